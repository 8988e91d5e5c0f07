/* emutrace native hot path: the entry backend's probes under emulation (backends/entry_python.py,
 * the Python reference; backends/entry_native.py binds this).
 *
 * A probe is a breakpoint on a function's first instruction.  At its trap C applies the
 * frame rule of `EntryBackend._entered`: the return address (link register, or the word at
 * sp: Intel SDM vol. 2, CALL) and the sp before the call (entry sp plus what the call
 * pushed) against the innermost open frame: the same frame and the same function records
 * nothing (a loop back to its own entry), any other frame is a call (hotpath.c writes its
 * record).  Then the displaced instruction is stepped over as int3_python.py's fall-back does it
 * (uprobes' step-over): the program's bytes back (uc_mem_write, uc_ctl_remove_cache), the
 * block run again from the probe (EP_COUNT: counted as the reference counts it), and at the
 * next block the breakpoint written back and that block restarted so that it holds the
 * probe (EP_RESTARTED: counted when it runs again).  If Python wants that block (hotpath.c's
 * attention), the re-arm is handed to Python instead (`ep_handover`), which re-arms it as the
 * reference's `_on_block` does.
 *
 * Python's (EP_PYTHON): a probe it was not told about (a jump or call at an entry, which the
 * reference simulates; a probe whose arguments are strings or structs; ELFv2's local entry),
 * the process entry while no frame is open, a signal handler's entry, a jump to another
 * function in the same frame (the tail rule), and every probe while a mapped module waits to
 * be probed (`hold`).  The open frames live here while C runs: Python reads back the part C
 * changed (from `ep_low` up, when `ep_dirty`) and hands over the part it changed
 * (`ep_frames_splice`): a deep recursion holds thousands of frames, and copying them all at
 * every Python section made it quadratic.
 */
#include <stdlib.h>
#include <string.h>

#include <unicorn/unicorn.h>

#include "abi.h"
#include "addrmap.h"
#include "core.h"
#include "entryprobe.h"

#define EP_MAX_BP 4  /* the longest breakpoint encoding (codeguard.py MAX_BP) */

typedef struct {
    uint64_t addr;  /* 0: empty */
    uint64_t func;
    uint8_t len, active;
    uint8_t hooked;  /* hook delivery: no breakpoint, the block hook sees it (len 0) */
    uint8_t pc_bits; /* ARM: 1 for a Thumb probe (an odd PC selects Thumb state) */
    uint8_t orig[EP_MAX_BP], bp[EP_MAX_BP];
} ep_probe;

ADDRTAB_BY_ADDR(ep_probes, ep_probe)

struct ep_state {
    uc_engine *uc;
    nt_reg_read_fn reg_read;
    nt_reg_write_fn reg_write;
    nt_mem_read_fn mem_read;
    nt_mem_write_fn mem_write;
    nt_ctl_fn ctl;
    int32_t pc_reg, sp_reg, link_reg;  /* link_reg -1: the call pushes the return address */
    int32_t mode_reg;   /* ARM: CPSR, whose mode_bit (T) says Thumb; -1: one instruction set */
    uint64_t mode_bit;
    uint32_t word, big_endian;
    uint64_t push, code_mask;
    ep_probes probes;
    ep_frame *frames;
    size_t depth, frames_cap;
    uint8_t dirty;      /* C changed the frames since Python last read them ... */
    size_t low;         /* ... none below this index */
    uint8_t hold;       /* a mapped module waits to be probed: every probe is Python's */
    uint64_t process_entry, handler_entry;
    /* the step-over in progress: the probe's block runs from resume_at (0: none), then
     * `rearm` is written back at the next block, which is restarted (restarted: its
     * address) or handed to Python (handover) */
    uint64_t resume_at, rearm, restarted, handover;
    uint64_t traps, stepovers, patches;
    uint64_t hooked_used;  /* hooked probes in the table */
    /* where the frame rule reads the stack pointer, link register and return address: the
     * Unicorn functions above (uc_ops), or the port that runs the program (ep_bind_port) */
    const core_ops *ops;
    void *port;
};

/* the frame rule's reads over the Unicorn functions ep_new was handed */
static void uc_regs_read(void *port, const int32_t *ids, uint64_t *out, uint32_t n)
{
    ep_state *e = port;
    for (uint32_t i = 0; i < n; i++) {
        out[i] = 0;  /* 32-bit registers fill the low half */
        e->reg_read(e->uc, ids[i], &out[i]);
    }
}

