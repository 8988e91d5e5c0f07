/* emutrace native library: the tracer core both ports share (core.h says what a port is):
 * the site table and transfer sets, the event buffer and its string copies, the records
 * and the record writer's offers, tail and strict-switch jumps.  The trap itself
 * (`core_trap`) is coretrap.h's, which each port compiles with its own operations.
 */
#include <stdlib.h>
#include <string.h>

#include "cond.h"
#include "core.h"
#include "coretrap.h"

/* ------------------------------------------------------------------ life */
int core_init(core_state *c, const nt_abi *abi, uint32_t links, void (*drain)(void),
              const core_ops *ops, void *port)
{
    memset(c, 0, sizeof *c);
    c->cfg = *abi;
    c->links = links;
    c->drain = drain;
    c->ops = ops;
    c->port = port;
    if (c->cfg.n_args > NT_MAX_REGS)
        c->cfg.n_args = NT_MAX_REGS;
    if (c->cfg.n_stack > NT_MAX_REGS - c->cfg.n_args)
        c->cfg.n_stack = NT_MAX_REGS - c->cfg.n_args;
    if (c->cfg.buffer_events == 0)
        c->cfg.buffer_events = 4096;
    if (c->cfg.code_mask == 0)
        c->cfg.code_mask = ~0ULL;
    int tables = core_sites_init(&c->sites, 1024) | addrset_init(&c->callees, 1024)
                 | addrset_init(&c->string_returns, 256) | addrpairs_init(&c->inside, 1024)
                 | addrpairs_init(&c->tails, 256) | addrpairs_init(&c->switch_jumps, 256);
    c->events = calloc(c->cfg.buffer_events, sizeof *c->events);
    return tables != 0 || !c->events ? -1 : 0;
}

void core_fini(core_state *c)
{
    core_sites_free(&c->sites);
    addrset_free(&c->callees);
    addrpairs_free(&c->inside);
    addrpairs_free(&c->tails);
    addrpairs_free(&c->switch_jumps);
    addrmap_free(&c->string_args);
    addrset_free(&c->string_returns);
    free(c->events);
    free(c->strings);
    c->events = NULL;
    c->strings = NULL;
}

/* ------------------------------------------------------------------ the site table */
static uint8_t site_read(core_site *p, int32_t reg)
{
    p->reads[p->n_reads] = reg;
    return p->n_reads++;
}

/* which registers a trap at p reads (core_site.reads): fixed by its op and tests */
static void site_plan_reads(const nt_abi *c, core_site *p)
{
    p->n_reads = 0;
    p->i_guard = p->i_cond = p->i_src = p->i_ret = p->i_ret_hi = 0;
    site_read(p, c->sp_reg);
    if (p->guard != C_ALWAYS)
        p->i_guard = site_read(p, p->guard_reg);
    if (p->op != OP_CALL && p->cond != C_ALWAYS)
        p->i_cond = site_read(p, p->cond_reg);
    if (p->src_reg >= 0)
        p->i_src = site_read(p, p->src_reg);
    p->i_val = p->n_reads;
    if (p->op == OP_CALL) {
        for (uint32_t i = 0; i < c->n_args; i++)
            site_read(p, c->arg_regs[i]);
    } else if (p->op == OP_RETURN) {
        if (c->ret_reg >= 0)
            p->i_ret = site_read(p, c->ret_reg);
        if (c->ret_hi_reg >= 0)
            p->i_ret_hi = site_read(p, c->ret_hi_reg);
    }
}

/* a site C finishes on its own (op OP_CALL, OP_RETURN, OP_JUMP), or OP_NONE: Python's.
 * A call that writes a link register is Python's on a port that cannot (links). */
int core_site_set(core_state *c, uint64_t addr, uint32_t op, uint64_t target, uint64_t after,
                  int32_t src_reg, int32_t link_reg, uint32_t release, uint32_t fast,
                  uint32_t conditional, uint32_t cond, int32_t cond_reg, uint32_t ca,
                  uint32_t cb, uint32_t cc, uint32_t clear_low, uint32_t guard,
                  int32_t guard_reg, uint32_t ga, uint32_t gb)
{
    core_site *p = core_sites_put(&c->sites, addr);
    if (!p)
        return -1;
    if (link_reg >= 0 && !c->links)
        op = OP_NONE;
    p->op = (uint8_t)op;
    p->target = target;
    p->after = after;
    p->src_reg = src_reg;
    p->link_reg = link_reg;
    p->release = release;
    p->fast = (uint8_t)fast;
    p->conditional = (uint8_t)conditional;
    p->reg_mask = ~(uint64_t)clear_low;
    p->guard = (uint8_t)guard;
    p->guard_reg = guard_reg;
    p->ga = (uint8_t)ga;
    p->gb = (uint8_t)gb;
    p->cond = (uint8_t)cond;
    p->cond_reg = cond_reg;
    p->ca = (uint8_t)ca;
    p->cb = (uint8_t)cb;
    p->cc = (uint8_t)cc;
    p->active = 1;
    p->after_bits = 0;
    p->ttest = C_ALWAYS;
    p->ta = p->tb = 0;
    p->gmask = 0;
    p->n_pops = 0;
    site_plan_reads(&c->cfg, p);
    return 0;
}

