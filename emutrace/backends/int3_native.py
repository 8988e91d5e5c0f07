"""The Unicorn hot path as the site tracer's engine (`HotPathEngine`, `--engine native`):
the algorithm of int3_python.py, with the per-event work in C (emutrace/native/hotpath.c).
int3, hwbp and entry run on it (a tracer composed with this engine: `create` here,
hwbp_native.py, entry_native.py); the engine never overrides the tracer, it is told.

What C does without entering Python:
* the block hook adds each block's instruction count (the count is computed once per block,
  by `Int3Backend.block_count`, through a callback, and kept in a C table);
* a trap at an armed patch site whose displaced instruction the ISA lowers to a
  `NativeOp` (isa/base.py: every ISA with patch delivery, arm's two instruction sets too):
  a call to a target whose function is already armed and whose arguments are integer
  registers, or a return whose value is in the return registers.  C simulates it,
  snapshots the registers, and appends one fixed record to a buffer.

Everything else is the Python reference code, reached through ctypes callbacks: the first
call of a target (discovery and arming), sites the ISA does not lower, strict cleanup's switches
C was not told enough for (strict.c does the others: backends/strict_native.py), the
site hooks C's site table does not finish (backends/hooked_sites.py: under lazy cleanup it
watches those of hook delivery and of code found by descent, on every ISA), fallbacks,
syscalls and faults, and every block while the Python state needs one (a restart, a
pending transfer, a re-arm).

For `emutrace record` and `emutrace run` the tracer attaches the record writer (`attach_writer`,
backends/native_writer.py): a call or return C finished then normally never reaches Python
at all — C keeps the shadow stack's common case and writes the uftrace record itself.

Order: the buffer is drained — records turned into `trace.events` with the same code the
Python path uses (an `ArgReader` over the snapshot) — before Python emits anything or looks
at the tail-call state, and at the end; so the event stream is the Python path's, byte for
byte (tests/test_native_engine.py).
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from typing import Protocol

from emutrace import native
from emutrace.backends import hooked_sites
from emutrace.backends.fastpath import FastSites, RecordDrain, SiteExtra
from emutrace.backends.hooked_sites import HookedSites
from emutrace.backends.int3_python import Int3Backend, Pending
from emutrace.backends.native_writer import NativeWriter, packed_sink_of
from emutrace.backends.strict_native import StrictInC
from emutrace.discover import Function, Site
from emutrace.discover.callabi import CallTypes
from emutrace.elf import Image
from emutrace.isa.base import Isa
from emutrace.native import EVENT, SiteOp
from emutrace.target.protocol import TrapHooks
from emutrace.target.unicorn_cpu import UnicornCpu
from emutrace.target.unicorn_run import HookSet
from emutrace.trace.events import Event
from emutrace.trace.shadow import ShadowStack
from emutrace.trace.uftrace_write import RecordSink

_NO_INTNO = 0xFFFFFFFF  # no breakpoint interrupt (hook delivery)


def fixed_insn_size(isa: Isa) -> int:
    """The size of every instruction where it is also the alignment past an undecodable
    one (a sweep filter's `fixed_size`, one instruction set): C counts a block's
    instructions from its size, as Decoder.insn_starts would; 0 elsewhere."""
    cls = isa.classifiers
    size = cls.sweep.fixed_size if cls is not None and cls.sweep is not None else 0
    return size if cls is not None and size == cls.insn_align and not cls.alt_mode else 0


class _HotpathTable:
    """hotpath.c's site tables (FastSites' SiteTable)."""

    strings = True  # C copies `char *` values at the event (StringTable)

    def __init__(self, lib: ctypes.CDLL, nt: int) -> None:
        self.lib, self.nt = lib, nt

    def string_args(self, target: int, mask: int) -> None:
        if self.lib.nt_string_args(self.nt, target, mask) != 0:
            raise MemoryError("native hot path: out of memory")

    def string_return(self, site: int) -> None:
        if self.lib.nt_string_return(self.nt, site) != 0:
            raise MemoryError("native hot path: out of memory")

    def site_set(self, addr: int, op: SiteOp) -> None:
        self.lib.nt_site_set(self.nt, addr, *op)

    def site_active(self, addr: int, on: bool) -> None:
        self.lib.nt_site_active(self.nt, addr, int(on))

    def callee_add(self, target: int) -> None:
        self.lib.nt_callee_add(self.nt, target)

    def inside_add(self, site: int, target: int) -> None:
        self.lib.nt_inside_add(self.nt, site, target)

    def inside_drop(self, target: int) -> None:
        self.lib.nt_inside_drop(self.nt, target)

    def tail_add(self, site: int, target: int) -> None:
        self.lib.nt_tail_add(self.nt, site, target)

    def switch_jump_add(self, site: int, target: int) -> None:
        self.lib.nt_switch_jump_add(self.nt, site, target)

    def site_extra(self, addr: int, extra: SiteExtra) -> None:
        after_bits, test, a, b, guard_mask, pops = extra
        self.lib.nt_site_extra(self.nt, addr, after_bits, test, a, b, guard_mask, len(pops),
                               (ctypes.c_int32 * max(1, len(pops)))(*pops))


class HotPathEngine:
    """The site tracer's engine (site_engine.SiteEngine) on the Unicorn hot path: C's hooks
    and tables (hotpath.c; strict.c for strict cleanup, hooked_sites.py for site hooks), the
    Python reference reached through callbacks for the rest.  Extensions for one mechanism
    (entry's probes in C: entry_native.py; hwbp's slots: hwbp_native.py) are composed in as
    `addons` and `finishers`."""

    cpu: UnicornCpu  # the C hooks run inside this Unicorn instance
    t: Int3Backend  # the tracer it runs (`attach`)
    _shadow_now: Callable[[], ShadowStack]  # the running thread's (attach_writer)

    def __init__(self, image: Image, cpu: UnicornCpu, hooks: HookSet,
                 emit: Callable[[Event], None], cleanup: str = "lazy",
                 delivery: str | None = None, hits_counter: str = "traps",
                 site_table_in_c: bool = True) -> None:
        """delivery: the tracer's (hwbp: "hook"); hits_counter: the counter C's site hits
        add to; site_table_in_c: hook delivery's sites in C's table (entry keeps Python's
        hooks except where every site is hooked)."""
        lib = native.load()
        isa = image.isa
        bp = isa.breakpoint_for(alt_mode=False)
        self.cpu, self.image = cpu, image
        self._lib, self._hooks, self._emit_now = lib, hooks, emit
        self.native_stats: dict[str, int] = {}
        # ctypes trampolines: kept referenced as long as C may call them
        self._callbacks = (native.PY_INTR(self._py_intr), native.PY_BLOCK(self.py_block),
                           native.PY_COUNT(self._py_count), native.PY_DRAIN(self._py_drain))
        # (an ISA with more argument registers than C saves gets no fast calls: args_fast)
        self._arg_names, self._ret_names = native.call_registers(isa)
        port = self.port = cpu.c_port
        cfg = native.Config()
        cfg.abi = native.call_abi(isa, cpu.reg_id, cpu.word, cpu.byteorder == "big", 4096)
        self._n_stack = cfg.abi.n_stack
        for field in ("reg_read", "reg_write", "mem_read", "mem_write", "emu_stop",
                      "reg_read_batch"):
            setattr(cfg, field, port.function(field))
        cfg.py_intr, cfg.py_block, cfg.py_count, cfg.py_drain = self._callbacks
        cfg.bp_intno = bp.intno if bp is not None else _NO_INTNO
        cfg.pc_after = bp.pc_after if bp is not None else 0
        cfg.bp_uncounted = int(bp is not None and not bp.counted)
        cfg.fixed_insn = fixed_insn_size(isa)
        # (block counts read from discovery's size maps: which instruction set runs)
        cls = isa.classifiers
        flag = isa.alt_mode_flag
        cfg.alt_reg, cfg.alt_bit = (cpu.reg_id(flag[0]), flag[1]) if flag else (-1, 0)
        cfg.align = cls.insn_align if cls is not None else 0
        cfg.alt_align = cls.alt_insn_align if cls is not None else 0
        self._cfg = cfg
        self._nt = lib.nt_new(port.handle, ctypes.byref(cfg))
        self._attention = False  # (nt_new's)
        if not self._nt:
            raise MemoryError("native hot path: out of memory")
        self._c_hooks: list[int] = []
        # hook delivery: C's site table and block hook instead of Python site hooks
        # (hwbp's slots on a Thumb ISA stay Python hooks, switched by Python: hwbp_native.py)
        self._thumb_slots = isa.thumb_bit and delivery == "hook"
        self._hooked = HookedSites(isa, lib, self._nt) \
            if site_table_in_c and hooked_sites.wanted(isa) and not self._thumb_slots \
            else None
        self._cleanup = cleanup
        self._hits_counter = hits_counter
        # what a composed delivery adds to `native_stats` (hwbp_native.py)
        self.more_native_stats: dict[str, int] = {}
        # a composed delivery's last look at C's tables, before `finish` frees them
        self.finishers: list[Callable[[], None]] = []
        # a mechanism's own C state beside the tracer's (entry's probes: entry_native.py)
        self.addons: list[EngineAddon] = []
        self._final_time = 0
        self._strict_c: StrictInC | None = None
        self._writer: NativeWriter | None = None  # `record`, `run`: C writes the records
        self._arming_sets = 0  # the hooked table's count when a site's arming began

    def attach(self, tracer: Int3Backend, hooks: TrapHooks) -> None:
        """The tracer is set up (nothing armed yet): C's hooks installed, its strict cleanup
        (strict.c, made before anything is armed, so that it sees every arming), the fast
        sites, the record drain and the block counts."""
        self.t = tracer
        isa, cpu, lib = self.image.isa, self.cpu, self._lib
        # strict cleanup: C switches the armed function where it knows both (strict.c), at
        # the traps of lowered sites or the site hooks of C's table (arm's A32 and Thumb code
        # too)
        if (self._cleanup == "strict" and not self._thumb_slots
                and (isa.lower is not None or self._hooked is not None)):
            self._strict_c = StrictInC(tracer, self._nt, self.port, isa.code_mask)
            if self._hooked is not None:
                self._strict_c.bind_hooked(self._hooked)
        self._install(hooks)
        if tracer.guard is not None:  # a load that hid breakpoints: settle at the next block
            tracer.guard.on_hide = lambda: self._attend(True)
        self._fast = FastSites(tracer, _HotpathTable(lib, self._nt), cpu.reg_id,
                               len(self._arg_names) + self._n_stack,
                               on_callee=(self._strict_c.callee if self._strict_c is not None
                                          else None))
        self._records = RecordDrain(tracer, cpu, self._emit_now, list(self._arg_names),
                                    self._ret_names, self._n_stack)
        if self._strict_c is not None:
            if tracer.guard is not None:  # C's switches replayed before a load or store
                tracer.guard.before = self._drain
            self._strict_c.push_chain(tracer.chain)
        if self._hooked is not None:
            self._hooked.bind(tracer, self, self._fast)
        # discovery's size maps lent to C for block counts (exported buffers: each stays
        # alive and unresized while C may read it)
        self._lent: list[ctypes.Array[ctypes.c_char]] = []
        decoder = tracer.decoder
        if hasattr(lib, "nt_size_map_add"):
            for (base, alt), sizes in list(decoder.size_maps().items()):
                self._lend_size_map(base, alt, sizes)
            decoder.on_size_map = self._lend_size_map
        self._preload_counts()

    def attach_writer(self, shadow_now: Callable[[], ShadowStack],
                      sink_now: Callable[[], RecordSink]) -> None:
        """The tracer's shadow stack (the running thread's) and sink, before the run: when
        the records go to a uftrace directory or `run`'s spill file, C keeps the shadow
        stack's common case and writes them itself (backends/native_writer.py); otherwise
        every event is drained to Python."""
        self._shadow_now = shadow_now
        sink = sink_now()
        packed = packed_sink_of(sink)
        # (an ISA whose sites C does not lower gives C no event to take, unless its site
        # hooks are C's: hook delivery, or a program whose code descent finds — arm)
        isa, t = self.image.isa, self.t
        hooked = self._hooked is not None and (hooked_sites.every_site_hooked(isa)
                                               or not t.discovery.symbols.funcs)
        if (packed is None or not self._nt
                or (t.strict and self._strict_c is None)
                or (isa.lower is None and not hooked)
                or not hasattr(self._lib, "uw_new")
                or self._writer is not None):
            return
        self._drain()
        self._writer = NativeWriter(self._lib, self._nt, shadow_now(), t.tails, sink_now,
                                    packed)
        self._records.writer = self._writer

    # ------------------------------------------------------------ composed parts
    @property
    def hooked_table(self) -> HookedSites | None:
        """C's site table (hook delivery), if this engine has one."""
        return self._hooked

    @property
    def strict_in_c(self) -> StrictInC | None:
        """strict.c's mirror, if C switches strict cleanup here."""
        return self._strict_c

    @property
    def writer(self) -> NativeWriter | None:
        """C's record writer, when `attach_writer` gave C the records."""
        return self._writer

    @property
    def fast(self) -> FastSites:
        """Which armed sites C may finish (fastpath.py)."""
        return self._fast

    @property
    def lib(self) -> ctypes.CDLL:
        return self._lib

    @property
    def nt(self) -> int:
        """hotpath.c's state (0 once finished)."""
        return self._nt or 0

    def drain_c(self) -> None:
        """What C did since Python last ran, onto Python's state (a Python hook's first
        step)."""
        self._drain()

    def refresh_c(self) -> None:
        """What Python changed, to C (after a Python hook changed it)."""
        self._refresh()

    # ------------------------------------------------------------ shared state
    @property
    def time(self) -> int:
        if not self._nt:
            return self._final_time
        return int(self._lib.nt_get_time(self._nt))

    @time.setter
    def time(self, value: int) -> None:
        self._lib.nt_set_time(self._nt, value)

    def _needs_blocks(self) -> bool:
        """Does the next block need Python's block hook?"""
        t = self.t
        return (t.pending is not None or bool(t.rearm)
                or t.armed_now or t.restarted is not None
                or t.resume_at is not None or t.after_trap
                or (t.guard is not None and bool(t.guard.hidden))
                or any(a.needs_blocks() for a in self.addons))

    def _attend(self, on: bool) -> None:
        """Whether C hands every block to Python's block hook (told only when it changes:
        C never changes it itself)."""
        if on != self._attention:
            self._attention = on
            self._lib.nt_set_attention(self._nt, int(on))

    def _refresh(self) -> None:
        """Tell C whether the next block needs Python's block hook."""
        t = self.t
        if self._hooked is not None:  # the sites Python set, to C's table at once
            self._hooked.flush()
        self._attend(self._needs_blocks())
        if self._strict_c is not None:  # what Python changed of the chain, to C's
            self._strict_c.push_chain(t.chain)
        if self._writer is not None:  # what Python changed, to C's stacks
            self._writer.push()
        if self._hooked is not None and self._hooked.sites:  # which return C may finish
            self._hooked.returns(t.tails.return_addrs)
        for addon in self.addons:
            addon.refresh()

    # ------------------------------------------------------------ the tracer's sections
    def wrap_emit(self, emit: Callable[[Event], None]) -> Callable[[Event], None]:
        def emit_drained(event: Event) -> None:
            self._drain()
            emit(event)

        return emit_drained

    def enter(self) -> None:
        self._drain()

    def leave(self) -> None:
        self._refresh()

    def pause(self) -> None:
        """(Between two runs of the CPU: C is idle.  A transfer C's site table left pending
        is for a site that has not run: the CPU stops only at an instruction's start, after
        the block hook that would resolve a transfer that ran, so the block is looked at
        again when it resumes.)"""
        self._drain()
        if self._hooked is not None:
            self._hooked.cancel()

    def thread_switched(self) -> None:
        """C is handed the incoming thread's state: its chain to strict.c (`_refresh`), its
        shadow stack and tail frames to the writer, its return addresses to the site
        table."""
        if self._writer is not None:
            self._writer.switch_thread(self._shadow_now())
        self._refresh()

    def block_entered(self) -> None:
        for addon in self.addons:
            addon.block_entered()

    # ------------------------------------------------------------ hooks
    def _install(self, hooks: TrapHooks) -> None:
        """(hooks is the run's HookSet the engine was made with: `self._hooks`.)"""
        hooks = self._hooks
        if self.t.delivery == "patch":
            hooks.on_trap = self.t.on_trap
        self.cpu.hook_del(hooks.intr_hook)  # C's INTR hook passes on what it does not finish
        # (hook delivery: the block hook of C's site table, which counts blocks as well)
        on_block, block_data = self._lib.nt_on_block, self._nt
        if self._hooked is not None:
            on_block, block_data = self._hooked.block_hook, self._hooked.ns
        for kind, fn, data in (("intr", self._lib.nt_on_intr, self._nt),
                               ("block", on_block, block_data)):
            handle = self.add_c_hook(kind, ctypes.cast(fn, ctypes.c_void_p).value or 0, data)
            if kind == "intr":
                self._c_intr_hook = handle

    def add_c_hook(self, kind: str, fn: int, data: int, begin: int = 1, end: int = 0) -> int:
        """A hook of the target's (`CPort.add_hook`: "intr", "block", "code") whose
        callback is C's (fn, with user data data), deleted at the end of the run before C's
        tables are freed; its handle."""
        handle = self.port.add_hook(kind, fn, data, begin, end)
        self._c_hooks.append(handle)
        return handle

    def del_c_hook(self, handle: int) -> None:
        self._c_hooks.remove(handle)
        self.port.del_hook(handle)

    def under_guard(self, body: Callable[[], None]) -> None:
        """body under the run's exception guard (an exception stops the run, re-raised by
        it), without a Python section's drain and refresh."""
        self._hooks.guard(body)

    def guarded(self, body: Callable[[], None]) -> None:
        """body as a Python section: under the run's guard, C's state refreshed after."""
        try:
            self._hooks.guard(body)
        finally:
            self._refresh()

    def _py_intr(self, intno: int) -> None:
        try:
            self._hooks.guard(self._drain)
            self._hooks.on_intr(self.port.engine, intno, None)  # guarded itself
        finally:
            self._refresh()

    def py_block(self, addr: int, size: int) -> None:
        """C hands a block to the reference's block hook."""
        def body() -> None:
            self._drain()
            self.t.on_block(self.port.engine, addr, size, None)

        self.guarded(body)

    def _lend_size_map(self, base: int, alt: bool, sizes: bytearray) -> None:
        """A size map of the decoder's (new or already there) to C, which counts a block
        whose instructions it knows without Python (hotpath.c count_from_map)."""
        if not self._nt or not sizes:
            return
        buffer = (ctypes.c_char * len(sizes)).from_buffer(sizes)
        if self._lib.nt_size_map_add(self._nt, base, len(sizes), ctypes.addressof(buffer),
                                     int(alt)) == 0:
            self._lent.append(buffer)

    def _preload_counts(self) -> None:
        """The block counts the decoder knows already (a program's store: a later run), to
        C's block tables at once: no block of them is asked of Python.  C's tables are keyed
        by address and size; on an ISA with two instruction sets only the blocks known in one
        of them go."""
        lib = self._lib
        if not hasattr(lib, "nt_counts_preload"):
            return
        counts = self.t.decoder.block_counts
        modes: dict[tuple[int, int], int] = {}
        for addr, size, _alt in counts:
            modes[(addr, size)] = modes.get((addr, size), 0) + 1
        rows = b"".join(native.LEARNED.pack(addr, size, int(alt), count, 0)
                        for (addr, size, alt), count in counts.items()
                        if modes[(addr, size)] == 1)
        n = len(rows) // native.LEARNED.size
        if not n:
            return
        if lib.nt_counts_preload(self._nt, rows, n) != 0:
            raise MemoryError("native hot path: out of memory")
        if self._hooked is not None:
            self._hooked.lib.hs_counts_preload(self._hooked.ns, rows, n)

    def _learned(self) -> None:
        """The block counts C read from the size maps, into the decoder's (kept for the
        next run with the file: store.py)."""
        lib, nt = self._lib, self._nt
        n = int(lib.nt_learned_count(nt)) if hasattr(lib, "nt_learned_count") else 0
        self.more_native_stats["c_block_counts"] = n
        if n:
            raw = ctypes.string_at(lib.nt_learned_at(nt), n * native.LEARNED.size)
            counts = self.t.decoder.block_counts
            for addr, size, alt, count, _pad in native.LEARNED.iter_unpack(raw):
                counts.setdefault((addr, size, bool(alt)), count)

    def _py_count(self, addr: int, size: int) -> int:
        self.more_native_stats["python_counts"] = \
            self.more_native_stats.get("python_counts", 0) + 1
        try:
            t = self.t
            key = (addr, size)
            count = t.block_sizes.get(key)
            if count is None:
                count = t.block_sizes[key] = t.block_count(addr, size)
            return count
        except BaseException as e:  # noqa: BLE001 - re-raised by run(), as a hook's
            if self._hooks.pending is None:
                self._hooks.pending = e
            self.port.stop()
            return 0

    def _py_drain(self) -> None:
        self.guarded(self._drain)

    # ------------------------------------------------------------ events
    def _drain(self) -> None:
        lib, nt, writer = self._lib, self._nt, self._writer
        if writer is not None:  # C's records and stacks first: they come before these
            writer.pull()
        if self._strict_c is not None:  # the switches C made, on Python's state
            self._strict_c.replay_journal()
        n = lib.nt_events_count(nt)
        if n:
            data = ctypes.string_at(lib.nt_events(nt), n * EVENT.size)
            n_strings = lib.nt_strings_len(nt)
            strings = ctypes.string_at(lib.nt_strings(nt), n_strings) if n_strings else b""
            lib.nt_events_clear(nt)
            self._records.drain(data, strings)
        for addon in self.addons:
            addon.drain()

    # ------------------------------------------------------------ the tracer's changes
    def hook_in_table(self, handle: int) -> bool:
        """A site in C's table has a negative handle: hotpath.c's block hook looks a block's
        site up at every entry, after Python's visit that armed it (`hs_on_block`)."""
        return handle < 0

    def site_arming(self, site: Site) -> None:
        self._arming_sets = self._hooked.sets if self._hooked is not None else 0

    def site_armed(self, site: Site, func: int) -> None:
        hooked = self._hooked
        self._fast.armed(site)
        armed = self.t.armed.get(site.addr)
        if hooked is not None and armed is not None and armed.hook < 0:
            # (C's handles are negative; armed again from idle, or put in the table now)
            hooked.armed(site, fresh=hooked.sets != self._arming_sets)
        if self._strict_c is not None:
            self._strict_c.site_armed(site, func)
        for addon in self.addons:
            addon.site_armed(site, func)

    def site_disarmed(self, addr: int) -> None:
        self._fast.disarmed(addr)
        if self._hooked is not None:
            self._hooked.active(addr, False)
        if self._strict_c is not None:
            self._strict_c.site_disarmed(addr)
        for addon in self.addons:
            addon.site_disarmed(addr)

    def function_taken(self, func: Function) -> None:
        if self._strict_c is not None and not self._strict_c.replaying:
            self._strict_c.taken(func)

    def function_dropped(self, start: int) -> None:
        if self._strict_c is not None and not self._strict_c.replaying:
            self._strict_c.dropped(start)

    def stale_found(self, starts: set[int]) -> None:
        # every function descent made stale is Python's until Python tells C its new sites
        # (`StrictInC.taken`): C would arm one it knows with its old sites when a return
        # reaches it on the chain or a call enters it, where Python descends it again
        if self._strict_c is not None:
            for start in starts:
                self._strict_c.forget(start)

    def rearming(self, old: Function, new: Function) -> None:
        if self._strict_c is not None:
            self._strict_c.forget(old.start)
            self._strict_c.forget(new.start)

    def code_written(self) -> None:
        if self._strict_c is not None:  # code the guest writes: every switch is Python's
            self._strict_c.disable()

    def resolve(self, p: Pending, target: int, reference: Callable[[Pending, int], None]
                ) -> None:
        self._fast.resolve(p, target, reference)

    # ------------------------------------------------------------ end
    def flush_events(self) -> None:
        """Hand the buffered events to the shadow stack (the tracer asks at the end of the
        run, before it reads the open frames)."""
        if self._nt:
            self._drain()

    def detach(self) -> None:
        """(SiteEngine.detach.)  C's block and code hooks go; its INTR hook stays: it hands
        the run's system calls and exceptions on to Python, as the run's own hook it
        replaced did, and finds no site armed.  C's tables live on to `finish`."""
        for handle in [h for h in self._c_hooks if h != self._c_intr_hook]:
            self.port.del_hook(handle)
            self._c_hooks.remove(handle)

    def finish(self) -> None:
        if not self._nt:  # finished already
            return
        self._drain()
        for finisher in self.finishers:
            finisher()
        self._learned()
        lib, nt, stats = self._lib, self._nt, self.t.stats
        for addon in self.addons:
            addon.finish(stats)
        stats["traps"] += int(lib.nt_counter(nt, 0))
        stats["simulated"] += int(lib.nt_counter(nt, 1))
        site_hits, site_slow, virtual_hits = self._hooked.counters() if self._hooked \
            else (0, 0, 0)
        stats[self._hits_counter] += site_hits
        stats["simulated"] += virtual_hits  # (the traps the reference simulates)
        # how much still went through Python (bench's profile; not a mechanism counter)
        self.native_stats.update({
            "python_traps": int(lib.nt_counter(nt, 2)) + site_slow,
            "python_blocks": int(lib.nt_counter(nt, 3)),
            "c_records": int(lib.nt_counter(nt, 4)),
            "c_tail_jumps": int(lib.nt_counter(nt, 5)),
            "c_strings": int(lib.nt_counter(nt, 6)),
            "c_strings_written": int(lib.nt_counter(nt, 7)),
            "c_switches": (self._strict_c.switches() if self._strict_c is not None else 0),
            **self.more_native_stats})
        if self._writer is not None:
            self.native_stats["c_records_other_threads"] = sum(
                n for tid, n in self._writer.written.items() if tid != 0)
            self._writer.close()
        for addon in self.addons:
            self.native_stats.update(addon.native_stats())
        self._final_time = self.time
        # the run is over: C's hooks go, then its tables (a bench or a test builds hundreds
        # of processes); the translated code first, which deleting a hook drops block by
        # block otherwise (UnicornCPort.drop_all_code)
        if self._c_hooks:
            self.port.drop_all_code()
        for handle in self._c_hooks:
            self.port.del_hook(handle)
        self._c_hooks.clear()
        decoder = self.t.decoder
        if decoder.on_size_map == self._lend_size_map:
            decoder.on_size_map = None
        lib.nt_free(nt)
        self._lent.clear()
        if self._hooked is not None:
            self._hooked.free()
        self._nt = None
        if self._strict_c is not None:
            self._strict_c.close()
        for addon in self.addons:
            addon.free()


class EngineAddon(Protocol):
    """A mechanism's own C state beside the hot path's (entry's probes, entry_native.py):
    told of the tracer's sections and changes as the engine is."""

    def needs_blocks(self) -> bool: ...

    def refresh(self) -> None: ...

    def drain(self) -> None: ...

    def block_entered(self) -> None: ...

    def site_armed(self, site: Site, func: int) -> None: ...

    def site_disarmed(self, addr: int) -> None: ...

    def finish(self, stats: dict[str, int]) -> None:
        """C's counters into the tracer's stats (before the hot path's own)."""
        ...

    def native_stats(self) -> dict[str, int]: ...

    def free(self) -> None: ...


def create(image: Image, cpu: UnicornCpu, hooks: HookSet, emit: Callable[[Event], None],
           cleanup: str = "lazy", types: CallTypes | None = None) -> Int3Backend:
    """int3 on the Unicorn hot path: the site tracer over a `HotPathEngine`."""
    engine = HotPathEngine(image, cpu, hooks, emit, cleanup)
    return Int3Backend(image, cpu, hooks, emit, cleanup, types, engine=engine)
