/* emutrace native hot path: strict cleanup of the int3 backend (backends/int3_python.py, fctrace's
 * rule: a function carries breakpoints only while it is the current one).
 *
 * The Python backend stays the owner of the algorithm: it discovers a function, arms it the
 * first time, and tells this table what it did (which sites hold breakpoint bytes, whose they
 * are, which functions are armed, the call chain).  From then on a call into a function C
 * knows, or a return to the chain's next function, is switched here: the function left is
 * disarmed (its original bytes written back, the translated code of each site dropped with
 * uc_ctl_remove_cache, as int3_python.py `_disarm_site` does), the chain pushed or popped, the
 * function entered armed (breakpoint bytes written, code dropped).  Each function armed or
 * disarmed is noted in a journal that Python replays when it next runs, and Python takes the
 * chain's changed frames (backends/strict_native.py): its dictionaries, code guard, counters
 * and chain follow without touching guest memory again.
 *
 * Site hooks (hook delivery: mips, mipsel, riscv64, whose breakpoint traps Unicorn does not
 * deliver usably) switch the same way with nothing written: the site's hook stays installed
 * and arming it is a table write, as int3_python.py keeps an idle hook (`idle_hooks`), so C flips
 * the site's `active` bit in hotpath.c's hooked-site table (hs_site_active, through
 * ns_bind_hooked)
 * and drops no translated code (the block hook reads the table at run time).
 *
 * hwbp (backends/hwbp_native.py) is the same algorithm delivered by N hardware slots per
 * function: with slot accounting on (ns_set_slots) every function armed here counts what
 * hwbp_slots.py `SlotDelivery.arm` counts — the slots its free sites take (`slot_ranges`: one per
 * site, or one stepped span when an address-slot function has more sites than slots, or at
 * most N ranges), a fall-back, and the most slots programmed at once — and a function
 * disarmed frees its slots.  Its hooks stay Python's or hotpath.c's site table's, idle.  On a
 * port with real slots (ploop.c: DR0-DR3) the function armed here has its site addresses
 * programmed through the port (ns_bind_slots); the ptrace port decides its hits with this
 * table's chain and switches too.
 *
 * Anything this table cannot decide (a function or site it was not told about, a return that
 * empties the chain, after the guest wrote over code) is declined: the trap goes to Python.
 */
#include <stdlib.h>
#include <string.h>

#include <unicorn/unicorn.h>

#include "abi.h"
#include "addrmap.h"
#include "strict.h"

#define NS_MAX_BP 4     /* the longest breakpoint encoding (codeguard.py MAX_BP) */
#define NS_NONE UINT32_MAX
#define NS_MAX_SLOTS 16  /* the most slots a port programs at once (x86: DR0-DR3) */
#define NS_JOURNAL 4096  /* switches kept for Python's replay; full: C declines the next */

typedef struct {
    uint64_t addr, owner;  /* owner: start of the function the armed site belongs to */
    uint8_t len, armed, has_bytes;
    uint8_t hooked;  /* a site hook stays installed: (dis)arming writes no guest memory */
    uint8_t bp[NS_MAX_BP], orig[NS_MAX_BP];
} ns_site;

typedef struct {
    uint64_t start, end;
    uint32_t *sites;  /* indexes into ns_state.sites, Function.sites' order */
    uint32_t n_sites;
    uint8_t armed, known;
    uint32_t in_use;  /* hwbp: the slots the armed function programs */
} ns_func;

struct ns_state {
    uc_engine *uc;
    nt_mem_write_fn mem_write;
    nt_ctl_fn ctl;
    ns_code_write_fn code_write;  /* the port's way to write a site's bytes (ns_bind_code) */
    void *code_port;
    uint64_t code_mask;
    ns_site *sites;
    size_t n_sites, sites_cap;
    addrmap site_ix;
    ns_func *funcs;
    size_t n_funcs, funcs_cap;
    addrmap func_ix, target_ix;  /* start -> function; call target -> function */
    ns_frame *chain;
    size_t depth, chain_cap;
    size_t low;  /* frames below this index are as Python last saw them */
    int disabled;
    void *table;            /* hotpath.c's patch-site table: a written site's `active` */
    ns_active_fn active;
    void *hooked_table;     /* its hooked-site table: a site hook's (ns_bind_hooked) */
    ns_active_fn hooked_active;
    uint64_t switches;  /* calls and returns switched here */
    ns_entry journal[NS_JOURNAL];  /* the switches Python has not replayed yet */
    uint32_t n_journal;
    uint64_t j_patches, j_removals;  /* what those switches count (int3_python.py stats) */
    /* hwbp's slot accounting (ns_set_slots; slots 0: off) */
    uint32_t slots;
    uint8_t slot_ranges;  /* 1: range slots (s390x PER), 0: address slots */
    uint64_t in_use;  /* slots programmed now: the armed functions' in_use, summed */
    uint64_t j_slot_writes, j_fallbacks, j_max_slots;  /* since the journal was cleared */
    ns_slots_fn slots_program;  /* the port's slot programming (ns_bind_slots), or NULL */
    void *slots_port;
};

