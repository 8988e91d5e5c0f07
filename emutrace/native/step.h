/* emutrace native library: the `step` backend's flow table and function entries (step.c),
 * as a port without Unicorn's code hook reads them (ploop.c pl_step: the instructions whose
 * hook C may take while it single-steps a ptrace tracee).
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
int st_entry_has(const st_state *s, uint64_t code);

#endif
