/* emutrace native library: the one hash table of the C side, an open-addressing table of
 * fixed-size entries looked up by an address (or by a few fields, one of them an address),
 * and the map every part shares, addrmap: a 64-bit key to an int32 value.
 * Header-only: every translation unit gets its own static copy.
 *
 * ADDRTAB(tab, entry_t, key_t, INDEX, USED, MATCH, KEYOF, SETKEY) makes the table type `tab`
 * (entries `t`, `cap` slots, `used` entries in all) and its functions:
 *   tab_find(t, k)     the entry holding k, or NULL
 *   tab_put(t, k)      the entry holding k, made if new (zeroed, then SETKEY); NULL when out
 *                      of memory.  The caller fills a new entry so that USED holds of it.
 *                      (A put may move every entry: pointers from before it are stale.)
 *   tab_init(t, cap)   room for cap slots (a power of two); 0, or -1 out of memory
 *   tab_remove(t, e)   the entry e taken out (Knuth, TAOCP vol. 3 §6.4, Algorithm R: the
 *                      entries after it in its run move back, so there are no tombstones)
 *   tab_next(t, &i)    the entry at place i or the first after it (i left at its place), or
 *                      NULL at the end: `for (i = 0; (e = tab_next(t, &i)); i++)`.  After
 *                      tab_remove(t, e) go on from the same i (without i++): place i then
 *                      holds an entry not visited yet, or none, and every remaining entry
 *                      is visited once (entries move back into slot i or later slots, or,
 *                      where their run wraps past the end, among slots visited already)
 *   tab_free(t)
 * The entry type says which slots are empty (USED false of an all-zero slot: a table is
 * calloc'ed) and how a key is hashed: INDEX(k, cap) is k's home slot, MATCH(e, k) whether
 * the used slot e holds k, KEYOF(e) the key e holds, SETKEY(e, k) writes k into e.
 *
 * ADDRTAB_APART(..., APART) is the same table for entries whose key can make a slot read as
 * empty — address 0 in a table keyed by a nonzero-means-used `addr` field (code at address 0:
 * a raw image at a board's -bios address 0): APART(k) is true of such keys, and their
 * entries live apart, in a short list after the slots (places cap, cap + 1, ... for
 * tab_next), found by MATCH alone.
 *
 * Linear probing; the table doubles before it is half full (from ADDRTAB_FIRST_CAP slots
 * when nothing was allocated).  Most tables hash an address with addr_mix, splitmix64's
 * finaliser (code addresses differ in few low bits) and keep the low bits; ADDRTAB_BY_ADDR
 * makes such a table of entries keyed by an `addr` field (0 included).
 */
