/* emutrace native library: the tracer core both ports share (core.c), and what a port
 * gives it (core_ops).
 *
 * A port is one way of running the program: the Unicorn hooks (hotpath.c: a trap is an
 * INTR hook, registers and memory are uc_* calls) or the ptrace loop (ploop.c: a trap is a
 * SIGTRAP seen by wait4, registers are the GETREGS array, memory is /proc/PID/mem).  The
 * core holds what a trap needs whatever the port: the site table (each armed site's
 * lowered instruction, isa/base.py `Isa.lower`), the transfer sets (callees, jumps that
 * record nothing, tail jumps, strict switch jumps, string values), the event buffer and its
 * string area, the clock and the counters; and it finishes a trap (`core_trap`: simulate the
 * displaced call, return or jump through the port's operations, write the record or hand it
 * to the record writer).  Register ids are the port's own plain ints (Unicorn register ids;
 * indices of `struct user_regs_struct`), so a site's register plan serves both.
 */
#ifndef EMUTRACE_CORE_H
#define EMUTRACE_CORE_H

#include <stdint.h>
#include <stddef.h>

#include "abi.h"
#include "addrset.h"
#include "entryprobe.h"
#include "strict.h"
#include "ufwrite.h"

/* ------------------------------------------------------------------ port operations */
typedef struct core_ops {
    /* registers ids[0..n) into out (n <= CORE_SITE_READS), zero-extended to 64 bits */
    void (*regs_read)(void *port, const int32_t *ids, uint64_t *out, uint32_t n);
    void (*reg_write)(void *port, int32_t id, uint64_t value);
    /* guest memory: 0, or -1 when not all len bytes could be moved */
    int (*mem_read)(void *port, uint64_t addr, void *out, uint64_t len);
    int (*mem_write)(void *port, uint64_t addr, const void *in, uint64_t len);
    /* bytes into the code: written so that the next run of addr sees them (Unicorn: the
     * write and uc_ctl_remove_cache; ptrace: /proc/PID/mem) */
    int (*code_write)(void *port, uint64_t addr, const void *in, uint64_t len);
    /* the event buffer is full at a trap: the port empties it if it can while the program
     * stands (Unicorn: py_drain, under the GIL); the ptrace loop cannot (it checks room
     * before each resume and stops with PL_FULL after a trap that filled it) */
    void (*buffer_full)(void *port);
} core_ops;

/* ------------------------------------------------------------------ the site table */
#define CORE_SITE_READS (4 + NT_MAX_REGS)  /* sp, guard, condition, source; arguments or values */
#define CORE_MAX_POPS 14  /* registers a RETURN loads below its target (ARM: r0-r12, lr) */

typedef struct {
    uint64_t addr;      /* 0: empty slot */
    uint64_t target;    /* OP_CALL with src_reg < 0: the direct target */
    uint64_t after;     /* the next instruction: the return address a call leaves */
    int32_t src_reg;    /* CALL: target register; RETURN: register holding the target */
    int32_t link_reg;   /* CALL: register the return address goes to; -1: pushed */
    uint32_t release;   /* RETURN popping the stack: extra bytes released (x86 ret imm16) */
    int32_t cond_reg;   /* JUMP: the register its condition reads */
    uint8_t cond, ca, cb, cc;  /* JUMP: condition test and its bit numbers */
    uint8_t conditional;  /* the site may fall through: not taken records nothing */
    uint64_t reg_mask;    /* applied to a target read from a register (Power: ~3) */
    int32_t guard_reg;    /* the condition under which C may finish the site at all */
    uint8_t guard, ga, gb;
    uint8_t op;
    uint8_t active;
    uint8_t fast;       /* a RETURN whose value C's snapshot covers */
    /* the registers a trap here reads, in one regs_read (core_site_reads): sp first, then
     * guard, condition and source registers (when the site has them, at i_guard, i_cond,
     * i_src), then from i_val a call's argument registers or a return's value registers
     * (i_ret, i_ret_hi: the return value and its high half, when the ABI has them) */
    int32_t reads[CORE_SITE_READS];
    uint8_t n_reads, i_guard, i_cond, i_src, i_val, i_ret, i_ret_hi;
    /* core_site_extra (where a code address's bit 0 selects the instruction set, ARM):
     * bits the next instruction's address gets as PC or link (the site's own mode), the
     * test a target read from a register or the stack must pass (ttest, bits ta, tb), the
     * mask of a C_MASK_ZERO guard, and the registers a RETURN pops below its target */
    uint8_t after_bits, ttest, ta, tb;
    uint64_t gmask;
    uint8_t n_pops;
    int32_t pops[CORE_MAX_POPS];
} core_site;