/* ------------------------------------------------------------------ maps */
/* address -> index (addrmap.h: address 0 too) */
static uint32_t map_get(const addrmap *m, uint64_t key)
{
    return (uint32_t)addrmap_get(m, key);  /* -1: NS_NONE */
}

static int map_put(addrmap *m, uint64_t key, uint32_t val)
{
    return addrmap_set(m, key, (int32_t)val);
}

static int grow(void **arr, size_t *cap, size_t need, size_t size)
{
    if (need <= *cap)
        return 0;
    size_t cap2 = *cap ? *cap : 64;
    while (cap2 < need)
        cap2 *= 2;
    void *p = realloc(*arr, cap2 * size);
    if (!p)
        return -1;
    memset((char *)p + *cap * size, 0, (cap2 - *cap) * size);
    *arr = p;
    *cap = cap2;
    return 0;
}

static uint32_t site_index(ns_state *ns, uint64_t addr)  /* found or made; NS_NONE: memory */
{
    uint32_t i = map_get(&ns->site_ix, addr);
    if (i != NS_NONE)
        return i;
    if (grow((void **)&ns->sites, &ns->sites_cap, ns->n_sites + 1, sizeof *ns->sites) != 0)
        return NS_NONE;
    i = (uint32_t)ns->n_sites;
    if (map_put(&ns->site_ix, addr, i) != 0)
        return NS_NONE;
    ns->n_sites++;
    ns->sites[i].addr = addr;
    return i;
}

static uint32_t func_index(ns_state *ns, uint64_t start)
{
    uint32_t i = map_get(&ns->func_ix, start);
    if (i != NS_NONE)
        return i;
    if (grow((void **)&ns->funcs, &ns->funcs_cap, ns->n_funcs + 1, sizeof *ns->funcs) != 0)
        return NS_NONE;
    i = (uint32_t)ns->n_funcs;
    if (map_put(&ns->func_ix, start, i) != 0)
        return NS_NONE;
    ns->n_funcs++;
    ns->funcs[i].start = start;
    return i;
}

/* ------------------------------------------------------------------ API for Python */
/* the Unicorn port's code write: the bytes, then the translated code of the range dropped
 * (Unicorn does not notice host writes; int3_python.py `_disarm_site`) */
static int uc_code_write(void *port, uint64_t addr, const void *in, uint64_t len)
{
    ns_state *ns = port;
    if (ns->mem_write(ns->uc, addr, in, len) != UC_ERR_OK)
        return -1;
    ns->ctl(ns->uc, UC_CTL_WRITE(UC_CTL_TB_REMOVE_CACHE, 2), addr, addr + len);
    return 0;
}

ns_state *ns_new(uc_engine *uc, void *mem_write, void *ctl, uint64_t code_mask)
{
    ns_state *ns = calloc(1, sizeof *ns);
    if (!ns)
        return NULL;
    ns->uc = uc;
    ns->mem_write = (nt_mem_write_fn)mem_write;
    ns->ctl = (nt_ctl_fn)ctl;
    ns->code_mask = code_mask;
    ns->code_write = uc_code_write;
    ns->code_port = ns;
    return ns;
}

/* the port that writes the sites' bytes, when it is not Unicorn's (ploop.c: /proc/PID/mem) */
void ns_bind_code(ns_state *ns, ns_code_write_fn code_write, void *port)
{
    ns->code_write = code_write;
    ns->code_port = port;
}

/* hwbp on a port with real slots (ploop.c: DR0-DR3): a function armed here has its site
 * addresses programmed through the port, after the function left was disarmed */
