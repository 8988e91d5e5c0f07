/* emutrace native hot path for the `step` backend: one Unicorn code hook on every
 * instruction (backends/step.py `_on_insn` is the reference, line for line).
 *
 * Built into the same library as hotpath.c (setup.py) and loaded the same way: Unicorn is
 * called through function pointers from the binding's own libunicorn.so.2, Python only
 * through the callbacks in st_config (ctypes trampolines that take the GIL).
 *
 * Per instruction: count it, resolve the transfer classified at an earlier instruction (it
 * took effect if the PC did not fall through; after the delay slot on ISAs with one), look
 * the address up in the flow table (address -> kind and flags, decoded once by Python), and
 * remember a classified instruction as the pending transfer.
 *
 * A taken transfer is one of:
 * - a jump to an address that is no function entry: nothing to record (TailRule.is_tail is
 *   false without a side effect).  `entries` is a superset of TailRule.entries: every
 *   function entry the symbol table had when Python last decoded new code (which it does
 *   before any newly mapped code runs), and every call target;
 * - a call, a return, or a jump that may be a tail call, whose values a register snapshot
 *   covers (integer arguments of a target in `fast`; an integer return value, `ret_fast`):
 *   one fixed record in the buffer, turned into events by Python in order;
 * - anything else (a first call of a target, a `maybe_return` jump, a return into a
 *   function's entry, values in memory or float registers): Python resolves it now, on the
 *   live CPU, after draining the buffer.
 *
 * For `emutrace record` (st_set_writer) a call or return C finished is offered to the record
 * writer (ufwrite.c) first, as hotpath.c offers its traps: the writer keeps the shadow stack's
 * common case and writes the uftrace record itself, or leaves the record to Python.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <unicorn/unicorn.h>

#include "abi.h"
#include "addrset.h"
#include "step.h"
#include "ufwrite.h"

typedef struct {
    uint64_t addr;
    uint32_t flow;  /* 0: empty slot */
} st_flow;

/* the flow table's home slot of addr: Fibonacci hashing (Knuth, TAOCP vol. 3 §6.4: multiply
 * by 2^64/phi, keep the top log2(cap) bits), which spreads the dense run of a block's
 * instruction addresses over the table with one multiply.  Looked up on every instruction,
 * so it is cheap (splitmix's two multiplies cost more than the probes they save here). */
#define FLOW_INDEX(k, cap) \
    ((size_t)(((k) * 0x9e3779b97f4a7c15ULL) >> (__builtin_clzll(cap) + 1)))
#define FLOW_USED(e) ((e)->flow != 0)
#define FLOW_MATCH(e, k) ((e)->addr == (k))
#define FLOW_KEYOF(e) ((e)->addr)
#define FLOW_SETKEY(e, k) ((e)->addr = (k))
ADDRTAB(flow_tab, st_flow, uint64_t, FLOW_INDEX, FLOW_USED, FLOW_MATCH, FLOW_KEYOF, FLOW_SETKEY)

typedef struct {
    uint32_t flow;
    uint64_t site, fallthrough, time, sp;
    uint32_t countdown;
} st_pending;

struct st_state {
    uc_engine *uc;
    st_config cfg;
    flow_tab flows;
    addrset fast;     /* call targets whose arguments the snapshot covers */
    addrset entries;  /* a superset of TailRule.entries */
    nt_event *events;
    uint32_t n_events;
    uint64_t time;
    int has_pending;
    st_pending pending;
    uint64_t recorded, slow;  /* transfers finished in C / resolved by Python */
    uint64_t decoded;  /* addresses Python decoded during the run (py_flow) */
    uw_state *writer;  /* the record writer (ufwrite.c), or NULL: every record to Python */
    uint64_t written[3];  /* calls, returns, tail calls the writer took */
};

static int flows_put(st_state *s, uint64_t addr, uint32_t flow)
{
    st_flow *p = flow_tab_put(&s->flows, addr);
    if (!p)
        return -1;
    p->flow = flow | F_DECODED;
    return 0;
}

