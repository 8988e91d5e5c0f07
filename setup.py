"""Build of the native hot path (emutrace/native/hotpath.c; step.c for `step`; branch.c for
`bts` and `btf`; ploop.c, the native target's ptrace loop), a plain C
library that emutrace loads with ctypes; everything else is in pyproject.toml.

It is compiled against the headers the unicorn wheel ships (unicorn/include) and does not
link libunicorn: the functions it calls are handed in from the library the Python binding
loaded.  The extension is optional: without a C compiler the package still installs and
`--engine native` says the library is missing (`--engine python` works).
"""

from __future__ import annotations

import importlib.util
import os

from setuptools import Extension, setup


def unicorn_include() -> list[str]:
    spec = importlib.util.find_spec("unicorn")
    if spec is None or spec.origin is None:
        return []
    inc = os.path.join(os.path.dirname(spec.origin), "include")
    return [inc] if os.path.isdir(os.path.join(inc, "unicorn")) else []


setup(ext_modules=[Extension(
    "emutrace.native._hotpath",
    sources=["emutrace/native/hotpath.c", "emutrace/native/ufwrite.c",
             "emutrace/native/step.c", "emutrace/native/ploop.c",
             "emutrace/native/branch.c", "emutrace/native/strict.c",
             "emutrace/native/entryprobe.c"],
    include_dirs=unicorn_include(),
    extra_compile_args=["-O2", "-std=c11", "-Wall", "-Wextra", "-fvisibility=default"],
    optional=True,
)])
