/* emutrace native hot path for the branch-tracing backends `bts` and `btf`: one Unicorn block
 * hook (backends/branch.py `BranchObserver._on_block` is the reference, step for step).
 *
 * Built into the same library as hotpath.c (setup.py) and loaded the same way: Unicorn is
 * called through function pointers from the binding's own libunicorn.so.2, Python only
 * through the callbacks in bb_config (ctypes trampolines that take the GIL).
 *
 * Per block entry: read the instruction set (ARM: CPSR.T), look the block up in a table
 * keyed by (address, size, instruction set) that Python fills once per block (instruction
 * count, the control transfer ending it, its index, fall-through, flags), then decide
 * whether the branch that ended the previous block was taken: the new block is not its
 * fall-through, or it is unconditional (a MIPS branch whose delay slot is a block of its
 * own resolves one block later).  Then count the block's instructions.
 *
 * A taken branch is, for
 * - bts: one record (from, to, time, sp at the target, instruction set).  `capacity`
 *   records make the BTS interrupt: Python decodes them (py_flush(1)).  A buffer smaller
 *   than the capacity is handed to Python without decoding (py_flush(0)), which keeps them
 *   as the reference's list does until the interrupt.  A record the decoder would make
 *   nothing of (a jump to no function entry: step.c's rule) is counted, not buffered;
 * - btf: one trap (counted).  Like step.c: a jump to no function entry records nothing; a
 *   call, a return or a jump to an entry whose values a register snapshot at the target
 *   covers is one record (the registers an ArgReader reads at the target); anything else
 *   is decoded by Python now, on the live CPU at the target (py_live), after the buffer.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <unicorn/unicorn.h>

#include "abi.h"
#include "addrset.h"
#include "branch.h"

typedef struct {
    uint64_t addr;   /* with size and thumb, the key; flags 0: an empty slot */
    uint32_t size, thumb;
    uint32_t count, index, flags;
    uint64_t site, fallthrough;
} bb_block;

#define B_KNOWN (1u << 31)  /* set on every filled slot */

/* the block table: keyed by (address, size, instruction set) */
typedef struct {
    uint64_t addr;
    uint32_t size, thumb;
} bb_key;
#define BB_INDEX(k, cap) \
    (addr_mix((k).addr ^ ((uint64_t)(k).size << 40) ^ ((uint64_t)(k).thumb << 63)) & ((cap) - 1))
#define BB_USED(e) ((e)->flags != 0)
#define BB_MATCH(e, k) ((e)->addr == (k).addr && (e)->size == (k).size && (e)->thumb == (k).thumb)
#define BB_KEYOF(e) ((bb_key){(e)->addr, (e)->size, (e)->thumb})
#define BB_SETKEY(e, k) ((e)->addr = (k).addr, (e)->size = (k).size, (e)->thumb = (k).thumb)
ADDRTAB(bb_blocks, bb_block, bb_key, BB_INDEX, BB_USED, BB_MATCH, BB_KEYOF, BB_SETKEY)

struct bb_state {
    uc_engine *uc;
    bb_config cfg;
    bb_blocks blocks;
    addrset fast;     /* btf: call targets whose arguments the snapshot covers */
    addrset entries;  /* btf: a superset of TailRule.entries (step.c's) */
    nt_event *records;
    uint32_t n_records;
    /* the branch that ended the last block (BranchObserver.branch and friends) */
    int has_branch, waiting;
    bb_block branch;
    uint64_t branch_time;
    uint32_t branch_thumb;
    uint64_t time;
    /* counters: taken branches, interrupts, records since the last decode (bts), branches
     * Python decoded live (btf), records buffered */
    uint64_t taken, interrupts, fill, live, buffered;
};

/* ------------------------------------------------------------------ API for Python */
bb_state *bb_new(uc_engine *uc, const bb_config *cfg)
{
    bb_state *s = calloc(1, sizeof *s);
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
    int blocks = bb_blocks_init(&s->blocks, 1 << 12);
    int sets = addrset_init(&s->fast, 1024) | addrset_init(&s->entries, 1024);
    s->records = calloc(s->cfg.abi.buffer_events, sizeof *s->records);
    if (blocks != 0 || sets != 0 || !s->records) {
        bb_blocks_free(&s->blocks); addrset_free(&s->fast); addrset_free(&s->entries);
        free(s->records); free(s);
        return NULL;
    }
    return s;
}

void bb_free(bb_state *s)
{
    if (!s)
        return;
    bb_blocks_free(&s->blocks);
    addrset_free(&s->fast);
    addrset_free(&s->entries);
    free(s->records);
    free(s);
}

int bb_fast_add(bb_state *s, uint64_t target) { return addrset_add(&s->fast, target); }
int bb_entry_add(bb_state *s, uint64_t code) { return addrset_add(&s->entries, code); }
uint64_t bb_get_time(const bb_state *s) { return s->time; }
void bb_set_time(bb_state *s, uint64_t t) { s->time = t; }

