/* emutrace native library: the core's trap (core.h says what a port is), in a header so that
 * each port compiles it with its own operations known (hotpath.c, ploop.c: `static const`
 * core_ops, whose calls the compiler then makes direct); core.c's `core_trap` is the same
 * body over a state's own operations.
 *
 * A trap at an armed site: read the registers the site's plan names (one port call),
 * simulate the displaced call or return as its lowered op says (uprobes' simulate-insn:
 * push or link the return address and jump; pop or read the link register; a jump's
 * condition over flag bits, cond.h), write one fixed-size record (abi.h nt_event) with the
 * registers Python turns into values, or hand it to the record writer (ufwrite.c), and
 * leave the registers as after the instruction for the port to resume.  Everything C cannot
 * finish — a first call (discovery, arming), a form it does not know, a value it does not
 * hold — is left untouched for Python's reference.
 */
#ifndef EMUTRACE_CORETRAP_H
#define EMUTRACE_CORETRAP_H

#include <string.h>

#include "cond.h"
#include "core.h"

/* the site's registers from..to (site->reads' order) into c->vals: one port call */
static inline void core_site_reads(const core_ops *ops, core_state *c, const core_site *site,
                                   uint32_t from, uint32_t to)
{
    if (to <= from)
        return;
    ops->regs_read(c->port, site->reads + from, c->vals + from, to - from);
}

/* may C finish the site at all (the op's guard)? */
static inline int core_guard_holds(const core_state *c, const core_site *site)
{
    uint64_t v = c->vals[site->i_guard];
    if (site->guard == C_MASK_ZERO)
        return (v & site->gmask) == 0;
    return test_holds(site->guard, v, site->ga, site->gb, 0) == 1;
}

/* does a target read from a register or the stack pass the site's test (interworking)? */
static inline int core_target_ok(const core_site *site, uint64_t raw)
{
    return test_holds(site->ttest, raw, site->ta, site->tb, 0) == 1;
}

static inline int core_cond_holds(const core_state *c, const core_site *site)
{
    return test_holds(site->cond, c->vals[site->i_cond], site->ca, site->cb, site->cc);
}

/* a call's snapshot (nt_event.regs): the argument registers, then the stack words (the
 * first n_args and n_stack of them: those read) */
static inline void core_call_snapshot(const core_state *c, const core_site *site,
                                      const uint8_t *stack, uint32_t n_args, uint32_t n_stack,
                                      uint64_t *regs)
{
    for (uint32_t i = 0; i < n_args; i++)
        regs[i] = c->vals[site->i_val + i];
    for (uint32_t i = 0; i < n_stack; i++)
        regs[c->cfg.n_args + i] = core_word_from(c, stack + i * c->cfg.word);
}

/* the stack words a call's snapshot holds, as the callee will see them (above the pushed
 * return address), from word `from` on; 0 if they cannot be read */
static inline int core_read_stack_args(const core_ops *ops, core_state *c, uint64_t entry_sp,
                                       uint8_t *stack, uint32_t from, uint32_t to)
{
    if (to <= from)
        return 1;
    return ops->mem_read(c->port,
                         (entry_sp + c->cfg.stack_offset + from * c->cfg.word) & core_word_mask(c),
                         stack + from * c->cfg.word, (uint64_t)(to - from) * c->cfg.word) == 0;
}

/* the pops a RETURN made: registers from the words below its target; a popped return
 * register is the value the return reports (the reference reads it after the simulation) */
static inline void core_write_pops(const core_ops *ops, core_state *c, const core_site *site,
                                   const uint8_t *words)
{
    for (uint32_t i = 0; i < site->n_pops; i++) {
        uint64_t v = core_word_from(c, words + i * c->cfg.word);
        ops->reg_write(c->port, site->pops[i], v);
        if (site->pops[i] == c->cfg.ret_reg)
            c->vals[site->i_ret] = v;
        else if (site->pops[i] == c->cfg.ret_hi_reg)
            c->vals[site->i_ret_hi] = v;
    }
}

