/* emutrace native ptrace loop: the ptrace port of the tracer core (core.c) — the
 * resume-and-wait step of the native target (target/ptrace_run.py) in C, finishing the int3
 * backend's traps at armed sites itself.
 *
 * Loaded with ctypes (emutrace/native/ploop.py).  `pl_resume` resumes a stopped x86_64 or
 * i386 tracee with PTRACE_CONT and waits for it (wait4(2)); at each stop it handles what it
 * can without Python and resumes again.  It handles exactly one kind of stop: an int3 (SIGTRAP,
 * si_code SI_KERNEL) one byte before an active site of the core's table, which the core
 * finishes (core_trap) through this port's operations: registers from and to the GETREGS
 * array (SETREGS after), memory through /proc/PID/mem (a call's pushed return address, one
 * word; strict cleanup's INT3 bytes).  The core's rules are the Unicorn port's: a call to a
 * function Python has armed already, a return (RET imm16's bytes too), a jump Python learnt
 * records nothing; a call or return appends one fixed-size record (abi.h nt_event, drained
 * by backends/fastpath.py) with the registers Python turns into argument or return values.
 * Under int3's strict cleanup the core also switches the armed function with strict.c's
 * table (pl_strict_*); for the entry backend this loop records at a function-entry probe
 * and steps over the displaced instruction (pl_entry_*): see their sections below.
 *
 * Three more backends have their own sections below: `step` (pl_step: single-steps whose
 * hook only counts), `hwbp` (hw_finish, pl_hw_*: debug-register hits, the slots moved by C)
 * and `btf` (pl_block: block steps that cross no taken branch).
 *
 * Every other stop goes back to Python unhandled, with its wait status: an exit or death,
 * a signal, a PTRACE_EVENT stop (fork, exec, seccomp, ...), a debug-register trap, an int3
 * at a site C does not know or cannot finish (a first call: Python discovers and arms).
 * C also returns, with the tracee stopped and its trap finished, when its event buffer is
 * full or after `max_stops` handled stops (so that Python's signal handlers run), and when
 * wait4 is interrupted by a signal to emutrace (the tracee is then running, not waited for).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stddef.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/types.h>
#include <sys/user.h>
#include <sys/wait.h>
#include <unistd.h>

#include "abi.h"
#include "addrset.h"
#include "branch.h"
#include "cond.h"
#include "core.h"
#include "coretrap.h"
#include "entryprobe.h"
#include "step.h"

#define PL_NREGS (sizeof(struct user_regs_struct) / sizeof(unsigned long long))
#define PL_SI_KERNEL 0x80 /* <asm-generic/siginfo.h>: int3's forced SIGTRAP */

/* hwbp (pl_hw_*): strict.c's table under slots (the functions Python taught, their slot
 * addresses as their sites, the chain), the function it has armed, and what C counted */
typedef struct {
    ns_state *slots;  /* strict.c's table, its slots programmed through this port */
    uint32_t on;      /* Python handed over: cur is armed alone, the chain is its chain */
    uint64_t cur;     /* the function the table has armed (its slots are in DR0-DR3) */
    uint64_t hits, slot_writes;
} pl_hw;

static void hw_free(pl_hw *hw);

typedef struct {
    core_state core;  /* the site table, transfer sets, event buffer, clock (core.h) */
    pl_config cfg;
    /* step: step.c's flow table and entries (made at the first pl_*_add): a quiet
     * instruction (one the step backend only counts) is a K_NONE flow of length 0 (the
     * loop is not told it), a jump that records nothing but may be a tail call a K_JUMP
     * flow with its length and F_CONDITIONAL; the entries are TailRule.entries */
    st_state *flows;
    bb_state *blocks;  /* btf: branch.c's block facts (pl_quiet_block_add) */
    pl_hw hw;        /* hwbp: the debug-register slots (pl_hw_*) */
    uint64_t last_pc;
    int32_t pid;  /* the tracee being resumed (the slots' port writes its debug registers) */
    uint64_t returned, resumes;  /* stops returned to Python, resumes */
    unsigned long long regs[PL_NREGS];  /* the stopped tracee's (GETREGS; SETREGS after) */
    ns_state *strict;  /* int3 --cleanup strict: strict.c's table (pl_strict_*), the core's */
    ep_state *entry;  /* the entry backend's probes: entryprobe.c's table (pl_entry_*) */
    uint64_t entry_process, entry_handler;  /* (ep_set's, kept for each call) */
    uint32_t entry_hold;
} pl_state;

static int strict_return_to_entry(const pl_state *s, const core_site *site);
enum { ENTRY_NOT_PROBE = 0, ENTRY_PYTHON = 1, ENTRY_DONE = 2, ENTRY_STOPPED = 3 };
static int pl_entry_trap(pl_state *s, int32_t pid, uint64_t at, int32_t *status);

/* ------------------------------------------------------------ port operations */
static uint64_t mask_of(const pl_state *s) { return s->core.cfg.word == 8 ? ~0ULL : 0xffffffffULL; }

static uint64_t reg(const pl_state *s, int32_t i) { return s->regs[i] & mask_of(s); }

/* registers: from the GETREGS array the loop fetched at the stop */
static void port_regs_read(void *port, const int32_t *ids, uint64_t *out, uint32_t n)
{
    const pl_state *s = port;
    for (uint32_t i = 0; i < n; i++)
        out[i] = ids[i] >= 0 && (size_t)ids[i] < PL_NREGS ? reg(s, ids[i]) : 0;
}