static int uc_read(void *port, uint64_t addr, void *out, uint64_t len)
{
    ep_state *e = port;
    return e->mem_read(e->uc, addr, out, len) == UC_ERR_OK ? 0 : -1;
}

static const core_ops uc_ops = {.regs_read = uc_regs_read, .mem_read = uc_read};

ep_state *ep_new(uc_engine *uc, void *reg_read, void *reg_write, void *mem_read,
                 void *mem_write, void *ctl, int32_t pc_reg, int32_t sp_reg, int32_t link_reg,
                 uint32_t word, uint32_t big_endian, uint64_t push, uint64_t code_mask,
                 int32_t mode_reg, uint64_t mode_bit)
{
    ep_state *e = calloc(1, sizeof *e);
    if (!e)
        return NULL;
    e->uc = uc;
    e->reg_read = (nt_reg_read_fn)reg_read;
    e->reg_write = (nt_reg_write_fn)reg_write;
    e->mem_read = (nt_mem_read_fn)mem_read;
    e->mem_write = (nt_mem_write_fn)mem_write;
    e->ctl = (nt_ctl_fn)ctl;
    e->pc_reg = pc_reg;
    e->sp_reg = sp_reg;
    e->link_reg = link_reg;
    e->mode_reg = mode_reg;
    e->mode_bit = mode_bit;
    e->word = word;
    e->big_endian = big_endian;
    e->push = push;
    e->code_mask = code_mask;
    e->ops = &uc_ops;
    e->port = e;
    if (ep_probes_init(&e->probes, 1024) != 0) {
        free(e);
        return NULL;
    }
    return e;
}

/* the port whose registers and memory the frame rule reads (the ptrace loop's) */
void ep_bind_port(ep_state *e, const core_ops *ops, void *port)
{
    e->ops = ops;
    e->port = port;
}

void ep_free(ep_state *e)
{
    if (!e)
        return;
    ep_probes_free(&e->probes);
    free(e->frames);
    free(e);
}

/* the table's row for a probe at addr (new or replaced), or NULL: out of memory */
static ep_probe *probe_row(ep_state *e, uint64_t addr)
{
    ep_probe *p = ep_probes_put(&e->probes, addr);
    if (!p)
        return NULL;
    e->hooked_used -= p->hooked;
    return p;
}

/* a probe C steps over: at addr, of the function starting at func; orig: the program's
 * bytes under the breakpoint bp (len of each); pc_bits: what the PC that runs it again
 * adds to addr (ARM's Thumb code: 1) */
int ep_probe_add(ep_state *e, uint64_t addr, uint64_t func, const uint8_t *orig,
                 const uint8_t *bp, uint32_t len, uint32_t pc_bits)
{
    if (len == 0 || len > EP_MAX_BP)
        return -1;
    ep_probe *p = probe_row(e, addr);
    if (!p)
        return -1;
    *p = (ep_probe){.addr = addr, .func = func, .len = (uint8_t)len, .active = 1,
                    .pc_bits = (uint8_t)pc_bits};
    memcpy(p->orig, orig, len);
    memcpy(p->bp, bp, len);
    return 0;
}

/* a probe under hook delivery (MIPS, RISC-V: no breakpoint is written): at addr, of the
 * function starting at func; the block hook that sees a block start there asks ep_enter */
int ep_probe_add_hooked(ep_state *e, uint64_t addr, uint64_t func)
{
    ep_probe *p = probe_row(e, addr);
    if (!p)
        return -1;
    *p = (ep_probe){.addr = addr, .func = func, .active = 1, .hooked = 1};
    e->hooked_used++;
    return 0;
}

uint64_t ep_hooked_count(const ep_state *e) { return e->hooked_used; }

/* is there an active hooked probe at addr? */
int ep_hooked_at(const ep_state *e, uint64_t addr)
{
    const ep_probe *p = ep_probes_find(&e->probes, addr);
    return p && p->hooked && p->active;
}

/* Python armed (1) or disarmed (0) the probe's breakpoint itself (a hooked probe: 0 when
 * its site became Python's code hook) */
void ep_probe_active(ep_state *e, uint64_t addr, uint32_t on)
{
    ep_probe *p = ep_probes_find(&e->probes, addr);
    if (p)
        p->active = (uint8_t)on;
}

void ep_set(ep_state *e, uint32_t hold, uint64_t process_entry, uint64_t handler_entry)
{
    e->hold = (uint8_t)hold;
    e->process_entry = process_entry;
    e->handler_entry = handler_entry;
}