#ifndef EMUTRACE_ADDRMAP_H
#define EMUTRACE_ADDRMAP_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static inline uint64_t addr_mix(uint64_t x)
{
    x ^= x >> 30; x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27; x *= 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

#define ADDRTAB_FIRST_CAP 256

#define ADDRTAB_APART(tab, entry_t, key_t, INDEX, USED, MATCH, KEYOF, SETKEY, APART)      \
    typedef struct {                                                                       \
        entry_t *t;                                                                        \
        size_t cap;  /* a power of two; 0: nothing allocated */                            \
        size_t used; /* entries, in the slots and apart */                                 \
        entry_t *apart; /* the entries of keys APART(k) holds of */                        \
        size_t n_apart;                                                                    \
    } tab;                                                                                 \
                                                                                           \
    static inline entry_t *tab##_apart_find(const tab *m, key_t k)                         \
    {                                                                                      \
        for (size_t i = 0; i < m->n_apart; i++)                                            \
            if (MATCH(&m->apart[i], k))                                                    \
                return &m->apart[i];                                                       \
        return NULL;                                                                       \
    }                                                                                      \
                                                                                           \
    static inline entry_t *tab##_apart_put(tab *m, key_t k)                                \
    {                                                                                      \
        entry_t *e = tab##_apart_find(m, k);                                               \
        if (e)                                                                             \
            return e;                                                                      \
        e = realloc(m->apart, (m->n_apart + 1) * sizeof *e);                               \
        if (!e)                                                                            \
            return NULL;                                                                   \
        m->apart = e;                                                                      \
        e = &m->apart[m->n_apart++];                                                       \
        memset(e, 0, sizeof *e);                                                           \
        SETKEY(e, k);                                                                      \
        m->used++;                                                                         \
        return e;                                                                          \
    }                                                                                      \
                                                                                           \
    /* the slot holding k, or the empty slot where k would go */                           \
    static inline entry_t *tab##_slot(entry_t *t, size_t cap, key_t k)                     \
    {                                                                                      \
        size_t i = (INDEX(k, cap));                                                        \
        while (USED(&t[i]) && !(MATCH(&t[i], k)))                                          \
            i = (i + 1) & (cap - 1);                                                       \
        return &t[i];                                                                      \
    }                                                                                      \
                                                                                           \
    static inline entry_t *tab##_find(const tab *m, key_t k)                               \
    {                                                                                      \
        if (APART(k))                                                                      \
            return tab##_apart_find(m, k);                                                 \
        if (!m->cap)                                                                       \
            return NULL;                                                                   \
        entry_t *e = tab##_slot(m->t, m->cap, k);                                          \
        return USED(e) ? e : NULL;                                                         \
    }                                                                                      \
                                                                                           \
    static inline int tab##_init(tab *m, size_t cap)                                       \
    {                                                                                      \
        m->t = calloc(cap, sizeof *m->t);                                                  \
        m->cap = m->t ? cap : 0;                                                           \
        m->used = 0;                                                                       \
        m->apart = NULL;                                                                   \
        m->n_apart = 0;                                                                    \
        return m->t ? 0 : -1;                                                              \
    }                                                                                      \
                                                                                           \
    static inline int tab##_grow(tab *m)                                                   \
    {                                                                                      \
        size_t cap = m->cap ? m->cap * 2 : ADDRTAB_FIRST_CAP;                              \
        entry_t *t = calloc(cap, sizeof *t);                                               \
        if (!t)                                                                            \
            return -1;                                                                     \
        for (size_t i = 0; i < m->cap; i++)                                                \
            if (USED(&m->t[i]))                                                            \
                *tab##_slot(t, cap, KEYOF(&m->t[i])) = m->t[i];                            \
        free(m->t);                                                                        \
        m->t = t;                                                                          \
        m->cap = cap;                                                                      \
        return 0;                                                                          \
    }                                                                                      \
                                                                                           \
    static inline entry_t *tab##_put(tab *m, key_t k)                                      \
    {                                                                                      \
        if (APART(k))                                                                      \
            return tab##_apart_put(m, k);                                                  \
        if (2 * (m->used + 1) > m->cap && tab##_grow(m) != 0)                              \
            return NULL;                                                                   \
        entry_t *e = tab##_slot(m->t, m->cap, k);                                          \
        if (!USED(e)) {                                                                    \
            memset(e, 0, sizeof *e);                                                       \
            SETKEY(e, k);                                                                  \
            m->used++;                                                                     \
        }                                                                                  \
        return e;                                                                          \
    }                                                                                      \
                                                                                           \
    static inline void tab##_remove(tab *m, entry_t *e)                                    \
    {                                                                                      \
        m->used--;                                                                         \
        if (m->n_apart && e >= m->apart && e < m->apart + m->n_apart) {                    \
            *e = m->apart[--m->n_apart];  /* the last one moves into its place */          \
            return;                                                                        \
        }                                                                                  \
        size_t mask = m->cap - 1, i = (size_t)(e - m->t), j = i;                           \
        for (;;) {                                                                         \
            memset(&m->t[i], 0, sizeof *e);                                                \
            for (;;) {                                                                     \
                j = (j + 1) & mask;                                                        \
                if (!USED(&m->t[j]))                                                       \
                    return;                                                                \
                size_t r = (INDEX(KEYOF(&m->t[j]), m->cap));                               \
                /* the entry at j stays unless its home r lies cyclically in (i, j] */      \
                if (i <= j ? (i < r && r <= j) : (i < r || r <= j))                        \
                    continue;                                                              \
                break;                                                                     \
            }                                                                              \
            m->t[i] = m->t[j];                                                             \
            i = j;                                                                         \
        }                                                                                  \
    }                                                                                      \
                                                                                           \
    static inline entry_t *tab##_next(const tab *m, size_t *i)                             \
    {                                                                                      \
        for (; *i < m->cap; (*i)++)                                                        \
            if (USED(&m->t[*i]))                                                           \
                return &m->t[*i];                                                          \
        return *i - m->cap < m->n_apart ? &m->apart[*i - m->cap] : NULL;                   \
    }                                                                                      \
                                                                                           \
    static inline void tab##_free(tab *m)                                                  \
    {                                                                                      \
        free(m->t);                                                                        \
        free(m->apart);                                                                    \
        m->t = m->apart = NULL;                                                            \
        m->cap = m->used = m->n_apart = 0;                                                 \
    }

/* a table with no key apart (its USED does not depend on the key alone) */
#define ADDRTAB_NONE_APART(k) 0
#define ADDRTAB(tab, entry_t, key_t, INDEX, USED, MATCH, KEYOF, SETKEY)                    \
    ADDRTAB_APART(tab, entry_t, key_t, INDEX, USED, MATCH, KEYOF, SETKEY, ADDRTAB_NONE_APART)

/* the home slot of an address key: addr_mix's low bits */
#define ADDRTAB_MIX_INDEX(k, cap) (addr_mix(k) & ((cap) - 1))

/* a table of entry_t keyed by its `addr` field (a slot's 0: empty; address 0 kept apart) */
#define ADDRTAB_ADDR_USED(e) ((e)->addr != 0)
#define ADDRTAB_ADDR_MATCH(e, k) ((e)->addr == (k))
#define ADDRTAB_ADDR_KEYOF(e) ((e)->addr)
#define ADDRTAB_ADDR_SETKEY(e, k) ((e)->addr = (k))
#define ADDRTAB_ADDR_APART(k) ((k) == 0)
#define ADDRTAB_BY_ADDR(tab, entry_t)                                                      \
    ADDRTAB_APART(tab, entry_t, uint64_t, ADDRTAB_MIX_INDEX, ADDRTAB_ADDR_USED,             \
                  ADDRTAB_ADDR_MATCH, ADDRTAB_ADDR_KEYOF, ADDRTAB_ADDR_SETKEY, ADDRTAB_ADDR_APART)

/* ---------------------------------------------------------------- addrmap */
/* A 64-bit key (an address, or a key mixed from two) to an int32 value: hotpath.c (the string
 * words of a call target), ufwrite.c (a function's record plan), strict.c, replaytext.c.
 * Keys are stored as key + 1, as addrset.h's, so that 0 marks an empty slot and address 0 is
 * a key like any other (~0, stored as 0, is refused). */
typedef struct {
    uint64_t key;  /* the key + 1; 0: empty */
    int32_t val;
} addrmap_entry;

#define ADDRMAP_USED(e) ((e)->key != 0)
#define ADDRMAP_MATCH(e, k) ((e)->key == (k))
#define ADDRMAP_KEYOF(e) ((e)->key)
#define ADDRMAP_SETKEY(e, k) ((e)->key = (k))
ADDRTAB(addrmap, addrmap_entry, uint64_t, ADDRTAB_MIX_INDEX, ADDRMAP_USED, ADDRMAP_MATCH,
        ADDRMAP_KEYOF, ADDRMAP_SETKEY)

/* the value of key, or -1 */
static inline int32_t addrmap_get(const addrmap *m, uint64_t key)
{
    const addrmap_entry *e = key + 1 != 0 ? addrmap_find(m, key + 1) : NULL;
    return e ? e->val : -1;
}

/* key -> val (replacing its value); 0, or -1 (key ~0, out of memory) */
static inline int addrmap_set(addrmap *m, uint64_t key, int32_t val)
{
    addrmap_entry *e = key + 1 != 0 ? addrmap_put(m, key + 1) : NULL;
    if (!e)
        return -1;
    e->val = val;
    return 0;
}

#endif
