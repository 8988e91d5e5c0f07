"""emutrace/native/addrmap.h, the C side's one hash table (and its instances in addrset.h),
against a plain array: a C program compiled with the host's C compiler runs random
insertions, look-ups and removals on each kind of table — including one whose hash sends
every key to the last slots, so that runs wrap around the end and removals move entries back
across it, and tables keyed by an address field whose key 0 (code at address 0) lives apart
— and checks every answer against the array."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

NATIVE = Path(__file__).resolve().parent.parent / "emutrace" / "native"

HARNESS = r"""
#include <stdio.h>
#include "addrset.h"

/* a table whose home slots are the last 5 of the table: long runs, wrapping around */
typedef struct { uint64_t key, value; } entry;
#define TAIL_INDEX(k, cap) (((cap) - 5 + (k) % 5) & ((cap) - 1))
#define USED(e) ((e)->key != 0)
#define MATCH(e, k) ((e)->key == (k))
#define KEYOF(e) ((e)->key)
#define SETKEY(e, k) ((e)->key = (k))
ADDRTAB(tailtab, entry, uint64_t, TAIL_INDEX, USED, MATCH, KEYOF, SETKEY)
ADDRTAB(mixtab, entry, uint64_t, ADDRTAB_MIX_INDEX, USED, MATCH, KEYOF, SETKEY)
/* keyed by an `addr`-like field with key 0 apart: ADDRTAB_BY_ADDR's kind, and the same with
 * the wrapping hash */
#define APART(k) ((k) == 0)
ADDRTAB_APART(tailzero, entry, uint64_t, TAIL_INDEX, USED, MATCH, KEYOF, SETKEY, APART)
ADDRTAB_APART(mixzero, entry, uint64_t, ADDRTAB_MIX_INDEX, USED, MATCH, KEYOF, SETKEY, APART)

#define N 300  /* keys: 1..N (tail, mix), 0..N (tailzero, mixzero), or N addresses with 0 and
                  ~0 (set, map, pairs) */
static uint64_t rng = 0x2545F4914F6CDD1DULL;
static uint64_t next(void)
{
    rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
    return rng;
}

static int fail(const char *what, long step)
{
    printf("%s at step %ld\n", what, step);
    return 1;
}

