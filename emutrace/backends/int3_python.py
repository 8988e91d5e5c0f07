"""The site tracer (`Int3Backend`): the lazy call-site breakpoint algorithm of fctrace, which
`int3`, `hwbp` and `entry` run, composed of a placement (`LazyPlacement` here; entry's
`EagerProbes`), a cleanup (cleanup.py: `LazyCleanup` or `StrictCleanup`), a delivery
(`SiteDelivery` here; hwbp's `SlotDelivery`) and an engine (site_engine.py: the Python
reference by default).

Only functions that have run carry breakpoints, on their call sites, returns and jumps that
may leave them.  When one fires, the event is recorded, the callee is discovered (decoded
once, cached) and armed, and the displaced instruction is *simulated* by the ISA's simulator
(uprobes' simulate-insn) — never single-stepped.

Delivery (from the ISA description):
* "patch": the ISA's real breakpoint bytes are written over the site (x86 int3, ARM/Thumb
  BKPT, AArch64 BRK, PowerPC trap, s390x 0x0001); after every write the translated code of
  the range is dropped (``ctl_remove_cache``), because Unicorn does not notice host writes.
* "hook": where Unicorn's trap path is broken (MIPS BREAK, RISC-V EBREAK: see the ISA
  capability table), a code hook bounded to the site fires before the instruction instead;
  it counts as a trap all the same.  The instruction itself then runs as it is.

An instruction the simulator does not handle (it returns None) runs in place instead: the
site is restored, execution resumes at it, and the breakpoint is written back at the next
translation block — the "fallbacks" counter says how often.  With hook delivery, and for
fallbacks, the target is learnt from the next block the CPU enters (a call, return or jump
always ends a block).

Cleanup (cleanup.py): "lazy" leaves breakpoints in place (after warm-up nothing is patched
any more); "strict" (fctrace's rule) disarms a function as soon as it stops being the
current one.  The tracer tells the policy each change of the current function.  A disarmed
site hook stays installed, idle, and is re-armed by a table write (both counted as
patches): Unicorn's hook_add/hook_del pair costs ~65 µs from Python.

Time: a block hook adds each block's instruction count (decoded once per block).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from emutrace.backends.args import ArgReader, handler_frame
from emutrace.backends.cleanup import CLEANUPS, Cleanup
from emutrace.backends.codeguard import CodeGuard
from emutrace.backends.site_engine import Placement, ReferenceEngine, SiteEngine
from emutrace.backends.tails import TailRule
from emutrace.discover import Discovery, Function, Site, SiteKind
from emutrace.discover.callabi import CallTypes
from emutrace.elf import Image
from emutrace.isa.base import Cap, Flow, FlowKind, Insn
from emutrace.target.protocol import Target, TrapHooks
from emutrace.trace.events import (
    Call,
    Event,
    Return,
    SignalDelivery,
    TailCall,
    TrapReturn,
)
from emutrace.trace.shadow import ShadowStack
from emutrace.trace.uftrace_write import RecordSink


@dataclass
class Armed:
    site: Site
    func: int  # start of the function the site belongs to
    original: bytes = b""  # bytes under the written breakpoint (patch delivery, not virtual)
    hook: int = 0  # hook handle (hook delivery)
    virtual: bool = False  # a patch site delivered without its bytes (`virtual_patch`)


@dataclass
class Pending:
    site: Site
    time: int
    sp: int
    fallthrough: int


# a site's kind as the shared transfer rule (tails.TailRule.taken) reads it, and back
_FLOW_OF = {SiteKind.CALL: FlowKind.CALL, SiteKind.RETURN: FlowKind.RETURN,
            SiteKind.TAIL: FlowKind.JUMP}
_SITE_OF = {FlowKind.CALL: SiteKind.CALL, FlowKind.RETURN: SiteKind.RETURN,
            FlowKind.JUMP: SiteKind.TAIL}

class FunctionDelivery(Protocol):
    """How the algorithm's decision to watch a function reaches the CPU: `arm` the sites of
    a function the policy has just taken into `armed_funcs`, `disarm` those of one it has
    just dropped, `rearm` one whose extent grew (a stale descent).  The algorithm (arming
    policy, events, step-over) is Int3Backend's; deliveries: `SiteDelivery` (a breakpoint
    or a site hook per site: int3) and hwbp.SlotDelivery (N hardware slots per function)."""

    def arm(self, func: Function) -> None: ...

    def disarm(self, func: Function) -> None: ...

    def rearm(self, old: Function, new: Function) -> None: ...


class SiteDelivery:
    """One breakpoint per site — the ISA's breakpoint bytes, or a site hook where traps are
    broken and for code found by descent (Int3Backend.arm_site) — set and removed one by
    one."""

    def __init__(self, backend: Int3Backend) -> None:
        self.backend = backend

    def arm(self, func: Function) -> None:
        b = self.backend
        for site in func.sites:
            if site.addr not in b.armed:
                b.arm_site(site, func.start)

    def disarm(self, func: Function) -> None:
        b = self.backend
        for site in func.sites:
            if site.addr in b.armed and b.armed[site.addr].func == func.start:
                b.disarm_site(site.addr)

    def rearm(self, old: Function, new: Function) -> None:
        """The new sites armed as well; the old ones stay (the CPU may be in the code the
        old extent covered: its return must still be seen)."""
        self.backend.armed_funcs[new.start] = new
        self.arm(new)


# what belongs to one thread of control: pending transfer, call chain, restarted block,
# fallback resume address, the tail rule's frames and return addresses, the chains saved
# by its open signal handlers
ThreadState = tuple[Pending | None, list[Function], int | None, int | None, list[int],
                    list[int | None], list[list[Function]]]


class Int3Backend:
    """The site tracer (module docstring); `int3` when nothing else is given."""

    name = "int3"

    def __init__(self, image: Image, cpu: Target, hooks: TrapHooks,
                 emit: Callable[[Event], None], cleanup: str = "lazy",
                 types: CallTypes | None = None,
                 delivery: str | None = None, name: str | None = None,
                 counters: tuple[str, ...] | None = None, engine: SiteEngine | None = None,
                 placement: Callable[[Int3Backend], Placement] | None = None) -> None:
        """name and counters: another mechanism on this algorithm (hwbp: its descriptor's;
        finish() reports only its counters).  engine: where the per-event work runs (the
        Python reference by default; site_engine.py); placement: when probes are set
        (lazy by default: entry_python.py's EagerProbes sets them all at start)."""
        self.engine: SiteEngine = engine or ReferenceEngine()
        emit = self.engine.wrap_emit(emit)
        if name is not None:
            self.name = name
        self.counters = counters
        policy = CLEANUPS.get(cleanup)
        if policy is None:
            raise ValueError(f"cleanup policy {cleanup!r}: lazy or strict")
        self.image, self.cpu, self.emit = image, cpu, emit
        self.cleanup: Cleanup = policy(self)
        isa = image.isa
        self.discovery = Discovery(image)
        self.tails = TailRule(self.discovery.symbols, isa.code_mask)
        self.decoder = self.discovery.decoder
        self.classify = self.decoder.cls.classify
        self.simulator = isa.simulate
        working = [b for b in isa.breakpoints if b.works]
        self.delivery = delivery or ("patch" if working else "hook")
        self.sites: FunctionDelivery = SiteDelivery(self)  # hwbp: its slots
        self.bp = isa.breakpoint_for(alt_mode=False)
        self.bp_alt = isa.breakpoint_for(alt_mode=True)
        self.bp_intnos = {b.intno for b in working}
        regs = isa.registers
        self.pc_reg, self.sp_reg, self.ret_reg = regs.pc, regs.sp, regs.retval
        # values are read when a transfer is resolved: the CPU stands at the callee's entry
        # (after any delay slot), or at the return's target with the result in place
        self.args = ArgReader(cpu, types or CallTypes(isa, image.path, self.discovery.symbols,
                                                      image.bias), at_entry=True)
        self.delay = self.decoder.cls.delay_bytes
        self.armed: dict[int, Armed] = {}
        self.armed_funcs: dict[int, Function] = {}
        self.flows: dict[int, tuple[Insn, Flow]] = {}
        self.block_sizes: dict[tuple[int, int], int] = {}
        self.pending: Pending | None = None
        self.rearm: dict[int, tuple[Site, int]] = {}  # restored for a fallback: site, func
        self._seen: set[int] = set()
        # the functions on the call chain, innermost last (kept by strict cleanup, which
        # re-arms the caller from here: descent from a return address would miss the
        # caller's earlier code)
        self.chain: list[Function] = []
        # per open exception or signal handler: the chain when it was taken, which its
        # return restores (a handler's own return may pop below it: a signal handler
        # returns to the trampoline, outside every function).  A handler left by siglongjmp
        # never returns: at most cleanup.MAX_OPEN_TRAPS are kept, as the Linux layer keeps
        # frames
        self.trap_chains: list[list[Function]] = []
        self.after_trap = False  # an exception return ran: the next block is current code
        self.armed_now = False  # set when a site was armed: the current block may hold it
        self.restarted: int | None = None
        self.resume_at: int | None = None  # a fallback re-executes the site from here
        self.idle_hooks: dict[int, int] = {}  # disarmed site → its hook, still installed
        self._finished = False
        self._tid = 0  # the guest thread running (threads: switch_thread)
        self._thread_state: dict[int, ThreadState] = {}
        # the thread whose execution armed each armed function: a trap of another thread
        # there is counted as "foreign_traps" (only once a program has made a thread)
        self.armed_for: dict[int, int] = {}
        self.stats = {"traps": 0, "patches": 0, "cache_removals": 0, "hooks_added": 0,
                      "simulated": 0, "fallbacks": 0, "functions": 0}
        # patched bytes hidden from guest loads; code the guest writes is dropped (item 22)
        # (site hooks too: code written over a discovered function must not be traced by
        # its old site table)
        hide = self.delivery == "patch" and isa.capability(Cap.HIDDEN_BREAKPOINTS).works
        # (a native target cannot watch loads and stores: its guest sees the breakpoint
        # bytes, as under any debugger)
        # how a site hook is installed (hook delivery): a bounded Python code hook here; the
        # native engine keeps the sites it can watch in a C table instead (int3_native.py)
        self.hook_site: Callable[[Site], int] = self.python_site_hook
        # how a patch site may be delivered without writing its breakpoint: the native
        # engine's C site table takes the sites whose trap the reference simulates
        # (hooked_sites.py `virtual`: a handle, or 0 where the bytes must be written); the
        # counters are the patch's, as if the bytes had been written
        self.virtual_patch: Callable[[Site], int] | None = None
        self.guard: CodeGuard | None = CodeGuard(
            cpu, self._code_range, self._code_written, hide_reads=hide) \
            if cpu.watches_memory else None
        self.placement: Placement = (placement or LazyPlacement)(self)
        self.engine.attach(self, hooks)

    @property
    def strict(self) -> bool:
        """Strict cleanup: only the current function armed (the engines' C addons and
        fast paths follow it)."""
        return self.cleanup.strict

    @property
    def time(self) -> int:
        """Guest instructions run (the engine keeps the count: C's, natively)."""
        return self.engine.time

    @time.setter
    def time(self, value: int) -> None:
        self.engine.time = value

    @property
    def native_stats(self) -> dict[str, int]:
        """How much of the run the engine's C did (bench's profile; empty for Python)."""
        return self.engine.native_stats

    def start(self, entry: int) -> None:
        self.placement.start(entry)
        self.engine.leave()

    def trap_entered(self, vector: int, signal: SignalDelivery | None = None) -> None:
        self.placement.trap_entered(vector, signal)

    def trap_returned(self, site: int) -> None:
        """An exception return at site runs next: the innermost exception frame ends; the
        code it returns to is armed at the next block (`on_block`)."""
        self.engine.enter()
        self.emit(TrapReturn(self.time, site))
        self.cleanup.trap_returned()
        self.after_trap = True
        self.engine.leave()

    def attach_writer(self, shadow_now: Callable[[], ShadowStack],
                      sink_now: Callable[[], RecordSink]) -> None:
        """The tracer's shadow stack and sink, before the run (an engine whose C writes
        the records takes them: int3_native.py)."""
        self.engine.attach_writer(shadow_now, sink_now)

    def flush_events(self) -> None:
        """Hand what the engine buffered to the shadow stack (at the end of the run)."""
        self.engine.flush_events()

    def lazy_start(self, entry: int) -> None:
        """Lazy placement's start: the function at entry armed (and on the chain)."""
        func = self.function_entered(entry)
        self.cleanup.started(func)
        self.arm(func)
        self.refresh_stale()

    def lazy_trap_entered(self, vector: int, signal: SignalDelivery | None = None) -> None:
        """An exception entered the guest's vector (kernel images), or a signal handler is
        entered (Linux programs): an exception or signal frame, and the vector's function
        armed as at the entry; the cleanup told first (strict: the interrupted function is
        no longer the current one).  A signal delivered between blocks may
        find a transfer not resolved yet: it went to the interrupted code (`resume`)."""
        self.engine.pause()
        if signal is not None and self.pending is not None:
            pending, self.pending = self.pending, None
            self.resolve(pending, signal.resume)
        self.cleanup.trap_entered()
        self.emit(handler_frame(self.time, self.cpu, vector, signal, self.args))
        self.after_trap = False
        self.start(vector)
        self.engine.leave()

    def context_loaded(self, site: int, target: int) -> None:
        """A system call at site loaded a whole register context (ppc32's swapcontext) and
        control goes on at target with no branch.  At a function's entry (a context
        `makecontext` made) that is a jump into it: reported and armed as a jump site's
        would be (MIPS's setcontext jumps there).  Elsewhere (a saved context resumed after
        its own system call) the return that runs next is seen as any return.  Eager
        probes (entry's placement) see the function entered by its own entry probe."""
        if not self.placement.arms_on_entry:
            return
        callee = self.function_at(target)
        if callee is None or callee.start != target or not self.tails.is_tail(target):
            return
        self.engine.pause()
        here = self.function_at(site)
        self.emit(TailCall(self.time, site, target, self.cpu.reg_read(self.sp_reg),
                           self.args.read(target)))
        if here is not None:
            self.cleanup.jumped(here.start, callee)
        self.arm(callee)
        self.engine.leave()

    def _resume_after_trap(self, addr: int) -> None:
        """The first block after an exception return: the function the cleanup finds
        current there, armed."""
        self.after_trap = False
        func = self.cleanup.resumed(addr)
        if func is not None:
            self.arm(func)

    # ------------------------------------------------------------ arming
    def function_entered(self, addr: int) -> Function | None:
        """The function the CPU is entering at addr (in its current instruction set)."""
        # (the CPU is at addr in Thumb state: discovery needs bit 0 set)
        return self.function_at(self.image.isa.mode_address(addr, self.cpu.in_alt_mode()))

    def function_at(self, addr: int) -> Function | None:
        """The function at addr (ARM: bit 0 selects Thumb), or None where discovery finds
        none: outside the image (vdso, a jump to data), a symbol over undecodable bytes."""
        try:
            return self.discovery.function_at(addr)
        except Exception:  # noqa: BLE001 - untraced, never a crash of the tracer
            return None

    def refresh_stale(self) -> None:
        """Functions found by descent that a newly known entry made stale: the engine
        told, then the placement's rule (`lazy_refresh_stale`)."""
        if self.discovery.stale:
            self.engine.stale_found(self.discovery.stale)
        self.placement.refresh_stale()

    def lazy_refresh_stale(self) -> None:
        """Functions found by descent that a newly known entry made stale (discover/
        descent.py): armed again as descended now, so that a jump they took for their own
        code is a TAIL site, decided by the tail rule as `step` decides it."""
        stale = self.discovery.stale
        while stale:
            start = stale.pop()
            old = self.armed_funcs.get(start) or next(
                (f for f in self.chain if f.start == start), None)
            if old is None:
                continue  # neither armed nor on the chain: descended again when reached
            new = self.function_at(old.entry)
            if new is None:
                continue
            if start in self.armed_funcs:
                self._rearm(old, new)
            # strict cleanup arms a caller again from the chain: never the stale extent
            self.chain = [new if f.start == start else f for f in self.chain]

    def _rearm(self, old: Function, new: Function) -> None:
        self.engine.rearming(old, new)
        self.sites.rearm(old, new)

    def take(self, func: Function | None) -> bool:
        """Enter func in the armed-function table; False if there is none, it is in, or the
        guest wrote over its code (it runs as written, untraced: see codeguard.py)."""
        if func is None or func.start in self.armed_funcs:
            return False
        if self.guard is not None:
            if self.guard.was_written(func.start, func.end):
                return False
            self.guard.cover(func.start)
        if func.start not in self._seen:
            self._seen.add(func.start)
            self.stats["functions"] += 1
        self.armed_funcs[func.start] = func
        self.armed_for[func.start] = self._tid
        self.engine.function_taken(func)
        return True

    def traceable(self, func: Function | None) -> bool:
        """func's code is the file's (discovery decoded it) and the guest has not written
        over it: a descent into memory no file maps (a JIT page) finds no sites."""
        return func is not None and self.decoder.in_code(func.start) and (
            self.guard is None or not self.guard.was_written(func.start, func.end))

    def arm(self, func: Function | None) -> None:
        """func entered: its sites armed (lazy placement; eager probed it at start-up)."""
        if not self.placement.arms_on_entry or not self.take(func):
            return
        assert func is not None
        self.sites.arm(func)

    def by_hook(self, func: int) -> bool:
        """Site hooks where traps are broken, and for code found by descent (no symbol): a
        wrong guess about what is code must never write a breakpoint into data."""
        known = self.armed_funcs.get(func)
        modules = self.image.modules  # (a dynamic program: a stripped ARM library's literal
        # pools are not marked, so its code is no surer than descent's)
        return self.delivery == "hook" or known is None or known.name is None or (
            modules is not None and not modules.code_known(func))

    def arm_site(self, site: Site, func: int) -> None:
        """One site of the function at func armed (the engine told before and after)."""
        self.engine.site_arming(site)
        self._deliver(site, func)
        self.engine.site_armed(site, func)

    def _deliver(self, site: Site, func: int) -> None:
        cpu, addr = self.cpu, site.addr
        if self.by_hook(func):
            handle = self.idle_hooks.pop(addr, 0)
            if handle:  # the site's hook is still installed: arming is a table write
                self.armed[addr] = Armed(site, func, hook=handle)
                self.stats["patches"] += 1
                return
            handle = self.hook_site(site)
            self.armed[addr] = Armed(site, func, hook=handle)
            self.stats["hooks_added"] += 1
            if self.engine.hook_in_table(handle):  # (counted as the drop a Unicorn hook needs)
                self.stats["cache_removals"] += 1
                return
            self.drop_cache(addr, site.size)  # a hook added after translation never fires
            self.armed_now |= self._restart_for(handle)
            return
        encoding = self.breakpoint_bytes(site)
        if self.guard is not None and self.guard.was_written(addr, addr + len(encoding)):
            return  # guest-written code is never patched
        handle = self.virtual_patch(site) if self.virtual_patch is not None else 0
        if handle:  # counted as the patch and the dropped translation it stands for
            self.stats["patches"] += 1
            self.stats["cache_removals"] += 1
            self.armed[addr] = Armed(site, func, hook=handle, virtual=True)  # (no bytes)
            if self.guard is not None:  # (guest stores still drop it; no bytes to hide)
                self.guard.cover(addr)
            self.armed_now |= self._restart_for(handle)
            return
        original = cpu.mem_read(addr, len(encoding))
        cpu.write_code(addr, encoding)
        self.stats["patches"] += 1
        self.drop_cache(addr, len(encoding))
        self.armed[addr] = Armed(site, func, original=original)
        if self.guard is not None:
            self.guard.patched(addr, original, encoding)
        # (a translating engine must restart the block that holds it; a CPU sees it at once)
        self.armed_now = cpu.translates_code

    def _restart_for(self, handle: int) -> bool:
        """Must the current block be entered again for the site hook (or virtual breakpoint)
        handle, armed now, to see it?  On a translating engine, for a Unicorn hook: one
        added after the block was translated never fires in it."""
        return self.cpu.translates_code and not self.engine.hook_in_table(handle)

    def python_site_hook(self, site: Site) -> int:
        return self.cpu.hook_code(self.on_site, site.addr, site.addr)

    def breakpoint_bytes(self, site: Site) -> bytes:
        """The breakpoint written over a patch site (in its instruction set)."""
        bp = self.bp_alt if site.alt_mode and self.bp_alt is not None else self.bp
        assert bp is not None
        return bp.encoding

    def disarm_site(self, addr: int) -> None:
        self._undeliver(addr)
        self.engine.site_disarmed(addr)

    def _undeliver(self, addr: int) -> None:
        armed = self.armed.pop(addr)
        if armed.virtual:  # nothing written: the owner's table forgets it (counted as the
            self.stats["patches"] += 1  # bytes put back and their translation dropped)
            self.stats["cache_removals"] += 1
            return
        if armed.hook:
            # the hook stays installed, idle (its hits are ignored): a hook_del + hook_add
            # pair costs ~65 µs in Python, a hundred times a patch, and strict cleanup on
            # MIPS/RISC-V would pay it for every site at every function switch
            self.idle_hooks[addr] = armed.hook
            self.stats["patches"] += 1
            return
        self.cpu.write_code(addr, armed.original)
        if self.guard is not None:
            self.guard.restored(addr)
        self.stats["patches"] += 1
        self.drop_cache(addr, len(armed.original))

    def disarm(self, func_start: int) -> None:
        func = self.armed_funcs.pop(func_start, None)
        if func is not None:
            self.sites.disarm(func)
            self.engine.function_dropped(func_start)

    def _code_range(self, addr: int) -> tuple[int, int]:
        """The range a patch site's guard covers: the executable file data holding it (else
        its page)."""
        return self.decoder.code_range(addr) or (addr & ~0xFFF, (addr & ~0xFFF) + 0x1000)

    def _code_written(self, lo: int, hi: int) -> None:
        """The guest is about to store into [lo, hi) of guarded code: every function it
        touches is disarmed (its original bytes back first, so the store lands on them) and
        is never armed again."""
        self.engine.code_written()

        def touched(at: int, size: int) -> bool:
            return at < hi and lo < at + size

        hit = {f.start for f in self.armed_funcs.values() if touched(f.start, f.end - f.start)}
        # (a site's bytes: those under its breakpoint, the instruction's where none are)
        hit.update(a.func for at, a in self.armed.items()
                   if touched(at, len(a.original) or a.site.size))
        for start in hit:
            self.disarm(start)
        for at in [at for at, a in self.armed.items()
                   if touched(at, len(a.original) or a.site.size)]:
            self.disarm_site(at)  # a site whose function is not armed as a whole
        for at in [at for at, (site, _f) in self.rearm.items() if touched(at, site.size)]:
            del self.rearm[at]

    def drop_cache(self, addr: int, size: int) -> None:
        if self.cpu.drop_code_cache(addr, addr + size):
            self.stats["cache_removals"] += 1

    # ------------------------------------------------------------ events
    def site_insn(self, site: Site) -> tuple[Insn, Flow]:
        got = self.flows.get(site.addr)
        if got is None:
            insn = self.decoder.insn_at(site.addr, site.alt_mode)
            assert insn is not None, hex(site.addr)
            flow = self.classify(insn)
            if site.executes is not None:  # s390x EXRL: the executed instruction is the call
                target = self.decoder.insn_at(site.executes, site.alt_mode)
                assert target is not None
                insn, flow = target, self.classify(target)
            got = self.flows[site.addr] = (insn, flow)
        return got

    def pending_at(self, site: Site) -> Pending:
        """The transfer a hit at site starts (the placement's: eager probes read a frame)."""
        return self.placement.pending_at(site)

    def site_pending(self, site: Site) -> Pending:
        """The transfer a call, return or jump site starts: resolved at its target."""
        cpu = self.cpu
        return Pending(site, self.time, cpu.reg_read(self.sp_reg),
                       site.addr + site.size + (self.delay if site.delay_slot else 0))

    def on_trap(self, intno: int) -> bool:
        """A breakpoint (patch delivery).  False: not ours, the run loop reports SIGTRAP."""
        if intno not in self.bp_intnos:
            return False
        cpu = self.cpu
        pc = cpu.pc
        bp = next((b for b in (self.bp, self.bp_alt)
                   if b is not None and b.intno == intno and pc - b.pc_after in self.armed),
                  None)
        if bp is None:
            return False
        addr = pc - bp.pc_after
        if not bp.counted:
            self.time += 1  # the site instruction, which the block's count left out
        armed = self.armed[addr]
        self.stats["traps"] += 1
        self._count_foreign(armed.func)
        pending = self.pending_at(armed.site)
        insn, flow = self.site_insn(armed.site)
        target = None
        if (self.simulator is not None and armed.site.executes is None
                and flow.kind is not FlowKind.NONE):
            target = self.simulator(cpu, insn, flow)
        if target is None:  # run the original instruction in place, re-arm afterwards
            self.stats["fallbacks"] += 1
            self.time -= 1  # the breakpoint was counted with its block; the re-run counts it
            self.disarm_site(addr)
            self.rearm[addr] = (armed.site, armed.func)
            self.pending = pending
            self.resume_at = addr
            cpu.reg_write(self.pc_reg, self.image.isa.mode_address(addr, armed.site.alt_mode))
            cpu.want_blocks()  # the transfer is learnt from the block the CPU enters next
            return True
        self.stats["simulated"] += 1
        cpu.reg_write(self.pc_reg, target)  # ARM: an odd PC selects Thumb state
        self.resolve(pending, self.image.isa.code_address(target))
        return True

    def on_site(self, uc: object, addr: int, size: int, _d: object) -> None:
        """A site hook (hook delivery): the instruction runs next; resolve at the next block."""
        self.engine.enter()
        self._site_hit(addr)
        self.engine.leave()

    def _site_hit(self, addr: int) -> None:
        armed = self.armed.get(addr)
        if armed is None or not armed.hook:
            # idle, or armed since by a breakpoint (the site's function was found by
            # descent first, hooked, then named by a module's symbols: patched): the trap
            # delivers it, a second delivery here would resolve it twice
            return
        self.stats["traps"] += 1
        self._count_foreign(armed.func)
        self.pending = self.pending_at(armed.site)
        self.cpu.want_blocks()

    def on_block(self, uc: object, addr: int, size: int, _d: object) -> None:
        self.engine.block_entered()
        self.placement.block()
        if self.guard is not None and self.guard.hidden:
            self.guard.settle()
        if self.restarted == addr or self.resume_at == addr:
            # the second entry of a block we restarted, or the block that re-executes a
            # fallback site: the site has not run yet, nothing to resolve
            self.restarted = self.resume_at = None
            self._count_block(addr, size)
            return
        self.armed_now = False
        if self.rearm:
            for site_addr, (site, func) in self.rearm.items():
                if func in self.armed_funcs and site_addr not in self.armed:
                    self.arm_site(site, func)
            self.rearm.clear()
        pending = self.pending
        if pending is not None and not (pending.site.delay_slot and
                                        addr == pending.site.addr + pending.site.size):
            # (a block that starts at the delay slot, split from its branch at a page or
            # block-size limit: the transfer comes after it)
            self.pending = None
            self.resolve(pending, addr)
        elif pending is not None:
            # a pulled target's single step stops in the delay slot: the transfer's block
            # entry is the next stop (Unicorn sees that block anyway)
            self.cpu.want_blocks()
        if self.after_trap:
            self._resume_after_trap(addr)
        if self.armed_now:
            # this block was translated before its sites were armed: run it again from its
            # start so that the new breakpoints (or site hooks) are in it
            self.restarted = addr
            self.cpu.reg_write(self.pc_reg,
                              self.image.isa.mode_address(addr, self.cpu.in_alt_mode()))
            return
        self._count_block(addr, size)

    def _count_block(self, addr: int, size: int) -> None:
        key = (addr, size)
        count = self.block_sizes.get(key)
        if count is None:
            count = self.block_sizes[key] = self.block_count(addr, size)
        self.time += count

    def block_count(self, addr: int, size: int) -> int:
        """The instructions in the block at addr of size bytes (decoded once)."""
        return self.decoder.block_count(addr, size, self.cpu.in_alt_mode())

    def resolve(self, p: Pending, target: int) -> None:
        """The transfer p went to target: the placement's look first, then the engine's
        resolution around the reference rule (`resolve_here`)."""
        if self.placement.resolving(p, target):
            self.engine.resolve(p, target, self.resolve_here)

    def resolve_here(self, p: Pending, target: int) -> None:
        """The reference rule: the transfer's events and arming."""
        self._transfer(p, target)
        if self.discovery.stale:
            self.refresh_stale()

    def _transfer(self, p: Pending, target: int) -> None:
        site = p.site
        # the shared rule (tails.py): not taken — a conditional site, or one in a Thumb IT
        # block that decodes as unconditional — or which transfer it was
        taken = self.tails.taken(_FLOW_OF[site.kind], site.conditional, site.maybe_return,
                                 target, p.fallthrough)
        if taken is None:
            return
        kind = _SITE_OF[taken]
        here = self.armed.get(site.addr)
        current = here.func if here is not None else None
        if kind is SiteKind.CALL:
            self.tails.called(target, p.fallthrough)
            self.emit(Call(p.time, site.addr, target, p.sp, p.fallthrough,
                           self.args.read(target), site.alt_link))
            callee = self.function_entered(target)
            if not self.traceable(callee):
                # code that cannot be traced (written by the guest, outside the image): its
                # return is never seen, so the caller stays armed under strict cleanup too,
                # or every later call would be lost (a call into JIT code)
                return
            assert callee is not None
            self.called(current, callee)
        elif kind is SiteKind.RETURN:
            elsewhere = not self.tails.returns_to(target)
            self.tails.returned()
            self.emit(Return(p.time, site.addr, p.sp, self.args.read_return(site.addr), target))
            self.returned(current, target, elsewhere)
        else:
            callee = self.function_entered(target)
            if callee is not None and current is not None and callee.start == current:
                if not (self.image.isa.thumb_bit and self.cpu.in_alt_mode() != site.alt_mode):
                    return  # a jump inside the function (a jump table)
                # a mode switch inside one symbol (`bx pc` in a Thumb stub to A32 code):
                # the code reached is decoded in its own mode
                callee = self.discovery.function_entered_at(target, self.cpu.in_alt_mode())
            if callee is None or current is None:
                return  # out of the image
            if self.tails.is_tail(target):
                self.emit(TailCall(p.time, site.addr, target, p.sp, self.args.read(target)))
            # a jump into the middle of another function (glibc's mempcpy → memcpy body) is
            # no call, but the code it reaches is now the current code: arm it all the same
            self.cleanup.jumped(current, callee)
            self.arm(callee)

    def called(self, current: int | None, callee: Function) -> None:
        """A call from the function at current (the site's) entered callee: the cleanup
        told (strict: pushed on the chain, the caller disarmed), callee armed (the native
        engines replay this for the calls C switched: strict.c under emulation, the C
        loop's drain natively, backends/strict_ptrace.py)."""
        self.cleanup.called(current, callee)
        self.arm(callee)

    def returned(self, current: int | None, target: int, elsewhere: bool = False) -> None:
        """A return from the function at current went to target (elsewhere: not to its
        call's return address): the cleanup's rule (strict: the caller armed from the chain,
        the returning function disarmed; strict_ptrace.py replays it)."""
        self.cleanup.returned(current, target, elsewhere)

    # ------------------------------------------------------------ threads
    def _count_foreign(self, func: int) -> None:
        """fctrace's argument for strict cleanup: other tasks rarely run instrumented
        code.  A trap in a function armed while another thread ran is counted."""
        if self._thread_state and self.armed_for.get(func, self._tid) != self._tid:
            self.stats["foreign_traps"] = self.stats.get("foreign_traps", 0) + 1

    def switch_thread(self, tid: int) -> None:
        """Another guest thread gets the CPU (machine/linux/threads.py): the state that
        belongs to a thread of control is swapped — the transfer awaiting resolution,
        the call chain, the tail rule's frames.  The cleanup told (strict is per thread:
        the code armed for the thread that stops is disarmed, the incoming thread's current
        function armed; lazy leaves everything armed: other threads take traps in code
        armed for another thread, bench/bench_threads.py counts them)."""
        self.engine.pause()
        mine = (self.pending, self.chain, self.restarted, self.resume_at,
                self.tails.frames, self.tails.return_addrs, self.trap_chains)
        self._thread_state[self._tid] = mine
        state = self._thread_state.pop(tid, None)
        self._tid = tid
        fresh: ThreadState = (None, [], None, None, [], [], [])
        (self.pending, chain, self.restarted, self.resume_at, self.tails.frames,
         self.tails.return_addrs, self.trap_chains) = state or fresh
        self.cleanup.thread_switched(chain)
        self.chain = chain
        self.engine.thread_switched()

    def detach(self) -> None:
        """(Backend.detach.)  Every armed function dropped and every site disarmed through
        its delivery (the program's bytes back, site hooks and slots freed), the idle site
        hooks deleted, then the engine's own hooks (SiteEngine.detach).  With nothing
        armed no transfer is resolved, so nothing is armed again."""
        self.engine.enter()  # what C did since Python last ran, onto Python's tables
        for start in list(self.armed_funcs):
            self.disarm(start)
        for addr in list(self.armed):
            self.disarm_site(addr)
        for handle in self.idle_hooks.values():
            if not self.engine.hook_in_table(handle):
                self.cpu.hook_del(handle)
        self.idle_hooks.clear()
        self.pending = None
        self.engine.detach()

    def finish(self) -> int:
        """The run ended: the engine's counters in, the placement's and the mechanism's
        view of them (entry's names; hwbp's counters only); the final time."""
        if not self._finished:
            self._finished = True
            self.engine.finish()
            self.stats = self.placement.final_stats(self.stats)
            if self.counters is not None:  # another mechanism's counters only (hwbp)
                self.stats = {k: self.stats[k] for k in self.counters}
        return self.time


class LazyPlacement:
    """fctrace's placement: a function's sites are armed when it is entered (the tracer's
    `lazy_*` rules)."""

    arms_on_entry = True

    def __init__(self, tracer: Int3Backend) -> None:
        self.t = tracer

    def start(self, entry: int) -> None:
        self.t.lazy_start(entry)

    def trap_entered(self, vector: int, signal: SignalDelivery | None) -> None:
        self.t.lazy_trap_entered(vector, signal)

    def block(self) -> None:
        pass

    def refresh_stale(self) -> None:
        self.t.lazy_refresh_stale()

    def pending_at(self, site: Site) -> Pending:
        return self.t.site_pending(site)

    def resolving(self, p: Pending, target: int) -> bool:
        return True

    def final_stats(self, stats: dict[str, int]) -> dict[str, int]:
        return stats

