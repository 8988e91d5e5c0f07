"""The pipe protocol between a worker and its cell process: length-prefixed pickles."""

from __future__ import annotations

import pickle
import struct
from typing import IO

LENGTH = struct.Struct("<Q")


def write_frame(stream: IO[bytes], value: object) -> None:
    data = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(LENGTH.pack(len(data)) + data)
    stream.flush()


def read_frame(stream: IO[bytes]) -> object | None:
    """The next frame's value; None at the end of the stream."""
    head = stream.read(LENGTH.size)
    if len(head) < LENGTH.size:
        return None
    return pickle.loads(stream.read(LENGTH.unpack(head)[0]))