/* BranchObserver.interrupted: the pending branch never runs (a signal handler entered) */
void bb_interrupted(bb_state *s)
{
    s->has_branch = 0;
    s->waiting = 0;
}

/* the records were decoded outside an interrupt (bts: a signal, the end) */
void bb_fill_reset(bb_state *s) { s->fill = 0; }

/* counters: 0 taken branches, 1 interrupts, 2 records since the last decode, 3 branches
 * decoded live, 4 records buffered */
uint64_t bb_counter(const bb_state *s, uint32_t which)
{
    switch (which) {
    case 0: return s->taken;
    case 1: return s->interrupts;
    case 2: return s->fill;
    case 3: return s->live;
    case 4: return s->buffered;
    default: return 0;
    }
}

const nt_event *bb_records(const bb_state *s) { return s->records; }
uint32_t bb_records_count(const bb_state *s) { return s->n_records; }
void bb_records_clear(bb_state *s) { s->n_records = 0; }

/* ------------------------------------------------------------------ the hook */
static inline uint64_t rd(bb_state *s, int reg)
{
    uint64_t v = 0;  /* 32-bit registers fill the low half (little-endian host) */
    s->cfg.reg_read(s->uc, reg, &v);
    return v;
}

static uint64_t word_from(const bb_state *s, const uint8_t *b)
{
    uint64_t v = 0;
    uint32_t n = s->cfg.abi.word;
    for (uint32_t i = 0; i < n; i++)
        v |= (uint64_t)b[s->cfg.abi.big_endian ? n - 1 - i : i] << (8 * i);
    return v;
}

/* the stack pointer as the reference reads it (Uc.reg_read: unmasked) */
static inline uint64_t sp_now(bb_state *s) { return rd(s, s->cfg.abi.sp_reg); }

/* a free record (the buffer handed to Python first when full), or NULL */
static nt_event *next_record(bb_state *s)
{
    if (s->n_records >= s->cfg.abi.buffer_events) {
        s->cfg.py_flush(0);  /* takes the GIL; the buffer is empty afterwards */
        if (s->n_records >= s->cfg.abi.buffer_events)
            return NULL;
    }
    return &s->records[s->n_records++];
}

/* May decoding this taken branch make an event (BranchDecoder.event)?  No for a jump to an
 * address outside `entries` (TailRule.is_tail is false there without a side effect: the
 * tail rule's entries are a subset of C's, which take every call target when it is taken
 * and every symbol entry before any code of a newly mapped module runs), nor for a kind
 * that is no call, return or jump.  A call's target joins `entries`. */
static int may_be_event(bb_state *s, uint64_t target)
{
    uint32_t flags = s->branch.flags, kind = B_KIND(flags);
    if (flags & B_MAYBE_RETURN)
        return 1;
    if (kind == K_CALL) {
        if (target != s->branch.fallthrough)
            addrset_add(&s->entries, target & s->cfg.abi.code_mask);
        return 1;
    }
    if (kind == K_RETURN)
        return 1;
    if (kind == K_JUMP || kind == K_BRANCH)
        return addrset_has(&s->entries, target & s->cfg.abi.code_mask);
    return 0;
}

/* bts: the branch record, and the interrupt when the buffer reaches its capacity.  Every
 * taken branch counts (records, the interrupt threshold); only those that may be an event
 * are handed to the decoder, which makes nothing of the others */
static void bts_record(bb_state *s, uint64_t target)
{
    if (may_be_event(s, target)) {
        nt_event *r = next_record(s);
        if (r) {
            r->kind = EV_RAW;
            r->flags = s->branch_thumb;
            r->time = s->branch_time;
            r->site = s->branch.site;
            r->target = target;
            r->sp = sp_now(s);
            s->buffered++;
        }
    }
    s->fill++;
    if (s->fill >= s->cfg.capacity) {
        s->interrupts++;
        s->fill = 0;
        s->cfg.py_flush(1);
    }
}

/* btf: the buffered record of a taken branch; 1 done (or nothing to record), 0 where
 * Python must decode it on the live CPU */