/* ... and into it: the loop sets them (SETREGS) after a finished trap */
static void port_reg_write(void *port, int32_t id, uint64_t value)
{
    pl_state *s = port;
    if (id >= 0 && (size_t)id < PL_NREGS)
        s->regs[id] = value;
}

/* memory: /proc/PID/mem, opened read-write by Python (little-endian x86: a word's low
 * bytes first) */
static int port_read(void *port, uint64_t addr, void *out, uint64_t len)
{
    const pl_state *s = port;
    return pread(s->cfg.mem_fd, out, len, (off_t)addr) == (ssize_t)len ? 0 : -1;
}

static int port_write(void *port, uint64_t addr, const void *in, uint64_t len)
{
    const pl_state *s = port;
    return pwrite(s->cfg.mem_fd, in, len, (off_t)addr) == (ssize_t)len ? 0 : -1;
}

/* code is memory to the kernel: the next run of addr sees the bytes written */
static int port_code_write(void *port, uint64_t addr, const void *in, uint64_t len)
{
    return port_write(port, addr, in, len);
}

/* the buffer is never full at a trap: pl_resume checks room before resuming and stops with
 * PL_FULL after a trap that filled it */
static void port_buffer_full(void *port) { (void)port; }

static const core_ops port_ops = {port_regs_read, port_reg_write, port_read, port_write,
                                  port_code_write, port_buffer_full};

/* ------------------------------------------------------------ life */
pl_state *pl_new(const pl_config *cfg)
{
    pl_state *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->cfg = *cfg;
    /* x86 pushes its return address: a call that links is no form of this port */
    if (core_init(&s->core, &cfg->abi, 0, NULL, &port_ops, s) != 0) {
        core_fini(&s->core);
        free(s);
        return NULL;
    }
    return s;
}

void pl_free(pl_state *s)
{
    if (!s)
        return;
    core_fini(&s->core);
    st_free(s->flows);
    bb_free(s->blocks);
    hw_free(&s->hw);
    ns_free(s->strict);
    ep_free(s->entry);
    free(s);
}

/* the site table and the transfer sets: core.c's (core_site_set says what each means) */
int pl_site_set(pl_state *s, uint64_t addr, uint32_t op, uint64_t target, uint64_t after,
                int32_t src_reg, int32_t link_reg, uint32_t release, uint32_t fast,
                uint32_t conditional, uint32_t cond, int32_t cond_reg, uint32_t ca,
                uint32_t cb, uint32_t cc, uint32_t clear_low, uint32_t guard,
                int32_t guard_reg, uint32_t ga, uint32_t gb)
{
    return core_site_set(&s->core, addr, op, target, after, src_reg, link_reg, release, fast,
                         conditional, cond, cond_reg, ca, cb, cc, clear_low, guard, guard_reg,
                         ga, gb);
}

void pl_site_active(pl_state *s, uint64_t addr, uint32_t on)
{
    core_site_active(&s->core, addr, on);
}

int pl_callee_add(pl_state *s, uint64_t target)
{
    return addrset_add(&s->core.callees, target);  /* (target 0 too, as Python tells it) */
}

int pl_inside_add(pl_state *s, uint64_t site, uint64_t target)
{
    return core_inside_add(&s->core, site, target);
}

void pl_inside_drop(pl_state *s, uint64_t target)
{
    core_inside_drop(&s->core, target);  /* (rare: a jump target became an entry) */
}

/* step.c's flow table for pl_step, made once (no Unicorn: only its tables are used) */
static st_state *step_flows(pl_state *s)
{
    if (!s->flows) {
        st_config cfg;
        memset(&cfg, 0, sizeof cfg);
        cfg.abi = s->core.cfg;
        cfg.abi.buffer_events = 1;  /* (its event buffer stays unused here) */
        s->flows = st_new(NULL, &cfg);
    }
    return s->flows;
}

#define PL_FLOW(len, kind, flags) ((uint32_t)(len) | (uint32_t)(kind) << 16 | (flags))

int pl_quiet_add(pl_state *s, uint64_t addr)
{
    st_state *t = step_flows(s);
    return t ? st_flow_add(t, addr, PL_FLOW(0, K_NONE, 0)) : -1;
}

/* a jump the step backend would only remember as pending (no call or return, not
 * maybe_return): C may take its hook */
int pl_jump_add(pl_state *s, uint64_t addr, uint64_t fallthrough, uint32_t conditional)
{
    st_state *t = step_flows(s);
    if (fallthrough - addr == 0 || fallthrough - addr > 0xffff)
        return 0;  /* no length a flow word holds: the step stays Python's */
    return t ? st_flow_add(t, addr, PL_FLOW(fallthrough - addr, K_JUMP,
                                            conditional ? F_CONDITIONAL : 0)) : -1;
}

int pl_entry_add(pl_state *s, uint64_t addr)
{
    st_state *t = step_flows(s);
    return t ? st_entry_add(t, addr) : -1;
}

void pl_set_time(pl_state *s, uint64_t time) { s->core.time = time; }
int64_t pl_time(pl_state *s) { return (int64_t)s->core.time; }
uint64_t pl_last_pc(pl_state *s) { return s->last_pc; }

