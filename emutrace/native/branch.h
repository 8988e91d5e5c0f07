/* emutrace native library: the branch backends' block facts (branch.c), as a port without
 * Unicorn's block hook uses them (ploop.c pl_block: the block steps whose stop C may take
 * while it block-steps a ptrace tracee).
 */
#ifndef EMUTRACE_BRANCH_H
#define EMUTRACE_BRANCH_H

#include <stdint.h>

#include "abi.h"

typedef struct bb_state bb_state;

bb_state *bb_new(uc_engine *uc, const bb_config *cfg);
void bb_free(bb_state *s);
/* a block [addr, addr + size) of count instructions that ends in no control transfer */
int bb_quiet_add(bb_state *s, uint64_t addr, uint32_t size, uint32_t count);
/* the hook's body for a block that ran from `from` to a stop at `at`: its instruction count
 * when it is such a block (the hook only counts it), else 0 */
uint32_t bb_block_quietly(const bb_state *s, uint64_t from, uint64_t at);

#endif
