/* emutrace native hot path: Unicorn hooks for the lazy call-site breakpoint algorithm (int3).
 *
 * Loaded with ctypes (emutrace/native/__init__.py).  It never links against libunicorn: the
 * Unicorn functions it calls are handed in as pointers taken from the libunicorn.so.2 the
 * Python binding loaded (unicorn.unicorn_py3.unicorn.uclib), so there is exactly one Unicorn
 * instance.  The GIL is released while emu_start runs: nothing here touches a Python object.
 * Python is entered only through the callbacks in nt_config (ctypes CFUNCTYPE trampolines,
 * which take the GIL themselves): a trap at a site C cannot finish, a block while the Python
 * side asked for attention, the instruction count of a block seen for the first time, and a
 * full event buffer.
 *
 * Per trap at an armed site (UC_HOOK_INTR): look the site up (open addressing, addr → site),
 * simulate the displaced call or return as its op says (uprobes' simulate-insn: push or link
 * the return address and jump; pop or read the link register), write one fixed-size event
 * record with the registers the Python side turns into values, continue.  Per block
 * (UC_HOOK_BLOCK): add the block's instruction count (a table keyed by (addr, size)).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <unicorn/unicorn.h>

#include "abi.h"
#include "addrset.h"
#include "cond.h"
#include "entryprobe.h"
#include "strict.h"
#include "ufwrite.h"

#define NT_SITE_READS (4 + NT_MAX_REGS)  /* sp, guard, condition, source; arguments or values */

/* one of discovery's size maps (sweep.c: one byte per code byte, an instruction's size at
 * its first, 0xFF where nothing decodes, 0 not known), lent by Python (nt_size_map_add) */
#define NT_SIZE_MAPS 16
#define NT_UNDECODABLE 0xFF
typedef struct {
    uint64_t base, len;
    const uint8_t *sizes;
    uint32_t alt;
} nt_size_map;

#define NT_MAX_POPS 14  /* registers a RETURN loads below its target (ARM: r0-r12, lr) */

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
    /* the registers a trap here reads, in one uc_reg_read_batch (site_reads): sp first,
     * then guard, condition and source registers (when the site has them, at i_guard,
     * i_cond, i_src), then from i_val a call's argument registers or a return's value
     * registers (i_ret, i_ret_hi: the return value and its high half, when the ABI has them) */
    int32_t reads[NT_SITE_READS];
    uint8_t n_reads, i_guard, i_cond, i_src, i_val, i_ret, i_ret_hi;
    /* nt_site_extra (where a code address's bit 0 selects the instruction set, ARM):
     * bits the next instruction's address gets as PC or link (the site's own mode), the
     * test a target read from a register or the stack must pass (ttest, bits ta, tb), the
     * mask of a C_MASK_ZERO guard, and the registers a RETURN pops below its target */
    uint8_t after_bits, ttest, ta, tb;
    uint64_t gmask;
    uint8_t n_pops;
    int32_t pops[NT_MAX_POPS];
} nt_site;

ADDRTAB_BY_ADDR(nt_sites, nt_site)

/* a translated block's key in the block tables (this one and the site hooks' hs_blocks) */
typedef struct {
    uint64_t addr;
    uint32_t size;
} block_key;
#define BLOCK_INDEX(k, cap) (addr_mix((k).addr ^ ((uint64_t)(k).size << 52)) & ((cap) - 1))

typedef struct {
    uint64_t key;   /* addr; 0: empty */
    uint32_t size;
    uint32_t count;
} nt_block;

#define NT_BLOCK_USED(e) ((e)->key != 0)
#define NT_BLOCK_MATCH(e, k) ((e)->key == (k).addr && (e)->size == (k).size)
#define NT_BLOCK_KEYOF(e) ((block_key){(e)->key, (e)->size})
#define NT_BLOCK_SETKEY(e, k) ((e)->key = (k).addr, (e)->size = (k).size)
ADDRTAB(nt_blocks, nt_block, block_key, BLOCK_INDEX, NT_BLOCK_USED, NT_BLOCK_MATCH,
        NT_BLOCK_KEYOF, NT_BLOCK_SETKEY)

typedef struct {
    uc_engine *uc;
    nt_config cfg;
    nt_sites sites;
    addrset callees;  /* call targets whose function is armed and whose arguments C reads */
    addrpairs inside; /* (jump site, target) pairs that record nothing (a jump inside its
                         function, or to code that is no function entry) */
    addrpairs switch_jumps;  /* strict cleanup: (jump site, target) pairs into another
                             * function that record nothing and switch the armed function */
    addrpairs tails;  /* (jump site, target) pairs to another armed function's entry whose
                        arguments C saves: a tail call unless it is the running function */
    addrmap string_args;  /* call targets (and entry probes) -> snapshot words that are
                              `char *` values, copied at the event (copy_string) */
    addrset string_returns; /* return sites whose value is a `char *`, copied as well */
    uint8_t *strings;      /* the copies of the buffered events, in order (string_put) */
    size_t strings_len, strings_cap;
    uint64_t strings_copied;
    uint64_t strings_written;  /* of those, the ones the record writer wrote */
    nt_blocks blocks;
    nt_event *events;
    uint32_t n_events;
    uint32_t attention;  /* the Python side wants every block hook */
    uint64_t time;       /* guest instructions executed (block counts) */
    uint64_t traps, simulated, slow_traps, slow_blocks;
    uw_state *writer;    /* the record writer (ufwrite.c), or NULL: every event to Python */
    uint64_t written;    /* events the writer took */
    uint64_t tail_jumps; /* jumps to a function entry C finished (EV_TAIL or the writer) */
    ns_state *strict;    /* strict cleanup (strict.c), or NULL: lazy */
    ep_state *entry;     /* the entry backend's probes (entryprobe.c), or NULL */
    uint64_t vals[NT_SITE_READS];  /* the last trap's register values (site->reads) */
    void *val_ptrs[NT_SITE_READS]; /* &vals[i], as uc_reg_read_batch takes them */
    nt_size_map size_maps[NT_SIZE_MAPS];
    uint32_t n_size_maps;
    nt_learned *learned;  /* block counts read from the size maps, for Python */
    size_t n_learned, learned_cap;
} nt_state;

/* ------------------------------------------------------------------ API for Python */
void nt_free(nt_state *s);

nt_state *nt_new(uc_engine *uc, const nt_config *cfg)
{
    nt_state *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->uc = uc;
    s->cfg = *cfg;
    for (int i = 0; i < NT_SITE_READS; i++)
        s->val_ptrs[i] = &s->vals[i];
    if (s->cfg.n_args > NT_MAX_REGS)
        s->cfg.n_args = NT_MAX_REGS;
    if (s->cfg.n_stack > NT_MAX_REGS - s->cfg.n_args)
        s->cfg.n_stack = NT_MAX_REGS - s->cfg.n_args;
    if (s->cfg.buffer_events == 0)
        s->cfg.buffer_events = 4096;
    if (s->cfg.code_mask == 0)
        s->cfg.code_mask = ~0ULL;
    int tables = nt_sites_init(&s->sites, 1024) | nt_blocks_init(&s->blocks, 4096)
                 | addrset_init(&s->callees, 1024) | addrset_init(&s->string_returns, 256)
                 | addrpairs_init(&s->inside, 1024) | addrpairs_init(&s->tails, 256)
                 | addrpairs_init(&s->switch_jumps, 256);
    s->events = calloc(s->cfg.buffer_events, sizeof *s->events);
    if (tables != 0 || !s->events) {
        nt_free(s);
        return NULL;
    }
    return s;
}

void nt_free(nt_state *s)
{
    if (!s)
        return;
    nt_sites_free(&s->sites);
    nt_blocks_free(&s->blocks);
    addrset_free(&s->callees);
    addrpairs_free(&s->inside);
    addrpairs_free(&s->tails);
    addrpairs_free(&s->switch_jumps);
    free(s->events);
    addrmap_free(&s->string_args);
    addrset_free(&s->string_returns);
    free(s->strings);
    free(s->learned);
    free(s);
}

/* a size map of the code at base (len bytes) in instruction set alt, which Python keeps
 * alive and unresized until nt_free: 0, or -1 when NT_SIZE_MAPS are lent already */
int nt_size_map_add(nt_state *s, uint64_t base, uint64_t len, const uint8_t *sizes,
                    uint32_t alt)
{
    if (s->n_size_maps >= NT_SIZE_MAPS)
        return -1;
    s->size_maps[s->n_size_maps++] = (nt_size_map){base, len, sizes, alt};
    return 0;
}