static int btf_record(bb_state *s, uint64_t target)
{
    uint32_t flags = s->branch.flags, kind = B_KIND(flags);
    uint64_t code = target & s->cfg.abi.code_mask;
    uint8_t stack[8 * NT_MAX_REGS];
    if (flags & B_MAYBE_RETURN)
        return 0;  /* returns_to: the tail rule's frames decide */
    if (kind == K_CALL) {
        if (target == s->branch.fallthrough)
            return 1;  /* a call to the next instruction only reads the PC */
        if (addrset_add(&s->entries, code) != 0 || !addrset_has(&s->fast, target))
            return 0;
    } else if (kind == K_RETURN) {
        if (target == s->branch.fallthrough)
            return 1;  /* a return to the next instruction is not taken */
        if (addrset_has(&s->entries, code))  /* maybe a return into an entry: a jump */
            return 0;
        if (!(flags & B_RET_FAST))
            return 0;
    } else if (kind == K_JUMP || kind == K_BRANCH) {
        if (!addrset_has(&s->entries, code))
            return 1;  /* TailRule.is_tail is false without a side effect */
        if (!addrset_has(&s->fast, target))
            return 0;
    } else {
        return 1;  /* no event for any other kind (BranchDecoder.event) */
    }
    uint64_t mask = s->cfg.abi.word == 8 ? ~0ULL : 0xffffffffULL;
    uint64_t sp = sp_now(s);
    if (kind != K_RETURN && s->cfg.abi.n_stack
        && s->cfg.mem_read(s->uc, (sp + s->cfg.abi.stack_offset) & mask, stack,
                           (uint64_t)s->cfg.abi.n_stack * s->cfg.abi.word) != UC_ERR_OK)
        return 0;
    nt_event *r = next_record(s);
    if (!r)
        return 0;
    r->kind = kind == K_CALL ? EV_CALL : kind == K_RETURN ? EV_RETURN : EV_TAIL;
    r->flags = s->branch_thumb;
    r->time = s->branch_time;
    r->site = s->branch.site;
    r->target = target;
    r->sp = sp;
    r->fallthrough = s->branch.fallthrough;
    r->entry_sp = sp;
    if (kind == K_RETURN) {
        uint32_t n = 0;
        if (s->cfg.abi.ret_reg >= 0)
            r->regs[n++] = rd(s, s->cfg.abi.ret_reg);
        if (s->cfg.abi.ret_hi_reg >= 0)
            r->regs[n++] = rd(s, s->cfg.abi.ret_hi_reg);
    } else {  /* the arguments as the callee sees them at its entry */
        for (uint32_t i = 0; i < s->cfg.abi.n_args; i++)
            r->regs[i] = rd(s, s->cfg.abi.arg_regs[i]);
        for (uint32_t i = 0; i < s->cfg.abi.n_stack; i++)
            r->regs[s->cfg.abi.n_args + i] = word_from(s, stack + i * s->cfg.abi.word);
    }
    s->buffered++;
    return 1;
}

static void taken(bb_state *s, uint64_t target)
{
    s->taken++;
    if (!s->cfg.live) {
        bts_record(s, target);
        return;
    }
    if (btf_record(s, target))
        return;
    s->live++;
    if (s->n_records)
        s->cfg.py_flush(0);
    s->cfg.py_live(s->branch.site, target, s->branch_time, s->branch_thumb);
}

void bb_on_block(uc_engine *uc, uint64_t addr, uint32_t size, void *user_data)
{
    bb_state *s = user_data;
    (void)uc;
    uint32_t thumb = s->cfg.alt_reg >= 0 && (rd(s, s->cfg.alt_reg) & s->cfg.alt_mask) != 0;
    /* the block first (Python decodes it once, and refreshes `entries` when it decodes new
     * code: before the branch into it is resolved; decoding has no effect on resolving) */
    bb_block *b = bb_blocks_find(&s->blocks, (bb_key){addr, size, thumb});
    if (!b) {
        uint64_t out[5] = {0, 0, 0, 0, 0};
        s->cfg.py_block(addr, size, thumb, out);
        bb_block fresh = {addr, size, thumb, (uint32_t)out[0], (uint32_t)out[2],
                          (uint32_t)out[4] | B_KNOWN, out[1], out[3]};
        b = bb_blocks_put(&s->blocks, (bb_key){addr, size, thumb});
        if (!b)
            return;
        *b = fresh;
    }
    if (s->waiting) {
        s->waiting = 0;
    } else {
        if (s->has_branch
            && (addr != s->branch.fallthrough || !(s->branch.flags & B_CONDITIONAL)))
            taken(s, addr);
        s->has_branch = 0;
    }
    if (b->flags & B_SITE) {
        s->branch = *b;
        s->has_branch = 1;
        s->waiting = (b->flags & B_SPLIT) != 0;
        s->branch_time = s->time + b->index;
        s->branch_thumb = thumb;
    }
    s->time += b->count;
}

/* ------------------------------------------------------------------ a port that stops */
/* ploop.c pl_block (PTRACE_SINGLEBLOCK): a stop's block is the run from where the tracee was
 * resumed to the stop, which Python walked once (btf_native.py `_walk`); when the walk
 * crossed no taken branch the backend's hook only counts its instructions, so Python tells
 * it as a block that ends in no transfer (no B_SITE, as bb_on_block counts one). */
int bb_quiet_add(bb_state *s, uint64_t addr, uint32_t size, uint32_t count)
{
    bb_block *b = bb_blocks_put(&s->blocks, (bb_key){addr, size, 0});
    if (!b)
        return -1;
    *b = (bb_block){addr, size, 0, count, 0, B_KNOWN, 0, addr + size};
    return 0;
}

uint32_t bb_block_quietly(const bb_state *s, uint64_t from, uint64_t at)
{
    if (at <= from || at - from > UINT32_MAX)
        return 0;  /* a REP iteration, a branch back: Python's */
    const bb_block *b = bb_blocks_find(&s->blocks, (bb_key){from, (uint32_t)(at - from), 0});
    return b && !(b->flags & B_SITE) ? b->count : 0;
}
