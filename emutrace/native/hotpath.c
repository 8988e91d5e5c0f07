/* emutrace native hot path: the Unicorn port of the tracer core (core.c) — its hooks for
 * the lazy call-site breakpoint algorithm (int3) and the port operations over uc_*.
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
 * Per trap at an armed site (UC_HOOK_INTR): look the site up in the core's table and let
 * the core finish it (core_trap); per block (UC_HOOK_BLOCK): add the block's instruction
 * count (a table keyed by (addr, size)).  The site table, the transfer sets and the event
 * buffer are the core's; the nt_* entry points Python calls are thin wrappers over core_*.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <unicorn/unicorn.h>

#include "abi.h"
#include "core.h"
#include "coretrap.h"
#include "entryprobe.h"
#include "strict.h"
#include "ufwrite.h"

/* one of discovery's size maps (sweep.c: one byte per code byte, an instruction's size at
 * its first, 0xFF where nothing decodes, 0 not known), lent by Python (nt_size_map_add) */
#define NT_SIZE_MAPS 16
#define NT_UNDECODABLE 0xFF
typedef struct {
    uint64_t base, len;
    const uint8_t *sizes;
    uint32_t alt;
} nt_size_map;

/* a translated block's key in the block tables (this one and the site hooks' hs_blocks) */
typedef struct {
    uint64_t addr;
    uint32_t size;
} block_key;
#define BLOCK_INDEX(k, cap) (addr_mix((k).addr ^ ((uint64_t)(k).size << 52)) & ((cap) - 1))

typedef struct {
    uint64_t key;   /* addr; a slot's 0: empty (address 0 is kept apart) */
    uint32_t size;
    uint32_t count;
} nt_block;

#define NT_BLOCK_USED(e) ((e)->key != 0)
#define NT_BLOCK_MATCH(e, k) ((e)->key == (k).addr && (e)->size == (k).size)
#define NT_BLOCK_KEYOF(e) ((block_key){(e)->key, (e)->size})
#define NT_BLOCK_SETKEY(e, k) ((e)->key = (k).addr, (e)->size = (k).size)
#define BLOCK_APART(k) ((k).addr == 0)
ADDRTAB_APART(nt_blocks, nt_block, block_key, BLOCK_INDEX, NT_BLOCK_USED, NT_BLOCK_MATCH,
              NT_BLOCK_KEYOF, NT_BLOCK_SETKEY, BLOCK_APART)

typedef struct {
    core_state core;     /* the site table, transfer sets, event buffer, clock (core.h) */
    uc_engine *uc;
    nt_config cfg;
    nt_blocks blocks;
    uint32_t attention;  /* the Python side wants every block hook */
    uint64_t slow_traps, slow_blocks;
    nt_size_map size_maps[NT_SIZE_MAPS];
    uint32_t n_size_maps;
    nt_learned *learned;  /* block counts read from the size maps, for Python */
    size_t n_learned, learned_cap;
} nt_state;

/* ------------------------------------------------------------------ port operations */
static void port_regs_read(void *port, const int32_t *ids, uint64_t *out, uint32_t n)
{
    nt_state *s = port;
    void *ptrs[CORE_SITE_READS];
    if (n > CORE_SITE_READS)
        n = CORE_SITE_READS;
    memset(out, 0, n * sizeof *out);  /* 32-bit registers fill the low half */
    if (n == 1) {  /* (one register: the plain read, cheaper than a batch of one) */
        s->cfg.reg_read(s->uc, ids[0], out);
        return;
    }
    for (uint32_t i = 0; i < n; i++)
        ptrs[i] = &out[i];
    s->cfg.reg_read_batch(s->uc, (int *)ids, ptrs, (int)n);
}

static void port_reg_write(void *port, int32_t id, uint64_t value)
{
    nt_state *s = port;
    s->cfg.reg_write(s->uc, id, &value);
}

static int port_read(void *port, uint64_t addr, void *out, uint64_t len)
{
    nt_state *s = port;
    return s->cfg.mem_read(s->uc, addr, out, len) == UC_ERR_OK ? 0 : -1;
}

static int port_write(void *port, uint64_t addr, const void *in, uint64_t len)
{
    nt_state *s = port;
    return s->cfg.mem_write(s->uc, addr, in, len) == UC_ERR_OK ? 0 : -1;
}