static int frames_room(ep_state *e, size_t n)
{
    if (n <= e->frames_cap)
        return 0;
    size_t cap = e->frames_cap ? e->frames_cap : 64;
    while (cap < n)
        cap *= 2;
    ep_frame *f = realloc(e->frames, cap * sizeof *f);
    if (!f)
        return -1;
    e->frames = f;
    e->frames_cap = cap;
    return 0;
}

/* Python's open frames: the first keep as C has them, then n more (ra, call sp, function:
 * each 3 words); C's from now on */
int ep_frames_splice(ep_state *e, uint64_t keep, uint64_t n, const uint64_t *words)
{
    if (keep > e->depth || frames_room(e, keep + n) != 0)
        return -1;
    for (uint64_t i = 0; i < n; i++)
        e->frames[keep + i] = (ep_frame){words[3 * i], words[3 * i + 1], words[3 * i + 2]};
    e->depth = keep + n;
    e->dirty = 0;
    e->low = e->depth;
    return 0;
}

uint32_t ep_dirty(const ep_state *e) { return e->dirty; }
uint64_t ep_low(const ep_state *e) { return e->low; }
uint64_t ep_depth(const ep_state *e) { return e->depth; }
const ep_frame *ep_frames(const ep_state *e) { return e->frames; }
void ep_clean(ep_state *e)
{
    e->dirty = 0;
    e->low = e->depth;
}

/* the frames from index k up changed */
static void changed_from(ep_state *e, size_t k)
{
    e->dirty = 1;
    if (k < e->low)
        e->low = k;
}

/* counters: 0 probe traps C finished, 1 of them stepped over (all of them), 2 bytes
 * written back and forth (patches, as int3_python.py counts a fall-back's) */
uint64_t ep_counter(const ep_state *e, uint32_t which)
{
    return which == 0 ? e->traps : which == 1 ? e->stepovers : which == 2 ? e->patches : 0;
}

/* the probe whose re-arm Python does at this block (0: none); taken once */
uint64_t ep_handover(ep_state *e)
{
    uint64_t at = e->handover;
    e->handover = 0;
    return at;
}

static int read_word(const ep_state *e, uint64_t addr, uint64_t *v)
{
    uint8_t b[8];
    if (e->ops->mem_read(e->port, addr, b, e->word) != 0)
        return 0;
    *v = 0;
    for (uint32_t i = 0; i < e->word; i++)
        *v |= (uint64_t)b[e->big_endian ? e->word - 1 - i : i] << (8 * i);
    return 1;
}

static void drop_code(ep_state *e, uint64_t addr, uint32_t len)
{
    e->ctl(e->uc, UC_CTL_WRITE(UC_CTL_TB_REMOVE_CACHE, 2), addr, addr + len);
}

/* entry_python.py `_entered`'s frame rule at probe p (at addr), with the registers of the probed
 * instruction: EP_CALL (a new frame, *out its record), EP_STEP (the same frame: nothing
 * recorded) or EP_PYTHON (nothing changed) */
static int frame_rule(ep_state *e, const ep_probe *p, uint64_t addr, ep_call *out)
{
    uint64_t mask = e->word == 8 ? ~0ULL : 0xffffffffULL;
    if ((p->func == e->process_entry && e->depth == 0) || p->func == e->handler_entry)
        return EP_PYTHON;  /* nothing called it: no call (entry_python.py _entered) */
    uint64_t sp = 0, ra = 0;
    e->ops->regs_read(e->port, &e->sp_reg, &sp, 1);
    sp &= mask;
    if (e->link_reg >= 0) {
        e->ops->regs_read(e->port, &e->link_reg, &ra, 1);
        ra &= mask;
    } else if (!read_word(e, sp, &ra)) {
        return EP_PYTHON;
    }
    ra &= e->code_mask;
    uint64_t call_sp = (sp + e->push) & mask;
    size_t k = e->depth;
    while (k && e->frames[k - 1].call_sp < call_sp)  /* frames left without a return */
        k--;
    int kind;
    if (k && e->frames[k - 1].ra == ra && e->frames[k - 1].call_sp == call_sp) {
        if (e->frames[k - 1].func != p->func)
            return EP_PYTHON;  /* a jump to another function: the tail rule's */
        kind = EP_STEP;  /* a loop back to its own entry: nothing recorded */
    } else {
        if (k && e->frames[k - 1].call_sp == call_sp)
            k--;  /* a frame at this very level is over */
        if (frames_room(e, k + 1) != 0)
            return EP_PYTHON;
        e->frames[k++] = (ep_frame){ra, call_sp, p->func};
        kind = EP_CALL;
        *out = (ep_call){ra, call_sp, sp, addr};
    }
    if (kind == EP_CALL)
        changed_from(e, k - 1);
    else if (k != e->depth)
        changed_from(e, k);
    e->depth = k;
    return kind;
}