/* ------------------------------------------------------------------ API for Python */
st_state *st_new(uc_engine *uc, const st_config *cfg)
{
    st_state *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->uc = uc;
    s->cfg = *cfg;
    if (s->cfg.abi.n_args > NT_MAX_REGS)
        s->cfg.abi.n_args = NT_MAX_REGS;
    if (s->cfg.abi.n_stack > NT_MAX_REGS - s->cfg.abi.n_args)
        s->cfg.abi.n_stack = NT_MAX_REGS - s->cfg.abi.n_args;
    if (s->cfg.abi.buffer_events == 0)
        s->cfg.abi.buffer_events = 4096;
    int flows = flow_tab_init(&s->flows, 1 << 14);
    int sets = addrset_init(&s->fast, 1024) | addrset_init(&s->entries, 1024);
    s->events = calloc(s->cfg.abi.buffer_events, sizeof *s->events);
    if (flows != 0 || sets != 0 || !s->events) {
        flow_tab_free(&s->flows); addrset_free(&s->fast); addrset_free(&s->entries);
        free(s->events); free(s);
        return NULL;
    }
    return s;
}

void st_free(st_state *s)
{
    if (!s)
        return;
    flow_tab_free(&s->flows);
    addrset_free(&s->fast);
    addrset_free(&s->entries);
    free(s->events);
    free(s);
}

/* flow words Python knew before the run (the same file decoded by an earlier run of this
 * process, step_native.py `_preload`): n addresses and their words; 0, or -1 out of memory */
int st_flows_load(st_state *s, const uint64_t *addrs, const uint32_t *flows, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++)
        if (flows_put(s, addrs[i], flows[i]) != 0)
            return -1;
    return 0;
}

int st_fast_add(st_state *s, uint64_t target) { return addrset_add(&s->fast, target); }
int st_entry_add(st_state *s, uint64_t code) { return addrset_add(&s->entries, code); }
int st_flow_add(st_state *s, uint64_t addr, uint32_t flow) { return flows_put(s, addr, flow); }

uint32_t st_flow_at(const st_state *s, uint64_t addr)
{
    const st_flow *p = flow_tab_find(&s->flows, addr);
    return p ? p->flow : 0;
}
uint64_t st_get_time(const st_state *s) { return s->time; }
void st_set_time(st_state *s, uint64_t t) { s->time = t; }
void st_clear_pending(st_state *s) { s->has_pending = 0; }

/* the pending transfer (flow, site, fall-through, time, sp, countdown) into out[6] and
 * forget it: 1, or 0 when there is none (a signal handler entered: step.py trap_entered) */
int st_take_pending(st_state *s, uint64_t *out)
{
    if (!s->has_pending)
        return 0;
    s->has_pending = 0;
    out[0] = s->pending.flow;
    out[1] = s->pending.site;
    out[2] = s->pending.fallthrough;
    out[3] = s->pending.time;
    out[4] = s->pending.sp;
    out[5] = s->pending.countdown;
    return 1;
}

/* the pending transfer again, as st_take_pending gave it (another guest thread ran in
 * between: step_native.py switch_thread) */
void st_put_pending(st_state *s, const uint64_t *in)
{
    s->pending.flow = (uint32_t)in[0];
    s->pending.site = in[1];
    s->pending.fallthrough = in[2];
    s->pending.time = in[3];
    s->pending.sp = in[4];
    s->pending.countdown = (uint32_t)in[5];
    s->has_pending = 1;
}

/* `emutrace record`: calls and returns C finishes go to this writer first (NULL: none) */
void st_set_writer(st_state *s, uw_state *writer) { s->writer = writer; }

/* counters: 0 transfers finished in C, 1 transfers Python resolved; 2 calls, 3 returns and
 * 4 tail calls the record writer took (among 0: events Python never saw); 5 addresses
 * Python decoded during the run */
uint64_t st_counter(const st_state *s, uint32_t which)
{
    switch (which) {
    case 0: return s->recorded;
    case 1: return s->slow;
    case 2: return s->written[0];
    case 3: return s->written[1];
    case 4: return s->written[2];
    case 5: return s->decoded;
    default: return 0;
    }
}

const nt_event *st_events(const st_state *s) { return s->events; }
uint32_t st_events_count(const st_state *s) { return s->n_events; }
void st_events_clear(st_state *s) { s->n_events = 0; }

/* ------------------------------------------------------------------ the hook */
static inline uint64_t rd(st_state *s, int reg)
{
    uint64_t v = 0;  /* 32-bit registers fill the low half (little-endian host) */
    s->cfg.reg_read(s->uc, reg, &v);
    return v;
}

static uint64_t word_from(const st_state *s, const uint8_t *b)
{
    uint64_t v = 0;
    uint32_t n = s->cfg.abi.word;
    for (uint32_t i = 0; i < n; i++)
        v |= (uint64_t)b[s->cfg.abi.big_endian ? n - 1 - i : i] << (8 * i);
    return v;
}