/* counters: 0 traps C finished, 1 of them simulated, 2 stops returned to Python, 3 resumes,
 * 4 strings copied, 5 events the record writer took */
uint64_t pl_counter(pl_state *s, uint32_t i)
{
    uint64_t all[6] = {s->core.traps, s->core.simulated, s->returned, s->resumes,
                       s->core.strings_copied, s->core.written};
    return i < 6 ? all[i] : 0;
}

/* `record` and `run` (int3, lazy cleanup): the calls and returns the core finishes are
 * offered to ufwrite.c's writer first (core_offer), as on the Unicorn port; drain: Python
 * takes the writer's bytes and the buffered records (a callback that takes the GIL, the
 * Unicorn port's py_drain).  NULL: every record to Python. */
void pl_set_writer(pl_state *s, uw_state *writer, void (*drain)(void))
{
    s->core.writer = writer;
    s->core.drain = drain;
}
void *pl_events(pl_state *s) { return s->core.events; }
/* `char *` values: the core copies their strings at the event (core_string_args: a call
 * target's or an entry probe's string words; core_string_return: a return site's), through
 * this port's memory reads; the copies of the buffered events, in order */
int pl_string_args(pl_state *s, uint64_t target, uint32_t mask)
{
    return core_string_args(&s->core, target, mask);
}
int pl_string_return(pl_state *s, uint64_t site) { return core_string_return(&s->core, site); }
const uint8_t *pl_strings(pl_state *s) { return s->core.strings; }
uint64_t pl_strings_len(pl_state *s) { return s->core.strings_len; }
uint32_t pl_events_count(pl_state *s) { return s->core.n_events; }
void pl_events_clear(pl_state *s) { core_events_clear(&s->core); }

/* ------------------------------------------------------------ register tests */
/* a test of register r (cond.h): EFLAGS bits (Intel SDM vol. 2, Jcc) or a register (JrCXZ);
 * -1 (Python's) without a register */
static int reg_test_holds(const pl_state *s, uint8_t test, int32_t r, uint8_t ia, uint8_t ib,
                          uint8_t ic)
{
    if (test == C_ALWAYS)
        return 1;
    if (r < 0)
        return -1;
    return test_holds(test, s->regs[r], ia, ib, ic);
}

static int read_word(const pl_state *s, uint64_t addr, uint64_t *out)
{
    uint64_t v = 0;  /* little-endian x86: the low bytes */
    if (pread(s->cfg.mem_fd, &v, s->core.cfg.word, (off_t)addr) != (ssize_t)s->core.cfg.word)
        return -1;
    *out = v;
    return 0;
}

/* ------------------------------------------------------------ debug registers (`hwbp`) */
/* The hwbp backend (backends/hwbp_slots.py: int3's algorithm under strict cleanup, delivered by
 * DR0-DR3) at a TRAP_HWBKPT stop: the CPU faulted before the site's instruction, and the
 * kernel set EFLAGS.RF so that it runs on resume (Intel SDM vol. 3 §18.3.1.1).  C finishes
 * the hit when strict.c's table (the Unicorn port's, under slots: ns_set_slots) decides it:
 * a call to the start of a function Python taught (pl_hw_func_set), a return to a caller
 * the chain holds (_caller's rule), a conditional jump not taken.  It appends the record
 * (the arguments and return value are in the registers and stack words the callee or
 * caller will see: the instruction has not run and changes neither); strict.c switches the
 * armed function and programs the one entered through this port (slots_program).  The
 * instruction itself runs when the tracee resumes, as the Python loop steps it. */
#define PL_TRAP_HWBKPT 4 /* <asm-generic/siginfo.h> */
#define PL_DEBUGREG_OFFSET offsetof(struct user, u_debugreg)

static void hw_free(pl_hw *hw) { ns_free(hw->slots); }

static int poke_dr(int32_t pid, int n, uint64_t value)
{
    return ptrace(PTRACE_POKEUSER, pid, (void *)(PL_DEBUGREG_OFFSET + n * sizeof(long)),
                  (void *)(uintptr_t)value) == -1 ? -1 : 0;
}

/* the port's slots (strict.c ns_bind_slots): the function strict.c arms gets DR0..DRn-1,
 * DR7 off first and on after (Ln: local enable of DRn; R/W 00, LEN 00: an execute
 * breakpoint, Intel SDM vol. 3 §18.2.4).  A request that fails (the tracee killed) is not
 * retried: the resume reports it, and Python's sync reprograms the registers anyway. */
static int slots_program(void *port, const uint64_t *addrs, uint32_t n)
{
    const pl_state *s = port;
    uint64_t enable = 0;
    if (poke_dr(s->pid, 7, 0) != 0)
        return -1;
    for (uint32_t i = 0; i < n && i < PL_HW_SLOTS; i++) {
        if (poke_dr(s->pid, (int)i, addrs[i]) != 0)
            return -1;
        enable |= 1ULL << (2 * i);
    }
    return enable ? poke_dr(s->pid, 7, enable) : 0;
}

/* a function whose slots C may program, as SlotDelivery.arm programs them after a disarm
 * freed all four: DRi = its i-th site (PtraceTarget.hook_hw takes the lowest free register);
 * calls: a call to its start may be finished in C (integer-word arguments) */