void ns_bind_slots(ns_state *ns, ns_slots_fn program, void *port)
{
    ns->slots_program = program;
    ns->slots_port = port;
}

/* the uc_ctl this table drops translated code with (hotpath.c's code_write, same library) */
nt_ctl_fn ns_ctl(const ns_state *ns) { return ns->ctl; }

void ns_free(ns_state *ns)
{
    if (!ns)
        return;
    for (size_t i = 0; i < ns->n_funcs; i++)
        free(ns->funcs[i].sites);
    free(ns->funcs);
    free(ns->sites);
    free(ns->chain);
    addrmap_free(&ns->site_ix);
    addrmap_free(&ns->func_ix);
    addrmap_free(&ns->target_ix);
    free(ns);
}

void ns_bind(ns_state *ns, void *table, ns_active_fn active)
{
    ns->table = table;
    ns->active = active;
}

/* where a site hook's `active` bit lives (hotpath.c's hooked-site table); patch sites keep
 * theirs in the table ns_bind names — one program may have both (code found by descent is
 * hooked on a patch-delivery ISA) */
void ns_bind_hooked(ns_state *ns, void *table, ns_active_fn active)
{
    ns->hooked_table = table;
    ns->hooked_active = active;
}

/* the breakpoint and the original bytes of a patch site (Python armed it once) */
int ns_site_bytes(ns_state *ns, uint64_t addr, uint32_t len, const uint8_t *bp, const uint8_t *orig)
{
    uint32_t i = site_index(ns, addr);
    if (i == NS_NONE || len == 0 || len > NS_MAX_BP)
        return -1;
    ns_site *s = &ns->sites[i];
    s->len = (uint8_t)len;
    memcpy(s->bp, bp, len);
    memcpy(s->orig, orig, len);
    s->has_bytes = 1;
    return 0;
}

/* a site delivered by a hook Python installed and keeps (int3_python.py idle_hooks): C may arm it
 * again with a table write */
int ns_site_hooked(ns_state *ns, uint64_t addr)
{
    uint32_t i = site_index(ns, addr);
    if (i == NS_NONE)
        return -1;
    ns->sites[i].hooked = 1;
    return 0;
}

/* Python armed (on) or disarmed a site; owner: the function it was armed for */
int ns_site_armed(ns_state *ns, uint64_t addr, uint32_t on, uint64_t owner)
{
    uint32_t i = site_index(ns, addr);
    if (i == NS_NONE)
        return -1;
    ns->sites[i].armed = (uint8_t)on;
    ns->sites[i].owner = owner;
    return 0;
}

/* a function's extent and sites (int3_python.py Function: start, end, sites) */
int ns_func_sites(ns_state *ns, uint64_t start, uint64_t end, uint32_t n, const uint64_t *addrs)
{
    uint32_t f = func_index(ns, start);
    if (f == NS_NONE)
        return -1;
    uint32_t *list = calloc(n ? n : 1, sizeof *list);
    if (!list)
        return -1;
    for (uint32_t k = 0; k < n; k++) {
        list[k] = site_index(ns, addrs[k]);
        if (list[k] == NS_NONE) {
            free(list);
            return -1;
        }
    }
    ns_func *fn = &ns->funcs[f];  /* (site_index may have moved ns->sites, not funcs) */
    free(fn->sites);
    fn->sites = list;
    fn->n_sites = n;
    fn->end = end;
    fn->known = 1;
    return 0;
}

int ns_func_armed(ns_state *ns, uint64_t start, uint32_t on)
{
    uint32_t f = func_index(ns, start);
    if (f == NS_NONE)
        return -1;
    ns->funcs[f].armed = (uint8_t)on;
    return 0;
}

/* is addr the start of a function the table was told the sites of (ns_func_sites), whether
 * C may switch it or not? */
int ns_func_told(const ns_state *ns, uint64_t addr)
{
    uint32_t f = map_get(&ns->func_ix, addr);
    return f != NS_NONE && ns->funcs[f].sites != NULL;
}

/* the function at start as the table was told it (ns_func_sites) and not forgotten: its end
 * and its first `room` site addresses; its number of sites, or -1 (hwbp's ptrace port reads
 * a function's slot addresses so, ploop.c hw_func) */
