"""i386 (IA-32), System V i386 psABI."""

import struct
from dataclasses import replace

from emutrace.isa.base import (
    CLONE_BACKWARDS,
    LINUX_NOT_TRIED,
    NATIVE_SIGNAL_HANDLERS,
    SIGNAL_HANDLERS,
    Breakpoint,
    Cap,
    Capability,
    Classifiers,
    CpuPort,
    CValues,
    DebugHardware,
    Engines,
    GuestError,
    Identity,
    Isa,
    NativeTracing,
    Plt,
    Registers,
    SyscallConvention,
)
from emutrace.isa.native_pmu import native_bts_reason
from emutrace.isa.native_sandbox import native_sandbox_reason
from emutrace.isa.x86_64 import (
    FPU_RESET,
    SWEEP_X86,
    classify_x86,
    x86_lowering,
    x86_simulator,
    x86_sp_effect,
)
from emutrace.rootfs import setup_root

# ---------------------------------------------------------------- identity
IDENTITY = Identity(
    name="i386",
    aliases=("x86", "i686", "ia32"),
    elf_machine="EM_386",
    elf_class=32,
    endian="little",
    qemu="i386",
    debian_arch="i386",
    triple="i686-linux-gnu",
)

# ---------------------------------------------------------------- engines
ENGINES = Engines(
    uc_arch="UC_ARCH_X86",
    uc_mode=("UC_MODE_32",),
    uc_reg_module="x86_const",
    uc_reg_prefix="UC_X86_REG_",
    cs_arch="CS_ARCH_X86",
    cs_mode=("CS_MODE_32",),
    ks_arch="KS_ARCH_X86",
    ks_mode=("KS_MODE_32",),
    # the segment bases as Unicorn gives them in 32-bit mode: MSR_FS_BASE, MSR_GS_BASE
    # (Intel SDM vol. 4 §2.1; QEMU's x86_64 target keeps the hidden base of a loaded
    # selector there), read by the simulator of `call gs:[0x10]`
    uc_msrs={"fs_base": 0xC0000100, "gs_base": 0xC0000101},
)

# ---------------------------------------------------------------- registers
# i386 psABI §2.2: all arguments on the stack, the first at 4(%esp) on entry; result in eax.
REGISTERS = Registers(
    pc="eip",
    sp="esp",
    retval="eax",
    args=(),
    tls="gs",
    stack_args_offset=4,
    general=("eax", "ebx", "ecx", "edx", "esi", "edi", "ebp"),
    # i386 psABI, "DWARF Definition": 0-7 are eax, ecx, edx, ebx, esp, ebp, esi, edi.  GCC
    # passes a static function's first arguments in eax, edx, ecx (its local calling
    # convention, as regparm(3)) and says where in DW_AT_location
    dwarf=("eax", "ecx", "edx", "ebx", "esp", "ebp", "esi", "edi"),
)

# ---------------------------------------------------------------- syscalls
# `int $0x80`: number in eax, arguments ebx, ecx, edx, esi, edi, ebp; -errno in eax.
SYSCALLS = SyscallConvention(
    instruction=bytes.fromhex("cd80"),  # int $0x80
    hook="intr",
    intno=0x80,
    insn=None,
    number="eax",
    args=("ebx", "ecx", "edx", "esi", "edi", "ebp"),
    ret="eax",
    clone_args=CLONE_BACKWARDS,
)

# ---------------------------------------------------------------- traps
BREAKPOINTS = (Breakpoint("int3", b"\xcc", hook="intr", intno=3, pc_after=1, works=True),)

# Hardware instruction breakpoints (what `hwbp` models):
# Intel SDM vol. 3 §18.2: four debug address registers DR0-DR3,
# enabled in DR7 (linux arch/x86/include/asm/hw_breakpoint.h: HBP_NUM 4)
DEBUG_HARDWARE = DebugHardware(4, "address", "DR0-DR3",
                               source="Intel SDM vol. 3 §18.2; linux HBP_NUM 4")

# Native tracing facts for the cost model (cost/prices.py): the published breakpoint-hit
# figure that prices a trap here, and this ISA's own facilities
# (../shared/reference/unicorn-and-hardware-facts.md)
NATIVE_TRACING = NativeTracing(
    "uprobe-x86_64",
    borrowed="x86_64 figure applied to i386 (the same CPUs run it)",
)


def native_dynamic() -> Capability:
    """Dynamic programs natively: this x86_64 host has no i386 ld.so, so the Debian root's
    is run explicitly (target/native_interp.py); the root must have been built."""
    root = setup_root("i386")
    if root is not None and (root / "lib" / "ld-linux.so.2").exists():
        return Capability(True)
    return Capability(False, "no i386 ld.so (/lib/ld-linux.so.2) on this x86_64 host and no "
                      "Debian root of i386 to run one from: run `emutrace rootfs --arch i386 "
                      "-o .cache/rootfs/i386`/make setup (or pass --root)")


