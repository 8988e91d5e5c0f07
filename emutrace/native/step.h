/* emutrace native library: the `step` backend's flow table, function entries, clock and
 * pending transfer (step.c), as a port without Unicorn's code hook uses them (ploop.c
 * pl_step: the instructions whose hook C may take while it single-steps a ptrace tracee).
 */
#ifndef EMUTRACE_STEP_H
#define EMUTRACE_STEP_H

#include <stdint.h>

#include "abi.h"

typedef struct st_state st_state;

st_state *st_new(uc_engine *uc, const st_config *cfg);
void st_free(st_state *s);
int st_entry_add(st_state *s, uint64_t code);
/* addr's flow word (abi.h F_*: length, kind, flags), or 0: not in the table */
int st_flow_add(st_state *s, uint64_t addr, uint32_t flow);
uint32_t st_flow_at(const st_state *s, uint64_t addr);
void st_set_time(st_state *s, uint64_t t);
void st_clear_pending(st_state *s);
int st_take_pending(st_state *s, uint64_t *out);
void st_put_pending(st_state *s, const uint64_t *in);
/* the hook's body at pc, sp for a port that stops where Python must run: 1 taken, 0 not */
int st_step_quietly(st_state *s, uint64_t pc, uint64_t sp);

#endif