/* what core_site_set leaves at its defaults (core_site: after_bits ... pops), after it */
int core_site_extra(core_state *c, uint64_t addr, uint32_t after_bits, uint32_t ttest,
                    uint32_t ta, uint32_t tb, uint64_t gmask, uint32_t n_pops,
                    const int32_t *pops)
{
    core_site *p = core_sites_find(&c->sites, addr);
    if (!p || n_pops > CORE_MAX_POPS)
        return -1;
    p->after_bits = (uint8_t)after_bits;
    p->ttest = (uint8_t)ttest;
    p->ta = (uint8_t)ta;
    p->tb = (uint8_t)tb;
    p->gmask = gmask;
    p->n_pops = (uint8_t)n_pops;
    for (uint32_t i = 0; i < n_pops; i++)
        p->pops[i] = pops[i];
    return 0;
}

void core_site_active(core_state *c, uint64_t addr, uint32_t active)
{
    core_site *p = core_sites_find(&c->sites, addr);
    if (p)
        p->active = (uint8_t)active;
}

int core_callee_add(core_state *c, uint64_t target)
{
    return addrset_add(&c->callees, target);
}

/* a jump from site to target records nothing and arms nothing (int3.py _resolve) */
int core_inside_add(core_state *c, uint64_t site, uint64_t target)
{
    return addrpairs_add(&c->inside, site, target);
}

/* forget every pair that goes to target (it became a function entry: a jump there may now
 * be a tail call) */
void core_inside_drop(core_state *c, uint64_t target)
{
    addrpairs_drop_target(&c->inside, target);
    addrpairs_drop_target(&c->switch_jumps, target);
}

/* a jump from site to target goes to the entry of another armed function whose arguments C
 * saves (fastpath.py FastSites._learn_jump): C records it as int3.py _transfer's jump case
 * does under lazy cleanup (a TailCall when TailRule.is_tail holds; arming is a no-op) */
int core_tail_add(core_state *c, uint64_t site, uint64_t target)
{
    return addrpairs_add(&c->tails, site, target);
}

/* strict cleanup: a jump from site to target enters another function that C knows and
 * records nothing (target is no function entry: fastpath.py FastSites._learn_jump), so C
 * switches the armed function as int3.py _transfer's jump case does (strict.c ns_jump) */
int core_switch_jump_add(core_state *c, uint64_t site, uint64_t target)
{
    return addrpairs_add(&c->switch_jumps, site, target);
}

/* ------------------------------------------------------------------ the event buffer */
/* the string area, made when the first string value is told: room for every word of
 * every event the buffer holds (index, length, STRING_LIMIT + 1 bytes each) */
static int strings_room(core_state *c)
{
    if (c->strings)
        return 0;
    c->strings_cap = (size_t)c->cfg.buffer_events * NT_MAX_REGS * (3 + NT_STRING_LIMIT + 1);
    c->strings = malloc(c->strings_cap);
    return c->strings ? 0 : -1;
}

/* the snapshot words (bit i: regs[i]) of a call to target (or of an entry probe at target)
 * that are `char *` values: their strings are copied at the event */
int core_string_args(core_state *c, uint64_t target, uint32_t mask)
{
    if (strings_room(c) != 0)
        return -1;
    return addrmap_set(&c->string_args, target, (int32_t)(mask & ((1u << NT_MAX_REGS) - 1)));
}

/* a return site whose value is a `char *`: its string is copied at the event */
int core_string_return(core_state *c, uint64_t site)
{
    if (strings_room(c) != 0)
        return -1;
    return site ? addrset_add(&c->string_returns, site) : 0;
}

uint32_t core_string_mask(const core_state *c, uint64_t target)
{
    int32_t mask = addrmap_get(&c->string_args, target);
    return mask > 0 ? (uint32_t)mask : 0;
}

uint32_t core_string_return_mask(const core_state *c, uint64_t site)
{
    return addrset_has(&c->string_returns, site) ? 1u : 0u;
}

void core_events_clear(core_state *c)
{
    c->n_events = 0;
    c->strings_len = 0;
}

static int room(core_state *c) { return core_room(c, c->ops); }