int ns_func_get(const ns_state *ns, uint64_t start, uint64_t *end, uint64_t *addrs,
                uint32_t room)
{
    uint32_t f = map_get(&ns->func_ix, start);
    if (f == NS_NONE || !ns->funcs[f].known)
        return -1;
    const ns_func *fn = &ns->funcs[f];
    *end = fn->end;
    for (uint32_t k = 0; k < fn->n_sites && k < room; k++)
        addrs[k] = ns->sites[fn->sites[k]].addr;
    return (int)fn->n_sites;
}

/* the start of the function a call to target enters (ns_target), or -1 */
int64_t ns_target_func(const ns_state *ns, uint64_t target)
{
    uint32_t f = map_get(&ns->target_ix, target);
    return f == NS_NONE ? -1 : (int64_t)ns->funcs[f].start;
}

/* a call to target no longer enters a function the table knows */
int ns_target_drop(ns_state *ns, uint64_t target)
{
    return map_put(&ns->target_ix, target, NS_NONE);
}

/* the function's extent changed (a stale descent): its traps are Python's from now on */
void ns_func_forget(ns_state *ns, uint64_t start)
{
    uint32_t f = map_get(&ns->func_ix, start);
    if (f != NS_NONE)
        ns->funcs[f].known = 0;
}

/* a call to target enters the function at start */
int ns_target(ns_state *ns, uint64_t target, uint64_t start)
{
    uint32_t f = func_index(ns, start);
    return f == NS_NONE ? -1 : map_put(&ns->target_ix, target, f);
}

/* the call chain as Python keeps it, innermost last */
int ns_chain_set(ns_state *ns, size_t n, const uint64_t *starts, const uint64_t *ends)
{
    if (grow((void **)&ns->chain, &ns->chain_cap, n + 1, sizeof *ns->chain) != 0) {
        ns->disabled = 1;  /* C's chain would be wrong: decline everything */
        return -1;
    }
    for (size_t k = 0; k < n; k++) {
        ns->chain[k].start = starts[k];
        ns->chain[k].end = ends[k];
        ns->chain[k].func = map_get(&ns->func_ix, starts[k]);
    }
    ns->depth = ns->low = n;
    return 0;
}

/* room for one more frame than the chain holds, so that ns_call_ok does not decline a call
 * for want of it (the ptrace loop, whose Python side hands its chain over only when it
 * changed it); 0, or -1 out of memory */
int ns_chain_reserve(ns_state *ns)
{
    return grow((void **)&ns->chain, &ns->chain_cap, ns->depth + 2, sizeof *ns->chain);
}

/* the chain as C left it: frames from chain_low() up changed since Python last saw it */
const ns_frame *ns_chain(const ns_state *ns) { return ns->chain; }
size_t ns_chain_depth(const ns_state *ns) { return ns->depth; }
size_t ns_chain_low(const ns_state *ns) { return ns->low; }
void ns_chain_seen(ns_state *ns) { ns->low = ns->depth; }
uint32_t ns_frame_size(void) { return (uint32_t)sizeof(ns_frame); }

/* the guest wrote over code (codeguard.py): every later switch is Python's */
void ns_disable(ns_state *ns) { ns->disabled = 1; }

/* the functions C armed and disarmed since Python last read them, in order (Python replays
 * them on its state) */
const ns_entry *ns_journal(const ns_state *ns) { return ns->journal; }
uint32_t ns_journal_count(const ns_state *ns) { return ns->n_journal; }
void ns_journal_clear(ns_state *ns)
{
    ns->n_journal = 0;
    ns->j_patches = ns->j_removals = 0;
    ns->j_slot_writes = ns->j_fallbacks = ns->j_max_slots = 0;
}
/* since the journal was last cleared: sites written (int3_python.py "patches": a breakpoint or the
 * original bytes, or a site hook armed or idled) and translated code dropped
 * ("cache_removals": patch sites only) */
uint64_t ns_journal_patches(const ns_state *ns) { return ns->j_patches; }
uint64_t ns_journal_removals(const ns_state *ns) { return ns->j_removals; }

/* the sites at addrs as C has them now: owner[k] the function a site is armed for, armed[k]
 * 0 when it is not armed (or C was never told about it) */
void ns_sites_state(const ns_state *ns, uint32_t n, const uint64_t *addrs, uint64_t *owner,
                    uint8_t *armed)
{
    for (uint32_t k = 0; k < n; k++) {
        uint32_t i = map_get(&ns->site_ix, addrs[k]);
        armed[k] = i != NS_NONE && ns->sites[i].armed;
        owner[k] = armed[k] ? ns->sites[i].owner : 0;
    }
}
uint64_t ns_switches(const ns_state *ns) { return ns->switches; }