int pl_hw_func_set(pl_state *s, uint64_t start, uint64_t end, uint32_t n, uint64_t a0,
                   uint64_t a1, uint64_t a2, uint64_t a3, uint32_t calls)
{
    pl_hw *hw = &s->hw;
    const uint64_t addrs[PL_HW_SLOTS] = {a0, a1, a2, a3};
    if (n > PL_HW_SLOTS)
        return 0;
    if (!hw->slots) {
        if (!(hw->slots = ns_new(NULL, NULL, NULL, ~0ULL)))
            return -1;
        ns_set_slots(hw->slots, PL_HW_SLOTS, 0);  /* address slots: SlotDelivery's counts */
        ns_bind_slots(hw->slots, slots_program, s);
    }
    for (uint32_t i = 0; i < n; i++)  /* a slot writes no guest memory (as a site hook) */
        if (ns_site_hooked(hw->slots, addrs[i]) != 0)
            return -1;
    if (ns_func_sites(hw->slots, start, end, n, addrs) != 0)
        return -1;
    return calls ? ns_target(hw->slots, start, start) : ns_target_drop(hw->slots, start);
}

void pl_hw_func_drop(pl_state *s, uint64_t start)
{
    if (s->hw.slots)
        ns_func_forget(s->hw.slots, start);
}

/* the function at start armed (on) or not in strict.c's table, with its sites */
static void hw_mark(ns_state *ns, uint64_t start, uint32_t on)
{
    uint64_t end, addrs[PL_HW_SLOTS];
    int n = ns_func_get(ns, start, &end, addrs, PL_HW_SLOTS);
    ns_func_armed(ns, start, on);
    for (int i = 0; i < n && i < PL_HW_SLOTS; i++)
        ns_site_armed(ns, addrs[i], on, on ? start : 0);
}

/* Python's turn is over: cur alone is armed, the chain (innermost last, extents) is the top
 * of its chain.  on = 0: every debug-register stop is Python's. */
void pl_hw_begin(pl_state *s, uint32_t on, uint64_t cur, const uint64_t *starts,
                 const uint64_t *ends, uint32_t depth)
{
    pl_hw *hw = &s->hw;
    hw->hits = hw->slot_writes = 0;
    hw->on = 0;
    if (!on || !hw->slots)
        return;
    if (hw->cur != cur)
        hw_mark(hw->slots, hw->cur, 0);
    hw_mark(hw->slots, cur, 1);
    hw->cur = cur;
    hw->on = ns_chain_set(hw->slots, depth, starts, ends) == 0;
}

uint64_t pl_hw_cur(pl_state *s) { return s->hw.cur; }
uint32_t pl_hw_depth(pl_state *s) { return s->hw.slots ? (uint32_t)ns_chain_depth(s->hw.slots) : 0; }
uint64_t pl_hw_count(pl_state *s, uint32_t i) { return i == 0 ? s->hw.hits : s->hw.slot_writes; }

/* the chain's starts, innermost last (room: pl_hw_depth) */
void pl_hw_chain(pl_state *s, uint64_t *starts, uint32_t room)
{
    const ns_frame *f = ns_chain(s->hw.slots);
    for (uint32_t i = 0; i < room && i < pl_hw_depth(s); i++)
        starts[i] = f[i].start;
}

/* 1: the hit finished (nothing more to do before resuming); 0: Python's, nothing changed.
 * The decision is strict.c's (ns_call_ok/ns_return_ok, then its switch: the function left
 * disarmed, the one entered armed, its slots programmed through slots_program). */
static int hw_finish(pl_state *s, int32_t pid)
{
    pl_hw *hw = &s->hw;
    ns_state *ns = hw->slots;
    if (ptrace(PTRACE_GETREGS, pid, 0, s->regs) == -1)
        return 0;
    uint64_t mask = mask_of(s), pc = reg(s, s->core.cfg.pc_reg), sp = reg(s, s->core.cfg.sp_reg);
    uint64_t owner = 0;
    uint8_t armed = 0;
    ns_sites_state(ns, 1, &pc, &owner, &armed);
    core_site *site = core_sites_find(&s->core.sites, pc);
    if (!armed || owner != hw->cur || !site || site->op == OP_NONE
        || reg_test_holds(s, site->guard, site->guard_reg, site->ga, site->gb, 0) != 1)
        return 0;  /* (not armed for the current function: a slot Python programmed) */
    uint64_t target, regs[NT_MAX_REGS] = {0};
    if (site->op == OP_CALL) {
        target = site->src_reg >= 0 ? reg(s, site->src_reg) & site->reg_mask : site->target;
        if (target == site->after || ns_chain_reserve(ns) != 0
            || !ns_call_ok(ns, site->addr, target))
            return 0;  /* a PC thunk, a callee not taught (discovery) */
        uint64_t entry_sp = (sp - s->core.cfg.word) & mask;  /* after CALL pushes */
        if (core_call_words(&s->core, entry_sp, regs, 0, s->core.cfg.n_args, 0,
                            s->core.cfg.n_stack) != 0)
            return 0;
        /* (the record's room: checked before resuming) */
        core_record(&s->core, EV_CALL, s->core.time, site->addr, target, sp, site->after,
                    entry_sp, regs, s->core.cfg.n_args + s->core.cfg.n_stack,
                    core_string_mask(&s->core, target));
        ns_call_commit(ns, site->addr, target);
    } else if (site->op == OP_RETURN && site->fast && site->src_reg < 0
               && !site->conditional && site->cond == C_ALWAYS) {
        if (read_word(s, sp, &target) != 0 || target == site->after
            || !ns_return_ok(ns, site->addr, target))
            return 0;  /* a caller the chain cannot place: Python's (_caller) */
        uint32_t n = 0;
        if (s->core.cfg.ret_reg >= 0)
            regs[n++] = reg(s, s->core.cfg.ret_reg);
        if (s->core.cfg.ret_hi_reg >= 0)
            regs[n++] = reg(s, s->core.cfg.ret_hi_reg);
        core_record(&s->core, EV_RETURN, s->core.time, site->addr, target, sp, site->after,
                    sp, regs, n, core_string_return_mask(&s->core, site->addr));
        ns_return_commit(ns, site->addr, target);
    } else if (site->op == OP_JUMP && site->conditional) {
        if (reg_test_holds(s, site->cond, site->cond_reg, site->ca, site->cb, site->cc) != 0)
            return 0;  /* taken: Python's */
        target = site->after;  /* not taken: no transfer, nothing changes */
    } else {
        return 0;
    }
    hw->hits++;
    hw->slot_writes += ns_journal_slot_writes(ns);
    ns_journal_clear(ns);  /* (Python takes the chain and the current function back) */
    if (ns_chain_depth(ns))
        hw->cur = ns_chain(ns)[ns_chain_depth(ns) - 1].start;
    s->last_pc = target;
    return 1;
}