ADDRTAB_BY_ADDR(core_sites, core_site)

/* ------------------------------------------------------------------ the state */
typedef struct {
    nt_abi cfg;           /* the port's calling convention and buffer (abi.h) */
    uint32_t links;       /* the port can finish a call that writes a link register */
    void (*drain)(void);  /* the record writer's way to hand bytes to Python (uw_take), or
                             NULL: the port has no writer */
    const core_ops *ops;
    void *port;           /* the ops' first argument */
    core_sites sites;
    addrset callees;  /* call targets whose function is armed and whose arguments C reads */
    addrpairs inside; /* (jump site, target) pairs that record nothing (a jump inside its
                         function, or to code that is no function entry) */
    addrpairs switch_jumps;  /* strict cleanup: (jump site, target) pairs into another
                             * function that record nothing and switch the armed function */
    addrpairs tails;  /* (jump site, target) pairs to another armed function's entry whose
                        arguments C saves: a tail call unless it is the running function */
    addrmap string_args;  /* call targets (and entry probes) -> snapshot words that are
                              `char *` values, copied at the event */
    addrset string_returns; /* return sites whose value is a `char *`, copied as well */
    uint8_t *strings;      /* the copies of the buffered events, in order */
    size_t strings_len, strings_cap;
    uint64_t strings_copied;
    uint64_t strings_written;  /* of those, the ones the record writer wrote */
    nt_event *events;
    uint32_t n_events;
    uint64_t time;        /* the backend's clock (guest instructions) */
    uint64_t traps, simulated;  /* traps C finished; of them simulated transfers */
    uint64_t written;     /* events the writer took */
    uint64_t tail_jumps;  /* jumps to a function entry C finished (EV_TAIL or the writer) */
    uw_state *writer;     /* the record writer (ufwrite.c), or NULL: every event to Python */
    ns_state *strict;     /* strict cleanup (strict.c), or NULL */
    ep_state *entry;      /* the entry backend's probes (entryprobe.c), or NULL */
    uint64_t vals[CORE_SITE_READS];  /* the last trap's register values (site->reads) */
} core_state;

/* the core of a port with that ABI (its configuration's first member; a buffer_events of 0
 * is 4096, a code_mask of 0 is ~0), links and drain as core_state's */
int core_init(core_state *c, const nt_abi *abi, uint32_t links, void (*drain)(void),
              const core_ops *ops, void *port);
void core_fini(core_state *c);

/* the site table and the transfer sets (the nt_* and pl_* entry points' bodies) */
int core_site_set(core_state *c, uint64_t addr, uint32_t op, uint64_t target, uint64_t after,
                  int32_t src_reg, int32_t link_reg, uint32_t release, uint32_t fast,
                  uint32_t conditional, uint32_t cond, int32_t cond_reg, uint32_t ca,
                  uint32_t cb, uint32_t cc, uint32_t clear_low, uint32_t guard,
                  int32_t guard_reg, uint32_t ga, uint32_t gb);
int core_site_extra(core_state *c, uint64_t addr, uint32_t after_bits, uint32_t ttest,
                    uint32_t ta, uint32_t tb, uint64_t gmask, uint32_t n_pops,
                    const int32_t *pops);
void core_site_active(core_state *c, uint64_t addr, uint32_t active);
int core_callee_add(core_state *c, uint64_t target);
int core_inside_add(core_state *c, uint64_t site, uint64_t target);
void core_inside_drop(core_state *c, uint64_t target);
int core_tail_add(core_state *c, uint64_t site, uint64_t target);
int core_switch_jump_add(core_state *c, uint64_t site, uint64_t target);
int core_string_args(core_state *c, uint64_t target, uint32_t mask);
int core_string_return(core_state *c, uint64_t site);
void core_events_clear(core_state *c);