/* hwbp: count slots as hwbp_slots.py SlotDelivery does, `slots` of them, ranges (1) or addresses */
void ns_set_slots(ns_state *ns, uint32_t slots, uint32_t ranges)
{
    ns->slots = slots;
    ns->slot_ranges = (uint8_t)(ranges != 0);
}

/* hwbp: Python armed (n slots) or disarmed (0) the function at start */
int ns_func_slots(ns_state *ns, uint64_t start, uint32_t n)
{
    uint32_t f = func_index(ns, start);
    if (f == NS_NONE)
        return -1;
    ns->in_use = ns->in_use - ns->funcs[f].in_use + n;
    ns->funcs[f].in_use = n;
    return 0;
}

/* where the count of switches made here lives: Python reads it without a call (hwbp's slot
 * hooks: while it has not moved since Python last replayed the journal, Python's tables are
 * C's) */
const uint64_t *ns_switches_at(const ns_state *ns) { return &ns->switches; }

/* hwbp: the slots the function at start programs now (0: not armed, or not known) */
uint32_t ns_func_in_use(const ns_state *ns, uint64_t start)
{
    uint32_t f = map_get(&ns->func_ix, start);
    return f == NS_NONE ? 0 : ns->funcs[f].in_use;
}

uint32_t ns_func_ref(ns_state *ns, uint64_t start) { return func_index(ns, start); }
int ns_func_is_armed(const ns_state *ns, uint32_t f) { return ns->funcs[f].armed; }

/* hwbp, since the journal was last cleared: slots written, fall-backs to a stepped span, the
 * most slots programmed at once after an arming here (0: none) */
uint64_t ns_journal_slot_writes(const ns_state *ns) { return ns->j_slot_writes; }
uint64_t ns_journal_fallbacks(const ns_state *ns) { return ns->j_fallbacks; }
uint64_t ns_journal_max_slots(const ns_state *ns) { return ns->j_max_slots; }

/* ------------------------------------------------------------------ switching */
static const ns_func *known_func(const ns_state *ns, uint32_t f)
{
    return f != NS_NONE && ns->funcs[f].known ? &ns->funcs[f] : NULL;
}

/* the site is armed here and its owner can be disarmed (or is the function entered) */
static const ns_func *owner_of(const ns_state *ns, uint64_t site)
{
    uint32_t i = map_get(&ns->site_ix, site);
    if (i == NS_NONE || !ns->sites[i].armed)
        return NULL;
    return known_func(ns, map_get(&ns->func_ix, ns->sites[i].owner));
}

/* every site the function would get breakpoint bytes on has them */
static int can_arm(const ns_state *ns, const ns_func *fn)
{
    if (fn->armed)
        return 1;
    for (uint32_t k = 0; k < fn->n_sites; k++) {
        const ns_site *s = &ns->sites[fn->sites[k]];
        if (!s->armed && !s->has_bytes && !s->hooked)
            return 0;
    }
    return 1;
}

static void note(ns_state *ns, uint64_t kind, uint64_t start)
{
    ns_entry *e = &ns->journal[ns->n_journal++];  /* room was checked by ns_*_ok */
    e->kind = kind;
    e->start = start;
}

static void write_site(ns_state *ns, ns_site *s, const uint8_t *bytes, uint32_t on)
{
    ns->j_patches++;
    if (!s->hooked) {
        ns->j_removals++;
        ns->code_write(ns->code_port, s->addr, bytes, s->len);
    }  /* (a site hook: its hook reads the table, nothing was translated with it) */
    s->armed = (uint8_t)on;
    if (s->hooked && ns->hooked_active)
        ns->hooked_active(ns->hooked_table, s->addr, on);
    else if (ns->active)
        ns->active(ns->table, s->addr, on);
}

/* int3_python.py _disarm: the sites that are the function's own get their original bytes back
 * (a site hook goes idle) */