/* the buffered record of a taken transfer, or 0 where Python must resolve it */
static int record(st_state *s, const st_pending *p, uint64_t pc)
{
    uint32_t kind = F_KIND(p->flow);
    uint64_t code = pc & s->cfg.abi.code_mask;
    uint8_t stack[8 * NT_MAX_REGS];
    if (p->flow & F_MAYBE_RETURN)
        return 0;
    if (kind == K_CALL) {
        if (addrset_add(&s->entries, code) != 0 || !addrset_has(&s->fast, pc))
            return 0;
    } else if (kind == K_RETURN) {
        if (addrset_has(&s->entries, code))  /* maybe a return into an entry: a jump */
            return 0;
        if (!(p->flow & F_RET_FAST))
            return 0;
    } else {  /* a jump: a tail call only to a function entry */
        if (!addrset_has(&s->entries, code))
            return 1;  /* nothing to record */
        if (!addrset_has(&s->fast, pc))
            return 0;
    }
    uint64_t sp = 0;
    if (kind != K_RETURN) {
        uint64_t mask = s->cfg.abi.word == 8 ? ~0ULL : 0xffffffffULL;
        sp = rd(s, s->cfg.abi.sp_reg) & mask;
        if (s->cfg.abi.n_stack
            && s->cfg.mem_read(s->uc, (sp + s->cfg.abi.stack_offset) & mask, stack,
                               (uint64_t)s->cfg.abi.n_stack * s->cfg.abi.word) != UC_ERR_OK)
            return 0;
    }
    uint64_t regs[NT_MAX_REGS] = {0};
    if (kind == K_RETURN) {
        uint32_t n = 0;
        if (s->cfg.abi.ret_reg >= 0)
            regs[n++] = rd(s, s->cfg.abi.ret_reg);
        if (s->cfg.abi.ret_hi_reg >= 0)
            regs[n++] = rd(s, s->cfg.abi.ret_hi_reg);
    } else {  /* the arguments as the callee sees them at its entry */
        for (uint32_t i = 0; i < s->cfg.abi.n_args; i++)
            regs[i] = rd(s, s->cfg.abi.arg_regs[i]);
        for (uint32_t i = 0; i < s->cfg.abi.n_stack; i++)
            regs[s->cfg.abi.n_args + i] = word_from(s, stack + i * s->cfg.abi.word);
    }
    /* `record`: a call, return or tail call goes to the writer first, when no buffered
     * record has to precede it (a call through an alternate link register unwinds
     * differently, Call.before_frame: Python's) */
    if (s->writer && uw_enabled(s->writer) && s->n_events == 0
        && !(kind == K_CALL && (p->flow & F_ALT_LINK))) {
        /* (no string copies: a plan that writes a `char *` leaves the event to Python) */
        uw_event ev = {kind == K_CALL, p->time, p->site, pc, p->sp, p->fallthrough, regs,
                       NULL};
        int taken = kind == K_CALL || kind == K_RETURN
                        ? uw_take(s->writer, &ev, s->cfg.py_drain)
                        : uw_take_tail(s->writer, &ev, s->cfg.py_drain);
        if (taken) {
            s->recorded++;
            s->written[kind == K_CALL ? 0 : kind == K_RETURN ? 1 : 2]++;
            return 1;
        }
    }
    if (s->n_events >= s->cfg.abi.buffer_events) {
        s->cfg.py_drain();  /* takes the GIL; the buffer is empty afterwards */
        if (s->n_events >= s->cfg.abi.buffer_events)
            return 0;
    }
    nt_event *e = &s->events[s->n_events++];
    e->kind = kind == K_CALL ? EV_CALL : kind == K_RETURN ? EV_RETURN : EV_TAIL;
    e->flags = p->flow;
    e->time = p->time;
    e->site = p->site;
    e->target = pc;
    e->sp = p->sp;
    e->fallthrough = p->fallthrough;
    e->entry_sp = sp;
    memcpy(e->regs, regs, sizeof regs);
    s->recorded++;
    /* the writer is on but left this record to Python: Python takes it now, so that the
     * next transfers find an empty buffer (and the writer can take them) */
    if (s->writer && uw_enabled(s->writer))
        s->cfg.py_drain();
    return 1;
}