/* ------------------------------------------------------------ the loop */
int pl_resume(pl_state *s, int32_t pid, int32_t request, int32_t sig, int32_t *status)
{
    uint32_t handled = 0;
    s->last_pc = 0;
    s->pid = pid;
    if (s->core.n_events >= s->core.cfg.buffer_events)
        return -ENOSPC;  /* Python drains the buffer before resuming */
    for (;;) {
        s->resumes++;
        if (ptrace((enum __ptrace_request)request, pid, 0, (void *)(intptr_t)sig) == -1)
            return -errno;
        sig = 0;
        int st;
        if (waitpid(pid, &st, 0) == -1)
            return errno == EINTR ? PL_EINTR : -errno;
        *status = st;
        if (!WIFSTOPPED(st) || WSTOPSIG(st) != SIGTRAP || (st >> 16) != 0)
            break;  /* an end, a signal, a PTRACE_EVENT stop */
        siginfo_t info;
        if (ptrace(PTRACE_GETSIGINFO, pid, 0, &info) == -1)
            break;
        if (s->hw.on) {  /* hwbp: a debug register's hit, or Python's */
            if (info.si_code != PL_TRAP_HWBKPT || hw_finish(s, pid) != 1)
                break;
            if (s->core.n_events >= s->core.cfg.buffer_events || ++handled >= s->cfg.max_stops)
                return PL_FULL;  /* stopped at the site, EFLAGS.RF set: resume runs it */
            continue;
        }
        if (info.si_code != PL_SI_KERNEL)
            break;  /* a step, a debug register, a SIGTRAP sent by a process */
        if (ptrace(PTRACE_GETREGS, pid, 0, s->regs) == -1)
            break;
        uint64_t at = (reg(s, s->core.cfg.pc_reg) - 1) & mask_of(s);
        if (s->entry) {  /* an entry probe: recorded and stepped over (pl_entry_trap) */
            int got = pl_entry_trap(s, pid, at, status);
            if (got == ENTRY_PYTHON)
                break;
            if (got == ENTRY_STOPPED) {  /* the step-over ended in another stop */
                s->returned++;
                return PL_STOP;
            }
            if (got < 0)
                return got;
            if (got == ENTRY_DONE)
                goto finished;
        }
        core_site *site = core_sites_find(&s->core.sites, at);
        /* the core simulates through the port: the registers in s->regs, the pushed return
         * address and strict cleanup's bytes already written to /proc/PID/mem */
        if (!site || !site->active || site->op == OP_NONE
            || (s->strict && (strict_return_to_entry(s, site) || ns_chain_reserve(s->strict)))
            || !core_trap_with(&s->core, &port_ops, site))
            break;  /* Python's: discovery, a site C does not know, the guest's own int3 */
        if (ptrace(PTRACE_SETREGS, pid, 0, s->regs) == -1)
            return -errno;
        if (s->strict)
            ns_journal_clear(s->strict);  /* (Python replays from the records) */
        if (s->entry && site->op == OP_RETURN)
            ep_returned(s->entry, reg(s, s->core.cfg.pc_reg));
    finished:
        s->last_pc = reg(s, s->core.cfg.pc_reg);
        if (s->core.n_events >= s->core.cfg.buffer_events || ++handled >= s->cfg.max_stops)
            return PL_FULL;  /* stopped, its trap finished: resume with no signal */
    }
    s->returned++;
    return PL_STOP;
}

/* ------------------------------------------------------------ single-stepping (`step`) */
/* The step backend's waiting transfer and clock are step.c's (st_pending: Python puts its
 * own before C steps and takes C's after, pl_step_pending_*). */