/* put / find / remove / next against values[] (0: absent), for either table type */
#define CHECK_TABLE(T, LOW)                                                                 \
    static int check_##T(void)                                                              \
    {                                                                                       \
        T t = {0};                                                                          \
        uint64_t values[N + 1] = {0};                                                       \
        for (long step = 0; step < 200000; step++) {                                        \
            uint64_t k = LOW + next() % (N + 1 - LOW), r = next() % 8;                      \
            entry *e = T##_find(&t, k);                                                     \
            if ((e != NULL) != (values[k] != 0) || (e && e->value != values[k]))            \
                return fail(#T " find", step);                                              \
            if (r < 4) {                                                                    \
                e = T##_put(&t, k);                                                         \
                e->value = values[k] = 1 + next() % 1000;                                   \
            } else if (r < 7 && e) {                                                        \
                T##_remove(&t, e);                                                          \
                values[k] = 0;                                                              \
            } else if (r == 7 && step % 64 == 0) {  /* drop every key of one residue */      \
                uint64_t m = next() % 7;                                                    \
                size_t i = 0;                                                               \
                while ((e = T##_next(&t, &i))) {                                            \
                    if (e->key % 7 == m) {                                                  \
                        values[e->key] = 0;                                                 \
                        T##_remove(&t, e);                                                  \
                    } else {                                                                \
                        i++;                                                                \
                    }                                                                       \
                }                                                                           \
                for (uint64_t j = LOW; j <= N; j++)                                         \
                    if (j % 7 == m && values[j])                                            \
                        return fail(#T " drop missed a key", step);                         \
            }                                                                               \
            size_t used = 0, seen = 0, i = 0;                                               \
            for (uint64_t j = LOW; j <= N; j++)                                             \
                used += values[j] != 0;                                                     \
            if (t.used != used)                                                             \
                return fail(#T " used", step);                                              \
            if (step % 1000 == 0) {                                                         \
                for (; (e = T##_next(&t, &i)); i++)                                         \
                    seen += e->value == values[e->key];                                     \
                if (seen != used)                                                           \
                    return fail(#T " next", step);                                          \
            }                                                                               \
        }                                                                                   \
        T##_free(&t);                                                                       \
        return 0;                                                                           \
    }
CHECK_TABLE(tailtab, 1)
CHECK_TABLE(mixtab, 1)
CHECK_TABLE(tailzero, 0)
CHECK_TABLE(mixzero, 0)

static int check_set_map_pairs(void)
{
    addrset set;
    addrmap map = {0};
    addrpairs pairs = {0};
    uint64_t keys[N];
    int in_set[N] = {0}, in_pairs[N][8] = {{0}};
    int32_t in_map[N];
    if (addrset_init(&set, 4) != 0)
        return fail("init", 0);
    for (int i = 0; i < N; i++) {
        keys[i] = i == 0 ? 0 : i == 1 ? ~0ULL : (next() & 0xffffff) << 2;
        in_map[i] = -1;
    }
    for (long step = 0; step < 100000; step++) {
        int i = (int)(next() % N), j = (int)(next() % 8);
        uint64_t k = keys[i], target = keys[j];
        if (addrset_has(&set, k) != (in_set[i] && k != ~0ULL))
            return fail("addrset_has", step);
        if (addrmap_get(&map, k) != (k != ~0ULL ? in_map[i] : -1))
            return fail("addrmap_get", step);
        if (addrpairs_has(&pairs, k, target) != in_pairs[i][j])
            return fail("addrpairs_has", step);
        switch (next() % 4) {
        case 0:
            addrset_add(&set, k);
            in_set[i] = 1;
            break;
        case 1:
            if (addrmap_set(&map, k, (int32_t)step) != (k != ~0ULL ? 0 : -1))
                return fail("addrmap_set", step);
            in_map[i] = (int32_t)step;
            break;
        case 2:
            addrpairs_add(&pairs, k, target);
            in_pairs[i][j] = 1;
            break;
        default:
            if (step % 16 == 0) {
                addrpairs_drop_target(&pairs, target);
                for (int a = 0; a < N; a++)
                    for (int b = 0; b < 8; b++)
                        if (keys[b] == target)
                            in_pairs[a][b] = 0;
            }
        }
        /* (duplicate keys among the random addresses share one entry) */
        for (int a = 0; a < N; a++)
            if (keys[a] == k) {
                in_set[a] = in_set[i];
                in_map[a] = in_map[i];
                for (int b = 0; b < 8; b++)
                    in_pairs[a][b] = in_pairs[i][b];
            }
    }
    addrset_free(&set);
    addrmap_free(&map);
    addrpairs_free(&pairs);
    return 0;
}

int main(void)
{
    if (check_tailtab() || check_mixtab() || check_tailzero() || check_mixzero()
        || check_set_map_pairs())
        return 1;
    printf("ok\n");
    return 0;
}
"""


def test_tables_agree_with_an_array(tmp_path: Path) -> None:
    cc = shutil.which("cc")
    if cc is None:
        pytest.skip("needs a C compiler")
    (tmp_path / "tables.c").write_text(HARNESS)
    subprocess.run([cc, "-std=c11", "-O1", "-Wall", "-Wextra", "-Werror", f"-I{NATIVE}",
                    str(tmp_path / "tables.c"), "-o", str(tmp_path / "tables")], check=True)
    out = subprocess.run([str(tmp_path / "tables")], capture_output=True, text=True,
                         timeout=120)
    assert out.stdout == "ok\n", out.stdout