static inline int core_trap_with(core_state *c, const core_ops *ops, core_site *site)
{
    uint64_t mask = core_word_mask(c);
    uint64_t code = c->cfg.code_mask & mask;  /* a target's address bits (ARM: no bit 0) */
    uint64_t resume = site->after | site->after_bits;  /* the next instruction, as PC */
    /* a call's argument registers wait until it is known how many its record holds */
    core_site_reads(ops, c, site, 0, site->op == OP_CALL ? site->i_val : site->n_reads);
    uint64_t sp = c->vals[0] & mask;
    uint64_t target, raw, entry_sp = sp;  /* raw: the PC written, target its code address */
    uint8_t buf[8 * (CORE_MAX_POPS + 1)], stack[8 * NT_MAX_REGS];
    uint32_t n_stack = c->cfg.n_stack;  /* stack words read into stack */
    uint32_t n_args = c->cfg.n_args;    /* argument registers read into c->vals */
    int to_writer = 0;  /* the writer said it takes this call */
    if (!core_guard_holds(c, site))
        return 0;
    if (site->op == OP_CALL) {
        raw = site->target;
        if (site->src_reg >= 0) {
            raw = c->vals[site->i_src] & mask & site->reg_mask;
            if (!core_target_ok(site, raw))
                return 0;
        }
        target = raw & code;
        /* a call to the next instruction (PC thunk) records nothing; a callee not armed
         * yet needs discovery: both are Python's */
        if (target == site->after || !addrset_has(&c->callees, target))
            return 0;
        if (site->link_reg < 0)
            entry_sp = (sp - c->cfg.word) & mask;
        /* the writer takes the call: read only the stack words its record holds */
        to_writer = core_writer_words(c, target, sp, site->after, &n_args, &n_stack);
        core_site_reads(ops, c, site, site->i_val, site->i_val + n_args);
        if (!core_read_stack_args(ops, c, entry_sp, stack, 0, n_stack) || !core_room(c, ops))
            return 0;
        if (c->strict && !ns_call_ok(c->strict, site->addr, target))
            return 0;
        if (site->link_reg >= 0) {
            ops->reg_write(c->port, site->link_reg, resume);
        } else {  /* the call pushes the return address (Intel SDM vol. 2, CALL) */
            core_word_to(c, site->after, buf);
            if (ops->mem_write(c->port, entry_sp, buf, c->cfg.word) != 0)
                return 0;
            ops->reg_write(c->port, c->cfg.sp_reg, entry_sp);
        }
    } else if (site->op == OP_RETURN && site->fast) {
        uint64_t top = sp;
        int taken = core_cond_holds(c, site);
        if (taken < 0 || (!taken && !site->conditional))
            return 0;
        if (!taken) {  /* a conditional return falling through records nothing */
            ops->reg_write(c->port, c->cfg.pc_reg, resume);
            c->traps++;
            c->simulated++;
            return 1;
        }
        if (site->src_reg >= 0) {
            raw = c->vals[site->i_src] & mask & site->reg_mask;
        } else {  /* the return pops it (RET, RET imm16; ARM POP {..., pc}: after n_pops) */
            uint32_t words = site->n_pops + 1u;
            if (ops->mem_read(c->port, sp, buf, (uint64_t)words * c->cfg.word) != 0)
                return 0;
            raw = core_word_from(c, buf + site->n_pops * c->cfg.word);
            top = (sp + words * c->cfg.word + site->release) & mask;
        }
        if (!core_target_ok(site, raw))
            return 0;
        target = raw & code;
        if (target == site->after)  /* a return to the next instruction records nothing */
            return 0;
        if (!core_room(c, ops))
            return 0;
        if (c->strict && !ns_return_ok(c->strict, site->addr, target))
            return 0;
        if (site->n_pops)
            core_write_pops(ops, c, site, buf);
        if (top != sp)
            ops->reg_write(c->port, c->cfg.sp_reg, top);
    } else if (site->op == OP_JUMP) {
        int taken = core_cond_holds(c, site);
        if (taken < 0)
            return 0;
        raw = resume;
        if (taken && site->src_reg >= 0) {
            raw = c->vals[site->i_src] & mask & site->reg_mask;
            if (!core_target_ok(site, raw))
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
              || addrpairs_has(&c->inside, site->addr, target))
            && !(taken && core_switch_jump(c, site->addr, target, 0, 0))
            && !(taken && core_tail_event(c, site->addr, target, sp, sp, c->time, 0, 0)))
            return 0;
        ops->reg_write(c->port, c->cfg.pc_reg, raw);
        c->traps++;
        c->simulated++;
        return 1;
    } else {
        return 0;
    }
    ops->reg_write(c->port, c->cfg.pc_reg, raw);
    c->traps++;
    c->simulated++;
    if (c->entry && site->op == OP_RETURN)  /* the open frames it leaves (entry.py) */
        ep_returned(c->entry, target);
    if (c->strict) {  /* the function switch of strict cleanup */
        if (site->op == OP_CALL)
            ns_call_commit(c->strict, site->addr, target);
        else
            ns_return_commit(c->strict, site->addr, target);
    }
    uint64_t regs[NT_MAX_REGS] = {0};
    uint32_t nregs = 0, strings;
    if (site->op == OP_CALL) {  /* the arguments as the callee sees them at its entry */
        core_call_snapshot(c, site, stack, n_args, n_stack, regs);
        strings = core_string_mask(c, target);
    } else {
        if (c->cfg.ret_reg >= 0)
            regs[nregs++] = c->vals[site->i_ret];
        if (c->cfg.ret_hi_reg >= 0)
            regs[nregs++] = c->vals[site->i_ret_hi];
        strings = core_string_return_mask(c, site->addr);
    }
    if (to_writer || site->op != OP_CALL) {  /* (a return: the writer reads one word) */
        uint64_t one[NT_MAX_REGS] = {c->cfg.ret_reg >= 0 ? regs[0] : 0};
        int ret_word = site->op != OP_CALL;
        if (core_offer(c, site->op == OP_CALL, c->time, site->addr, target, sp, site->after,
                       ret_word ? one : regs,
                       ret_word && c->cfg.ret_reg < 0 ? 0 : strings))
            return 1;
    }
    /* Python's event holds every argument (the writer, which said it takes the call, only
     * declines it when out of memory; stack words it cannot read then stay 0) */
    if (site->op == OP_CALL) {
        core_site_reads(ops, c, site, site->i_val + n_args, site->i_val + c->cfg.n_args);
        if (!core_read_stack_args(ops, c, entry_sp, stack, n_stack, c->cfg.n_stack))
            memset(stack + n_stack * c->cfg.word, 0, (c->cfg.n_stack - n_stack) * c->cfg.word);
        core_call_snapshot(c, site, stack, c->cfg.n_args, c->cfg.n_stack, regs);
        nregs = c->cfg.n_args + c->cfg.n_stack;
    }
    core_record(c, site->op == OP_CALL ? EV_CALL : EV_RETURN, c->time, site->addr, target, sp,
                site->after, entry_sp, regs, nregs, strings);  /* (room was made above) */
    core_hand_over(c);
    return 1;
}

#endif