int pl_step_pending_put(pl_state *s, uint64_t time, uint32_t has, const uint64_t *words)
{
    st_state *t = step_flows(s);
    if (!t)
        return -1;
    st_set_time(t, time);
    if (has)
        st_put_pending(t, words);
    else
        st_clear_pending(t);
    return 0;
}

/* 1 and the pending transfer's words (st_take_pending's), or 0: none */
int pl_step_pending_take(pl_state *s, uint64_t *words)
{
    return s->flows ? st_take_pending(s->flows, words) : 0;
}

/* PTRACE_SINGLESTEP the stopped tracee (the Python loop has run its hooks before the
 * instruction at its PC) and keep stepping while step.c's hook body takes the hook at the
 * next instruction (st_step_quietly: it would record nothing); *skipped counts the hooks C
 * took.  Returns PL_STOP with the wait status of the first stop it does not take (the
 * Python loop takes it as the result of its own step and runs the hooks there), PL_FULL
 * after max_stops (the tracee stopped before an instruction whose hook C took: step on),
 * PL_EINTR as pl_resume. */
int pl_step(pl_state *s, int32_t pid, int32_t sig, int32_t *status, uint64_t *skipped)
{
    uint32_t steps = 0;
    *skipped = 0;
    s->last_pc = 0;
    for (;;) {
        s->resumes++;
        if (ptrace(PTRACE_SINGLESTEP, pid, 0, (void *)(intptr_t)sig) == -1)
            return -errno;
        sig = 0;
        int st;
        if (waitpid(pid, &st, 0) == -1)
            return errno == EINTR ? PL_EINTR : -errno;
        *status = st;
        if (!s->flows || !WIFSTOPPED(st) || WSTOPSIG(st) != SIGTRAP || (st >> 16) != 0)
            break;
        siginfo_t info;
        /* a step's trap: TRAP_TRACE, or TRAP_BRKPT after a system call (ptrace_run.py) */
        if (ptrace(PTRACE_GETSIGINFO, pid, 0, &info) == -1
            || (info.si_code != 1 && info.si_code != 2))
            break;
        if (ptrace(PTRACE_GETREGS, pid, 0, s->regs) == -1)
            break;
        uint64_t pc = reg(s, s->core.cfg.pc_reg);
        if (!st_step_quietly(s->flows, pc, reg(s, s->core.cfg.sp_reg)))
            break;  /* a call, a return, a tail call, code not decoded yet: Python's */
        (*skipped)++;  /* its hook: taken; it runs at the next step */
        s->last_pc = pc;
        if (++steps >= s->cfg.max_stops)
            return PL_FULL;
    }
    s->returned++;
    return PL_STOP;
}

/* ------------------------------------------------------------ int3 strict cleanup (pl_strict_*) */
/* `--cleanup strict` (backends/int3_python.py `_transfer`, fctrace's rule): only the current
 * function is armed.  The rule is strict.c's, the same table the Unicorn port switches with
 * (core_trap asks ns_call_ok/ns_return_ok before it simulates and commits after), here fed
 * by the pl_strict_* wrappers below from what Python registers: each function it arms, with
 * its sites and the program's byte under each (`ok` when all of them are breakpoints C may
 * write), which function each armed site is armed for, which function a call target
 * enters, and the chain whenever Python changed it (a first call, a signal).  strict.c
 * writes the bytes through this port's code_write (one pwrite to /proc/PID/mem per site:
 * x86's INT3 is one byte).  The drain replays the same bookkeeping on Python's tables from
 * the records (backends/strict_ptrace.py), which counts the patches as the Python path
 * does, so strict.c's journal is not read here: it is emptied after every switch. */
#define PL_INT3 0xCC /* Intel SDM vol. 2, INT3 */

int pl_strict_enable(pl_state *s)
{
    if (s->strict)
        return 0;
    s->strict = ns_new(NULL, NULL, NULL, ~0ULL);
    if (!s->strict)
        return -1;
    ns_bind_code(s->strict, port_code_write, s);
    ns_bind(s->strict, s, (ns_active_fn)pl_site_active);
    s->core.strict = s->strict;
    return 0;
}

/* a function Python armed (again: its extent or sites may have changed, a stale descent) */
int pl_strict_func(pl_state *s, uint64_t start, uint64_t end, uint32_t ok, uint32_t n,
                   const uint64_t *addrs, const uint8_t *origs)
{
    static const uint8_t int3 = PL_INT3;
    for (uint32_t i = 0; i < n; i++)
        if (ns_site_bytes(s->strict, addrs[i], 1, &int3, &origs[i]) != 0)
            return -1;
    if (ns_func_sites(s->strict, start, end, n, addrs) != 0)
        return -1;
    if (!ok)
        ns_func_forget(s->strict, start);  /* (told, but its switches are Python's) */
    return 0;
}

void pl_strict_func_armed(pl_state *s, uint64_t start, uint32_t on)
{
    ns_func_armed(s->strict, start, on);
}

/* the site at addr is armed for the function at owner (0: disarmed) */
int pl_strict_owner(pl_state *s, uint64_t addr, uint64_t owner)
{
    return ns_site_armed(s->strict, addr, owner != 0, owner);
}

int pl_strict_callee(pl_state *s, uint64_t target, uint64_t start)
{
    return ns_target(s->strict, target, start);
}

int pl_strict_chain_set(pl_state *s, uint32_t n, const uint64_t *starts, const uint64_t *ends)
{
    return ns_chain_set(s->strict, n, starts, ends);
}

