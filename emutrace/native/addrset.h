/* emutrace native hot path: the open-addressing set of addresses the C hooks share
 * (step.c's `fast` and `entries`, branch.c's).  Header-only: every translation unit gets its
 * own static copy, so the library exports nothing from here.
 *
 * Keys are stored as key + 1, so that 0 marks an empty slot and address 0 is a key like any
 * other.  Linear probing; the table doubles before it is half full (capacity: a power of
 * two).  The mixer is splitmix64's finaliser: code addresses differ in few low bits.
 */
#ifndef EMUTRACE_ADDRSET_H
#define EMUTRACE_ADDRSET_H

#include <stdint.h>
#include <stdlib.h>

typedef struct {
    uint64_t *keys;  /* key + 1; 0: empty */
    size_t cap;      /* power of two */
    size_t used;
} addrset;

static inline uint64_t addr_mix(uint64_t x)
{
    x ^= x >> 30; x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27; x *= 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

/* an empty set of `cap` slots (a power of two); 0, or -1 out of memory */
static inline int addrset_init(addrset *set, size_t cap)
{
    set->keys = calloc(cap, sizeof *set->keys);
    set->cap = cap;
    set->used = 0;
    return set->keys ? 0 : -1;
}

static inline void addrset_free(addrset *set)
{
    free(set->keys);
    set->keys = NULL;
    set->cap = set->used = 0;
}

static inline int addrset_has(const addrset *set, uint64_t key)
{
    key += 1;
    size_t i = addr_mix(key) & (set->cap - 1);
    while (set->keys[i] != 0) {
        if (set->keys[i] == key)
            return 1;
        i = (i + 1) & (set->cap - 1);
    }
    return 0;
}

/* 0 (added, or there already), -1 out of memory */
static inline int addrset_add(addrset *set, uint64_t key)
{
    key += 1;
    if (2 * (set->used + 1) > set->cap) {
        size_t cap = set->cap * 2;
        uint64_t *keys = calloc(cap, sizeof *keys);
        if (!keys)
            return -1;
        for (size_t i = 0; i < set->cap; i++) {
            uint64_t k = set->keys[i];
            if (k) {
                size_t j = addr_mix(k) & (cap - 1);
                while (keys[j])
                    j = (j + 1) & (cap - 1);
                keys[j] = k;
            }
        }
        free(set->keys);
        set->keys = keys;
        set->cap = cap;
    }
    size_t i = addr_mix(key) & (set->cap - 1);
    while (set->keys[i] != 0) {
        if (set->keys[i] == key)
            return 0;
        i = (i + 1) & (set->cap - 1);
    }
    set->keys[i] = key;
    set->used++;
    return 0;
}

#endif
