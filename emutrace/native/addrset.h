/* emutrace native library: the set of addresses the C hooks share (step.c's `fast` and
 * `entries`, branch.c's, hotpath.c's callees and string returns, ploop.c's), and the set
 * of address pairs: instances of addrmap.h's table.  Header-only:
 * every translation unit gets its own static copy, so the library exports nothing from here.
 *
 * Keys are stored as key + 1, so that 0 marks an empty slot and address 0 is a key like any
 * other (~0, stored as 0, is never held: adding it does nothing).
 */
#ifndef EMUTRACE_ADDRSET_H
#define EMUTRACE_ADDRSET_H

#include <stdint.h>

#include "addrmap.h"

#define ADDRSET_USED(e) (*(e) != 0)
#define ADDRSET_MATCH(e, k) (*(e) == (k))
#define ADDRSET_KEYOF(e) (*(e))
#define ADDRSET_SETKEY(e, k) (*(e) = (k))
ADDRTAB(addrset, uint64_t, uint64_t, ADDRTAB_MIX_INDEX, ADDRSET_USED, ADDRSET_MATCH,
        ADDRSET_KEYOF, ADDRSET_SETKEY)

static inline int addrset_has(const addrset *set, uint64_t key)
{
    return key + 1 != 0 && addrset_find(set, key + 1) != NULL;
}

/* 0 (added, or there already), -1 out of memory */
static inline int addrset_add(addrset *set, uint64_t key)
{
    if (key + 1 == 0)
        return 0;
    return addrset_put(set, key + 1) ? 0 : -1;
}

/* ---------------------------------------------------------------- addrpairs */
/* A set of (site, target) address pairs (hotpath.c's and ploop.c's jumps that record
 * nothing, and the like); pairs with site 0 are kept apart (addrmap.h ADDRTAB_APART). */
typedef struct {
    uint64_t site, target;  /* a slot's site 0: empty */
} addrpair;

#define ADDRPAIR_INDEX(k, cap) (addr_mix((k).site ^ addr_mix((k).target)) & ((cap) - 1))
#define ADDRPAIR_USED(e) ((e)->site != 0)
#define ADDRPAIR_MATCH(e, k) ((e)->site == (k).site && (e)->target == (k).target)
#define ADDRPAIR_KEYOF(e) (*(e))
#define ADDRPAIR_SETKEY(e, k) (*(e) = (k))
#define ADDRPAIR_APART(k) ((k).site == 0)
ADDRTAB_APART(addrpairs, addrpair, addrpair, ADDRPAIR_INDEX, ADDRPAIR_USED, ADDRPAIR_MATCH,
              ADDRPAIR_KEYOF, ADDRPAIR_SETKEY, ADDRPAIR_APART)

static inline int addrpairs_has(const addrpairs *p, uint64_t site, uint64_t target)
{
    return addrpairs_find(p, (addrpair){site, target}) != NULL;
}

/* 0 (added, or there already), -1 out of memory */
static inline int addrpairs_add(addrpairs *p, uint64_t site, uint64_t target)
{
    return addrpairs_put(p, (addrpair){site, target}) ? 0 : -1;
}

/* every pair that goes to target taken out */
static inline void addrpairs_drop_target(addrpairs *p, uint64_t target)
{
    addrpair *e;
    for (size_t i = 0; (e = addrpairs_next(p, &i));) {
        if (e->target == target)
            addrpairs_remove(p, e);  /* (slot i now holds a pair not visited yet, or none) */
        else
            i++;
    }
}

#endif