nt_event *core_event(core_state *c)
{
    if (!room(c))
        return NULL;
    nt_event *e = &c->events[c->n_events++];
    memset(e, 0, sizeof *e);
    return e;
}

void core_hand_over(core_state *c)
{
    if (c->writer && uw_enabled(c->writer))
        c->drain();
}

/* ------------------------------------------------------------------ words and strings */
/* The C string at addr as ArgReader.string reads it (backends/args.py): chunks of at most
 * STRING_LIMIT + 1 bytes that never cross a page, up to the NUL or STRING_LIMIT + 1 bytes;
 * NULL, or any chunk unreadable: none.  Its bytes go to out (room for 2 * (STRING_LIMIT +
 * 1)); the length, or NT_STRING_NONE. */
static uint32_t string_read(core_state *c, uint64_t addr, uint8_t *out)
{
    size_t n = 0;
    int none = addr == 0;
    while (!none && n <= NT_STRING_LIMIT) {
        uint64_t at = addr + n;
        uint64_t chunk = 0x1000 - (at & 0xfff);
        if (chunk > NT_STRING_LIMIT + 1)
            chunk = NT_STRING_LIMIT + 1;
        if (c->ops->mem_read(c->port, at, out + n, chunk) != 0) {
            none = 1;
            break;
        }
        uint8_t *nul = memchr(out + n, 0, chunk);
        if (nul) {
            n = (size_t)(nul - out);
            break;
        }
        n += chunk;
    }
    if (n > NT_STRING_LIMIT + 1)
        n = NT_STRING_LIMIT + 1;
    return none ? NT_STRING_NONE : (uint32_t)n;
}

/* word index's string at addr appended to the string area: index, length (NT_STRING_NONE:
 * none), bytes (the area has room for every word of every event the buffer holds:
 * strings_room) */
static void string_put(core_state *c, uint32_t index, uint64_t addr)
{
    uint8_t out[2 * (NT_STRING_LIMIT + 1)];
    uint32_t len = string_read(c, addr, out);
    uint8_t *p = c->strings + c->strings_len;
    p[0] = (uint8_t)index;
    p[1] = (uint8_t)len;
    p[2] = (uint8_t)(len >> 8);
    if (len != NT_STRING_NONE)
        memcpy(p + 3, out, len);
    c->strings_len += 3 + (len != NT_STRING_NONE ? len : 0);
    c->strings_copied++;
}

/* the strings of the event's words in mask (bit i: regs[i], masked to a word), counted in
 * its nregs */
static void event_strings(core_state *c, nt_event *e, uint32_t mask)
{
    uint64_t word_mask = core_word_mask(c);
    uint32_t count = 0;
    if (!mask || !c->strings)
        return;
    for (uint32_t i = 0; i < NT_MAX_REGS; i++) {
        if (mask >> i & 1) {
            string_put(c, i, e->regs[i] & word_mask);
            count++;
        }
    }
    e->nregs |= count << NT_STRINGS_SHIFT;
}

/* the copies of an event's string words in mask for the record writer (uw_event.strings) */
typedef struct {
    uw_strings list;
    uint8_t bytes[NT_MAX_REGS][2 * (NT_STRING_LIMIT + 1)];
} core_copies;

static const uw_strings *writer_strings(core_state *c, core_copies *cp, uint32_t mask,
                                        const uint64_t *regs)
{
    uint64_t word_mask = core_word_mask(c);
    if (!mask)
        return NULL;
    cp->list.mask = mask;
    for (uint32_t i = 0; i < NT_MAX_REGS; i++) {
        if (mask >> i & 1) {
            cp->list.len[i] = (uint16_t)string_read(c, regs[i] & word_mask, cp->bytes[i]);
            cp->list.bytes[i] = cp->bytes[i];
        }
    }
    return &cp->list;
}

/* the record writer took an event: the strings it wrote are copies made */
static void writer_copied(core_state *c, const uw_event *e)
{
    if (e->strings) {
        uint64_t n = (uint64_t)__builtin_popcount(e->strings->mask);
        c->strings_copied += n;
        c->strings_written += n;
    }
}

/* ------------------------------------------------------------------ records */
int core_call_words(core_state *c, uint64_t entry_sp, uint64_t *regs, uint32_t a0, uint32_t a1,
                    uint32_t w0, uint32_t w1)
{
    uint8_t stack[8 * NT_MAX_REGS];
    uint32_t n = c->cfg.word;
    if (a1 > a0)
        c->ops->regs_read(c->port, c->cfg.arg_regs + a0, regs + a0, a1 - a0);
    if (w1 <= w0)
        return 0;
    if (c->ops->mem_read(c->port,
                         (entry_sp + c->cfg.stack_offset + (uint64_t)w0 * n) & core_word_mask(c),
                         stack + w0 * n, (uint64_t)(w1 - w0) * n) != 0)
        return -1;
    for (uint32_t i = w0; i < w1; i++)
        regs[c->cfg.n_args + i] = core_word_from(c, stack + i * n);
    return 0;
}

