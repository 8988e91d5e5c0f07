/* emutrace native library: a site's condition tests (abi.h C_*, isa/base.py CONDITION_TESTS
 * and its comments say what each test means), shared by the Unicorn hooks (hotpath.c) and
 * the ptrace loop (ploop.c).  Header-only, as addrmap.h.
 */
#ifndef EMUTRACE_COND_H
#define EMUTRACE_COND_H

#include <stdint.h>

#include "abi.h"

/* does the test hold for the value v of its register (bits ia, ib, ic)?  -1: unknown test
 * (C_MASK_ZERO is a guard's, with its mask: hotpath.c guard_holds) */
static inline int test_holds(uint8_t test, uint64_t v, uint8_t ia, uint8_t ib, uint8_t ic)
{
    if (test == C_ALWAYS)
        return 1;
    unsigned a = v >> ia & 1, b = v >> ib & 1, c = v >> ic & 1;
    uint64_t low = ia >= 64 ? ~0ULL : (1ULL << ia) - 1;
    switch (test) {
    case C_SET: return a;
    case C_CLEAR: return !a;
    case C_ANY: return a || b;
    case C_NONE: return !a && !b;
    case C_EQ: return a == b;
    case C_NE: return a != b;
    case C_SET_OR_NE: return a || b != c;
    case C_CLEAR_AND_EQ: return !a && b == c;
    case C_SET_AND_CLEAR: return a && !b;
    case C_CLEAR_OR_SET: return !a || b;
    case C_ZERO: return (v & low) == 0;
    case C_NONZERO: return (v & low) != 0;
    case C_BOTH: return a && b;
    case C_CC_MASK: return (ib & (8 >> (v >> ia & 3))) != 0;
    default: return -1;
    }
}

#endif