/* bytes into translated code: the write, then the translations over it dropped with the
 * uc_ctl strict.c was handed (uc_ctl_remove_cache, as int3_python.py `_disarm_site`); -1
 * without it (no strict table bound: nothing writes code) */
static int port_code_write(void *port, uint64_t addr, const void *in, uint64_t len)
{
    nt_state *s = port;
    nt_ctl_fn ctl = s->core.strict ? ns_ctl(s->core.strict) : NULL;
    if (!ctl || s->cfg.mem_write(s->uc, addr, in, len) != UC_ERR_OK)
        return -1;
    ctl(s->uc, UC_CTL_WRITE(UC_CTL_TB_REMOVE_CACHE, 2), addr, addr + len);
    return 0;
}

static void port_buffer_full(void *port)
{
    nt_state *s = port;
    s->cfg.py_drain();  /* takes the GIL; the buffer is empty afterwards */
}

static const core_ops port_ops = {port_regs_read, port_reg_write, port_read, port_write,
                                  port_code_write, port_buffer_full};

/* ------------------------------------------------------------------ API for Python */
void nt_free(nt_state *s);

nt_state *nt_new(uc_engine *uc, const nt_config *cfg)
{
    nt_state *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->uc = uc;
    s->cfg = *cfg;
    int core = core_init(&s->core, &cfg->abi, 1, cfg->py_drain, &port_ops, s);
    if (core != 0 || nt_blocks_init(&s->blocks, 4096) != 0) {
        nt_free(s);
        return NULL;
    }
    return s;
}