uint32_t pl_strict_chain_count(pl_state *s) { return (uint32_t)ns_chain_depth(s->strict); }

/* a return into a function's entry may be a jump (TailRule.taken): Python's, before the
 * core asks strict.c */
static int strict_return_to_entry(const pl_state *s, const core_site *site)
{
    uint64_t target;
    if (site->op != OP_RETURN || site->src_reg >= 0)
        return 0;
    return read_word(s, reg(s, s->core.cfg.sp_reg), &target) != 0
           || ns_func_told(s->strict, target);
}

/* ------------------------------------------------------------ entry probes (pl_entry_*) */
/* The entry backend (backends/entry_python.py): a probe on a function's first instruction.  At its
 * trap C decides call or not by entryprobe.c's frame rule (EntryBackend._entered: the
 * return address at SP and the SP before the call against the innermost open frame), the
 * Unicorn port's, reading through this port's operations, and appends the call's record;
 * then it steps over the displaced instruction as the Python backend does (a fall-back: the
 * program's byte back, PTRACE_SINGLESTEP, the INT3 written again; uprobes' step-over),
 * counting a trap and a step-over and taking one off the time, as Int3Backend._on_trap does.
 * Python's: the process entry's first hit, a signal handler's entry, a jump into another
 * function in the same frame (a tail call by the tail rule), a probe whose instruction
 * Python simulates, and every probe while Python has a module to probe first (`hold`).
 * Returns are the lazy return sites of the table; C also pops the open frames a return
 * leaves (ep_returned).  Python reads the frames back when C changed them and hands them
 * to C when it did (the pl_entry_* wrappers over entryprobe.c's table). */
int pl_entry_enable(pl_state *s, uint64_t process_entry, uint64_t push, uint64_t code_mask)
{
    if (!s->entry) {
        s->entry = ep_new(NULL, NULL, NULL, NULL, NULL, NULL, s->core.cfg.pc_reg, s->core.cfg.sp_reg, -1,
                          s->core.cfg.word, 0, push, code_mask, -1, 0);
        if (!s->entry)
            return -1;
        ep_bind_port(s->entry, &port_ops, s);  /* x86: the return address is at SP */
    }
    s->entry_process = process_entry;
    ep_set(s->entry, s->entry_hold, s->entry_process, s->entry_handler);
    return 0;
}

int pl_entry_probe(pl_state *s, uint64_t addr, uint64_t func, uint32_t orig)
{
    static const uint8_t int3 = PL_INT3;
    uint8_t byte = (uint8_t)orig;
    return ep_probe_add(s->entry, addr, func, &byte, &int3, 1, 0);
}

void pl_entry_probe_active(pl_state *s, uint64_t addr, uint32_t on)
{
    ep_probe_active(s->entry, addr, on);
}

void pl_entry_hold(pl_state *s, uint32_t hold, uint64_t handler_entry)
{
    s->entry_hold = hold;
    s->entry_handler = handler_entry;
    ep_set(s->entry, hold, s->entry_process, handler_entry);
}

int pl_entry_frames_set(pl_state *s, uint32_t n, const uint64_t *ra, const uint64_t *call_sp,
                        const uint64_t *func)
{
    uint64_t *words = malloc((n ? n : 1) * 3 * sizeof *words);
    if (!words)
        return -1;
    for (uint32_t i = 0; i < n; i++) {
        words[3 * i] = ra[i];
        words[3 * i + 1] = call_sp[i];
        words[3 * i + 2] = func[i];
    }
    int rc = ep_frames_splice(s->entry, 0, n, words);
    free(words);
    return rc;
}

/* the frames, if C changed them since Python last read or set them: their count, or -1 */
int64_t pl_entry_frames_get(pl_state *s, uint64_t *ra, uint64_t *call_sp, uint64_t *func,
                            uint32_t room)
{
    ep_state *e = s->entry;
    if (!ep_dirty(e))
        return -1;
    uint64_t n = ep_depth(e);
    if (n > room)
        return (int64_t)n;  /* (nothing copied: call again with room) */
    const ep_frame *f = ep_frames(e);
    for (uint64_t i = 0; i < n; i++) {
        ra[i] = f[i].ra;
        call_sp[i] = f[i].call_sp;
        func[i] = f[i].func;
    }
    ep_clean(e);
    return (int64_t)n;
}

uint64_t pl_entry_stepovers(pl_state *s) { return ep_counter(s->entry, 1); }