static void disarm(ns_state *ns, uint64_t start)
{
    uint32_t f = map_get(&ns->func_ix, start);
    ns_func *fn = &ns->funcs[f];
    if (!fn->armed)
        return;
    fn->armed = 0;
    ns->in_use -= fn->in_use;  /* (hwbp: its slots are free; 0 otherwise) */
    fn->in_use = 0;
    note(ns, NS_DISARMED, start);
    for (uint32_t k = 0; k < fn->n_sites; k++) {
        ns_site *s = &ns->sites[fn->sites[k]];
        if (s->armed && s->owner == start)
            write_site(ns, s, s->orig, 0);
    }
}

/* hwbp_slots.py SlotDelivery.arm: the slots the function's n_free free sites take (`slot_ranges`:
 * one per site; more sites than address slots, one stepped span, a fall-back; range slots,
 * at most `slots` ranges cut at the widest gaps) */
static void count_slots(ns_state *ns, ns_func *fn, uint32_t n_free)
{
    uint32_t ranges = n_free;
    if (n_free > ns->slots) {
        ranges = ns->slot_ranges ? ns->slots : 1;
        ns->j_fallbacks += !ns->slot_ranges;
    }
    ns->j_slot_writes += ranges;
    ns->in_use = ns->in_use - fn->in_use + ranges;
    fn->in_use = ranges;
    if (ns->in_use > ns->j_max_slots)
        ns->j_max_slots = ns->in_use;
}

/* the port programs the armed function's sites in their order, slot i = site i (as
 * SlotDelivery.arm programs them after a disarm freed every slot); a failed request is not
 * retried: the port's next stop reports it */
static void program_slots(ns_state *ns, const ns_func *fn)
{
    uint64_t addrs[NS_MAX_SLOTS];
    uint32_t n = fn->n_sites < ns->slots ? fn->n_sites : ns->slots;
    if (n > NS_MAX_SLOTS)
        n = NS_MAX_SLOTS;
    for (uint32_t k = 0; k < n; k++)
        addrs[k] = ns->sites[fn->sites[k]].addr;
    ns->slots_program(ns->slots_port, addrs, n);
}

/* int3_python.py _arm: a function not armed gets breakpoints on every site not armed already
 * (an idle site hook is armed again) */
static void arm(ns_state *ns, ns_func *fn)
{
    if (fn->armed)
        return;
    fn->armed = 1;
    note(ns, NS_ARMED, fn->start);
    uint32_t n_free = 0;
    for (uint32_t k = 0; k < fn->n_sites; k++) {
        ns_site *s = &ns->sites[fn->sites[k]];
        if (!s->armed) {
            write_site(ns, s, s->bp, 1);
            s->owner = fn->start;
            n_free++;
        }
    }
    if (ns->slots)
        count_slots(ns, fn, n_free);
    if (ns->slots_program)
        program_slots(ns, fn);
}

static int push(ns_state *ns, const ns_func *fn, uint32_t f)
{
    if (grow((void **)&ns->chain, &ns->chain_cap, ns->depth + 1, sizeof *ns->chain) != 0)
        return -1;
    ns->chain[ns->depth].start = fn->start;
    ns->chain[ns->depth].end = fn->end;
    ns->chain[ns->depth].func = f;
    ns->depth++;
    return 0;
}

int ns_call_ok(const ns_state *ns, uint64_t site, uint64_t target)
{
    if (ns->disabled || ns->n_journal + 2 > NS_JOURNAL || ns->depth + 1 > ns->chain_cap)
        return 0;
    const ns_func *owner = owner_of(ns, site);
    const ns_func *callee = known_func(ns, map_get(&ns->target_ix, target));
    return owner != NULL && callee != NULL && can_arm(ns, callee);
}

/* int3_python.py _transfer, CALL under strict: the caller disarmed unless it is the callee, the
 * callee pushed and armed */
void ns_call_commit(ns_state *ns, uint64_t site, uint64_t target)
{
    uint32_t f = map_get(&ns->target_ix, target);
    uint64_t owner = ns->sites[map_get(&ns->site_ix, site)].owner;
    if (ns->funcs[f].start != owner)
        disarm(ns, owner);
    if (ns->depth < ns->low)
        ns->low = ns->depth;
    push(ns, &ns->funcs[f], f);  /* room was checked by ns_call_ok */
    arm(ns, &ns->funcs[f]);
    ns->switches++;
}

/* int3_python.py _caller: the frame a return goes back to (the innermost one whose extent holds
 * the target after the returning one is popped); 0: the chain would be empty */