void nt_free(nt_state *s)
{
    if (!s)
        return;
    core_fini(&s->core);
    nt_blocks_free(&s->blocks);
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

/* the site table and the transfer sets: core.c's (core_site_set says what each means) */
int nt_site_set(nt_state *s, uint64_t addr, uint32_t op, uint64_t target, uint64_t after,
                int32_t src_reg, int32_t link_reg, uint32_t release, uint32_t fast,
                uint32_t conditional, uint32_t cond, int32_t cond_reg, uint32_t ca,
                uint32_t cb, uint32_t cc, uint32_t clear_low, uint32_t guard,
                int32_t guard_reg, uint32_t ga, uint32_t gb)
{
    return core_site_set(&s->core, addr, op, target, after, src_reg, link_reg, release, fast,
                         conditional, cond, cond_reg, ca, cb, cc, clear_low, guard, guard_reg,
                         ga, gb);
}

int nt_site_extra(nt_state *s, uint64_t addr, uint32_t after_bits, uint32_t ttest, uint32_t ta,
                  uint32_t tb, uint64_t gmask, uint32_t n_pops, const int32_t *pops)
{
    return core_site_extra(&s->core, addr, after_bits, ttest, ta, tb, gmask, n_pops, pops);
}

void nt_site_active(nt_state *s, uint64_t addr, uint32_t active)
{
    core_site_active(&s->core, addr, active);
}

int nt_callee_add(nt_state *s, uint64_t target) { return core_callee_add(&s->core, target); }

int nt_string_args(nt_state *s, uint64_t target, uint32_t mask)
{
    return core_string_args(&s->core, target, mask);
}

int nt_string_return(nt_state *s, uint64_t site) { return core_string_return(&s->core, site); }

int nt_inside_add(nt_state *s, uint64_t site, uint64_t target)
{
    return core_inside_add(&s->core, site, target);
}

int nt_tail_add(nt_state *s, uint64_t site, uint64_t target)
{
    return core_tail_add(&s->core, site, target);
}

int nt_switch_jump_add(nt_state *s, uint64_t site, uint64_t target)
{
    return core_switch_jump_add(&s->core, site, target);
}

int nt_inside_drop(nt_state *s, uint64_t target)
{
    core_inside_drop(&s->core, target);
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
    s->core.strict = ns;
    ns_bind(ns, s, (ns_active_fn)nt_site_active);
}
void nt_set_writer(nt_state *s, uw_state *writer) { s->core.writer = writer; }
void nt_set_entry(nt_state *s, ep_state *entry) { s->core.entry = entry; }
uint64_t nt_get_time(const nt_state *s) { return s->core.time; }
void nt_set_time(nt_state *s, uint64_t t) { s->core.time = t; }

/* counters: 0 traps, 1 simulated, 2 traps passed to Python, 3 blocks passed to Python,
 * 4 events the record writer took, 5 jumps to a function entry C finished, 6 strings C
 * copied, 7 of those the record writer wrote */
uint64_t nt_counter(const nt_state *s, uint32_t which)
{
    switch (which) {
    case 0: return s->core.traps;
    case 1: return s->core.simulated;
    case 2: return s->slow_traps;
    case 3: return s->slow_blocks;
    case 4: return s->core.written;
    case 5: return s->core.tail_jumps;
    case 6: return s->core.strings_copied;
    case 7: return s->core.strings_written;
    default: return 0;
    }
}

/* the event buffer: Python reads n records from events, then calls nt_events_clear */
const nt_event *nt_events(const nt_state *s) { return s->core.events; }
uint32_t nt_events_count(const nt_state *s) { return s->core.n_events; }
void nt_events_clear(nt_state *s) { core_events_clear(&s->core); }
const uint8_t *nt_strings(const nt_state *s) { return s->core.strings; }
uint64_t nt_strings_len(const nt_state *s) { return s->core.strings_len; }
uint32_t nt_event_size(void) { return (uint32_t)sizeof(nt_event); }

/* ------------------------------------------------------------------ the hooks */
static inline uint64_t rd(nt_state *s, int reg)
{
    uint64_t v = 0;  /* 32-bit registers fill the low half (little-endian host) */
    s->cfg.reg_read(s->uc, reg, &v);
    return v;
}

static inline void wr(nt_state *s, int reg, uint64_t v) { s->cfg.reg_write(s->uc, reg, &v); }

/* an entry probe's call (entryprobe.c decided it): the record, with the arguments the
 * callee sees now, at its entry (stack words it cannot read stay 0, as core_trap's) */
static void entry_call(nt_state *s, const ep_call *c)
{
    core_state *core = &s->core;
    uint64_t regs[NT_MAX_REGS] = {0};
    uint32_t strings = core_string_mask(core, c->target);
    core_call_words(core, c->entry_sp, regs, 0, core->cfg.n_args, 0, core->cfg.n_stack);
    /* `record`, `run`: the record writer takes it when nothing buffered precedes it (as
     * core_trap's: a call at the caller's sp, returning to ra) */
    if (core_offer(core, 1, core->time, c->ra, c->target, c->call_sp, c->ra, regs, strings))
        return;
    if (!core_record(core, EV_CALL, core->time, c->ra, c->target, c->call_sp, c->ra,
                     c->entry_sp, regs, core->cfg.n_args + core->cfg.n_stack, strings))
        return;  /* (room was made before ep_trap) */
    core_hand_over(core);
}

/* an entry probe C finishes (1): recorded if a call, stepped over; one instruction taken
 * off the time, as int3.py's fall-back does (the re-run block counts it again) */
static int entry_trap(nt_state *s, uint64_t addr)
{
    ep_call call;
    if (s->core.n_events >= s->core.cfg.buffer_events) {
        s->cfg.py_drain();
        if (s->core.n_events >= s->core.cfg.buffer_events)
            return 0;
    }
    int kind = ep_trap(s->core.entry, addr, &call);
    if (kind == EP_PYTHON)
        return 0;
    if (kind == EP_CALL)
        entry_call(s, &call);
    s->core.time -= 1;
    return 1;
}

void nt_on_intr(uc_engine *uc, uint32_t intno, void *user_data)
{
    nt_state *s = user_data;
    (void)uc;
    if (intno == s->cfg.bp_intno) {
        uint64_t addr = rd(s, s->core.cfg.pc_reg) - s->cfg.pc_after;
        core_site *site = core_sites_find(&s->core.sites, addr);
        s->core.time += s->cfg.bp_uncounted;  /* (as int3.py `_on_trap` counts the site) */
        if (site && site->active && site->op != OP_NONE
            && core_trap_with(&s->core, &port_ops, site))
            return;
        if (s->core.entry && !s->attention && entry_trap(s, addr))
            return;  /* (a step-over: the re-run counts the instruction, as in entry.py) */
        s->core.time -= s->cfg.bp_uncounted;  /* Python counts it itself */
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
        s->core.time += b->count;
        return;
    }
    uint32_t count = block_count_of(s, addr, size);
    nt_block_set(s, addr, size, count);
    s->core.time += count;
}

void nt_on_block(uc_engine *uc, uint64_t addr, uint32_t size, void *user_data)
{
    nt_state *s = user_data;
    (void)uc;
    if (s->core.entry) {  /* an entry probe's step-over in progress (entryprobe.c) */
        int step = ep_block(s->core.entry, addr, s->attention);
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
    uint64_t addr;  /* a slot's 0: empty (address 0 is kept apart) */
    uint32_t size;
    uint32_t gen;   /* the table's generation the site below was found in (hs_state.gen) */
    uint32_t site_gen;  /* and the count of sites then (hs_state.site_gen) */
    uint64_t site;  /* the armed site this block holds + 1 (code at address 0), 0: none */
    uint64_t inner_probe;  /* an entry probe inside the block (not at its start), 0: none */
    uint32_t count; /* its instruction count (nt's block table's), once `counted` */
    uint32_t counted;
} hs_block;

ADDRTAB_BY_ADDR(hs_sites, hs_site)
#define HS_BLOCK_USED(e) ((e)->addr != 0)
#define HS_BLOCK_MATCH(e, k) ((e)->addr == (k).addr && (e)->size == (k).size)
#define HS_BLOCK_KEYOF(e) ((block_key){(e)->addr, (e)->size})
#define HS_BLOCK_SETKEY(e, k) ((e)->addr = (k).addr, (e)->size = (k).size)
ADDRTAB_APART(hs_blocks, hs_block, block_key, BLOCK_INDEX, HS_BLOCK_USED, HS_BLOCK_MATCH,
              HS_BLOCK_KEYOF, HS_BLOCK_SETKEY, BLOCK_APART)

typedef struct {
    nt_state *nt;
    hs_config cfg;
    hs_sites sites;
    hs_blocks blocks;
    /* a block's site is found again when `gen` moved (every block looks again: entry's
     * probes changed) or when a site was added since whose end is the block's end (the only
     * sites a block can hold, hs_block_site): `site_gen` counts the sites added, `ends`
     * holds, per end address (a site's addr + size, and past its delay slot), the count
     * when the last site ending there was added */
    uint32_t gen, site_gen;
    addrmap ends;
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
    if ((hs_sites_init(&h->sites, 1024) | hs_blocks_init(&h->blocks, 4096)
         | addrmap_init(&h->ends, 1024)) != 0) {
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
    addrmap_free(&h->ends);
    free(h);
}

int hs_site_set(hs_state *h, uint64_t addr, uint32_t size, uint32_t op, uint64_t after,
                int64_t sp_delta, uint32_t conditional, uint32_t finish, uint32_t fast,
                uint32_t delay, uint32_t taken_only, uint32_t virtual_bp)
{
    size_t known = h->sites.used;
    hs_site *p = hs_sites_put(&h->sites, addr);
    if (!p)
        return -1;
    uint8_t shared = p->shared;  /* (it stays shared) */
    if (h->sites.used != known) {
        /* a new site: the blocks that end where it ends look for their site again */
        h->site_gen++;
        if (addrmap_set(&h->ends, addr + size, (int32_t)h->site_gen) != 0
            || (delay && addrmap_set(&h->ends, after, (int32_t)h->site_gen) != 0)
            || h->site_gen > INT32_MAX)
            h->gen++;  /* (out of memory, or too many to count: every block looks again) */
    }
    *p = (hs_site){addr, after, sp_delta, size, (uint8_t)op, (uint8_t)conditional,
                   (uint8_t)finish, (uint8_t)fast, (uint8_t)delay, 1, (uint8_t)taken_only,
                   (uint8_t)virtual_bp, 0, shared};
    return 0;
}

/* hs_site_set for n sites in one call (the sites a Python section armed): row i is
 * rows[i * HS_ROW_WORDS ...], hs_site_set's arguments after h in their order, each one
 * word (sp_delta two's complement); 0, or -1 out of memory (the rows before it are set) */
#define HS_ROW_WORDS 11
int hs_site_set_rows(hs_state *h, const uint64_t *rows, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const uint64_t *r = rows + i * HS_ROW_WORDS;
        if (hs_site_set(h, r[0], (uint32_t)r[1], (uint32_t)r[2], r[3], (int64_t)r[4],
                        (uint32_t)r[5], (uint32_t)r[6], (uint32_t)r[7], (uint32_t)r[8],
                        (uint32_t)r[9], (uint32_t)r[10]) != 0)
            return -1;
    }
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
        h->rets_mark = h->nt->core.simulated;
        return;
    }
    h->n_rets = (size_t)n_total;
    h->rets_from = (size_t)(n_total - n_given);
    memcpy(h->rets + h->rets_from, top, (size_t)n_given * sizeof *top);
    h->rets_mark = h->nt->core.simulated;
}

/* does a return to target go back to the running call's return address — the only return
 * the tail rule neither turns into a jump (`enters`) nor follows by arming the code it
 * reaches (int3.py `_transfer`: lazy, `elsewhere`)? */
static int hs_returns_to(const hs_state *h, uint64_t target)
{
    return h->rets_mark == h->nt->core.simulated && h->n_rets > h->rets_from
           && h->rets[h->n_rets - 1] == target;
}

/* target is known not to be the running call's return address (tails.py `returns_to`
 * false): the innermost one C holds differs, or C knows there is none */
static int hs_returns_elsewhere(const hs_state *h, uint64_t target)
{
    if (h->rets_mark != h->nt->core.simulated)
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
    uint64_t at = 0;  /* the site + 1, 0: none */
    if (b && b->gen == h->gen && b->site_gen != h->site_gen
        && addrmap_get(&h->ends, addr + size) <= (int32_t)b->site_gen)
        b->site_gen = h->site_gen;  /* (no site added since ends where this block ends) */
    if (b && b->gen == h->gen && b->site_gen == h->site_gen) {
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
                at = a + 1;
                break;
            }
        }
        /* (entry: a hooked probe past the block's first instruction, where only a code hook
         * sees the probed instruction about to run) */
        ep_state *ep = h->nt->core.entry;
        if (ep && ep_hooked_count(ep))
            for (uint64_t a = addr + h->cfg.align; a < end && !inner; a += h->cfg.align)
                if (ep_hooked_at(ep, a))
                    inner = a;
        if (b) {
            b->site = at;
            b->inner_probe = inner;
            b->gen = h->gen;
            b->site_gen = h->site_gen;
        }
    }
    if (!at)
        return NULL;
    hs_site *p = hs_sites_find(&h->sites, at - 1);
    return p && p->active && !p->dropped ? p : NULL;
}