static int pl_entry_trap(pl_state *s, int32_t pid, uint64_t at, int32_t *status)
{
    ep_state *e = s->entry;
    ep_call call;
    uint8_t orig = 0;
    uint64_t regs[NT_MAX_REGS] = {0};
    if (!ep_probe_at(e, at))
        return ENTRY_NOT_PROBE;
    /* the arguments as the callee sees them at its entry (now), read before the frame rule
     * changes anything: a stack word that cannot be read leaves the probe to Python */
    if (core_call_words(&s->core, reg(s, s->core.cfg.sp_reg), regs, 0, s->core.cfg.n_args, 0,
                        s->core.cfg.n_stack) != 0)
        return ENTRY_PYTHON;
    int kind = ep_decide(e, at, &call, &orig);
    if (kind == EP_PYTHON)
        return ENTRY_PYTHON;
    /* decided: the record, then the step-over */
    if (kind == EP_CALL)  /* (the record's room: checked before resuming) */
        core_record(&s->core, EV_CALL, s->core.time, call.ra, at, call.call_sp, call.ra,
                    call.entry_sp, regs, s->core.cfg.n_args + s->core.cfg.n_stack,
                    core_string_mask(&s->core, at));
    s->core.traps++;
    s->core.time--;  /* the fall-back's re-run is counted by its block (Int3Backend._on_trap) */
    uint8_t byte = (uint8_t)orig;
    if (pwrite(s->cfg.mem_fd, &byte, 1, (off_t)at) != 1)
        return -EIO;
    s->regs[s->core.cfg.pc_reg] = at;
    if (ptrace(PTRACE_SETREGS, pid, 0, s->regs) == -1)
        return -errno;
    int st, bad = 0;
    if (ptrace(PTRACE_SINGLESTEP, pid, 0, 0) == -1)
        return -errno;
    while (waitpid(pid, &st, 0) == -1)  /* (one instruction: waited for to its end) */
        if (errno != EINTR)
            return -errno;
    *status = st;
    siginfo_t info;
    if (!WIFSTOPPED(st) || WSTOPSIG(st) != SIGTRAP || (st >> 16) != 0
        || ptrace(PTRACE_GETSIGINFO, pid, 0, &info) == -1
        || (info.si_code != 1 && info.si_code != 2))
        bad = 1;
    byte = PL_INT3;
    if (pwrite(s->cfg.mem_fd, &byte, 1, (off_t)at) != 1 && !bad)
        return -EIO;
    if (bad) {  /* (a fault or a signal at the instruction: the stop is at the probe) */
        s->last_pc = at;
        return ENTRY_STOPPED;
    }
    errno = 0;
    long pc = ptrace(PTRACE_PEEKUSER, pid, (void *)(s->core.cfg.pc_reg * sizeof(unsigned long long)),
                     0);
    if (errno)
        return -errno;
    s->regs[s->core.cfg.pc_reg] = (unsigned long long)pc;
    return ENTRY_DONE;
}

/* ------------------------------------------------------------ branch steps (`btf`) */
/* A stop's block (backends/btf_native.py `_walk`: the run from where the tracee was resumed
 * to the stop) that crossed no taken branch is told once as one of branch.c's block facts:
 * the backend's hook would only count its instructions. */
int pl_quiet_block_add(pl_state *s, uint64_t from, uint64_t at, uint32_t count)
{
    if (!s->blocks) {
        bb_config cfg;
        memset(&cfg, 0, sizeof cfg);
        cfg.abi = s->core.cfg;
        cfg.abi.buffer_events = 1;  /* (its record buffer stays unused here) */
        if (!(s->blocks = bb_new(NULL, &cfg)))
            return -1;
    }
    if (at <= from || at - from > UINT32_MAX)
        return 0;  /* nothing C could take: the stop stays Python's */
    return bb_quiet_add(s->blocks, from, (uint32_t)(at - from), count);
}

/* PTRACE_SINGLEBLOCK the stopped tracee (resumed at `from`) and keep block-stepping while
 * each stop's walk runs on to it with no taken branch (the backend would only count the
 * instructions: `stops` and `walked` add them up).  A stop after exactly one instruction
 * with si_code TRAP_TRACE is the degradation's proof: C takes it only once Python has seen
 * one (`degraded_known`).  Returns as pl_step: PL_STOP with the first stop it does not take
 * (*last_pc: where that stop's walk begins, 0 if C took none), PL_FULL after max_stops. */
int pl_block(pl_state *s, int32_t pid, int32_t sig, uint64_t from, uint32_t degraded_known,
             int32_t *status, uint64_t *stops, uint64_t *walked)
{
    uint32_t taken = 0;
    *stops = *walked = 0;
    s->last_pc = 0;
    for (;;) {
        s->resumes++;
        if (ptrace(PTRACE_SINGLEBLOCK, pid, 0, (void *)(intptr_t)sig) == -1)
            return -errno;
        sig = 0;
        int st;
        if (waitpid(pid, &st, 0) == -1)
            return errno == EINTR ? PL_EINTR : -errno;
        *status = st;
        if (!WIFSTOPPED(st) || WSTOPSIG(st) != SIGTRAP || (st >> 16) != 0)
            break;
        siginfo_t info;
        if (ptrace(PTRACE_GETSIGINFO, pid, 0, &info) == -1
            || (info.si_code != 1 && info.si_code != 2))
            break;  /* (TRAP_BRKPT after a system call, TRAP_TRACE: ptrace_run.py STEP_CODES) */
        errno = 0;
        long got = ptrace(PTRACE_PEEKUSER, pid,
                          (void *)(s->core.cfg.pc_reg * sizeof(unsigned long long)), 0);
        if (errno)
            break;
        uint64_t at = (uint64_t)got & mask_of(s);
        uint32_t n = s->blocks ? bb_block_quietly(s->blocks, from, at) : 0;
        if (n == 0 || (n == 1 && info.si_code == 2 && !degraded_known))
            break;
        (*stops)++;
        *walked += n;
        from = s->last_pc = at;
        if (++taken >= s->cfg.max_stops)
            return PL_FULL;
    }
    s->returned++;
    return PL_STOP;
}