/* a trap at an armed site (active, op not OP_NONE), the PC at the site: finished (1: the
 * registers and memory as after the displaced instruction, the record written), or 0:
 * Python's, nothing changed */
int core_trap(core_state *c, core_site *site);

/* the next record's slot, zeroed (the port made room if it can), or NULL: full */
nt_event *core_event(core_state *c);
/* a call's snapshot into regs: argument registers [a0, a1), then stack words [w0, w1)
 * read at entry_sp as the callee sees them; 0, or -1 when a stack word cannot be read (the
 * stack words then stay as they were) */
int core_call_words(core_state *c, uint64_t entry_sp, uint64_t *regs, uint32_t a0, uint32_t a1,
                    uint32_t w0, uint32_t w1);
/* a call (regs: its snapshot) or a return (regs: its value registers) offered to the record
 * writer, when it is on and nothing buffered precedes the event: 1 taken, 0 Python's */
int core_offer(core_state *c, uint32_t call, uint64_t time, uint64_t site, uint64_t target,
               uint64_t sp, uint64_t after, const uint64_t *regs, uint32_t string_mask);
/* the record for Python (kind EV_*; nregs words of regs; the strings of the words in
 * string_mask copied), or NULL when there is no room */
nt_event *core_record(core_state *c, uint32_t kind, uint64_t time, uint64_t site,
                      uint64_t target, uint64_t sp, uint64_t after, uint64_t entry_sp,
                      const uint64_t *regs, uint32_t nregs, uint32_t string_mask);
/* after a record for Python while the writer is on: Python takes it now, so that the next
 * events find an empty buffer (and the writer can take them) */
void core_hand_over(core_state *c);
/* the string words of a call to target (or an entry probe at it), of a return at site */
uint32_t core_string_mask(const core_state *c, uint64_t target);
uint32_t core_string_return_mask(const core_state *c, uint64_t site);

/* the record writer: will it take a call to target at sp (returning to after)?  Then only
 * the words its record holds are read: *n_args and *n_stack (all on entry) are cut */
int core_writer_words(core_state *c, uint64_t target, uint64_t sp, uint64_t after,
                      uint32_t *n_args, uint32_t *n_stack);
/* strict cleanup: a jump taken into another function that records nothing, switched (1) or
 * Python's (0); [lo, hi): the block running now (strict.c declines to write into it) */
int core_switch_jump(core_state *c, uint64_t site, uint64_t target, uint64_t lo, uint64_t hi);
/* a jump learnt to go to another armed function's entry: recorded (1) or Python's (0) */
int core_tail_event(core_state *c, uint64_t site, uint64_t target, uint64_t sp,
                    uint64_t entry_sp, uint64_t time, uint64_t lo, uint64_t hi);

static inline uint64_t core_word_mask(const core_state *c)
{
    return c->cfg.word == 8 ? ~0ULL : 0xffffffffULL;
}

/* a guest word from its bytes, and back (the ABI's byte order) */
static inline uint64_t core_word_from(const core_state *c, const uint8_t *b)
{
    uint64_t v = 0;
    uint32_t n = c->cfg.word;
    for (uint32_t i = 0; i < n; i++)
        v |= (uint64_t)b[c->cfg.big_endian ? n - 1 - i : i] << (8 * i);
    return v;
}

static inline void core_word_to(const core_state *c, uint64_t v, uint8_t *b)
{
    uint32_t n = c->cfg.word;
    for (uint32_t i = 0; i < n; i++)
        b[c->cfg.big_endian ? n - 1 - i : i] = (uint8_t)(v >> (8 * i));
}

/* room for one more record: made by the port if it can */
static inline int core_room(core_state *c, const core_ops *ops)
{
    if (c->n_events < c->cfg.buffer_events)
        return 1;
    ops->buffer_full(c->port);  /* (Unicorn: the buffer is empty afterwards) */
    return c->n_events < c->cfg.buffer_events;
}

#endif
