/* emutrace native hot path: strict cleanup of the int3 backend in C (strict.c).
 *
 * hotpath.c asks before it finishes a call or a return at a site under strict cleanup
 * (ns_call_ok, ns_return_ok: no side effect) and, once it has simulated it, lets strict.c
 * switch the armed function (ns_call_commit, ns_return_commit).
 */
#ifndef EMUTRACE_STRICT_H
#define EMUTRACE_STRICT_H

#include <stddef.h>
#include <stdint.h>

#include "abi.h"

typedef struct ns_state ns_state;

/* what strict.c tells hotpath.c's site table: a site armed (1) or disarmed (0) */
typedef void (*ns_active_fn)(void *table, uint64_t addr, uint32_t active);

void ns_bind(ns_state *ns, void *table, ns_active_fn active);
/* the port that writes the sites' bytes when it is not Unicorn's (the ptrace loop's), with its
 * first argument (core.h core_ops.code_write) */
typedef int (*ns_code_write_fn)(void *port, uint64_t addr, const void *in, uint64_t len);
void ns_bind_code(ns_state *ns, ns_code_write_fn code_write, void *port);
/* hardware slots (ns_set_slots): the port that programs a function's slot addresses when
 * strict.c arms it (the ptrace port: DR0-DR3 and DR7).  Unbound, a slot is a site hook's
 * `active` bit (the Unicorn port: ns_bind_hooked) */
typedef int (*ns_slots_fn)(void *port, const uint64_t *addrs, uint32_t n);
void ns_bind_slots(ns_state *ns, ns_slots_fn program, void *port);
/* the uc_ctl the table was handed (hotpath.c's code_write drops translations with it) */
nt_ctl_fn ns_ctl(const ns_state *ns);

/* the table as Python fills it (strictlib.py; the ptrace loop's pl_strict_* wrappers) */
ns_state *ns_new(uc_engine *uc, void *mem_write, void *ctl, uint64_t code_mask);
void ns_free(ns_state *ns);
int ns_site_bytes(ns_state *ns, uint64_t addr, uint32_t len, const uint8_t *bp,
                  const uint8_t *orig);
int ns_site_hooked(ns_state *ns, uint64_t addr);
int ns_site_armed(ns_state *ns, uint64_t addr, uint32_t on, uint64_t owner);
int ns_func_sites(ns_state *ns, uint64_t start, uint64_t end, uint32_t n, const uint64_t *addrs);
int ns_func_armed(ns_state *ns, uint64_t start, uint32_t on);
void ns_func_forget(ns_state *ns, uint64_t start);
int ns_func_told(const ns_state *ns, uint64_t addr);
int ns_target(ns_state *ns, uint64_t target, uint64_t start);
int64_t ns_target_func(const ns_state *ns, uint64_t target);
int ns_target_drop(ns_state *ns, uint64_t target);
int ns_func_get(const ns_state *ns, uint64_t start, uint64_t *end, uint64_t *addrs,
                uint32_t room);
int ns_chain_set(ns_state *ns, size_t n, const uint64_t *starts, const uint64_t *ends);
size_t ns_chain_depth(const ns_state *ns);
int ns_chain_reserve(ns_state *ns);
const ns_frame *ns_chain(const ns_state *ns);
void ns_journal_clear(ns_state *ns);
void ns_set_slots(ns_state *ns, uint32_t slots, uint32_t ranges);
uint64_t ns_journal_slot_writes(const ns_state *ns);
void ns_sites_state(const ns_state *ns, uint32_t n, const uint64_t *addrs, uint64_t *owner,
                    uint8_t *armed);

/* the switches (hotpath.c core.c ploop.c) */
void ns_bind_hooked(ns_state *ns, void *table, ns_active_fn active);
int ns_call_ok(const ns_state *ns, uint64_t site, uint64_t target);
void ns_call_commit(ns_state *ns, uint64_t site, uint64_t target);
int ns_jump(ns_state *ns, uint64_t site, uint64_t target, uint64_t lo, uint64_t hi);
int ns_return_ok(const ns_state *ns, uint64_t site, uint64_t target);
void ns_return_commit(ns_state *ns, uint64_t site, uint64_t target);
/* both at once, for a site hook's transfer (it ran already: nothing to simulate) */
int ns_switch(ns_state *ns, uint32_t call, uint64_t site, uint64_t target, uint64_t lo,
              uint64_t hi);
/* hwbp's stepped spans (hotpath.c hs_on_span): a function's index, made if new (UINT32_MAX:
 * out of memory), and whether it is armed now (a test, no lookup: once per instruction) */
uint32_t ns_func_ref(ns_state *ns, uint64_t start);
int ns_func_is_armed(const ns_state *ns, uint32_t f);

#endif