/* C finishes the pending transfer to target (1), or leaves it to Python (0) */
static int hs_finish(hs_state *h, const hs_site *p, uint64_t target, uint32_t size,
                     uint64_t sp_site,
                     uint64_t sp_now)
{
    nt_state *s = h->nt;
    core_state *c = &s->core;
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
               || addrpairs_has(&c->inside, p->addr, target)
               || core_switch_jump(c, p->addr, target, target, target + size)
               || core_tail_event(c, p->addr, target, sp_site, sp_now, h->pending_time,
                                  target, target + size);
    /* a call or return to the next instruction (not taken, or one that only reads the
     * PC) is no transfer (tails.py `TailRule.taken`); a callee not armed yet, a value C's
     * registers do not hold: Python's */
    if (target == p->after)
        return 1;
    if ((p->op == OP_CALL && !addrset_has(&c->callees, target))
        || (p->op == OP_RETURN && (!p->fast || !hs_returns_to(h, target))))
        return 0;
    /* a call: the words its record holds — all of them unless the writer says it takes
     * the call and how many its record keeps (`uw_call_words`, as core_trap asks); read at
     * the callee's entry (now) */
    uint32_t n_args = c->cfg.n_args, n_stack = c->cfg.n_stack;
    int to_writer = p->op == OP_CALL
                    && core_writer_words(c, target, sp_site, p->after, &n_args, &n_stack);
    if (p->op == OP_CALL && core_call_words(c, sp_now, regs, 0, n_args, 0, n_stack) != 0)
        return 0;
    if (p->op == OP_RETURN) {
        if (c->cfg.ret_reg >= 0)
            regs[0] = rd(s, c->cfg.ret_reg);
        if (c->cfg.ret_hi_reg >= 0)
            regs[c->cfg.ret_reg >= 0] = rd(s, c->cfg.ret_hi_reg);
    }
    if (c->strict) {  /* strict cleanup: C switches the armed function (strict.c) or declines */
        if (c->n_events >= c->cfg.buffer_events)
            s->cfg.py_drain();  /* (room first: a switch made is never handed to Python) */
        if (c->n_events >= c->cfg.buffer_events
            || !ns_switch(c->strict, p->op == OP_CALL, p->addr, target, target,
                          target + size))
            return 0;
    }
    if (c->entry && p->op == OP_RETURN)  /* the open frames it leaves (entry.py) */
        ep_returned(c->entry, target);
    uint32_t strings = p->op == OP_CALL ? core_string_mask(c, target)
                       : core_string_return_mask(c, p->addr);
    if ((to_writer || p->op != OP_CALL)
        && core_offer(c, p->op == OP_CALL, h->pending_time, p->addr, target, sp_site, p->after,
                      regs, strings)) {
        hs_rets_apply(h, p);
        return 1;
    }
    /* Python's event holds every argument (the writer, which said it takes the call, only
     * declines it when out of memory; stack words it cannot read then stay 0) */
    if (p->op == OP_CALL
        && core_call_words(c, sp_now, regs, n_args, c->cfg.n_args, n_stack,
                           c->cfg.n_stack) != 0)
        memset(regs + c->cfg.n_args + n_stack, 0, (c->cfg.n_stack - n_stack) * sizeof *regs);
    uint32_t nregs = p->op == OP_CALL ? c->cfg.n_args + c->cfg.n_stack
                     : (uint32_t)(c->cfg.ret_reg >= 0) + (c->cfg.ret_hi_reg >= 0);
    if (!core_record(c, p->op == OP_CALL ? EV_CALL : EV_RETURN, h->pending_time, p->addr,
                     target, sp_site, p->after, sp_now, regs, nregs, strings))
        return 0;
    hs_rets_apply(h, p);  /* (before the drain below, whose refresh sends Python's again) */
    core_hand_over(c);    /* as core_trap: Python takes it now */
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
        if (!ep_hooked_at(s->core.entry, addr))
            return;
    } else {
        if (s->core.n_events >= s->core.cfg.buffer_events)
            s->cfg.py_drain();  /* (room first: ep_enter's frame is never without its record) */
        if (s->core.n_events < s->core.cfg.buffer_events)
            kind = ep_enter(s->core.entry, addr, &call);
        else if (!ep_hooked_at(s->core.entry, addr))
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
        uint64_t mask = s->core.cfg.word == 8 ? ~0ULL : 0xffffffffULL;
        uint64_t sp_now = rd(s, s->core.cfg.sp_reg) & mask;
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
    hs_site *site = h->sites.used || (s->core.entry && ep_hooked_count(s->core.entry))
                    ? hs_block_site(h, b, addr, size) : NULL;
    if (b && b->inner_probe && h->cfg.py_probe) {  /* Python's code hooks from now on */
        s->cfg.py_drain();
        for (uint64_t at = b->inner_probe; at < addr + size; at += h->cfg.align)
            if (ep_hooked_at(s->core.entry, at))  /* (its ep_probe_active 0: in no block now) */
                h->cfg.py_probe(at, 1);
        h->gen++;
        /* the block was translated without those hooks (Python dropped it): it is entered
         * again, and only then counted and seen by Python's block hook */
        wr(s, s->core.cfg.pc_reg, addr);
        return;
    }
    if (python) {
        s->slow_blocks++;
        if (h->cfg.py_visit(addr, size))
            return;  /* restarted (sites armed in it): the block is entered again */
        b = hs_block_get(h, addr, size);  /* (Python may have grown the table since) */
        site = h->sites.used ? hs_block_site(h, b, addr, size) : NULL;
    } else if (b && b->counted) {
        s->core.time += b->count;
    } else {
        uint32_t count = block_count_of(s, addr, size);
        b = hs_block_get(h, addr, size);
        if (b) {
            b->count = count;
            b->counted = 1;
        }
        s->core.time += count;
    }
    if (s->core.entry && h->cfg.py_probe && ep_hooked_count(s->core.entry))
        hs_entry_probe(s, h, addr, python);
    /* (no site hooked yet — a program whose code all has symbols, on an ISA with working
     * breakpoints: the site lookup is one test) */
    if (site) {  /* the reference's site hook (or breakpoint) would fire in this block */
        h->hits += !site->shared;
        h->virtual_hits += site->virtual_bp;
        h->pending = *site;
        h->pending_time = s->core.time;
        h->has_pending = 1;
    }
}

/* hwbp: a span for the function at owner (the user data of its code hook, hs_on_span); NULL
 * without strict.c (whose table says which functions are armed) or memory */
hs_span *hs_span_new(hs_state *h, uint64_t owner)
{
    ns_state *ns = h->nt->core.strict;
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
    if (!ns_func_is_armed(h->nt->core.strict, span->func))
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