/* an address seen for the first time: Python decodes it (once) */
static __attribute__((noinline)) uint32_t decode(st_state *s, uint64_t addr, uint32_t size)
{
    uint32_t flow = s->cfg.py_flow(addr, size) | F_DECODED;
    s->decoded++;
    flows_put(s, addr, flow);
    return flow;
}

/* the pending transfer at the next instruction, addr (after its delay slot) */
static __attribute__((noinline)) void resolve(st_state *s, uint64_t addr)
{
    st_pending *p = &s->pending;
    if (p->countdown) {
        p->countdown--;
        return;
    }
    uint32_t kind = F_KIND(p->flow);
    s->has_pending = 0;
    /* taken if it did not fall through; an unconditional jump or return to the next
     * address is taken all the same, a call to the next instruction only reads the PC */
    if (addr != p->fallthrough
        || !((p->flow & F_CONDITIONAL) || kind == K_CALL || kind == K_RETURN)) {
        if (!record(s, p, addr)) {
            s->slow++;
            if (s->n_events)
                s->cfg.py_drain();
            s->cfg.py_resolve(p->flow, p->site, p->fallthrough, p->time, p->sp, addr);
        }
    }
}

/* the instruction at addr, classified by flow, is the pending transfer: it waits for the
 * next instruction (after the delay slot); sp is the one before it runs */
static void pending_at(st_state *s, uint64_t addr, uint32_t flow, uint64_t time, uint64_t sp)
{
    s->pending.flow = flow;
    s->pending.site = addr;
    s->pending.fallthrough = addr + (flow & 0xffff) + s->cfg.delay;
    s->pending.time = time;
    s->pending.sp = sp;
    s->pending.countdown = s->cfg.delay ? 1 : 0;
    s->has_pending = 1;
}

static __attribute__((noinline)) void make_pending(st_state *s, uint64_t addr, uint32_t flow,
                                                   uint64_t time)
{
    uint64_t mask = s->cfg.abi.word == 8 ? ~0ULL : 0xffffffffULL;
    pending_at(s, addr, flow, time, rd(s, s->cfg.abi.sp_reg) & mask);
}

/* The hook, on every instruction: kept small (a count, one table look-up, two tests),
 * since it runs millions of times; the rest is out of line. */
void st_on_insn(uc_engine *uc, uint64_t addr, uint32_t size, void *user_data)
{
    st_state *s = user_data;
    (void)uc;
    uint64_t time = s->time++;
    /* decode first (step.py decodes after resolving; decoding has no effect on the
     * resolution, and Python refreshes `entries` when it decodes new code) */
    const st_flow *p = flow_tab_find(&s->flows, addr);
    uint32_t flow = p ? p->flow : 0;
    if (__builtin_expect(flow == 0, 0))
        flow = decode(s, addr, size);
    if (s->has_pending)
        resolve(s, addr);
    uint32_t kind = F_KIND(flow);
    if (__builtin_expect(kind == K_NONE || kind == K_STOP, 1))
        return;
    make_pending(s, addr, flow, time);
}

/* ------------------------------------------------------------------ a port that stops */
/* The hook's body for a port that hands back to Python where C cannot go on instead of
 * calling it (ploop.c pl_step: PTRACE_SINGLESTEP), at the instruction at pc, sp: C takes it
 * only where the reference hook would record nothing.  The pending transfer must be a jump
 * (no call or return, not maybe_return, no delay slot left) that fell through when
 * conditional, or lands on no entry (TailRule.is_tail is then false without a side effect);
 * the instruction must be one the port was taught: quiet (K_NONE, counted) or a jump
 * (K_JUMP, made pending).  1: taken; 0: Python's, nothing changed. */
int st_step_quietly(st_state *s, uint64_t pc, uint64_t sp)
{
    uint32_t flow = st_flow_at(s, pc), kind = F_KIND(flow);
    if (!flow || (kind != K_NONE && kind != K_JUMP))
        return 0;  /* a call, a return, or code not decoded yet */
    if (s->has_pending) {
        const st_pending *p = &s->pending;
        if (F_KIND(p->flow) != K_JUMP || (p->flow & F_MAYBE_RETURN) || p->countdown)
            return 0;
        if (!((p->flow & F_CONDITIONAL) && pc == p->fallthrough)
            && addrset_has(&s->entries, pc & s->cfg.abi.code_mask))
            return 0;  /* maybe a tail call */
        s->has_pending = 0;  /* it recorded nothing */
    }
    uint64_t time = s->time++;
    if (kind == K_JUMP)
        pending_at(s, pc, flow, time, sp);
    return 1;
}
