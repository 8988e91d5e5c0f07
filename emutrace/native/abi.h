/* emutrace native library: every struct and constant the Python side mirrors, in one place.
 *
 * The Python side reads and writes these layouts through ctypes structures and struct
 * formats (native/__init__.py Config, EVENT, LEARNED; ploop.py LoopConfig, Pending;
 * branchlib.py BranchConfig; steplib.py StepConfig; backends/hooked_sites.py NsConfig; the
 * frame and journal formats of strictlib.py, backends/entry_native.py and
 * backends/native_writer.py).  tests/test_native_abi.py compiles this header and checks each
 * of them against it — field names, order, offsets and sizes — and the constants below
 * against their Python names.  A layout changes here first, then in its Python mirror.
 *
 * Sections: what every part shares (the event record, site ops, condition tests, event
 * kinds), then each part's own: the Unicorn hooks (hotpath.c, its site-hook table, step.c,
 * branch.c, strict.c, entryprobe.c, ufwrite.c, crashguard.c) and the ptrace loop (ploop.c).
 */
#ifndef EMUTRACE_ABI_H
#define EMUTRACE_ABI_H

#include <stdint.h>

#include <unicorn/unicorn.h>

/* ================================================================ shared by every part */

/* the words an event record holds: argument registers and stack words, or return values
 * (native.MAX_REGS) */
#define NT_MAX_REGS 8

/* event kinds in every event buffer (native.EV_*, branchlib.BR_*): a call, a return, a jump
 * to a function entry (a tail call if TailRule.is_tail says so when it is drained), a bts
 * branch record (branch.c: from, to) */
enum { EV_CALL = 1, EV_RETURN = 2, EV_TAIL = 3, EV_RAW = 4 };

/* one event record (native.EVENT_FORMAT).  The second word is `nregs` in hotpath.c's and
 * ploop.c's records: the words in regs, plus (<< NT_STRINGS_SHIFT) how many string copies
 * the event has in hotpath.c's string area; `flags` in step.c's (the transfer's flow word)
 * and branch.c's (bit 0: the source's instruction set, Thumb).  time is read signed by
 * Python (a fallback may take it below 0). */
typedef struct {
    uint32_t kind;
    union {
        uint32_t nregs;
        uint32_t flags;
    };
    uint64_t time, site, target, sp, fallthrough;
    uint64_t entry_sp;  /* CALL: the sp the callee starts with */
    uint64_t regs[NT_MAX_REGS];
} nt_event;

/* hotpath.c's string area (nt_strings): per copy a u8 word index, a u16 length or
 * NT_STRING_NONE, the bytes (native.STRINGS_SHIFT, STRING_NONE) */
#define NT_STRINGS_SHIFT 8
#define NT_STRING_NONE 0xffff
#define NT_STRING_LIMIT 64  /* trace/values.py STRING_LIMIT */

/* site ops: what the displaced instruction does (native.OP_*) */
enum { OP_NONE = 0, OP_CALL = 1, OP_RETURN = 2, OP_JUMP = 3 };

/* condition tests (isa/base.py CONDITION_TESTS, same order; cond.h test_holds) */
enum {
    C_ALWAYS, C_SET, C_CLEAR, C_ANY, C_NONE, C_EQ, C_NE, C_SET_OR_NE, C_CLEAR_AND_EQ,
    C_SET_AND_CLEAR, C_CLEAR_OR_SET, C_ZERO, C_NONZERO, C_BOTH, C_CC_MASK,
    C_MASK_ZERO  /* guards only (hotpath.c nt_site.gmask): test_holds does not know it */
};

/* an instruction's flow kind (isa/base.py FlowKind; step.c's flow words, branch.c's block
 * flags); every other kind resolves as a jump */
enum { K_NONE = 0, K_CALL = 1, K_RETURN = 2, K_JUMP = 3, K_STOP = 4, K_BRANCH = 5,
       K_EXECUTE = 6 };

/* the calling convention and event buffer of a port's tracer core (core.h core_init), the
 * first member of each port's configuration (native.CallAbi) */
typedef struct {
    int32_t pc_reg, sp_reg;  /* the port's register ids (Unicorn's; user_regs_struct indices) */
    uint32_t word;        /* bytes per stack word (4 or 8) */
    uint32_t big_endian;
    uint32_t n_args;      /* integer argument registers snapshotted at a call */
    uint32_t n_stack;     /* ... then this many stack words (n_args + n_stack <= 8) */
    int32_t stack_offset; /* from the callee's entry sp to its first stack argument */
    int32_t arg_regs[NT_MAX_REGS];
    int32_t ret_reg, ret_hi_reg;  /* -1: none */
    uint32_t buffer_events;       /* records held before the buffer is drained (0: 4096) */
    uint64_t code_mask;   /* the bits of a target that address code (ARM: ~1; 0 taken as ~0) */
} nt_abi;

