"""The address-space bookkeeping against a model: a set of mapped pages."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from emutrace.machine.linux.memory import PAGE, AddressSpace, Layout


class FakeCpu:
    """Unicorn's mapping rules, reduced: mapping an already-mapped page is an error."""

    def __init__(self) -> None:
        self.pages: dict[int, int] = {}

    def mem_map(self, addr: int, size: int, perms: int = 7) -> None:
        for p in range(addr, addr + size, PAGE):
            assert p not in self.pages, hex(p)
            self.pages[p] = perms

    def mem_unmap(self, addr: int, size: int) -> None:
        for p in range(addr, addr + size, PAGE):
            del self.pages[p]

    def mem_protect(self, addr: int, size: int, perms: int) -> None:
        for p in range(addr, addr + size, PAGE):
            assert p in self.pages
            self.pages[p] = perms

    def mem_write(self, addr: int, data: bytes) -> None:
        pass

    def mem_read(self, addr: int, size: int) -> bytes:
        return bytes(size)


LAYOUT = Layout(pie_base=0, mmap_top=0x100 * PAGE, mmap_bottom=0x10 * PAGE,
                stack_top=0x200 * PAGE, stack_size=0x10 * PAGE)

ops = st.lists(st.tuples(st.sampled_from(["map", "unmap", "alloc", "protect"]),
                         st.integers(0, 0x120), st.integers(1, 0x20)), max_size=40)


@settings(max_examples=300, deadline=None)
@given(ops)
def test_bookkeeping_matches_the_pages(script: list[tuple[str, int, int]]) -> None:
    cpu = FakeCpu()
    space = AddressSpace(cpu, LAYOUT)
    for op, page, npages in script:
        addr, size = page * PAGE, npages * PAGE
        if op == "map":
            space.map(addr, size, 3)
        elif op == "unmap":
            space.unmap(addr, size)
        elif op == "protect":
            ok = space.protect(addr, size, 1)
            assert ok == all(p in cpu.pages for p in range(addr, addr + size, PAGE))
        else:
            found = space.find_free(size)
            if found is not None:
                assert LAYOUT.mmap_bottom <= found and found + size <= LAYOUT.mmap_top
                assert all(p not in cpu.pages for p in range(found, found + size, PAGE))
                space.map(found, size, 3)
        mapped = {p for lo, hi in space.mapped(0, 1 << 40) for p in range(lo, hi, PAGE)}
        assert mapped == set(cpu.pages)


def test_brk_grows_and_shrinks() -> None:
    cpu = FakeCpu()
    space = AddressSpace(cpu, LAYOUT)
    space.init_brk(0x5 * PAGE + 12)
    start = space.brk
    assert start == 0x6 * PAGE
    assert space.set_brk(start + 3 * PAGE + 1) == start + 3 * PAGE + 1
    assert set(cpu.pages) == {start + i * PAGE for i in range(4)}
    assert space.set_brk(start + PAGE) == start + PAGE
    assert set(cpu.pages) == {start}
    assert space.set_brk(start - PAGE) == start + PAGE  # below the start: refused
    space.map(start + 2 * PAGE, PAGE, 3)  # something in the way
    assert space.set_brk(start + 5 * PAGE) == start + PAGE