/* is there a probe with a breakpoint (not a hooked one) at addr, active or not? */
int ep_probe_at(const ep_state *e, uint64_t addr)
{
    const ep_probe *p = ep_probes_find(&e->probes, addr);
    return p && !p->hooked;
}

/* a probe's trap under a port that steps over by itself (the ptrace loop: the program's
 * bytes back, one PTRACE_SINGLESTEP, the breakpoint again): the frame rule's answer
 * (EP_CALL, *out its record; EP_STEP; EP_PYTHON: nothing changed), counted as a trap and
 * a step-over unless Python's; *orig: the program's byte under the breakpoint */
int ep_decide(ep_state *e, uint64_t addr, ep_call *out, uint8_t *orig)
{
    ep_probe *p = ep_probes_find(&e->probes, addr);
    if (!p || !p->active || p->hooked || e->hold)
        return EP_PYTHON;
    int kind = frame_rule(e, p, addr, out);
    if (kind == EP_PYTHON)
        return kind;
    *orig = p->orig[0];
    e->traps++;
    e->stepovers++;
    return kind;
}

int ep_trap(ep_state *e, uint64_t addr, ep_call *out)
{
    ep_probe *p = ep_probes_find(&e->probes, addr);
    if (!p || !p->active || p->hooked || e->hold || e->resume_at || e->rearm
        || e->restarted || e->handover)
        return EP_PYTHON;
    int kind = frame_rule(e, p, addr, out);
    if (kind == EP_PYTHON)
        return kind;
    /* the step-over (int3_python.py _on_trap's fall-back): the program's bytes back, run from
     * here */
    e->mem_write(e->uc, addr, p->orig, p->len);
    e->patches++;
    drop_code(e, addr, p->len);
    uint64_t pc = addr | p->pc_bits;
    e->reg_write(e->uc, e->pc_reg, &pc);
    e->resume_at = addr;
    e->traps++;
    e->stepovers++;
    return kind;
}

int ep_block(ep_state *e, uint64_t addr, uint32_t attention)
{
    if (e->restarted) {  /* (nothing runs between the restart and this block) */
        int again = e->restarted == addr;
        e->restarted = 0;
        if (again)
            return EP_COUNT;
    }
    if (e->resume_at) {
        uint64_t at = e->resume_at;
        e->resume_at = 0;
        e->rearm = at;
        if (at == addr)
            return EP_COUNT;  /* the probe's block, with the program's bytes */
    }
    if (!e->rearm)
        return EP_GO;
    ep_probe *p = ep_probes_find(&e->probes, e->rearm);
    uint64_t at = e->rearm;
    e->rearm = 0;
    if (!p || !p->active)
        return EP_GO;  /* Python disarmed it meanwhile: nothing to write back */
    if (attention) {  /* Python's block: the reference's re-arm is Python's too */
        e->handover = at;
        return EP_GO;
    }
    e->mem_write(e->uc, at, p->bp, p->len);
    e->patches++;
    drop_code(e, at, p->len);
    /* this block was translated before the probe was back: run it again (int3_python.py
     * _on_block's restart), in the instruction set it runs in */
    uint64_t pc = addr;
    if (e->mode_reg >= 0) {
        uint64_t mode = 0;
        e->reg_read(e->uc, e->mode_reg, &mode);
        pc |= (mode & e->mode_bit) != 0;
    }
    e->reg_write(e->uc, e->pc_reg, &pc);
    e->restarted = addr;
    return EP_RESTARTED;
}

int ep_enter(ep_state *e, uint64_t addr, ep_call *out)
{
    ep_probe *p = ep_probes_find(&e->probes, addr);
    if (!p || !p->hooked || !p->active)
        return EP_NONE;
    if (e->hold)
        return EP_PYTHON;
    int kind = frame_rule(e, p, addr, out);
    if (kind != EP_PYTHON)
        e->traps++;
    return kind;
}

void ep_returned(ep_state *e, uint64_t target)
{
    for (size_t i = e->depth; i-- > 0;) {
        if (e->frames[i].ra == target) {  /* the frame it returns to, and those above */
            e->depth = i;
            changed_from(e, i);
            return;
        }
    }
}