/* ================================================================ Unicorn hooks */

/* the Unicorn entry points, from the binding's own library */
typedef uc_err (*nt_reg_read_fn)(uc_engine *, int, void *);
typedef uc_err (*nt_reg_write_fn)(uc_engine *, int, const void *);
typedef uc_err (*nt_mem_read_fn)(uc_engine *, uint64_t, void *, uint64_t);
typedef uc_err (*nt_mem_write_fn)(uc_engine *, uint64_t, const void *, uint64_t);
typedef uc_err (*nt_emu_stop_fn)(uc_engine *);
typedef uc_err (*nt_reg_read_batch_fn)(uc_engine *, int *, void **, int);
typedef uc_err (*nt_ctl_fn)(uc_engine *, uc_control_type, ...);

/* ---------------------------------------------------------------- hotpath.c */

/* callbacks into Python */
typedef void (*py_intr_fn)(uint32_t intno);
typedef void (*py_block_fn)(uint64_t addr, uint32_t size);
typedef uint32_t (*py_count_fn)(uint64_t addr, uint32_t size);
typedef void (*py_drain_fn)(void);

/* native.Config */
typedef struct {
    nt_abi abi;
    nt_reg_read_fn reg_read;
    nt_reg_write_fn reg_write;
    nt_mem_read_fn mem_read;
    nt_mem_write_fn mem_write;
    nt_emu_stop_fn emu_stop;
    py_intr_fn py_intr;
    py_block_fn py_block;
    py_count_fn py_count;
    py_drain_fn py_drain;
    uint32_t bp_intno;  /* the interrupt a breakpoint raises */
    uint32_t pc_after;  /* PC seen in the hook minus the breakpoint's address */
    nt_reg_read_batch_fn reg_read_batch;  /* every register a site reads, in one call */
    uint32_t bp_uncounted;  /* 1: the breakpoint's block count leaves it out (s390x) */
    uint32_t fixed_insn;  /* every instruction this many bytes, and the alignment past an
                             undecodable one (aarch64, MIPS, POWER): a block of n bytes
                             holds n / fixed_insn of them (Decoder.insn_starts); 0: ask
                             Python (py_count) or read the size maps */
    int32_t alt_reg;      /* the register whose alt_bit says the alternative instruction set
                             runs (ARM: CPSR.T), -1: none */
    uint32_t alt_bit;
    uint32_t align, alt_align;  /* past an undecodable spot, in each instruction set */
} nt_config;

/* a block count C read from a size map, for Python's store (native.LEARNED) */
typedef struct {
    uint64_t addr;
    uint32_t size, alt, count, pad;
} nt_learned;

/* ---------------------------------------------------------------- hotpath.c site hooks */

/* the reference's pending transfer for a site, and its block hook (1: block restarted) */
typedef void (*py_site_fn)(uint64_t site, uint64_t time, uint64_t sp);
typedef uint32_t (*py_visit_fn)(uint64_t addr, uint32_t size);
/* entry's hooked probe at addr is Python's: the reference's code hook there runs now
 * (inside 0: the block starts with it), or (inside 1: the probe lies inside the block) it
 * becomes a Python code hook from now on and the block is translated again */
typedef void (*py_probe_fn)(uint64_t addr, uint32_t inside);

/* backends/hooked_sites.py NsConfig */
typedef struct {
    py_site_fn py_site;    /* the reference's pending transfer for this site */
    py_visit_fn py_visit;  /* the reference's block hook */
    uint32_t align;        /* instruction alignment: where a site may start in a block */
    py_probe_fn py_probe;  /* (entry under hook delivery; else NULL) */
} hs_config;

/* hs_site.finish: 0 Python resolves the transfer; 1 C may; FINISH_UNLESS_RETURN C may when
 * the target is not the running call's return address (hooked_sites.py _C_UNLESS_RETURN) */
#define FINISH_UNLESS_RETURN 2

/* ---------------------------------------------------------------- step.c */

/* the flow of an instruction, packed by Python (step_native.py): bits 0-15 its length in
 * bytes, 16-18 its kind (K_*), then flags */
#define F_KIND(f) (((f) >> 16) & 7)
#define F_CONDITIONAL (1u << 19)
#define F_MAYBE_RETURN (1u << 20)
#define F_ALT_LINK (1u << 21)
#define F_RET_FAST (1u << 22)  /* a return whose value the snapshot covers */
#define F_DECODED (1u << 31)   /* set on every entry: 0 is an empty slot's flow */

typedef uint32_t (*py_flow_fn)(uint64_t addr, uint32_t size);
typedef void (*py_resolve_fn)(uint32_t flow, uint64_t site, uint64_t fallthrough,
                              uint64_t time, uint64_t sp, uint64_t pc);