# ---------------------------------------------------------------- classifiers
# The same instructions as x86_64 (Intel SDM vol. 2), decoded in 32-bit mode.
CLASSIFIERS = Classifiers(classify=classify_x86, insn_align=1, sp_effect=x86_sp_effect(4),
                          virtual_breakpoints=True,
                          sweep=replace(SWEEP_X86, lengths="i386"))

# ---------------------------------------------------------------- simulation
SIMULATE = x86_simulator(4, "esp", "eflags")  # as x86_64, with 4-byte stack slots


# ---------------------------------------------------------------- quirks
# A GDT of our own at the top of the address space.  Entry 2 is a flat 32-bit ring-0 data
# segment loaded into SS: UC_MODE_32 leaves SS's hidden descriptor without the B bit, so the
# first segment load (glibc's `mov %ax,%gs`) would switch pushes to 16-bit SP.
# Entries 12–14 are the TLS slots of set_thread_area(2) (GDT_ENTRY_TLS_MIN = 12, asm/segment.h).
GDT_BASE = 0xFFFFF000
GDT_ENTRIES = 32
SS_ENTRY = 2
TLS_FIRST, TLS_LAST = 12, 14


def _descriptor(base: int, limit: int, access: int, flags: int) -> bytes:
    """An 8-byte segment descriptor (Intel SDM vol. 3 §3.4.5)."""
    value = limit & 0xFFFF
    value |= (base & 0xFFFFFF) << 16
    value |= access << 40
    value |= ((limit >> 16) & 0xF) << 48
    value |= flags << 52
    value |= ((base >> 24) & 0xFF) << 56
    return value.to_bytes(8, "little")


def setup_gdt(cpu: CpuPort) -> None:
    cpu.mem_map(GDT_BASE, 0x1000, 3)
    # access 0x93: present, DPL 0, data, read/write, accessed; flags 0xC: 4 KiB granular, 32-bit
    cpu.mem_write(GDT_BASE + 8 * SS_ENTRY, _descriptor(0, 0xFFFFF, 0x93, 0xC))
    cpu.reg_write("gdtr", (0, GDT_BASE, 8 * GDT_ENTRIES - 1, 0))
    cpu.reg_write("ss", SS_ENTRY << 3)


def set_thread_area(cpu: CpuPort, args: tuple[int, ...]) -> int:
    """set_thread_area(struct user_desc *) (asm/ldt.h): install a TLS descriptor."""
    addr = args[0]
    entry, base, limit, bits = struct.unpack("<iIII", cpu.mem_read(addr, 16))
    if entry == -1:
        entry = TLS_FIRST
        cpu.mem_write(addr, struct.pack("<i", entry))
    if not TLS_FIRST <= entry <= TLS_LAST:
        raise GuestError("EINVAL")
    # user_desc bits: seg_32bit 0, contents 1-2, read_exec_only 3, limit_in_pages 4,
    # seg_not_present 5, useable 6
    flags = 0x4 | (0x8 if bits & 0x10 else 0)
    access = 0xF2 if not bits & 0x20 else 0x72  # DPL 3 data, read/write
    cpu.mem_write(GDT_BASE + 8 * entry, _descriptor(base, limit, access, flags))
    return 0


def clone_tls(cpu: CpuPort, tls: int) -> None:
    """clone(CLONE_SETTLS) on i386: tls points to a user_desc, installed as
    set_thread_area does (arch/x86/kernel/process_32.c do_set_thread_area); the new thread's
    %gs selector is reloaded, so that its hidden base is the new descriptor's (each thread's
    saved CPU context keeps its own %gs base; the GDT slot is shared, as glibc never reloads
    %gs once set)."""
    set_thread_area(cpu, (tls,))
    cpu.reg_write("gs", cpu.reg_read("gs"))


# ---------------------------------------------------------------- capabilities
# ---------------------------------------------------------------- C values
# SysV i386 psABI 1.1 §2.2: char is signed; every argument on the stack in 4-byte slots
# (a double in two, a struct in ceil(size/4)); float/double results in x87 %st(0), 64-bit
# integer results in %edx:%eax; a struct result in memory, its address a hidden first
# stack argument.  Structs with float members are structs like any other (on the stack);
# long double is the x87 80-bit extended format in 12 bytes (3 stack slots), returned in
# %st(0).
C_VALUES = CValues(char_signed=True, fp_retval="st0", fp_x87=True, retval_hi="edx",
                   struct_in_slots=1 << 16, struct_ret_in_regs=0, struct_fp="core",
                   long_double="x87", long_double_args="slots", long_double_ret="x87",
                   long_double_size=12)


