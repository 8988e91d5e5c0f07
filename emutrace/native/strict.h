/* emutrace native hot path: strict cleanup of the int3 backend in C (strict.c).
 *
 * hotpath.c asks before it finishes a call or a return at a site under strict cleanup
 * (ns_call_ok, ns_return_ok: no side effect) and, once it has simulated it, lets strict.c
 * switch the armed function (ns_call_commit, ns_return_commit).
 */
#ifndef EMUTRACE_STRICT_H
#define EMUTRACE_STRICT_H

#include <stdint.h>

#include "abi.h"

typedef struct ns_state ns_state;

/* what strict.c tells hotpath.c's site table: a site armed (1) or disarmed (0) */
typedef void (*ns_active_fn)(void *table, uint64_t addr, uint32_t active);

void ns_bind(ns_state *ns, void *table, ns_active_fn active);
/* the uc_ctl the table was handed (hotpath.c's code_write drops translations with it) */
nt_ctl_fn ns_ctl(const ns_state *ns);
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
