"""A list that remembers the lowest index changed since it was last handed to C, so that
a native engine copies only the part that changed (the shadow stack's frames for C's
record writer, entry's open frames for its probes): copying the whole list at every
Python section made a deep recursion quadratic."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, SupportsIndex, TypeVar, overload

T = TypeVar("T")


class WatchedList(list[T]):
    """A list that remembers the lowest index changed since `clean` (push, pop, item
    assignment; the element below a push too: ShadowStack._push marks it `called`)."""

    def __init__(self, items: Iterable[T] = ()) -> None:
        super().__init__(items)
        self.low = len(self)

    def clean(self) -> None:
        self.low = len(self)

    def append(self, item: T) -> None:
        self.low = min(self.low, max(len(self) - 1, 0))
        super().append(item)

    def pop(self, index: SupportsIndex = -1) -> T:
        item = super().pop(index)
        self.low = min(self.low, len(self)) if index.__index__() == -1 else 0
        return item

    @overload
    def __setitem__(self, index: SupportsIndex, value: T) -> None: ...

    @overload
    def __setitem__(self, index: slice, value: Iterable[T]) -> None: ...

    def __setitem__(self, index: Any, value: Any) -> None:
        super().__setitem__(index, value)
        if isinstance(index, slice):
            self.low = 0
        else:
            i = index.__index__()
            self.low = min(self.low, i if i >= 0 else max(len(self) + i, 0))

    def __delitem__(self, index: Any) -> None:
        if isinstance(index, slice) and index.step is None and index.stop is None:
            start = len(self) if index.start is None else index.start
            low = start if start >= 0 else max(len(self) + start, 0)
            self.low = min(self.low, low, len(self))  # (`del a[i:]`: a cut of the top)
        else:
            self.low = 0
        super().__delitem__(index)

    def extend(self, items: Iterable[T]) -> None:
        self.low = min(self.low, len(self))
        super().extend(items)

    def insert(self, index: SupportsIndex, item: T) -> None:
        super().insert(index, item)
        self.low = 0

    def clear(self) -> None:
        super().clear()
        self.low = 0

    def replace_from(self, low: int, items: Iterable[T]) -> None:
        """Python's copy of what C changed: everything from low on (not a change to push)."""
        list.__delitem__(self, slice(low, None))
        list.extend(self, items)
        self.low = len(self)
