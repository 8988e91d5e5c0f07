"""`entry`: eager probes on every function entry and every return, placed at start-up —
the DTrace fbt / SystemTap / uprobes way, against fctrace's lazy call sites.

At `start` every function the program's symbol table names is decoded, and a probe is put
on its first instruction (ELFv2: also its local entry) and on each of its returns; code
that a direct call reaches but no symbol names (static glibc's IRELATIVE PLT stubs) is
found by descent and probed too.  Probes are the ISA's breakpoint bytes where Unicorn
delivers them, site hooks on MIPS/RISC-V and for code found by descent, exactly as `int3`
does (this backend reuses its delivery, simulation and step-over machinery).  A probe on a
first instruction displaces an ordinary instruction: it is run in place and the probe is
written back at the next block (uprobes' step-over), which is what an entry probe costs
beyond the trap.

What an entry probe sees is the callee, after the call: the stack pointer before the call
is the entry sp plus what the call pushed, the return address is in the link register
(x86: at sp), and arguments are read at the entry (`ArgReader(at_entry=True)`).  Whether
the function was called or jumped to (a tail call) is not visible either: it is decided
by the frame — an entry whose (return address, call sp) equal those of the innermost open
frame reuses that frame (a jump: a tail call by the shared `TailRule`, or a loop back to
its own entry, or ELFv2's fall-through from the global to the local entry), any other
entry is a call.  A call always runs at a deeper sp than its caller's call (the caller
pushed a return address or saved its link register), so the rule cannot mistake one.

The process entry point is not a call (nothing called `_start`): its first hit is skipped.
A binary without a symbol table cannot be probed eagerly — there is no function list to
probe up front — and is refused (exit 69); `int3` discovers code as it runs instead.
A dynamic program: the program's and ld.so's functions are probed at start-up, each
library's when ld.so maps it (the module map's symbol table grows: probed at the next
block, before any of the library's code runs).  What a stripped library's `.dynsym` does not
name and no direct call reaches (static functions called through pointers) is not probed.

The mechanism is the site tracer of int3_python.py with this placement (`EagerProbes`)
instead of the lazy one: delivery, simulation, step-over and the engines are the tracer's.

Counters: `probes` set at start-up, `patches` (breakpoint writes at start-up), `traps`
(probe hits), `stepovers` (displaced instructions re-run in place, each two more writes),
`simulated` (displaced calls/returns/jumps simulated), `functions` probed.
"""

from __future__ import annotations

from collections.abc import Callable

from emutrace.backends.args import call_push_size, handler_frame
from emutrace.backends.int3_python import Int3Backend, Pending
from emutrace.backends.watched import WatchedList
from emutrace.discover import Function, Site, SiteKind
from emutrace.discover.callabi import CallTypes
from emutrace.elf import Image
from emutrace.errors import Unsupported
from emutrace.target.protocol import Target, TrapHooks
from emutrace.trace.events import Call, Event, SignalDelivery, TailCall