# Intel SDM vol. 3 §6.3.1 vector numbers; arch/x86/kernel/traps.c signals: #DE divide
# error → SIGFPE, #MF/#XM floating point → SIGFPE, #GP and #SS → SIGSEGV, #UD → SIGILL
EXCEPTION_SIGNALS = {0: "SIGFPE", 6: "SIGILL", 12: "SIGSEGV", 13: "SIGSEGV", 16: "SIGFPE",
                     19: "SIGFPE"}

ISA = Isa(
    # i386 psABI ch. 5 / BFD elf_i386_lazy_plt: PLT0 and stubs of 16 bytes; IBT stubs in .plt.sec
    plt=Plt(header=16, entry=16, sec_entry=16, lazy_offset=6),
    c_values=C_VALUES,
    exception_signals=EXCEPTION_SIGNALS,
    identity=IDENTITY,
    engines=ENGINES,
    registers=REGISTERS,
    syscalls=SYSCALLS,
    breakpoints=BREAKPOINTS,
    debug_hardware=DEBUG_HARDWARE,
    native_tracing=NATIVE_TRACING,
    reset=FPU_RESET,  # Linux's initial x87 control word and MXCSR (isa/x86_64.py)
    # arch/x86/include/asm/elf.h elf_read_implies_exec: mmap_is_ia32() && EXSTACK_DEFAULT
    exec_stack_by_default=True,
    hwcap=0,  # CPUID.1:EDX on x86; glibc reads CPUID itself
    hwcap2=0,
    platform="i686",
    uname_machine="i686",
    capabilities={
        Cap.GDB_TARGET: Capability(True),  # run --target gdb: qemu-user's stub
        Cap.HIDDEN_BREAKPOINTS: Capability(True),  # backends/codeguard.py read hook
        Cap.LINUX_KERNEL: LINUX_NOT_TRIED,
        Cap.KERNEL: Capability(True),  # isa/kernel_i386.py, board pc-i386
        Cap.NATIVE_TARGET: Capability(True),  # runs on the x86_64 host: run --target native
        # --target native --backend bts: branch records through perf_event_open
        Cap.NATIVE_BTS: Capability(False, native_bts_reason()),
        Cap.NATIVE_SIGNAL_HANDLERS: NATIVE_SIGNAL_HANDLERS,
        # namespaces, Landlock, no capabilities (isa/native_sandbox.py, target/namespaces.py)
        Cap.NATIVE_SANDBOX: Capability(not native_sandbox_reason(), native_sandbox_reason()),
        Cap.NATIVE_DYNAMIC: native_dynamic(),  # through the Debian root's ld.so
        # (a site hook's int3 under the backend's: target/ptrace_run.py steps it as its own)
        Cap.NATIVE_DYNAMIC_STRICT: Capability(True),
        Cap.SIGNAL_HANDLERS: SIGNAL_HANDLERS,
        Cap.RUN_STATIC: Capability(True),
        Cap.RUN_DYNAMIC: Capability(True),
        Cap.TRACE_DYNAMIC: Capability(True),
        Cap.PLT_NAMES: Capability(True),
        Cap.SW_BREAKPOINT: Capability(True),
        Cap.THREAD_PREEMPTION: Capability(True),
        Cap.CPU_TIMERS: Capability(True),  # ITIMER_PROF/VIRTUAL (cpu_timers.py)
        Cap.BUSYBOX: Capability(True),
        Cap.OPTIMISED_CODE: Capability(True),
        Cap.STEP_CLOCK: Capability(True),
        # (x86 instructions are 1 to 15 bytes: native/x86len.c gives the length of the
        # common ones that are never transfers; capstone decodes the rest)
        Cap.SWEEP_DECODES_KEPT_ONLY: Capability(True),
        Cap.DESCENT_WALK_NATIVE: Capability(True),
        Cap.STRIPPED_TAIL_CALLS: Capability(True),
        Cap.ENTRY_SEES_EVERY_CALL: Capability(
            False,
            "glibc's _start calls a PC thunk placed inside _start (_start+0x28): "
            "eager entry probes see function entries only, so that call is not "
            "traced (compared at named entries)"),
    },
    private_syscalls={"set_thread_area": set_thread_area},
    # i386 `mmap` (nr 90) is old_mmap(struct mmap_arg_struct *) with six 32-bit words
    # (arch/x86/kernel/sys_ia32.c); glibc uses mmap2, but old programs do not.
    # `select` (nr 82) is sys_old_select(struct sel_arg_struct *): five words (fs/select.c);
    # glibc uses _newselect/pselect6
    packed_args={"mmap": 6, "select": 5},
    setup=setup_gdt,
    clone_tls=clone_tls,
    classifiers=CLASSIFIERS,
    simulate=SIMULATE,
    lower=x86_lowering("eflags", 4),
)