/* steplib.StepConfig */
typedef struct {
    nt_abi abi;           /* (code_mask: TailRule.mask, ~1 where the low bit selects Thumb) */
    nt_reg_read_fn reg_read;
    nt_mem_read_fn mem_read;
    py_flow_fn py_flow;
    py_resolve_fn py_resolve;
    py_drain_fn py_drain;
    uint32_t delay;       /* the ISA has a delay slot: resolve one instruction later */
} st_config;

/* ---------------------------------------------------------------- branch.c */

/* Python: the block's facts into out[5] (count, site, index, fall-through, flags) */
typedef void (*py_block_info_fn)(uint64_t addr, uint32_t size, uint32_t thumb, uint64_t *out);
/* Python: take the buffered records (interrupt: the BTS threshold was reached) */
typedef void (*py_flush_fn)(uint32_t interrupt);
/* Python: decode this taken branch on the live CPU (btf) */
typedef void (*py_live_fn)(uint64_t site, uint64_t target, uint64_t time, uint32_t thumb);

/* block flags (branchlib.B_*) */
#define B_SITE 1u          /* the block ends in a control transfer */
#define B_CONDITIONAL 2u   /* ... which may fall through */
#define B_SPLIT 4u         /* ... whose delay slot is the next block (a page boundary) */
#define B_KIND_SHIFT 8
#define B_KIND(f) (((f) >> B_KIND_SHIFT) & 7)  /* the transfer's FlowKind (K_*) */
#define B_MAYBE_RETURN (1u << 11)
#define B_RET_FAST (1u << 12)  /* a return whose value the snapshot covers */

/* branchlib.BranchConfig */
typedef struct {
    nt_abi abi;           /* (code_mask: TailRule.mask, ~1 where the low bit selects Thumb;
                             buffer_events: records C holds before handing them to Python) */
    nt_reg_read_fn reg_read;
    nt_mem_read_fn mem_read;
    py_block_info_fn py_block;
    py_flush_fn py_flush;
    py_live_fn py_live;
    int32_t alt_reg;      /* the register whose alt_mask bit says Thumb; -1: none */
    uint64_t alt_mask;
    uint32_t live;            /* 0: bts (records only), 1: btf (a trap per taken branch) */
    uint64_t capacity;        /* bts: records that make an interrupt */
} bb_config;

/* ---------------------------------------------------------------- strict.c */

/* journal entry kinds (strictlib.ARMED, DISARMED) */
enum { NS_ARMED = 1, NS_DISARMED = 2 };

/* strictlib.JOURNAL_ENTRY */
typedef struct {
    uint64_t kind;  /* NS_ARMED, NS_DISARMED */
    uint64_t start; /* the function */
} ns_entry;

/* strictlib.FRAME */
typedef struct {
    uint64_t start, end;
    uint32_t func;  /* index, NS_NONE: a function this table was not told about */
} ns_frame;

/* ---------------------------------------------------------------- entryprobe.c */

/* backends/entry_native.py FRAME */
typedef struct {
    uint64_t ra, call_sp, func;
} ep_frame;

/* ---------------------------------------------------------------- ufwrite.c */

/* frame flags (the Python Frame's fields; native_writer.py _RET_KNOWN, _TAIL_FRAME,
 * _CALLED) */
#define F_RET_KNOWN 1u
#define F_TAIL 2u
#define F_CALLED 4u

typedef struct {  /* shadow.py Frame: five words, as Python reads and writes them
                     (native_writer.py _FRAME) */
    uint64_t func, ret, sp, time, flags;
} uw_frame;

typedef struct {  /* tails.py TailRule: frames[i], return_addrs[i] (native_writer.py _TAIL) */
    uint64_t code, ret, flags;
} uw_tail;

/* ---------------------------------------------------------------- crashguard.c */

/* cg_emu_start's result when the emulation crashed: no uc_err value (crashguard.CG_CRASHED) */
#define CG_CRASHED 0x43524153

/* ================================================================ the ptrace loop (ploop.c) */

/* pl_resume's results (ploop.PL_*; negative: -errno) */
enum { PL_STOP = 0, PL_FULL = 1, PL_EINTR = 2, PL_ERROR = 3 };

/* ploop.LoopConfig */
typedef struct {
    nt_abi abi;              /* registers: indices into struct user_regs_struct */
    uint32_t max_stops;      /* handled stops before returning to Python */
    int32_t mem_fd;          /* /proc/PID/mem, opened read-write by Python */
} pl_config;

/* hwbp (pl_hw_*): the debug-register slots and the top of Python's chain handed to C
 * (ploop.HW_SLOTS, HW_CHAIN) */
#define PL_HW_SLOTS 4    /* DR0-DR3 */
#define PL_HW_CHAIN 1024 /* chain entries handed over (the top of Python's chain) */

#endif
