/* emutrace native hot path: an open-addressing map from a nonzero 64-bit key (an address, or
 * a key mixed from two) to an int32 value, shared by hotpath.c (the string words of a call
 * target) and ufwrite.c (a function's record plan).  Header-only, as addrset.h: every
 * translation unit gets its own static copy.
 *
 * Linear probing; the table doubles before it is half full (capacity: a power of two, set
 * by the first put when zero).  Key 0 is refused (it marks an empty slot).
 */
#ifndef EMUTRACE_ADDRMAP_H
#define EMUTRACE_ADDRMAP_H

#include <stdint.h>
#include <stdlib.h>

#include "addrset.h"  /* addr_mix */

typedef struct {
    uint64_t *keys;  /* 0: empty */
    int32_t *vals;
    size_t cap;      /* power of two (0: nothing allocated yet) */
    size_t used;
} addrmap;

/* the value of key, or -1 */
static inline int32_t addrmap_get(const addrmap *m, uint64_t key)
{
    if (!m->used)
        return -1;
    size_t i = addr_mix(key) & (m->cap - 1);
    while (m->keys[i]) {
        if (m->keys[i] == key)
            return m->vals[i];
        i = (i + 1) & (m->cap - 1);
    }
    return -1;
}

static inline void addrmap_slot_put(uint64_t *keys, int32_t *vals, size_t cap, uint64_t key,
                                    int32_t val, size_t *used)
{
    size_t i = addr_mix(key) & (cap - 1);
    while (keys[i] && keys[i] != key)
        i = (i + 1) & (cap - 1);
    if (!keys[i])
        (*used)++;
    keys[i] = key;
    vals[i] = val;
}

/* key -> val (replacing its value); 0, or -1 (key 0, out of memory) */
static inline int addrmap_put(addrmap *m, uint64_t key, int32_t val)
{
    if (key == 0)
        return -1;
    if (2 * (m->used + 1) > m->cap) {
        size_t cap = m->cap ? m->cap * 2 : 256, used = 0;
        uint64_t *keys = calloc(cap, sizeof *keys);
        int32_t *vals = calloc(cap, sizeof *vals);
        if (!keys || !vals) {
            free(keys);
            free(vals);
            return -1;
        }
        for (size_t i = 0; i < m->cap; i++)
            if (m->keys[i])
                addrmap_slot_put(keys, vals, cap, m->keys[i], m->vals[i], &used);
        free(m->keys);
        free(m->vals);
        m->keys = keys;
        m->vals = vals;
        m->cap = cap;
        m->used = used;
    }
    addrmap_slot_put(m->keys, m->vals, m->cap, key, val, &m->used);
    return 0;
}

static inline void addrmap_free(addrmap *m)
{
    free(m->keys);
    free(m->vals);
    m->keys = NULL;
    m->vals = NULL;
    m->cap = m->used = 0;
}

#endif