static size_t caller_depth(const ns_state *ns, uint64_t target)
{
    uint64_t code = target & ns->code_mask;
    size_t n = ns->depth ? ns->depth - 1 : 0;
    while (n > 0 && !(ns->chain[n - 1].start <= code && code < ns->chain[n - 1].end))
        n--;
    return n;
}

int ns_return_ok(const ns_state *ns, uint64_t site, uint64_t target)
{
    if (ns->disabled || ns->n_journal + 2 > NS_JOURNAL || ns->depth == 0)
        return 0;
    size_t n = caller_depth(ns, target);
    if (n == 0)
        return 0;  /* discovery finds the caller: Python */
    const ns_func *caller = known_func(ns, ns->chain[n - 1].func);
    return owner_of(ns, site) != NULL && caller != NULL && can_arm(ns, caller);
}

/* int3_python.py _transfer, RETURN under strict: the chain popped to the caller, the returning
 * function disarmed unless it is the caller, the caller armed */
void ns_return_commit(ns_state *ns, uint64_t site, uint64_t target)
{
    size_t n = caller_depth(ns, target);
    uint64_t owner = ns->sites[map_get(&ns->site_ix, site)].owner;
    ns->depth = n;
    if (n < ns->low)
        ns->low = n;
    ns_func *caller = &ns->funcs[ns->chain[n - 1].func];
    if (caller->start != owner)
        disarm(ns, owner);
    arm(ns, caller);
    ns->switches++;
}

/* a site of fn whose bytes a switch writes lies in [lo, hi): the block running now, which is
 * translated already, so they would take effect only at its next translation (the
 * reference restarts the block: int3_python.py `_armed_now`) */
static int writes_in(const ns_state *ns, const ns_func *fn, uint64_t lo, uint64_t hi)
{
    if (lo >= hi)
        return 0;  /* (no block running: a trap's switch) */
    for (uint32_t k = 0; fn && k < fn->n_sites; k++) {
        const ns_site *s = &ns->sites[fn->sites[k]];
        if (!s->hooked && lo <= s->addr && s->addr < hi)
            return 1;
    }
    return 0;
}

/* int3_python.py _transfer, a jump into another function that records nothing, under strict: the
 * chain's innermost frame becomes the function entered, the function left is disarmed and
 * the one entered armed.  1: switched; 0: declined, nothing changed (Python's) */
int ns_jump(ns_state *ns, uint64_t site, uint64_t target, uint64_t lo, uint64_t hi)
{
    if (ns->disabled || ns->n_journal + 2 > NS_JOURNAL || ns->depth == 0)
        return 0;
    const ns_func *owner = owner_of(ns, site);
    uint32_t f = map_get(&ns->target_ix, target);
    const ns_func *callee = known_func(ns, f);
    if (owner == NULL || callee == NULL || callee == owner || !can_arm(ns, callee)
        || writes_in(ns, owner, lo, hi) || writes_in(ns, callee, lo, hi))
        return 0;
    uint64_t left = owner->start;
    if (ns->depth - 1 < ns->low)
        ns->low = ns->depth - 1;
    ns->chain[ns->depth - 1].start = callee->start;
    ns->chain[ns->depth - 1].end = callee->end;
    ns->chain[ns->depth - 1].func = f;
    disarm(ns, left);
    arm(ns, &ns->funcs[f]);
    ns->switches++;
    return 1;
}

/* a transfer that already ran (a site hook's, resolved at the start of the next block,
 * [lo, hi): hotpath.c hs_finish): switched here (1) or declined (0, nothing changed:
 * Python's), also when the switch would write breakpoint or original bytes into that block
 * (`writes_in`: a patch site there, on a patch-delivery ISA) */
int ns_switch(ns_state *ns, uint32_t call, uint64_t site, uint64_t target, uint64_t lo,
              uint64_t hi)
{
    if (call ? !ns_call_ok(ns, site, target) : !ns_return_ok(ns, site, target))
        return 0;
    const ns_func *owner = owner_of(ns, site);
    const ns_func *entered = call ? known_func(ns, map_get(&ns->target_ix, target))
                                  : known_func(ns, ns->chain[caller_depth(ns, target) - 1].func);
    if (writes_in(ns, owner, lo, hi) || writes_in(ns, entered, lo, hi))
        return 0;
    if (call)
        ns_call_commit(ns, site, target);
    else
        ns_return_commit(ns, site, target);
    return 1;
}