class EagerProbes:
    """The placement (site_engine.Placement) of `entry`: every function probed at start-up,
    entries and returns; calls and tail calls told apart by the frame rule (`entered`)."""

    arms_on_entry = False  # everything is armed at start-up: the lazy arming never runs

    def __init__(self, tracer: Int3Backend) -> None:
        self.t = tracer
        isa = tracer.image.isa
        self.entry_args = tracer.args  # the tracer's reader reads at the callee's entry too
        self.link = isa.registers.link
        self.push = call_push_size(tracer.cpu)
        self.code_mask = isa.code_mask
        self.entries: dict[int, Function] = {}  # probed entry address → its function
        # (return address, call sp, function), innermost last; what changed since the
        # native engine last took them is marked (WatchedList)
        self.open: WatchedList[tuple[int, int, int]] = WatchedList()
        self.process_entry: int | None = None
        self.handler_entry: int | None = None  # a signal handler's, until its probe fires
        self.generation = -1  # of the symbol table when its functions were last probed
        # an engine's look before and after probing (entry_native.py: C's own counts)
        self.before_probing: Callable[[], None] | None = None
        self.after_probing: Callable[[], None] | None = None

    # ------------------------------------------------------------ start-up
    def start(self, entry: int) -> None:
        t = self.t
        if not t.discovery.symbols.funcs:
            raise Unsupported(f"{t.image.path}: no symbol table; the entry backend "
                              "probes every function up front and needs the list (use int3)")
        self.probe_known()
        entered = t.function_at(entry)
        self.process_entry = entered.start if entered is not None else None

    def probe_known(self) -> None:
        """Probe every function the symbol table names that is not probed yet: at start-up
        (a static program; a dynamic one's program and ld.so) and again each time a module
        is mapped (ld.so's mmap of a library, a dlopen: the table grows, `block`)."""
        if self.before_probing is not None:
            self.before_probing()
        t = self.t
        symbols = t.discovery.symbols
        self.generation = symbols.generation
        # (address, reached by a call): symbols first, then what their direct calls reach
        # without a symbol (entries probed) and what their direct jumps reach outside every
        # symbol (ARM glibc's strcmp leaves by a return placed before its symbol: only the
        # returns are probed there, a jump is not a call).  A cold partition (`f.cold`,
        # discover.symbols) likewise: f jumps to it, never calls it, so its returns are
        # probed and its start is no entry (the frame rule in `entered` reads a call's
        # return address and sp, which in the middle of f are neither)
        todo = [(t.image.isa.mode_address(s.start, s.alt), s.part_of is None)
                for s in symbols.funcs]
        while todo:
            addr, called = todo.pop()
            func = t.function_at(addr)
            if func is None or func.start in t.armed_funcs:
                continue
            self._probe(func, called)
            for site in func.sites:
                if site.target is None or (site.target & self.code_mask) in self.entries:
                    continue
                if site.kind is SiteKind.CALL:
                    todo.append((site.target, True))
                elif symbols.containing(site.target & self.code_mask) is None:
                    todo.append((site.target, False))
        t.stats["probes"] = len(t.armed)
        t.stats["startup_patches"] = t.stats["patches"]
        if self.after_probing is not None:
            self.after_probing()

    def block(self) -> None:
        """A module mapped since the last block (the symbol table grew): its functions are
        probed before any of its code runs (ld.so maps a library, then relocates it, then
        calls into it: its mmap returns to ld.so's code first)."""
        if self.t.discovery.symbols.generation != self.generation:
            self.probe_known()

    def trap_entered(self, vector: int, signal: SignalDelivery | None) -> None:
        """A signal handler (or exception vector) is entered: its frame, and its entry
        probe's next hit is no call (nothing called it).  Everything is probed already."""
        t = self.t
        t.engine.enter()
        if signal is not None and t.pending is not None:
            pending, t.pending = t.pending, None
            t.resolve(pending, signal.resume)
        t.emit(handler_frame(t.time, t.cpu, vector, signal, t.args))
        t.after_trap = False
        self.handler_entry = vector & self.code_mask
        t.engine.leave()

    def _probe(self, func: Function, entries: bool) -> None:
        t = self.t
        t.armed_funcs[func.start] = func
        t.stats["functions"] += 1
        # returns, and jumps that return when they go to the call's return address
        # (isa.base.Flow.maybe_return: RISC-V `jr t0`, s390x `br %r4`)
        returns = {s.addr: s for s in func.sites
                   if s.kind is SiteKind.RETURN or s.maybe_return}
        starts = {func.start, func.local_entry} if entries else set()
        for addr in sorted(starts):
            self.entries[addr] = func
            if addr not in returns:
                insn = t.decoder.insn_at(addr, func.alt_mode)
                if insn is None:
                    continue
                t.arm_site(Site(addr, insn.size, SiteKind.ENTRY, alt_mode=func.alt_mode),
                           func.start)
        for site in returns.values():
            if site.addr not in t.armed:  # a shared tail is swept with every entry into it
                t.arm_site(site, func.start)

    def refresh_stale(self) -> None:
        """Entries and returns are probed at start-up; a descent gone stale (a jump that
        became a tail call) changes neither (the entry probe sees where a jump goes)."""
        self.t.discovery.stale.clear()

    # ------------------------------------------------------------ events
    def pending_at(self, site: Site) -> Pending:
        func = self.entries.get(site.addr)
        if func is not None:
            self.entered(func, site.addr)
        if site.kind is SiteKind.ENTRY:  # nothing more happens when it executes
            return Pending(site, self.t.time, 0, site.addr + site.size)
        return self.t.site_pending(site)

    def entered(self, func: Function, addr: int) -> None:
        """The probe at addr, an entry of func, fired: a call, a tail call or neither, by
        the frame rule."""
        t = self.t
        cpu = t.cpu
        if func.start == self.process_entry and not self.open:
            return  # the kernel started the process here (ELFv2: both entries): no call
        if func.start == self.handler_entry:
            self.handler_entry = None
            return  # the kernel entered a signal handler here (trap_entered): no call
        sp = cpu.reg_read(t.sp_reg)
        ra = (cpu.reg_read(self.link) if self.link else cpu.read_word(sp)) & self.code_mask
        call_sp = sp + self.push
        while self.open and self.open[-1][1] < call_sp:  # frames left without a return
            self.open.pop()
        if self.open and self.open[-1][:2] == (ra, call_sp):  # the same frame: a jump
            if self.open[-1][2] == func.start:
                return  # a loop back to its own entry, or global → local entry
            if t.tails.is_tail(addr):
                self.open[-1] = (ra, call_sp, func.start)
                t.emit(TailCall(t.time, ra, addr, sp, self.entry_args.read(func.start)))
            return
        if self.open and self.open[-1][1] == call_sp:
            self.open.pop()  # a frame at this very level is over (left without a return)
        t.tails.called(addr, ra)
        self.open.append((ra, call_sp, func.start))
        t.emit(Call(t.time, ra, addr, call_sp, ra, self.entry_args.read(func.start)))

    def resolving(self, p: Pending, target: int) -> bool:
        if p.site.kind is SiteKind.ENTRY:
            return False
        tails = self.t.tails
        returns = p.site.kind is SiteKind.RETURN or (p.site.maybe_return
                                                     and tails.returns_to(target))
        if not returns and p.site.kind is SiteKind.TAIL:
            return False  # a maybe-return jump that jumps: the entry probes see where it goes
        if returns and target != p.fallthrough:
            for i in range(len(self.open) - 1, -1, -1):  # the frame it returns to, and above
                if self.open[i][0] == target:
                    del self.open[i:]
                    break
        return True

    def final_stats(self, s: dict[str, int]) -> dict[str, int]:
        return {"probes": s.get("probes", 0), "patches": s.get("startup_patches", 0),
                "traps": s["traps"], "stepovers": s["fallbacks"],
                "simulated": s["simulated"], "functions": s["functions"]}


def create_reference(image: Image, cpu: Target, hooks: TrapHooks,
                     emit: Callable[[Event], None], types: CallTypes | None = None
                     ) -> Int3Backend:
    """entry on the Python reference engine: the site tracer with eager placement."""
    return Int3Backend(image, cpu, hooks, emit, "lazy", types, name="entry",
                       placement=EagerProbes)


def probes_of(tracer: Int3Backend) -> EagerProbes:
    """The eager placement of an entry tracer."""
    placement = tracer.placement
    assert isinstance(placement, EagerProbes)
    return placement