int core_offer(core_state *c, uint32_t call, uint64_t time, uint64_t site, uint64_t target,
               uint64_t sp, uint64_t after, const uint64_t *regs, uint32_t string_mask)
{
    core_copies copies;
    if (!c->writer || !uw_enabled(c->writer) || c->n_events != 0)
        return 0;
    uw_event ev = {(int)call, time, site, target, sp, after, regs,
                   writer_strings(c, &copies, string_mask, regs)};
    if (!uw_take(c->writer, &ev, c->drain))
        return 0;
    writer_copied(c, &ev);
    c->written++;
    return 1;
}

nt_event *core_record(core_state *c, uint32_t kind, uint64_t time, uint64_t site,
                      uint64_t target, uint64_t sp, uint64_t after, uint64_t entry_sp,
                      const uint64_t *regs, uint32_t nregs, uint32_t string_mask)
{
    nt_event *e = core_event(c);
    if (!e)
        return NULL;
    e->kind = kind;
    e->time = time;
    e->site = site;
    e->target = target;
    e->sp = sp;
    e->fallthrough = after;
    e->entry_sp = entry_sp;
    e->nregs = nregs;
    memcpy(e->regs, regs, nregs * sizeof *regs);
    event_strings(c, e, string_mask);
    return e;
}

int core_writer_words(core_state *c, uint64_t target, uint64_t sp, uint64_t after,
                      uint32_t *n_args, uint32_t *n_stack)
{
    if (!c->writer || !uw_enabled(c->writer) || c->n_events != 0)
        return 0;
    int words = uw_call_words(c->writer, target, sp, after, c->drain);
    if (words < 0)
        return 0;
    if ((uint32_t)words < *n_args)
        *n_args = (uint32_t)words;
    if ((uint32_t)words < c->cfg.n_args + *n_stack)
        *n_stack = (uint32_t)words > c->cfg.n_args ? words - c->cfg.n_args : 0;
    return 1;
}

int core_switch_jump(core_state *c, uint64_t site, uint64_t target, uint64_t lo, uint64_t hi)
{
    return c->strict && addrpairs_has(&c->switch_jumps, site, target)
           && ns_jump(c->strict, site, target, lo, hi);
}

/* a jump from site to target, learnt to go to another armed function's entry (`tails`),
 * under lazy cleanup: recorded for TailRule.is_tail to decide — by the writer
 * (uw_take_tail, which leaves it to Python when the running function is target already),
 * else as an EV_TAIL record drained in order.  The arguments as the callee sees them, at
 * entry_sp (a jump moves no sp); sp: at the site.  1 if recorded, 0: Python's */
int core_tail_event(core_state *c, uint64_t site, uint64_t target, uint64_t sp,
                    uint64_t entry_sp, uint64_t time, uint64_t lo, uint64_t hi)
{
    uint64_t regs[NT_MAX_REGS] = {0};
    if (!addrpairs_has(&c->tails, site, target))
        return 0;
    if (core_call_words(c, entry_sp, regs, 0, 0, 0, c->cfg.n_stack) != 0)
        return 0;
    if (c->strict) {  /* strict cleanup: the jump switches the armed function (room first: a
                         switch made is never handed to Python) */
        if (!room(c) || !ns_jump(c->strict, site, target, lo, hi))
            return 0;
    }
    c->ops->regs_read(c->port, c->cfg.arg_regs, regs, c->cfg.n_args);
    uint32_t strings = core_string_mask(c, target);
    if (c->writer && uw_enabled(c->writer) && c->n_events == 0) {
        core_copies copies;
        uw_event ev = {0, time, site, target, sp, 0, regs,
                       writer_strings(c, &copies, strings, regs)};
        if (uw_take_tail(c->writer, &ev, c->drain)) {
            writer_copied(c, &ev);
            c->written++;
            c->tail_jumps++;
            return 1;
        }
    }
    if (!core_record(c, EV_TAIL, time, site, target, sp, 0, entry_sp, regs,
                     c->cfg.n_args + c->cfg.n_stack, strings))
        return 0;
    c->tail_jumps++;
    core_hand_over(c);  /* the writer is on but left it to Python: Python takes it now */
    return 1;
}

/* ------------------------------------------------------------------ one trap */
/* (the body is coretrap.h's, which each port also compiles with its own operations) */
int core_trap(core_state *c, core_site *site) { return core_trap_with(c, c->ops, site); }
