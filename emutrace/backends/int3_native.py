"""`int3` on the native hot path (`--engine native`): the algorithm of backends/int3.py, with
the per-event work in C (emutrace/native/hotpath.c).

What C does without entering Python:
* the block hook adds each block's instruction count (the count is computed once per block,
  by `Int3Backend._count`, through a callback, and kept in a C table);
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

import unicorn
from unicorn import unicorn_const as ucc
from unicorn.unicorn_py3.unicorn import uclib

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
from emutrace.trace.events import Event, SignalDelivery
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


class NativeInt3Backend(Int3Backend):
    name = "int3"
    cpu: UnicornCpu  # the C hooks run inside this Unicorn instance
    # hook delivery: C's site table watches the site hooks (entry's keeps Python's hooks)
    site_table_in_c = True
    _shadow_now: Callable[[], ShadowStack]  # the running thread's (attach_writer)

    def switch_thread(self, tid: int) -> None:
        """Another guest thread gets the CPU (between two runs of the CPU: C is idle).  What
        C did is the stopping thread's (drained first); the reference swaps the state of a
        thread of control; C is then handed the incoming thread's (its chain to strict.c,
        its shadow stack and tail frames to the writer, its return addresses to the site
        table).  A transfer C's site table left pending is for a site that has not run: the
        CPU stops only at an instruction's start, after the block hook that would resolve a
        transfer that ran (threads.py), so the block is looked at again when it resumes."""
        self._drain()
        if self._hooked is not None:
            self._hooked.cancel()
        super().switch_thread(tid)
        if self._writer is not None:
            self._writer.switch_thread(self._shadow_now())
        self._refresh()

    def __init__(self, image: Image, cpu: UnicornCpu, hooks: HookSet,
                 emit: Callable[[Event], None], cleanup: str = "lazy",
                 types: CallTypes | None = None, delivery: str | None = None,
                 name: str | None = None, counters: tuple[str, ...] | None = None,
                 hits_counter: str = "traps") -> None:
        """delivery, name, counters: as Int3Backend's (hwbp: "hook", its own; its slots are
        backends/hwbp_native.py's); hits_counter: the counter C's site hits add to."""
        lib = native.load()
        isa = image.isa
        regs = isa.registers
        bp = isa.breakpoint_for(alt_mode=False)
        self._lib, self._hooks, self._emit_now = lib, hooks, emit
        # ctypes trampolines: kept referenced as long as C may call them
        self._callbacks = (native.PY_INTR(self._py_intr), native.PY_BLOCK(self._py_block),
                           native.PY_COUNT(self._py_count), native.PY_DRAIN(self._py_drain))
        # (an ISA with more argument registers than C saves gets no fast calls: _args_fast)
        self._arg_names = regs.args[:native.MAX_REGS]
        self._ret_names = [regs.retval] + ([isa.c_values.retval_hi]
                                           if isa.c_values.retval_hi else [])
        cfg = native.Config()
        for field in ("reg_read", "reg_write", "mem_read", "mem_write", "emu_stop",
                      "reg_read_batch"):
            setattr(cfg, field, ctypes.cast(getattr(uclib, f"uc_{field}"), ctypes.c_void_p))
        cfg.py_intr, cfg.py_block, cfg.py_count, cfg.py_drain = self._callbacks
        cfg.pc_reg, cfg.sp_reg = cpu.reg_id(regs.pc), cpu.reg_id(regs.sp)
        cfg.bp_intno = bp.intno if bp is not None else _NO_INTNO
        cfg.pc_after = bp.pc_after if bp is not None else 0
        cfg.bp_uncounted = int(bp is not None and not bp.counted)
        cfg.word, cfg.big_endian = cpu.word, int(cpu.byteorder == "big")
        cfg.n_args = len(self._arg_names)
        # stack words after the argument registers (i386: all of them; x86_64: args 7 and 8)
        self._n_stack = cfg.n_stack = native.MAX_REGS - cfg.n_args
        cfg.stack_offset = regs.stack_args_offset
        for i, name in enumerate(self._arg_names):
            cfg.arg_regs[i] = cpu.reg_id(name)
        cfg.ret_reg = cpu.reg_id(self._ret_names[0])
        cfg.ret_hi_reg = cpu.reg_id(self._ret_names[1]) if len(self._ret_names) > 1 else -1
        cfg.buffer_events = 4096
        cfg.code_mask = isa.code_mask & ((1 << 64) - 1)  # ARM: a target's bit 0 is its mode
        cfg.fixed_insn = fixed_insn_size(isa)
        # (block counts read from discovery's size maps: which instruction set runs)
        cls = isa.classifiers
        flag = isa.alt_mode_flag
        cfg.alt_reg, cfg.alt_bit = (cpu.reg_id(flag[0]), flag[1]) if flag else (-1, 0)
        cfg.align = cls.insn_align if cls is not None else 0
        cfg.alt_align = cls.alt_insn_align if cls is not None else 0
        self._cfg = cfg
        self._nt = lib.nt_new(cpu.uc._uch, ctypes.byref(cfg))
        self._attention = False  # (nt_new's)
        if not self._nt:
            raise MemoryError("native hot path: out of memory")
        self._c_hooks: list[int] = []
        # hook delivery: C's site table and block hook instead of Python site hooks
        # (hwbp's slots on a Thumb ISA stay Python hooks, switched by Python: hwbp_native.py)
        thumb_slots = isa.thumb_bit and delivery == "hook"
        self._hooked = HookedSites(isa, lib, self._nt) \
            if self.site_table_in_c and hooked_sites.wanted(isa) and not thumb_slots \
            else None
        self._hits_counter = hits_counter
        # what a composed delivery adds to `native_stats` (hwbp_native.py)
        self.more_native_stats: dict[str, int] = {}
        # a composed delivery's last look at C's tables, before `finish` frees them
        self.finishers: list[Callable[[], None]] = []
        self._final_time = 0
        # strict cleanup: C switches the armed function where it knows both (strict.c), at
        # the traps of lowered sites or the site hooks of C's table (arm's A32 and Thumb code
        # too); made before the base class arms anything, so that it sees every arming
        self._strict_c: StrictInC | None = None
        if (cleanup == "strict" and not thumb_slots
                and (isa.lower is not None or self._hooked is not None)):
            self._strict_c = StrictInC(self, self._nt, cpu.uc, isa.code_mask)
            if self._hooked is not None:
                self._strict_c.bind_hooked(self._hooked)
        super().__init__(image, cpu, hooks, self._emit_drained, cleanup, types,
                         delivery=delivery, name=name, counters=counters)
        if self.guard is not None:  # a load that hid breakpoints: settle at the next block
            self.guard.on_hide = lambda: self._attend(True)
        self._fast = FastSites(self, _HotpathTable(lib, self._nt), cpu.reg_id,
                               len(self._arg_names) + self._n_stack,
                               on_callee=(self._strict_c.callee if self._strict_c is not None
                                          else None))
        self._records = RecordDrain(self, cpu, emit, list(self._arg_names), self._ret_names,
                                    self._n_stack)
        if self._strict_c is not None:
            if self.guard is not None:  # C's switches replayed before a load or store
                self.guard.before = self._drain
            self._strict_c.push_chain(self.chain)
        self._writer: NativeWriter | None = None  # `record`, `run`: C writes the records
        if self._hooked is not None:
            self._hooked.bind(self, self._fast)
        # discovery's size maps lent to C for block counts (exported buffers: each stays
        # alive and unresized while C may read it)
        self._lent: list[ctypes.Array[ctypes.c_char]] = []
        if hasattr(lib, "nt_size_map_add"):
            for (base, alt), sizes in list(self.decoder.size_maps().items()):
                self._lend_size_map(base, alt, sizes)
            self.decoder.on_size_map = self._lend_size_map
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
        isa = self.image.isa
        hooked = self._hooked is not None and (hooked_sites.every_site_hooked(isa)
                                               or not self.discovery.symbols.funcs)
        if (packed is None or not self._nt
                or (self.strict and self._strict_c is None)
                or (isa.lower is None and not hooked)
                or not hasattr(self._lib, "uw_new")
                or self._writer is not None):
            return
        self._drain()
        self._writer = NativeWriter(self._lib, self._nt, shadow_now(), self.tails, sink_now,
                                    packed)
        self._records.writer = self._writer

    # ------------------------------------------------------------ composed parts
    @property
    def hooked_table(self) -> HookedSites | None:
        """C's site table (hook delivery), if this backend has one."""
        return self._hooked

    @property
    def strict_in_c(self) -> StrictInC | None:
        """strict.c's mirror, if C switches strict cleanup here."""
        return self._strict_c

    def drain_c(self) -> None:
        """What C did since Python last ran, onto Python's state (a Python hook's first
        step)."""
        self._drain()

    def refresh_c(self) -> None:
        """What Python changed, to C (after a Python hook changed it)."""
        self._refresh()

    # ------------------------------------------------------------ shared state
    @property  # type: ignore[override]
    def time(self) -> int:
        if not self._nt:
            return self._final_time
        return int(self._lib.nt_get_time(self._nt))

    @time.setter
    def time(self, value: int) -> None:
        self._lib.nt_set_time(self._nt, value)

    def _needs_blocks(self) -> bool:
        """Does the next block need Python's block hook?"""
        return (self.pending is not None or bool(self.rearm)
                or self._armed_now or self._restarted is not None
                or self._resume_at is not None or self._after_trap
                or (self.guard is not None and bool(self.guard.hidden)))

    def _attend(self, on: bool) -> None:
        """Whether C hands every block to Python's block hook (told only when it changes:
        C never changes it itself)."""
        if on != self._attention:
            self._attention = on
            self._lib.nt_set_attention(self._nt, int(on))

    def _refresh(self) -> None:
        """Tell C whether the next block needs Python's block hook."""
        self._attend(self._needs_blocks())
        if self._strict_c is not None:  # what Python changed of the chain, to C's
            self._strict_c.push_chain(self.chain)
        if self._writer is not None:  # what Python changed, to C's stacks
            self._writer.push()
        if self._hooked is not None and self._hooked.sites:  # which return C may finish
            self._hooked.returns(self.tails.return_addrs)

    # ------------------------------------------------------------ hooks
    def _install(self, hooks: TrapHooks) -> None:
        assert isinstance(hooks, HookSet)
        if self.delivery == "patch":
            hooks.on_trap = self._on_trap
        uc = self.cpu.uc
        uc.hook_del(hooks.intr_hook)  # C's INTR hook passes on what it does not finish
        # (hook delivery: the block hook of C's site table, which counts blocks as well)
        on_block, block_data = self._lib.nt_on_block, self._nt
        if self._hooked is not None:
            on_block, block_data = self._hooked.block_hook, self._hooked.ns
        for kind, fn, data in ((ucc.UC_HOOK_INTR, self._lib.nt_on_intr, self._nt),
                               (ucc.UC_HOOK_BLOCK, on_block, block_data)):
            self.add_c_hook(kind, ctypes.cast(fn, ctypes.c_void_p).value or 0, data)

    def add_c_hook(self, kind: int, fn: int, data: int, begin: int = 1, end: int = 0) -> int:
        """A Unicorn hook whose callback is C's (fn, with user data data), deleted at the
        end of the run before C's tables are freed; its handle."""
        handle = ctypes.c_size_t()
        err = uclib.uc_hook_add(self.cpu.uc._uch, ctypes.byref(handle), kind,
                                ctypes.c_void_p(fn), ctypes.c_void_p(data),
                                ctypes.c_uint64(begin), ctypes.c_uint64(end))
        if err != ucc.UC_ERR_OK:
            raise unicorn.UcError(err)
        self._c_hooks.append(handle.value)
        return handle.value

    def del_c_hook(self, handle: int) -> None:
        self._c_hooks.remove(handle)
        uclib.uc_hook_del(self.cpu.uc._uch, ctypes.c_size_t(handle))

    def under_guard(self, body: Callable[[], None]) -> None:
        """body under the run's exception guard (an exception stops the run, re-raised by
        it), without a Python section's drain and refresh."""
        self._hooks.guard(body)

    def _guarded(self, body: Callable[[], None]) -> None:
        try:
            self._hooks.guard(body)
        finally:
            self._refresh()

    def _py_intr(self, intno: int) -> None:
        try:
            self._hooks.guard(self._drain)
            self._hooks.on_intr(self.cpu.uc, intno, None)  # guarded itself
        finally:
            self._refresh()

    def _py_block(self, addr: int, size: int) -> None:
        def body() -> None:
            self._drain()
            self._on_block(self.cpu.uc, addr, size, None)

        self._guarded(body)

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
        counts = self.decoder.block_counts
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
            counts = self.decoder.block_counts
            for addr, size, alt, count, _pad in native.LEARNED.iter_unpack(raw):
                counts.setdefault((addr, size, bool(alt)), count)

    def _py_count(self, addr: int, size: int) -> int:
        self.more_native_stats["python_counts"] = \
            self.more_native_stats.get("python_counts", 0) + 1
        try:
            key = (addr, size)
            count = self.block_sizes.get(key)
            if count is None:
                count = self.block_sizes[key] = self._count(addr, size)
            return count
        except BaseException as e:  # noqa: BLE001 - re-raised by run(), as a hook's
            if self._hooks.pending is None:
                self._hooks.pending = e
            self.cpu.uc.emu_stop()
            return 0

    def _py_drain(self) -> None:
        self._guarded(self._drain)

    def _on_site(self, uc: object, addr: int, size: int, _d: object) -> None:
        self._drain()
        super()._on_site(uc, addr, size, _d)
        self._refresh()

    def start(self, entry: int) -> None:
        super().start(entry)
        self._refresh()

    def trap_entered(self, vector: int, signal: SignalDelivery | None = None) -> None:
        """(The Linux layer may call it between runs: C's stacks learn the signal frame.
        A fault in a block left its site unrun: C's pending transfer is dropped.)"""
        self._drain()
        if self._hooked is not None:
            self._hooked.cancel()
        super().trap_entered(vector, signal)
        self._refresh()

    def trap_returned(self, site: int) -> None:
        """(A signal handler's rt_sigreturn: the next block, the interrupted code, is
        Python's, which re-arms it under strict cleanup.)"""
        self._drain()
        super().trap_returned(site)
        self._refresh()

    # ------------------------------------------------------------ events
    def _emit_drained(self, event: Event) -> None:
        self._drain()
        self._emit_now(event)

    def _drain(self) -> None:
        lib, nt, writer = self._lib, self._nt, self._writer
        if writer is not None:  # C's records and stacks first: they come before these
            writer.pull()
        if self._strict_c is not None:  # the switches C made, on Python's state
            self._strict_c.replay_journal()
        n = lib.nt_events_count(nt)
        if not n:
            return
        data = ctypes.string_at(lib.nt_events(nt), n * EVENT.size)
        n_strings = lib.nt_strings_len(nt)
        strings = ctypes.string_at(lib.nt_strings(nt), n_strings) if n_strings else b""
        lib.nt_events_clear(nt)
        self._records.drain(data, strings)

    # ------------------------------------------------------------ arming
    def _hook_in_table(self, handle: int) -> bool:
        """A site in C's table has a negative handle: hotpath.c's block hook looks a block's
        site up at every entry, after Python's visit that armed it (`hs_on_block`)."""
        return handle < 0

    def _arm_site(self, site: Site, func: int) -> None:
        strict_c, hooked = self._strict_c, self._hooked
        sets = hooked.sets if hooked is not None else 0
        super()._arm_site(site, func)
        self._fast.armed(site)
        armed = self.armed.get(site.addr)
        if hooked is not None and armed is not None and armed.hook < 0:
            # (C's handles are negative; armed again from idle, or put in the table now)
            hooked.armed(site, fresh=hooked.sets != sets)
        if strict_c is not None:
            strict_c.site_armed(site, func)

    def _disarm_site(self, addr: int) -> None:
        strict_c = self._strict_c
        super()._disarm_site(addr)
        self._fast.disarmed(addr)
        if self._hooked is not None:
            self._hooked.active(addr, False)
        if strict_c is not None:
            strict_c.site_disarmed(addr)

    def _take(self, func: Function | None) -> bool:
        taken = super()._take(func)
        if taken and self._strict_c is not None and not self._strict_c.replaying:
            assert func is not None
            self._strict_c.taken(func)
        return taken

    def _disarm(self, func_start: int) -> None:
        was_armed = func_start in self.armed_funcs
        super()._disarm(func_start)
        if was_armed and self._strict_c is not None and not self._strict_c.replaying:
            self._strict_c.dropped(func_start)

    def _refresh_stale(self) -> None:
        # every function descent made stale is Python's until Python tells C its new sites
        # (`StrictInC.taken`): C would arm one it knows with its old sites when a return
        # reaches it on the chain or a call enters it, where Python descends it again
        if self._strict_c is not None:
            for start in self.discovery.stale:
                self._strict_c.forget(start)
        super()._refresh_stale()

    def _rearm(self, old: Function, new: Function) -> None:
        if self._strict_c is not None:
            self._strict_c.forget(old.start)
            self._strict_c.forget(new.start)
        super()._rearm(old, new)

    def _code_written(self, lo: int, hi: int) -> None:
        if self._strict_c is not None:  # code the guest writes: every switch is Python's
            self._strict_c.disable()
        super()._code_written(lo, hi)

    def _resolve(self, p: Pending, target: int) -> None:
        self._fast.resolve(p, target, super()._resolve)

    # ------------------------------------------------------------ end
    def flush_events(self) -> None:
        """Hand the buffered events to the shadow stack (the tracer asks at the end of the
        run, before it reads the open frames)."""
        if self._nt:
            self._drain()

    def finish(self) -> int:
        if not self._nt:  # finished already
            return self._final_time
        self._drain()
        for finisher in self.finishers:
            finisher()
        self._learned()
        lib, nt = self._lib, self._nt
        self.stats["traps"] += int(lib.nt_counter(nt, 0))
        self.stats["simulated"] += int(lib.nt_counter(nt, 1))
        site_hits, site_slow, virtual_hits = self._hooked.counters() if self._hooked \
            else (0, 0, 0)
        self.stats[self._hits_counter] += site_hits
        self.stats["simulated"] += virtual_hits  # (the traps the reference simulates)
        # how much still went through Python (bench's profile; not a mechanism counter)
        self.native_stats = {"python_traps": int(lib.nt_counter(nt, 2)) + site_slow,
                             "python_blocks": int(lib.nt_counter(nt, 3)),
                             "c_records": int(lib.nt_counter(nt, 4)),
                             "c_tail_jumps": int(lib.nt_counter(nt, 5)),
                             "c_strings": int(lib.nt_counter(nt, 6)),
                             "c_strings_written": int(lib.nt_counter(nt, 7)),
                             "c_switches": (self._strict_c.switches()
                                            if self._strict_c is not None else 0),
                             **self.more_native_stats}
        if self._writer is not None:
            self.native_stats["c_records_other_threads"] = sum(
                n for tid, n in self._writer.written.items() if tid != 0)
            self._writer.close()
        self._final_time = self.time
        # the run is over: C's hooks go, then its tables (a bench or a test builds hundreds
        # of processes)
        for handle in self._c_hooks:
            uclib.uc_hook_del(self.cpu.uc._uch, ctypes.c_size_t(handle))
        self._c_hooks.clear()
        if self.decoder.on_size_map == self._lend_size_map:
            self.decoder.on_size_map = None
        lib.nt_free(nt)
        self._lent.clear()
        if self._hooked is not None:
            self._hooked.free()
        self._nt = None
        if self._strict_c is not None:
            self._strict_c.close()
        super().finish()  # (another mechanism's counters only: hwbp)
        return self._final_time