size_t nt_learned_count(const nt_state *s) { return s->n_learned; }

const nt_learned *nt_learned_at(const nt_state *s) { return s->learned; }

static uint8_t site_read(nt_site *p, int32_t reg)
{
    p->reads[p->n_reads] = reg;
    return p->n_reads++;
}

/* which registers a trap at p reads (nt_site.reads): fixed by its op and tests */
static void site_plan_reads(const nt_config *c, nt_site *p)
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

/* a site C finishes on its own (op OP_CALL or OP_RETURN), or OP_NONE: Python's */
int nt_site_set(nt_state *s, uint64_t addr, uint32_t op, uint64_t target, uint64_t after,
                int32_t src_reg, int32_t link_reg, uint32_t release, uint32_t fast,
                uint32_t conditional, uint32_t cond, int32_t cond_reg, uint32_t ca,
                uint32_t cb, uint32_t cc, uint32_t clear_low, uint32_t guard,
                int32_t guard_reg, uint32_t ga, uint32_t gb)
{
    nt_site *p = addr ? nt_sites_put(&s->sites, addr) : NULL;
    if (!p)
        return -1;
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
    site_plan_reads(&s->cfg, p);
    return 0;
}

/* what nt_site_set leaves at its defaults (nt_site: after_bits ... pops), after it */
int nt_site_extra(nt_state *s, uint64_t addr, uint32_t after_bits, uint32_t ttest, uint32_t ta,
                  uint32_t tb, uint64_t gmask, uint32_t n_pops, const int32_t *pops)
{
    nt_site *p = nt_sites_find(&s->sites, addr);
    if (!p || n_pops > NT_MAX_POPS)
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

void nt_site_active(nt_state *s, uint64_t addr, uint32_t active)
{
    nt_site *p = nt_sites_find(&s->sites, addr);
    if (p)
        p->active = (uint8_t)active;
}

int nt_callee_add(nt_state *s, uint64_t target)
{
    return target ? addrset_add(&s->callees, target) : 0;
}

/* the string area, made when the first string value is told: room for every word of
 * every event the buffer holds (index, length, STRING_LIMIT + 1 bytes each) */
static int strings_room(nt_state *s)
{
    if (s->strings)
        return 0;
    s->strings_cap = (size_t)s->cfg.buffer_events * NT_MAX_REGS * (3 + NT_STRING_LIMIT + 1);
    s->strings = malloc(s->strings_cap);
    return s->strings ? 0 : -1;
}

/* the snapshot words (bit i: regs[i]) of a call to target (or of an entry probe at target)
 * that are `char *` values: their strings are copied at the event */
int nt_string_args(nt_state *s, uint64_t target, uint32_t mask)
{
    if (strings_room(s) != 0)
        return -1;
    return addrmap_set(&s->string_args, target, (int32_t)(mask & ((1u << NT_MAX_REGS) - 1)));
}

/* a return site whose value is a `char *`: its string is copied at the event */
int nt_string_return(nt_state *s, uint64_t site)
{
    if (strings_room(s) != 0)
        return -1;
    return site ? addrset_add(&s->string_returns, site) : 0;
}

/* a jump from site to target records nothing and arms nothing (int3.py _resolve) */
int nt_inside_add(nt_state *s, uint64_t site, uint64_t target)
{
    return addrpairs_add(&s->inside, site, target);
}

/* a jump from site to target goes to the entry of another armed function whose arguments C
 * saves (fastpath.py FastSites._learn_jump): C records it as int3.py _transfer's jump case
 * does under lazy cleanup (a TailCall when TailRule.is_tail holds; arming is a no-op) */
int nt_tail_add(nt_state *s, uint64_t site, uint64_t target)
{
    return addrpairs_add(&s->tails, site, target);
}

/* strict cleanup: a jump from site to target enters another function that C knows and
 * records nothing (target is no function entry: fastpath.py FastSites._learn_jump), so C
 * switches the armed function as int3.py _transfer's jump case does (strict.c ns_jump) */
int nt_switch_jump_add(nt_state *s, uint64_t site, uint64_t target)
{
    return addrpairs_add(&s->switch_jumps, site, target);
}

/* forget every pair that goes to target (it became a function entry: a jump there may now
 * be a tail call) */
int nt_inside_drop(nt_state *s, uint64_t target)
{
    addrpairs_drop_target(&s->inside, target);
    addrpairs_drop_target(&s->switch_jumps, target);
    return 0;
}

int nt_block_set(nt_state *s, uint64_t addr, uint32_t size, uint32_t count)
{
    nt_block *b = nt_blocks_put(&s->blocks, (block_key){addr, size});
    if (!b)
        return -1;
    b->count = count;
    return 0;
}

/* block counts known before the run (a program's store: Python's table of an earlier run),
 * n rows as nt_learned gives them, into the block table: such a block is never asked of
 * Python; 0, or -1 when out of memory (the rest are Python's to count) */
int nt_counts_preload(nt_state *s, const nt_learned *rows, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (nt_block_set(s, rows[i].addr, rows[i].size, rows[i].count) != 0)
            return -1;
    return 0;
}

void nt_set_attention(nt_state *s, uint32_t on) { s->attention = on; }

/* strict cleanup: calls and returns C finishes switch the armed function (strict.c) */
void nt_set_strict(nt_state *s, ns_state *ns)
{
    s->strict = ns;
    ns_bind(ns, s, (ns_active_fn)nt_site_active);
}
void nt_set_writer(nt_state *s, uw_state *writer) { s->writer = writer; }
void nt_set_entry(nt_state *s, ep_state *entry) { s->entry = entry; }
uint64_t nt_get_time(const nt_state *s) { return s->time; }
void nt_set_time(nt_state *s, uint64_t t) { s->time = t; }

/* counters: 0 traps, 1 simulated, 2 traps passed to Python, 3 blocks passed to Python,
 * 4 events the record writer took, 5 jumps to a function entry C finished, 6 strings C
 * copied, 7 of those the record writer wrote */
uint64_t nt_counter(const nt_state *s, uint32_t which)
{
    switch (which) {
    case 0: return s->traps;
    case 1: return s->simulated;
    case 2: return s->slow_traps;
    case 3: return s->slow_blocks;
    case 4: return s->written;
    case 5: return s->tail_jumps;
    case 6: return s->strings_copied;
    case 7: return s->strings_written;
    default: return 0;
    }
}

/* the event buffer: Python reads n records from events, then calls nt_events_clear */
const nt_event *nt_events(const nt_state *s) { return s->events; }
uint32_t nt_events_count(const nt_state *s) { return s->n_events; }
void nt_events_clear(nt_state *s)
{
    s->n_events = 0;
    s->strings_len = 0;
}
const uint8_t *nt_strings(const nt_state *s) { return s->strings; }
uint64_t nt_strings_len(const nt_state *s) { return s->strings_len; }
uint32_t nt_event_size(void) { return (uint32_t)sizeof(nt_event); }

/* ------------------------------------------------------------------ the hooks */
static inline uint64_t rd(nt_state *s, int reg)
{
    uint64_t v = 0;  /* 32-bit registers fill the low half (little-endian host) */
    s->cfg.reg_read(s->uc, reg, &v);
    return v;
}

static inline void wr(nt_state *s, int reg, uint64_t v) { s->cfg.reg_write(s->uc, reg, &v); }

static uint64_t word_from(const nt_state *s, const uint8_t *b)
{
    uint64_t v = 0;
    uint32_t n = s->cfg.word;
    for (uint32_t i = 0; i < n; i++)
        v |= (uint64_t)b[s->cfg.big_endian ? n - 1 - i : i] << (8 * i);
    return v;
}

static void word_to(const nt_state *s, uint64_t v, uint8_t *b)
{
    uint32_t n = s->cfg.word;
    for (uint32_t i = 0; i < n; i++)
        b[s->cfg.big_endian ? n - 1 - i : i] = (uint8_t)(v >> (8 * i));
}

static nt_event *next_event(nt_state *s)
{
    if (s->n_events >= s->cfg.buffer_events) {
        s->cfg.py_drain();  /* takes the GIL; the buffer is empty afterwards */
        if (s->n_events >= s->cfg.buffer_events)
            return NULL;
    }
    return &s->events[s->n_events++];
}

/* ------------------------------------------------------------------ string values */
/* The C string at addr as ArgReader.string reads it (backends/args.py): chunks of at most
 * STRING_LIMIT + 1 bytes that never cross a page, up to the NUL or STRING_LIMIT + 1 bytes;
 * NULL, or any chunk unreadable: none.  Its bytes go to out (room for 2 * (STRING_LIMIT +
 * 1)); the length, or NT_STRING_NONE. */
static uint32_t string_read(nt_state *s, uint64_t addr, uint8_t *out)
{
    size_t n = 0;
    int none = addr == 0;
    while (!none && n <= NT_STRING_LIMIT) {
        uint64_t at = addr + n;
        uint64_t chunk = 0x1000 - (at & 0xfff);
        if (chunk > NT_STRING_LIMIT + 1)
            chunk = NT_STRING_LIMIT + 1;
        if (s->cfg.mem_read(s->uc, at, out + n, chunk) != UC_ERR_OK) {
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
static void string_put(nt_state *s, uint32_t index, uint64_t addr)
{
    uint8_t out[2 * (NT_STRING_LIMIT + 1)];
    uint32_t len = string_read(s, addr, out);
    uint8_t *p = s->strings + s->strings_len;
    p[0] = (uint8_t)index;
    p[1] = (uint8_t)len;
    p[2] = (uint8_t)(len >> 8);
    if (len != NT_STRING_NONE)
        memcpy(p + 3, out, len);
    s->strings_len += 3 + (len != NT_STRING_NONE ? len : 0);
    s->strings_copied++;
}

/* the record writer took an event: the strings it wrote are copies made */
static void writer_copied(nt_state *s, const uw_event *e)
{
    if (e->strings) {
        uint64_t n = (uint64_t)__builtin_popcount(e->strings->mask);
        s->strings_copied += n;
        s->strings_written += n;
    }
}

/* the copies of an event's string words in mask for the record writer (uw_event.strings),
 * made in copies; NULL when mask is empty */
typedef struct {
    uw_strings list;
    uint8_t bytes[NT_MAX_REGS][2 * (NT_STRING_LIMIT + 1)];
} nt_copies;

static const uw_strings *writer_strings(nt_state *s, nt_copies *c, uint32_t mask,
                                        const uint64_t *regs)
{
    uint64_t word_mask = s->cfg.word == 8 ? ~0ULL : 0xffffffffULL;
    if (!mask)
        return NULL;
    c->list.mask = mask;
    for (uint32_t i = 0; i < NT_MAX_REGS; i++) {
        if (mask >> i & 1) {
            c->list.len[i] = (uint16_t)string_read(s, regs[i] & word_mask, c->bytes[i]);
            c->list.bytes[i] = c->bytes[i];
        }
    }
    return &c->list;
}

/* the string words of a call to target (or an entry probe at it): nt_string_args's mask */
static uint32_t string_mask(const nt_state *s, uint64_t target)
{
    int32_t mask = addrmap_get(&s->string_args, target);
    return mask > 0 ? (uint32_t)mask : 0;
}

/* the strings of the event's words in mask (bit i: regs[i], masked to a word), counted in
 * its nregs */
static void event_strings(nt_state *s, nt_event *e, uint32_t mask)
{
    uint64_t word_mask = s->cfg.word == 8 ? ~0ULL : 0xffffffffULL;
    uint32_t count = 0;
    if (!mask || !s->strings)
        return;
    for (uint32_t i = 0; i < NT_MAX_REGS; i++) {
        if (mask >> i & 1) {
            string_put(s, i, e->regs[i] & word_mask);
            count++;
        }
    }
    e->nregs |= count << NT_STRINGS_SHIFT;
}

/* may C finish the site at all (the op's guard)? */
static int guard_holds(const nt_state *s, const nt_site *site)
{
    uint64_t v = s->vals[site->i_guard];
    if (site->guard == C_MASK_ZERO)
        return (v & site->gmask) == 0;
    return test_holds(site->guard, v, site->ga, site->gb, 0) == 1;
}

/* does a target read from a register or the stack pass the site's test (interworking)? */
static int target_ok(const nt_site *site, uint64_t raw)
{
    return test_holds(site->ttest, raw, site->ta, site->tb, 0) == 1;
}

static int cond_holds(const nt_state *s, const nt_site *site)
{
    return test_holds(site->cond, s->vals[site->i_cond], site->ca, site->cb, site->cc);
}

/* the site's registers from..to (site->reads' order) into s->vals: one Unicorn call */
static void site_reads(nt_state *s, const nt_site *site, uint32_t from, uint32_t to)
{
    if (to <= from)
        return;
    memset(s->vals + from, 0, (to - from) * sizeof s->vals[0]);  /* 32-bit: the low half */
    s->cfg.reg_read_batch(s->uc, (int *)site->reads + from, s->val_ptrs + from, (int)(to - from));
}

/* a call's snapshot (nt_event.regs): the argument registers, then the stack words (the
 * first n_args and n_stack of them: those read) */
static void call_snapshot(const nt_state *s, const nt_site *site, const uint8_t *stack,
                          uint32_t n_args, uint32_t n_stack, uint64_t *regs)
{
    for (uint32_t i = 0; i < n_args; i++)
        regs[i] = s->vals[site->i_val + i];
    for (uint32_t i = 0; i < n_stack; i++)
        regs[s->cfg.n_args + i] = word_from(s, stack + i * s->cfg.word);
}

/* the event just simulated, to the record writer: 1 if it took it (no record for Python) */
static int offer(nt_state *s, const nt_site *site, uint64_t target, uint64_t sp,
                 const uint8_t *stack, uint32_t n_args, uint32_t n_stack)
{
    uint64_t regs[NT_MAX_REGS] = {0};
    nt_copies copies;
    uw_event ev = {site->op == OP_CALL, s->time, site->addr, target, sp, site->after, regs,
                   NULL};
    if (site->op == OP_CALL) {  /* as the record below: registers, then the stack words */
        call_snapshot(s, site, stack, n_args, n_stack, regs);
        ev.strings = writer_strings(s, &copies, string_mask(s, target), regs);
    } else if (s->cfg.ret_reg >= 0) {
        regs[0] = s->vals[site->i_ret];
        ev.strings = writer_strings(s, &copies, addrset_has(&s->string_returns, site->addr),
                                    regs);
    }
    if (!uw_take(s->writer, &ev, s->cfg.py_drain))
        return 0;
    writer_copied(s, &ev);
    s->written++;
    return 1;
}

/* the stack words a call's snapshot holds, as the callee will see them (above the pushed
 * return address), from word `from` on; 0 if they cannot be read */
static int read_stack_args(nt_state *s, uint64_t entry_sp, uint8_t *stack, uint32_t from,
                           uint32_t to)
{
    uint64_t mask = s->cfg.word == 8 ? ~0ULL : 0xffffffffULL;
    if (to <= from)
        return 1;
    return s->cfg.mem_read(s->uc, (entry_sp + s->cfg.stack_offset + from * s->cfg.word) & mask,
                           stack + from * s->cfg.word,
                           (uint64_t)(to - from) * s->cfg.word) == UC_ERR_OK;
}

/* the pops a RETURN made: registers from the words below its target; a popped return
 * register is the value the return reports (the reference reads it after the simulation) */
static void write_pops(nt_state *s, nt_site *site, const uint8_t *words)
{
    for (uint32_t i = 0; i < site->n_pops; i++) {
        uint64_t v = word_from(s, words + i * s->cfg.word);
        wr(s, site->pops[i], v);
        if (site->pops[i] == s->cfg.ret_reg)
            s->vals[site->i_ret] = v;
        else if (site->pops[i] == s->cfg.ret_hi_reg)
            s->vals[site->i_ret_hi] = v;
    }
}

/* a jump from site to target, learnt to go to another armed function's entry (`tails`),
 * under lazy cleanup: recorded for TailRule.is_tail to decide — by the writer
 * (uw_take_tail, which leaves it to Python when the running function is target already),
 * else as an EV_TAIL record drained in order.  The arguments as the callee sees them, at
 * entry_sp (a jump moves no sp); sp: at the site.  1 if recorded, 0: Python's */
/* strict cleanup: a jump taken into another function that records nothing, switched here
 * (1) or left to Python (0).  [lo, hi): the block running now, when a site hook's transfer
 * is resolved at its start (strict.c declines to write into it) */
static int switch_jump(nt_state *s, uint64_t site, uint64_t target, uint64_t lo, uint64_t hi)
{
    return s->strict && addrpairs_has(&s->switch_jumps, site, target)
           && ns_jump(s->strict, site, target, lo, hi);
}

static int tail_event(nt_state *s, uint64_t site, uint64_t target, uint64_t sp,
                      uint64_t entry_sp, uint64_t time, uint64_t lo, uint64_t hi)
{
    uint64_t mask = s->cfg.word == 8 ? ~0ULL : 0xffffffffULL;
    uint8_t stack[8 * NT_MAX_REGS];
    uint64_t regs[NT_MAX_REGS] = {0};
    if (!addrpairs_has(&s->tails, site, target))
        return 0;
    if (s->cfg.n_stack
        && s->cfg.mem_read(s->uc, (entry_sp + s->cfg.stack_offset) & mask, stack,
                           (uint64_t)s->cfg.n_stack * s->cfg.word) != UC_ERR_OK)
        return 0;
    if (s->strict) {  /* strict cleanup: the jump switches the armed function (room first: a
                         switch made is never handed to Python) */
        if (s->n_events >= s->cfg.buffer_events)
            s->cfg.py_drain();
        if (s->n_events >= s->cfg.buffer_events || !ns_jump(s->strict, site, target, lo, hi))
            return 0;
    }
    for (uint32_t i = 0; i < s->cfg.n_args; i++)
        regs[i] = rd(s, s->cfg.arg_regs[i]);
    for (uint32_t i = 0; i < s->cfg.n_stack; i++)
        regs[s->cfg.n_args + i] = word_from(s, stack + i * s->cfg.word);
    if (s->writer && uw_enabled(s->writer) && s->n_events == 0) {
        nt_copies copies;
        uw_event ev = {0, time, site, target, sp, 0, regs,
                       writer_strings(s, &copies, string_mask(s, target), regs)};
        if (uw_take_tail(s->writer, &ev, s->cfg.py_drain)) {
            writer_copied(s, &ev);
            s->written++;
            s->tail_jumps++;
            return 1;
        }
    }
    nt_event *e = next_event(s);
    if (!e)
        return 0;
    *e = (nt_event){0};
    e->kind = EV_TAIL;
    e->time = time;
    e->site = site;
    e->target = target;
    e->sp = sp;
    e->entry_sp = entry_sp;
    e->nregs = s->cfg.n_args + s->cfg.n_stack;
    memcpy(e->regs, regs, sizeof regs);
    event_strings(s, e, string_mask(s, target));
    s->tail_jumps++;
    /* the writer is on but left it to Python: Python takes it now (as fast_trap's) */
    if (s->writer && uw_enabled(s->writer))
        s->cfg.py_drain();
    return 1;
}

/* will the record writer take a call to target at sp (returning to after)?  Then only the
 * argument registers and stack words its record holds are read: *n_args and *n_stack
 * (all of them on entry) are cut to those */
static int writer_words(nt_state *s, uint64_t target, uint64_t sp, uint64_t after,
                        uint32_t *n_args, uint32_t *n_stack)
{
    if (!s->writer || !uw_enabled(s->writer) || s->n_events != 0)
        return 0;
    int words = uw_call_words(s->writer, target, sp, after, s->cfg.py_drain);
    if (words < 0)
        return 0;
    if ((uint32_t)words < *n_args)
        *n_args = (uint32_t)words;
    if ((uint32_t)words < s->cfg.n_args + *n_stack)
        *n_stack = (uint32_t)words > s->cfg.n_args ? words - s->cfg.n_args : 0;
    return 1;
}

static int fast_trap(nt_state *s, nt_site *site)
{
    uint64_t mask = s->cfg.word == 8 ? ~0ULL : 0xffffffffULL;
    uint64_t code = s->cfg.code_mask & mask;  /* a target's address bits (ARM: no bit 0) */
    uint64_t resume = site->after | site->after_bits;  /* the next instruction, as PC */
    /* a call's argument registers wait until it is known how many its record holds */
    site_reads(s, site, 0, site->op == OP_CALL ? site->i_val : site->n_reads);
    uint64_t sp = s->vals[0] & mask;
    uint64_t target, raw, entry_sp = sp;  /* raw: the PC written, target its code address */
    uint8_t buf[8 * (NT_MAX_POPS + 1)], stack[8 * NT_MAX_REGS];
    uint32_t n_stack = s->cfg.n_stack;  /* stack words read into stack */
    uint32_t n_args = s->cfg.n_args;    /* argument registers read into s->vals */
    int to_writer = 0;  /* the writer said it takes this call */
    if (!guard_holds(s, site))
        return 0;
    if (site->op == OP_CALL) {
        raw = site->target;
        if (site->src_reg >= 0) {
            raw = s->vals[site->i_src] & mask & site->reg_mask;
            if (!target_ok(site, raw))
                return 0;
        }
        target = raw & code;
        /* a call to the next instruction (PC thunk) records nothing; a callee not armed
         * yet needs discovery: both are Python's */
        if (target == site->after || !addrset_has(&s->callees, target))
            return 0;
        if (site->link_reg < 0)
            entry_sp = (sp - s->cfg.word) & mask;
        /* the writer takes the call: read only the stack words its record holds */
        to_writer = writer_words(s, target, sp, site->after, &n_args, &n_stack);
        site_reads(s, site, site->i_val, site->i_val + n_args);
        if (!read_stack_args(s, entry_sp, stack, 0, n_stack))
            return 0;
        if (s->events && s->n_events >= s->cfg.buffer_events) {
            s->cfg.py_drain();
            if (s->n_events >= s->cfg.buffer_events)
                return 0;
        }
        if (s->strict && !ns_call_ok(s->strict, site->addr, target))
            return 0;
        if (site->link_reg >= 0) {
            wr(s, site->link_reg, resume);
        } else {  /* the call pushes the return address (Intel SDM vol. 2, CALL) */
            word_to(s, site->after, buf);
            if (s->cfg.mem_write(s->uc, entry_sp, buf, s->cfg.word) != UC_ERR_OK)
                return 0;
            wr(s, s->cfg.sp_reg, entry_sp);
        }
    } else if (site->op == OP_RETURN && site->fast) {
        uint64_t top = sp;
        int taken = cond_holds(s, site);
        if (taken < 0 || (!taken && !site->conditional))
            return 0;
        if (!taken) {  /* a conditional return falling through records nothing */
            wr(s, s->cfg.pc_reg, resume);
            s->traps++;
            s->simulated++;
            return 1;
        }
        if (site->src_reg >= 0) {
            raw = s->vals[site->i_src] & mask & site->reg_mask;
        } else {  /* the return pops it (RET, RET imm16; ARM POP {..., pc}: after n_pops) */
            uint32_t words = site->n_pops + 1u;
            if (s->cfg.mem_read(s->uc, sp, buf, (uint64_t)words * s->cfg.word) != UC_ERR_OK)
                return 0;
            raw = word_from(s, buf + site->n_pops * s->cfg.word);
            top = (sp + words * s->cfg.word + site->release) & mask;
        }
        if (!target_ok(site, raw))
            return 0;
        target = raw & code;
        if (target == site->after)  /* a return to the next instruction records nothing */
            return 0;
        if (s->n_events >= s->cfg.buffer_events) {
            s->cfg.py_drain();
            if (s->n_events >= s->cfg.buffer_events)
                return 0;
        }
        if (s->strict && !ns_return_ok(s->strict, site->addr, target))
            return 0;
        if (site->n_pops)
            write_pops(s, site, buf);
        if (top != sp)
            wr(s, s->cfg.sp_reg, top);
    } else if (site->op == OP_JUMP) {
        int taken = cond_holds(s, site);
        if (taken < 0)
            return 0;
        raw = resume;
        if (taken && site->src_reg >= 0) {
            raw = s->vals[site->i_src] & mask & site->reg_mask;
            if (!target_ok(site, raw))
                return 0;
        } else if (taken) {
            raw = site->target;
        }
        target = raw & code;
        /* not taken, or a jump Python found inside the function (in the site's own
         * instruction set: a switch is Python's): nothing to record; a jump to another
         * armed function's entry: recorded first */
        if ((raw & ~code & mask) != site->after_bits)
            return 0;
        if (!((site->conditional && target == site->after)
              || addrpairs_has(&s->inside, site->addr, target))
            && !(taken && switch_jump(s, site->addr, target, 0, 0))
            && !(taken && tail_event(s, site->addr, target, sp, sp, s->time, 0, 0)))
            return 0;
        wr(s, s->cfg.pc_reg, raw);
        s->traps++;
        s->simulated++;
        return 1;
    } else {
        return 0;
    }
    wr(s, s->cfg.pc_reg, raw);
    s->traps++;
    s->simulated++;
    if (s->entry && site->op == OP_RETURN)  /* the open frames it leaves (entry.py) */
        ep_returned(s->entry, target);
    if (s->strict) {  /* the function switch of strict cleanup */
        if (site->op == OP_CALL)
            ns_call_commit(s->strict, site->addr, target);
        else
            ns_return_commit(s->strict, site->addr, target);
    }
    if (to_writer || (site->op != OP_CALL && s->writer && uw_enabled(s->writer)
                      && s->n_events == 0)) {
        if (offer(s, site, target, sp, stack, n_args, n_stack))
            return 1;
    }
    /* Python's event holds every argument (the writer, which said it takes the call, only
     * declines it when out of memory; stack words it cannot read then stay 0) */
    if (site->op == OP_CALL) {
        site_reads(s, site, site->i_val + n_args, site->i_val + s->cfg.n_args);
        if (!read_stack_args(s, entry_sp, stack, n_stack, s->cfg.n_stack))
            memset(stack + n_stack * s->cfg.word, 0, (s->cfg.n_stack - n_stack) * s->cfg.word);
    }
    nt_event *e = next_event(s);  /* room was made above */
    e->time = s->time;
    e->site = site->addr;
    e->target = target;
    e->sp = sp;
    e->fallthrough = site->after;
    e->entry_sp = entry_sp;
    if (site->op == OP_CALL) {  /* the arguments as the callee sees them at its entry */
        e->kind = EV_CALL;
        e->nregs = s->cfg.n_args + s->cfg.n_stack;
        call_snapshot(s, site, stack, s->cfg.n_args, s->cfg.n_stack, e->regs);
        event_strings(s, e, string_mask(s, target));
    } else {
        e->kind = EV_RETURN;
        e->nregs = 0;
        if (s->cfg.ret_reg >= 0)
            e->regs[e->nregs++] = s->vals[site->i_ret];
        if (s->cfg.ret_hi_reg >= 0)
            e->regs[e->nregs++] = s->vals[site->i_ret_hi];
        if (addrset_has(&s->string_returns, site->addr))
            event_strings(s, e, 1);
    }
    /* the writer is on but left this event to Python: Python takes it now, so that the
     * next events find an empty buffer (and the writer can take them) */
    if (s->writer && uw_enabled(s->writer))
        s->cfg.py_drain();
    return 1;
}

/* an entry probe's call (entryprobe.c decided it): the record, with the arguments the
 * callee sees now, at its entry (stack words it cannot read stay 0, as fast_trap's) */
static void entry_call(nt_state *s, const ep_call *c)
{
    uint8_t stack[8 * NT_MAX_REGS] = {0};
    uint64_t regs[NT_MAX_REGS] = {0};
    for (uint32_t i = 0; i < s->cfg.n_args; i++)
        regs[i] = rd(s, s->cfg.arg_regs[i]);
    read_stack_args(s, c->entry_sp, stack, 0, s->cfg.n_stack);
    for (uint32_t i = 0; i < s->cfg.n_stack; i++)
        regs[s->cfg.n_args + i] = word_from(s, stack + i * s->cfg.word);
    /* `record`, `run`: the record writer takes it when nothing buffered precedes it (as
     * fast_trap's `offer`: a call at the caller's sp, returning to ra) */
    if (s->writer && uw_enabled(s->writer) && s->n_events == 0) {
        nt_copies copies;
        uw_event ev = {1, s->time, c->ra, c->target, c->call_sp, c->ra, regs,
                       writer_strings(s, &copies, string_mask(s, c->target), regs)};
        if (uw_take(s->writer, &ev, s->cfg.py_drain)) {
            writer_copied(s, &ev);
            s->written++;
            return;
        }
    }
    nt_event *e = next_event(s);  /* room was made before ep_trap */
    if (!e)
        return;
    *e = (nt_event){0};
    e->kind = EV_CALL;
    e->time = s->time;
    e->site = c->ra;
    e->target = c->target;
    e->sp = c->call_sp;
    e->fallthrough = c->ra;
    e->entry_sp = c->entry_sp;
    e->nregs = s->cfg.n_args + s->cfg.n_stack;
    memcpy(e->regs, regs, sizeof regs);
    event_strings(s, e, string_mask(s, c->target));
    if (s->writer && uw_enabled(s->writer))  /* as fast_trap: Python takes it now */
        s->cfg.py_drain();
}

/* an entry probe C finishes (1): recorded if a call, stepped over; one instruction taken
 * off the time, as int3.py's fall-back does (the re-run block counts it again) */
static int entry_trap(nt_state *s, uint64_t addr)
{
    ep_call call;
    if (s->n_events >= s->cfg.buffer_events) {
        s->cfg.py_drain();
        if (s->n_events >= s->cfg.buffer_events)
            return 0;
    }
    int kind = ep_trap(s->entry, addr, &call);
    if (kind == EP_PYTHON)
        return 0;
    if (kind == EP_CALL)
        entry_call(s, &call);
    s->time -= 1;
    return 1;
}

void nt_on_intr(uc_engine *uc, uint32_t intno, void *user_data)
{
    nt_state *s = user_data;
    (void)uc;
    if (intno == s->cfg.bp_intno) {
        uint64_t addr = rd(s, s->cfg.pc_reg) - s->cfg.pc_after;
        nt_site *site = nt_sites_find(&s->sites, addr);
        s->time += s->cfg.bp_uncounted;  /* (as int3.py `_on_trap` counts the site) */
        if (site && site->active && site->op != OP_NONE && fast_trap(s, site))
            return;
        if (s->entry && !s->attention && entry_trap(s, addr))
            return;  /* (a step-over: the re-run counts the instruction, as in entry.py) */
        s->time -= s->cfg.bp_uncounted;  /* Python counts it itself */
        s->slow_traps++;
    }
    s->cfg.py_intr(intno);  /* syscalls, faults, and traps Python finishes */
}

/* the instructions of the block [addr, addr + size) by a size map, as sweep.c `count`
 * reads one (past an undecodable spot by the alignment): 1 and *count, or 0 where the map
 * does not know every one (Python decodes them) */
static int count_from_map(nt_state *s, uint64_t addr, uint32_t size, uint32_t *count)
{
    uint32_t alt = s->cfg.alt_reg >= 0 && (rd(s, s->cfg.alt_reg) & s->cfg.alt_bit) != 0;
    for (uint32_t i = 0; i < s->n_size_maps; i++) {
        const nt_size_map *m = &s->size_maps[i];
        if (m->alt != alt || addr < m->base || addr - m->base >= m->len)
            continue;
        uint32_t align = alt ? s->cfg.alt_align : s->cfg.align, n = 0;
        for (uint64_t at = addr; at < addr + size; n++) {
            uint8_t v = at - m->base < m->len ? m->sizes[at - m->base] : 0;
            if (v == 0 || align == 0)
                return 0;
            at += v == NT_UNDECODABLE ? align : v;
        }
        if (s->n_learned == s->learned_cap) {  /* (out of memory: only not learned) */
            size_t cap = s->learned_cap ? 2 * s->learned_cap : 1024;
            nt_learned *t = realloc(s->learned, cap * sizeof *t);
            if (t) {
                s->learned = t;
                s->learned_cap = cap;
            }
        }
        if (s->n_learned < s->learned_cap)
            s->learned[s->n_learned++] = (nt_learned){addr, size, alt, n, 0};
        *count = n;
        return 1;
    }
    return 0;
}

/* the instruction count of a block seen for the first time: its size in fixed-size
 * instructions, or read from discovery's size maps, or Python's (Decoder.block_count) */
static uint32_t block_count_of(nt_state *s, uint64_t addr, uint32_t size)
{
    uint32_t n = s->cfg.fixed_insn, count;
    if (n)
        return (size + n - 1) / n;
    return count_from_map(s, addr, size, &count) ? count : s->cfg.py_count(addr, size);
}

static void count_block(nt_state *s, uint64_t addr, uint32_t size)
{
    const nt_block *b = nt_blocks_find(&s->blocks, (block_key){addr, size});
    if (b) {
        s->time += b->count;
        return;
    }
    uint32_t count = block_count_of(s, addr, size);
    nt_block_set(s, addr, size, count);
    s->time += count;
}

void nt_on_block(uc_engine *uc, uint64_t addr, uint32_t size, void *user_data)
{
    nt_state *s = user_data;
    (void)uc;
    if (s->entry) {  /* an entry probe's step-over in progress (entryprobe.c) */
        int step = ep_block(s->entry, addr, s->attention);
        if (step == EP_RESTARTED)
            return;
        if (step == EP_COUNT) {
            count_block(s, addr, size);
            return;
        }
    }
    if (s->attention) {
        s->slow_blocks++;
        s->cfg.py_block(addr, size);
        return;
    }
    count_block(s, addr, size);
}

/* ------------------------------------------------------------------ hooked sites
 * Hook delivery (every site on MIPS, RISC-V: Unicorn's BREAK/EBREAK trap path is broken,
 * isa/mips.py and isa/riscv64.py; the sites of code found by descent elsewhere, int3.py
 * `_by_hook`, while nt_on_intr finishes the patched ones — this block hook replaces
 * nt_on_block and does its counting, so the two kinds of delivery coexist with one block
 * hook and one INTR hook): the reference puts one bounded Python code hook on each armed site
 * (int3.py `_on_site`: the site's transfer is pending from there, resolved at the next
 * block the CPU enters).  Bounded code hooks are scanned linearly on every hit (DESIGN §5),
 * so here one C block hook replaces them all: a table of armed sites, and per translated
 * block the site it holds.  A call, return or jump ends its block (after its delay slot on
 * MIPS), so when a block holding an armed site starts, its transfer is what the block ends
 * with; it is resolved where the reference resolves it, at the next block, whose address is
 * the target.  What the site hook would have read there: the time (the count after the
 * block, as the reference's block hook adds it at the block's start) and sp, which is sp at
 * the next block less what the site and its delay slot add to it (`sp_delta`, from the
 * ISA's `sp_effect`; a site whose effect is unknown keeps its Python hook).
 * C finishes what fast_trap finishes (a call to a known armed callee with integer
 * arguments, a return whose value is in the return registers, a jump not taken or known to
 * record nothing); everything else is handed to Python as the pending transfer the
 * reference's site hook would have left, with the block, to the reference's block code. */
typedef struct {
    uint64_t addr;      /* 0: empty */
    uint64_t after;     /* the fall-through, past any delay slot */
    int64_t sp_delta;   /* what the site and its delay slot add to sp */
    uint32_t size;      /* bytes of the site instruction */
    uint8_t op;         /* OP_CALL, OP_RETURN, OP_JUMP */
    uint8_t conditional, finish, fast, delay, active;
    uint8_t taken_only; /* the reference's hook runs only when the transfer is taken */
    uint8_t virtual_bp; /* a breakpoint the reference would write (int3.py `virtual_patch`):
                         * its hits are traps the reference simulates */
    uint8_t dropped;    /* no longer watched here (hs_site_drop), until set again */
    uint8_t shared;     /* hwbp: a site of two functions, its hits counted by the code hooks
                         * of each (hs_on_span) and not by the block hook */
} hs_site;

typedef struct {
    uint64_t addr;  /* 0: empty */
    uint32_t size;
    uint32_t gen;   /* the site table's generation the site below was found in */
    uint64_t site;  /* the armed site this block holds, 0: none */
    uint64_t inner_probe;  /* an entry probe inside the block (not at its start), 0: none */
    uint32_t count; /* its instruction count (nt's block table's), once `counted` */
    uint32_t counted;
} hs_block;

ADDRTAB_BY_ADDR(hs_sites, hs_site)
#define HS_BLOCK_USED(e) ((e)->addr != 0)
#define HS_BLOCK_MATCH(e, k) ((e)->addr == (k).addr && (e)->size == (k).size)
#define HS_BLOCK_KEYOF(e) ((block_key){(e)->addr, (e)->size})
#define HS_BLOCK_SETKEY(e, k) ((e)->addr = (k).addr, (e)->size = (k).size)
ADDRTAB(hs_blocks, hs_block, block_key, BLOCK_INDEX, HS_BLOCK_USED, HS_BLOCK_MATCH,
        HS_BLOCK_KEYOF, HS_BLOCK_SETKEY)

typedef struct {
    nt_state *nt;
    hs_config cfg;
    hs_sites sites;
    hs_blocks blocks;
    uint32_t gen;
    int has_pending;
    hs_site pending;        /* the site whose transfer the running block ends with */
    uint64_t pending_time;
    uint64_t hits, slow, virtual_hits;
    /* the tail rule's return addresses (tails.py TailRule.return_addrs), innermost last:
     * the top of Python's at its last section (`hs_returns_set`), then C's own calls and
     * returns.  Entries below `rets_from` were not sent; none is known once nt's fast_trap
     * finished a transfer since (its records reach Python's stack only at the drain) */
    uint64_t *rets;
    size_t n_rets, rets_cap, rets_from;
    uint64_t rets_mark;  /* nt's `simulated` when Python sent them */
    struct hs_span *spans;  /* hwbp's stepped spans (hs_span_new), freed with the table */
    uint64_t stepped;       /* instructions run in them that were no site of the table */
} hs_state;

/* hwbp (hwbp.py SlotDelivery): a stepped span (a function with more sites than address
 * slots) or a range slot (s390x PER) is a bounded code hook over the range, as the
 * reference's, calling hs_on_span; its sites are entries of the site table, hit by the block
 * hook like an address slot's */
typedef struct hs_span {
    hs_state *h;
    uint32_t func;  /* strict.c's index of the function the span is for (ns_func_ref) */
    struct hs_span *next;
} hs_span;

void hs_free(hs_state *h);

hs_state *hs_new(nt_state *nt, const hs_config *cfg)
{
    hs_state *h = calloc(1, sizeof *h);
    if (!h)
        return NULL;
    h->nt = nt;
    h->cfg = *cfg;
    if (h->cfg.align == 0)
        h->cfg.align = 1;
    h->gen = 1;
    if ((hs_sites_init(&h->sites, 1024) | hs_blocks_init(&h->blocks, 4096)) != 0) {
        hs_free(h);
        return NULL;
    }
    return h;
}

void hs_free(hs_state *h)
{
    if (!h)
        return;
    while (h->spans) {
        hs_span *next = h->spans->next;
        free(h->spans);
        h->spans = next;
    }
    free(h->rets);
    hs_sites_free(&h->sites);
    hs_blocks_free(&h->blocks);
    free(h);
}

int hs_site_set(hs_state *h, uint64_t addr, uint32_t size, uint32_t op, uint64_t after,
                int64_t sp_delta, uint32_t conditional, uint32_t finish, uint32_t fast,
                uint32_t delay, uint32_t taken_only, uint32_t virtual_bp)
{
    size_t known = h->sites.used;
    hs_site *p = addr ? hs_sites_put(&h->sites, addr) : NULL;
    if (!p)
        return -1;
    uint8_t shared = p->shared;  /* (it stays shared) */
    if (h->sites.used != known)
        h->gen++;  /* a new site: blocks look for their site again */
    *p = (hs_site){addr, after, sp_delta, size, (uint8_t)op, (uint8_t)conditional,
                   (uint8_t)finish, (uint8_t)fast, (uint8_t)delay, 1, (uint8_t)taken_only,
                   (uint8_t)virtual_bp, 0, shared};
    return 0;
}

/* hwbp: the site at addr is two functions' (hs_site.shared) */
void hs_site_shared(hs_state *h, uint64_t addr)
{
    hs_site *p = hs_sites_find(&h->sites, addr);
    if (p)
        p->shared = 1;
}

/* something blocks look for changed (entry's hooked probes): every block looks again */
void hs_touch(hs_state *h) { h->gen++; }

/* entry under hook delivery: where its hooked probes C does not finish go (py_probe_fn) */
void hs_set_probe(hs_state *h, void *py_probe)
{
    h->cfg.py_probe = (py_probe_fn)py_probe;
    h->gen++;
}

void hs_site_active(hs_state *h, uint64_t addr, uint32_t active)
{
    hs_site *p = hs_sites_find(&h->sites, addr);
    if (p)
        p->active = (uint8_t)active;
}

/* the site is no longer C's to watch (hwbp: a Python hook delivers it from now on); its
 * `active` bit may still be flipped, to no effect (hs_site_set watches it again) */
void hs_site_drop(hs_state *h, uint64_t addr)
{
    hs_site *p = hs_sites_find(&h->sites, addr);
    if (p)
        p->dropped = 1;
}

static int hs_rets_reserve(hs_state *h, size_t n)
{
    if (n <= h->rets_cap)
        return 1;
    size_t cap = h->rets_cap ? h->rets_cap : 64;
    while (cap < n)
        cap *= 2;
    uint64_t *t = realloc(h->rets, cap * sizeof *t);
    if (!t)
        return 0;
    h->rets = t;
    h->rets_cap = cap;
    return 1;
}

/* Python's return addresses: n_total of them, the last n_given in top (innermost last;
 * ~0 for a frame without one) */
void hs_returns_set(hs_state *h, const uint64_t *top, uint64_t n_total, uint64_t n_given)
{
    if (n_given > n_total || !hs_rets_reserve(h, (size_t)n_total)) {
        h->n_rets = h->rets_from = 0;
        h->rets_mark = h->nt->simulated;
        return;
    }
    h->n_rets = (size_t)n_total;
    h->rets_from = (size_t)(n_total - n_given);
    memcpy(h->rets + h->rets_from, top, (size_t)n_given * sizeof *top);
    h->rets_mark = h->nt->simulated;
}

/* does a return to target go back to the running call's return address — the only return
 * the tail rule neither turns into a jump (`enters`) nor follows by arming the code it
 * reaches (int3.py `_transfer`: lazy, `elsewhere`)? */
static int hs_returns_to(const hs_state *h, uint64_t target)
{
    return h->rets_mark == h->nt->simulated && h->n_rets > h->rets_from
           && h->rets[h->n_rets - 1] == target;
}

/* target is known not to be the running call's return address (tails.py `returns_to`
 * false): the innermost one C holds differs, or C knows there is none */
static int hs_returns_elsewhere(const hs_state *h, uint64_t target)
{
    if (h->rets_mark != h->nt->simulated)
        return 0;
    if (h->n_rets > h->rets_from)
        return h->rets[h->n_rets - 1] != target;
    return h->n_rets == 0;
}

/* C finished p's call or return: the tail rule's stack as Python's drain will leave it */
static void hs_rets_apply(hs_state *h, const hs_site *p)
{
    if (p->op == OP_RETURN) {
        h->n_rets--;
    } else if (hs_rets_reserve(h, h->n_rets + 1)) {
        h->rets[h->n_rets++] = p->after;
    } else {
        h->n_rets = h->rets_from = 0;  /* out of memory: returns are Python's */
    }
}

/* the transfer awaiting the next block is forgotten: the block was left before its site
 * ran (a fault or trap in it delivers a signal; the reference's site hook never fired) */
void hs_cancel(hs_state *h) { h->has_pending = 0; }

/* 0 traps (site hits), 1 hits handed to Python, 2 hits of virtual breakpoints (of 0),
 * 3 instructions of hwbp's armed spans that were no site (`stepped`) */
uint64_t hs_counter(const hs_state *h, uint32_t which)
{
    return which == 0 ? h->hits : which == 1 ? h->slow : which == 2 ? h->virtual_hits
           : which == 3 ? h->stepped : 0;
}

/* the block [addr, addr + size)'s entry in the block table (made if new), or NULL out of
 * memory */
static hs_block *hs_block_get(hs_state *h, uint64_t addr, uint32_t size)
{
    hs_block *b = hs_blocks_find(&h->blocks, (block_key){addr, size});
    return b ? b : hs_blocks_put(&h->blocks, (block_key){addr, size});
}

/* nt_counts_preload for the site table's block hook, which keeps its own block table */
void hs_counts_preload(hs_state *h, const nt_learned *rows, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        hs_block *b = hs_block_get(h, rows[i].addr, rows[i].size);
        if (b) {
            b->count = rows[i].count;
            b->counted = 1;
        }
    }
}

/* the armed site the block [addr, addr + size) (its entry b, or NULL) holds, or NULL (and,
 * under entry's hook delivery, the hooked probe inside it in b->inner_probe) */
static hs_site *hs_block_site(hs_state *h, hs_block *b, uint64_t addr, uint32_t size)
{
    uint64_t at = 0;
    if (b && b->gen == h->gen) {
        at = b->site;
    } else {
        /* the site is the block's last instruction (or its delay slot is): an armed
         * address inside the block that ends elsewhere is no instruction of this block
         * (descent decoded those bytes in the other instruction set, or from another
         * offset: the reference's code hook there never fires in this block) */
        uint64_t end = addr + size, inner = 0;
        for (uint64_t a = addr; a < end; a += h->cfg.align) {
            const hs_site *p = hs_sites_find(&h->sites, a);
            if (p && (a + p->size == end || (p->delay && p->after == end))) {
                at = a;
                break;
            }
        }
        /* (entry: a hooked probe past the block's first instruction, where only a code hook
         * sees the probed instruction about to run) */
        ep_state *ep = h->nt->entry;
        if (ep && ep_hooked_count(ep))
            for (uint64_t a = addr + h->cfg.align; a < end && !inner; a += h->cfg.align)
                if (ep_hooked_at(ep, a))
                    inner = a;
        if (b) {
            b->site = at;
            b->inner_probe = inner;
            b->gen = h->gen;
        }
    }
    if (!at)
        return NULL;
    hs_site *p = hs_sites_find(&h->sites, at);
    return p && p->active && !p->dropped ? p : NULL;
}

/* a call's arguments as the callee sees them at its entry (now): argument registers
 * [a0, a1) and stack words [w0, w1) into regs; 0 when a stack word cannot be read */
static int hs_call_words(hs_state *h, uint64_t sp_now, uint64_t *regs, uint8_t *stack,
                         uint32_t a0, uint32_t a1, uint32_t w0, uint32_t w1)
{
    nt_state *s = h->nt;
    uint64_t mask = s->cfg.word == 8 ? ~0ULL : 0xffffffffULL;
    uint32_t n = s->cfg.word;
    for (uint32_t i = a0; i < a1; i++)
        regs[i] = rd(s, s->cfg.arg_regs[i]);
    if (w1 > w0) {
        if (s->cfg.mem_read(s->uc, (sp_now + s->cfg.stack_offset + (uint64_t)w0 * n) & mask,
                            stack + w0 * n, (uint64_t)(w1 - w0) * n) != UC_ERR_OK)
            return 0;
        for (uint32_t i = w0; i < w1; i++)
            regs[s->cfg.n_args + i] = word_from(s, stack + i * n);
    }
    return 1;
}

/* C finishes the pending transfer to target (1), or leaves it to Python (0) */
static int hs_finish(hs_state *h, const hs_site *p, uint64_t target, uint32_t size,
                     uint64_t sp_site,
                     uint64_t sp_now)
{
    nt_state *s = h->nt;
    uint8_t stack[8 * NT_MAX_REGS];
    uint64_t regs[NT_MAX_REGS] = {0};
    if (!p->finish)
        return 0;
    /* FINISH_UNLESS_RETURN: a jump that may be a return (s390x `br %r1`, RISC-V `jr t0`) is
     * one when it goes to the running call's return address (TailRule.taken): Python's */
    if (p->finish == FINISH_UNLESS_RETURN && !hs_returns_elsewhere(h, target))
        return 0;
    if (p->op == OP_JUMP)  /* not taken, or a jump Python found records nothing, or one to
                              another armed function's entry (recorded) */
        return (p->conditional && target == p->after)
               || addrpairs_has(&s->inside, p->addr, target)
               || switch_jump(s, p->addr, target, target, target + size)
               || tail_event(s, p->addr, target, sp_site, sp_now, h->pending_time, target,
                             target + size);
    /* a call or return to the next instruction (not taken, or one that only reads the
     * PC) is no transfer (tails.py `TailRule.taken`); a callee not armed yet, a value C's
     * registers do not hold: Python's */
    if (target == p->after)
        return 1;
    if ((p->op == OP_CALL && !addrset_has(&s->callees, target))
        || (p->op == OP_RETURN && (!p->fast || !hs_returns_to(h, target))))
        return 0;
    /* a call: the words its record holds — all of them unless the writer says it takes
     * the call and how many its record keeps (`uw_call_words`, as fast_trap asks) */
    uint32_t n_args = s->cfg.n_args, n_stack = s->cfg.n_stack;
    int to_writer = p->op == OP_CALL
                    && writer_words(s, target, sp_site, p->after, &n_args, &n_stack);
    if (p->op == OP_CALL && !hs_call_words(h, sp_now, regs, stack, 0, n_args, 0, n_stack))
        return 0;
    if (p->op == OP_RETURN) {
        if (s->cfg.ret_reg >= 0)
            regs[0] = rd(s, s->cfg.ret_reg);
        if (s->cfg.ret_hi_reg >= 0)
            regs[s->cfg.ret_reg >= 0] = rd(s, s->cfg.ret_hi_reg);
    }
    if (s->strict) {  /* strict cleanup: C switches the armed function (strict.c) or declines */
        if (s->n_events >= s->cfg.buffer_events)
            s->cfg.py_drain();  /* (room first: a switch made is never handed to Python) */
        if (s->n_events >= s->cfg.buffer_events
            || !ns_switch(s->strict, p->op == OP_CALL, p->addr, target, target,
                          target + size))
            return 0;
    }
    if (s->entry && p->op == OP_RETURN)  /* the open frames it leaves (entry.py) */
        ep_returned(s->entry, target);
    if ((to_writer || p->op != OP_CALL) && s->writer && uw_enabled(s->writer)
        && s->n_events == 0) {
        nt_copies copies;
        uw_event ev = {p->op == OP_CALL, h->pending_time, p->addr, target, sp_site, p->after,
                       regs, writer_strings(s, &copies, p->op == OP_CALL
                                            ? string_mask(s, target)
                                            : addrset_has(&s->string_returns, p->addr) ? 1u : 0u,
                                            regs)};
        if (uw_take(s->writer, &ev, s->cfg.py_drain)) {
            writer_copied(s, &ev);
            s->written++;
            hs_rets_apply(h, p);
            return 1;
        }
    }
    /* Python's event holds every argument (the writer, which said it takes the call, only
     * declines it when out of memory; stack words it cannot read then stay 0) */
    if (p->op == OP_CALL
        && !hs_call_words(h, sp_now, regs, stack, n_args, s->cfg.n_args, n_stack,
                          s->cfg.n_stack))
        memset(regs + s->cfg.n_args + n_stack, 0, (s->cfg.n_stack - n_stack) * sizeof *regs);
    nt_event *e = next_event(s);
    if (!e)
        return 0;
    *e = (nt_event){0};
    e->kind = p->op == OP_CALL ? EV_CALL : EV_RETURN;
    e->time = h->pending_time;
    e->site = p->addr;
    e->target = target;
    e->sp = sp_site;
    e->fallthrough = p->after;
    e->entry_sp = sp_now;
    if (p->op == OP_CALL) {
        e->nregs = s->cfg.n_args + s->cfg.n_stack;
    } else {
        e->nregs = (s->cfg.ret_reg >= 0) + (s->cfg.ret_hi_reg >= 0);
    }
    memcpy(e->regs, regs, sizeof regs);
    event_strings(s, e, p->op == OP_CALL ? string_mask(s, target)
                        : addrset_has(&s->string_returns, p->addr) ? 1u : 0u);
    hs_rets_apply(h, p);  /* (before the drain below, whose refresh sends Python's again) */
    if (s->writer && uw_enabled(s->writer))  /* as fast_trap: Python takes it now */
        s->cfg.py_drain();
    return 1;
}

/* entry under hook delivery: the block starts at addr, its first instruction not run: the
 * reference's code hook on a hooked probe there (entry.py `_entered`), in C (the frame rule,
 * the call record) or handed to Python (its `_on_site`) */
static void hs_entry_probe(nt_state *s, hs_state *h, uint64_t addr, int python)
{
    ep_call call;
    int kind = EP_PYTHON;
    if (python) {
        if (!ep_hooked_at(s->entry, addr))
            return;
    } else {
        if (s->n_events >= s->cfg.buffer_events)
            s->cfg.py_drain();  /* (room first: ep_enter's frame is never without its record) */
        if (s->n_events < s->cfg.buffer_events)
            kind = ep_enter(s->entry, addr, &call);
        else if (!ep_hooked_at(s->entry, addr))
            return;
        if (kind == EP_NONE || kind == EP_STEP)
            return;
        if (kind == EP_CALL) {
            entry_call(s, &call);
            return;
        }
    }
    s->cfg.py_drain();  /* C's records come before what Python emits */
    h->cfg.py_probe(addr, 0);
}

void hs_on_block(uc_engine *uc, uint64_t addr, uint32_t size, void *user_data)
{
    hs_state *h = user_data;
    nt_state *s = h->nt;
    int python = s->attention;
    (void)uc;
    if (h->has_pending && !(h->pending.delay && addr == h->pending.addr + h->pending.size)) {
        /* (a block that starts at the delay slot, split from its branch: the transfer
         * comes after it) */
        uint64_t mask = s->cfg.word == 8 ? ~0ULL : 0xffffffffULL;
        uint64_t sp_now = rd(s, s->cfg.sp_reg) & mask;
        uint64_t sp_site = (sp_now - (uint64_t)h->pending.sp_delta) & mask;
        h->has_pending = 0;
        if (h->pending.taken_only && addr == h->pending.after) {
            h->hits -= !h->pending.shared;  /* not taken: the reference's hook did not run */
        } else if (python || !hs_finish(h, &h->pending, addr, size, sp_site, sp_now)) {
            h->slow++;
            /* (no drain first: Python only notes the pending transfer; its block hook,
             * next, drains C's records before it emits anything) */
            h->cfg.py_site(h->pending.addr, h->pending_time, sp_site);
            python = 1;
        }
    }
    /* one table lookup for the block's count and site (nt's block table is not used) */
    hs_block *b = hs_block_get(h, addr, size);
    hs_site *site = h->sites.used || (s->entry && ep_hooked_count(s->entry))
                    ? hs_block_site(h, b, addr, size) : NULL;
    if (b && b->inner_probe && h->cfg.py_probe) {  /* Python's code hooks from now on */
        s->cfg.py_drain();
        for (uint64_t at = b->inner_probe; at < addr + size; at += h->cfg.align)
            if (ep_hooked_at(s->entry, at))  /* (its ep_probe_active 0: in no block now) */
                h->cfg.py_probe(at, 1);
        h->gen++;
        /* the block was translated without those hooks (Python dropped it): it is entered
         * again, and only then counted and seen by Python's block hook */
        wr(s, s->cfg.pc_reg, addr);
        return;
    }
    if (python) {
        s->slow_blocks++;
        if (h->cfg.py_visit(addr, size))
            return;  /* restarted (sites armed in it): the block is entered again */
        b = hs_block_get(h, addr, size);  /* (Python may have grown the table since) */
        site = h->sites.used ? hs_block_site(h, b, addr, size) : NULL;
    } else if (b && b->counted) {
        s->time += b->count;
    } else {
        uint32_t count = block_count_of(s, addr, size);
        b = hs_block_get(h, addr, size);
        if (b) {
            b->count = count;
            b->counted = 1;
        }
        s->time += count;
    }
    if (s->entry && h->cfg.py_probe && ep_hooked_count(s->entry))
        hs_entry_probe(s, h, addr, python);
    /* (no site hooked yet — a program whose code all has symbols, on an ISA with working
     * breakpoints: the site lookup is one test) */
    if (site) {  /* the reference's site hook (or breakpoint) would fire in this block */
        h->hits += !site->shared;
        h->virtual_hits += site->virtual_bp;
        h->pending = *site;
        h->pending_time = s->time;
        h->has_pending = 1;
    }
}

/* hwbp: a span for the function at owner (the user data of its code hook, hs_on_span); NULL
 * without strict.c (whose table says which functions are armed) or memory */
hs_span *hs_span_new(hs_state *h, uint64_t owner)
{
    ns_state *ns = h->nt->strict;
    uint32_t f = ns ? ns_func_ref(ns, owner) : UINT32_MAX;
    hs_span *span = f == UINT32_MAX ? NULL : malloc(sizeof *span);
    if (!span)
        return NULL;
    *span = (hs_span){h, f, h->spans};
    h->spans = span;
    return span;
}

/* an instruction of a span is about to run: as hwbp.py `_on_slot`, nothing while the span's
 * function is not armed (its hook idle), else a hit on an armed site or one more stepped
 * instruction.  An armed site's hit is the block hook's (the block ends with it) unless two
 * functions share the site (each function's hook counts its own); a dropped site is a
 * Python hook's (hwbp_native.py `_py_cover`), which counts it */
void hs_on_span(uc_engine *uc, uint64_t addr, uint32_t size, void *user_data)
{
    hs_span *span = user_data;
    hs_state *h = span->h;
    (void)uc;
    (void)size;
    if (!ns_func_is_armed(h->nt->strict, span->func))
        return;
    const hs_site *p = hs_sites_find(&h->sites, addr);
    if (p && p->dropped)
        return;
    if (p && p->active) {
        h->hits += p->shared;
        return;
    }
    h->stepped++;
}
