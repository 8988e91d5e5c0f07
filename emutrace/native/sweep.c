/* Discovery's sweep loop in C (a program's first traced run).
 *
 * disasm.c decodes a stretch of code with capstone's C library and hands Python flat arrays;
 * Python then made one `Insn` per instruction and kept it in the decoder's table, ~1 µs an
 * instruction in the interpreter, ~12 ms of static glibc's start-up (bench/startup_phases.py).
 * This module, a CPython extension (unlike the rest of emutrace/native, a plain library loaded
 * with ctypes), does that loop: `stretch` decodes, makes the same `Insn` tuples and keeps
 * them in the same table, with the same stops.  Capstone's cs_disasm and cs_free are handed
 * in as addresses (the wheel's libcapstone.so, as disasm.c's), with the handle disasm.c
 * opened.  emutrace/discover/decode.py `Decoder._decode_stretch` keeps the Python loop as
 * the reference; tests/test_disasm.py runs both over each ISA's fib and compares.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdbool.h>
#include <string.h>

/* capstone's cs_insn up to the fields read here (capstone 5: include/capstone/capstone.h),
 * declared through the wheel's header when the build has it */
#if defined(__has_include)
#if __has_include(<capstone/capstone.h>)
#include <capstone/capstone.h>
#define SWEEP_CAPSTONE 1
#endif
#endif

#ifdef SWEEP_CAPSTONE

#include "sweeprule.h"

typedef size_t (*cs_disasm_fn)(csh, const uint8_t *, size_t, uint64_t, size_t, cs_insn **);
typedef void (*cs_free_fn)(cs_insn *, size_t);

/* The sizes of the instructions decoded so far in one range of code (Decoder._size_map):
 * one byte per code byte, at an instruction's first: its size; SIZE_UNDECODABLE where
 * nothing decodes; 0 where nothing was decoded yet.  Block counts read it
 * (sweep_count), so a block of code a sweep went through is not decoded again. */
#define SIZE_UNDECODABLE 0xFF

/* What this extension did, for the tests that read the capability table (`stats`):
 * instructions capstone decoded for a scan, and straight runs walked for a descent */
static unsigned long long sweep_scan_decoded, sweep_walks;

typedef struct {
    uint8_t *sizes;
    uint64_t base, len;
} size_map;

static void size_note(const size_map *m, uint64_t at, unsigned size) {
    if (m->sizes != NULL && at >= m->base && at - m->base < m->len)
        m->sizes[at - m->base] = (uint8_t)size;
}

static unsigned size_at(const size_map *m, uint64_t at) {
    return m->sizes != NULL && at >= m->base && at - m->base < m->len ? m->sizes[at - m->base]
                                                                        : 0;
}

/* An insn_type tuple of a capstone instruction (code: the bytes decoded from base). */
static PyObject *sweep_insn(PyTypeObject *type, const cs_insn *ci, const uint8_t *code,
                            uint64_t base, PyObject *flag) {
    PyObject *fields[5] = {
        PyLong_FromUnsignedLongLong(ci->address), PyLong_FromLong(ci->size),
        PyUnicode_FromString(ci->mnemonic), PyUnicode_FromString(ci->op_str),
        PyBytes_FromStringAndSize((const char *)code + (ci->address - base), ci->size)};
    PyObject *insn = type->tp_alloc(type, 6);
    int bad = insn == NULL;
    for (int f = 0; f < 5; f++)
        bad |= fields[f] == NULL;
    if (bad) {
        for (int f = 0; f < 5; f++)
            Py_XDECREF(fields[f]);
        Py_XDECREF(insn);
        return NULL;
    }
    for (int f = 0; f < 5; f++)
        PyTuple_SET_ITEM(insn, f, fields[f]);
    Py_INCREF(flag);
    PyTuple_SET_ITEM(insn, 5, flag);
    return insn;
}

/* cache.setdefault((insn.addr, alt), insn), as a new reference */
static PyObject *sweep_keep(PyObject *cache, PyObject *insn, PyObject *flag) {
    PyObject *key = PyTuple_Pack(2, PyTuple_GET_ITEM(insn, 0), flag);
    if (key == NULL)
        return NULL;
    PyObject *kept = PyDict_SetDefault(cache, key, insn); /* borrowed */
    Py_DECREF(key);
    Py_XINCREF(kept);
    return kept;
}

/* The insn_type tuple of ci as cache holds it under (address, alt) (setdefault), as a new
 * reference */
static PyObject *sweep_held(PyTypeObject *type, const cs_insn *ci, PyObject *cache,
                            PyObject *flag) {
    PyObject *insn = sweep_insn(type, ci, ci->bytes, ci->address, flag);
    PyObject *held = insn == NULL ? NULL : sweep_keep(cache, insn, flag);
    Py_XDECREF(insn);
    return held;
}

/* None kept in cache under (at, alt): nothing decodes there.  0, or -1 (a Python error) */
static int sweep_undecodable(PyObject *cache, uint64_t at, PyObject *flag) {
    PyObject *key = Py_BuildValue("(KO)", (unsigned long long)at, flag);
    int bad = key == NULL || PyDict_SetItem(cache, key, Py_None) < 0;
    Py_XDECREF(key);
    return bad ? -1 : 0;
}

/* stretch(disasm, free, handle, code, addr, stop, count, alt, cache, insn_type) -> list
 *
 * Decode code (the bytes at addr) with capstone, at most count instructions (0: all), and
 * return the instructions from addr on, back to back, as insn_type tuples
 * (addr, size, mnemonic, op_str, raw bytes, alt): one already in cache under (addr, alt) is
 * that one, one not there is made and put there; the list ends before an address cache holds
 * None for (undecodable), after the instruction reaching stop, and after a mnemonic starting
 * with "it" when alt (Thumb's IT: the instructions after it are decoded by a new call).  An
 * empty list where nothing decodes at addr (None is then put in cache under (addr, alt)). */
static PyObject *sweep_stretch(PyObject *self, PyObject *args) {
    (void)self;
    unsigned long long disasm_addr, free_addr, handle, addr, stop;
    Py_buffer code;
    Py_ssize_t count;
    int alt;
    PyObject *cache, *insn_type;
    if (!PyArg_ParseTuple(args, "KKKy*KKnpO!O!", &disasm_addr, &free_addr, &handle, &code,
                          &addr, &stop, &count, &alt, &PyDict_Type, &cache, &PyType_Type,
                          &insn_type))
        return NULL;
    PyTypeObject *type = (PyTypeObject *)insn_type;
    if (!PyType_IsSubtype(type, &PyTuple_Type)) {
        PyBuffer_Release(&code);
        PyErr_SetString(PyExc_TypeError, "insn_type must be a tuple type");
        return NULL;
    }
    cs_disasm_fn disasm = (cs_disasm_fn)(uintptr_t)disasm_addr;
    cs_free_fn free_insns = (cs_free_fn)(uintptr_t)free_addr;
    cs_insn *insns = NULL;
    size_t got = disasm((csh)handle, (const uint8_t *)code.buf, (size_t)code.len, addr,
                        (size_t)(count < 0 ? 0 : count), &insns);
    PyObject *run = PyList_New(0);
    PyObject *flag = alt ? Py_True : Py_False;
    for (size_t i = 0; run != NULL && i < got; i++) {
        const cs_insn *ci = &insns[i];
        PyObject *at = PyLong_FromUnsignedLongLong(ci->address);
        PyObject *key = at == NULL ? NULL : PyTuple_Pack(2, at, flag);
        if (key == NULL) {
            Py_XDECREF(at);
            Py_CLEAR(run);
            break;
        }
        PyObject *insn = PyDict_GetItemWithError(cache, key); /* borrowed */
        if (insn == Py_None) {
            Py_DECREF(at);
            Py_DECREF(key);
            break;
        }
        if (insn == NULL && PyErr_Occurred()) {
            Py_DECREF(at);
            Py_DECREF(key);
            Py_CLEAR(run);
            break;
        }
        Py_DECREF(at);
        if (insn != NULL) {
            Py_INCREF(insn);
        } else {
            insn = sweep_insn(type, ci, (const uint8_t *)code.buf, addr, flag);
            if (insn == NULL || PyDict_SetItem(cache, key, insn) < 0) {
                Py_XDECREF(insn);
                Py_DECREF(key);
                Py_CLEAR(run);
                break;
            }
        }
        Py_DECREF(key);
        int appended = PyList_Append(run, insn);
        Py_DECREF(insn);
        if (appended < 0) {
            Py_CLEAR(run);
            break;
        }
        if (ci->address + ci->size >= stop ||
            (alt && ci->mnemonic[0] == 'i' && ci->mnemonic[1] == 't'))
            break;
    }
    if (insns != NULL)
        free_insns(insns, got);
    if (run != NULL && PyList_GET_SIZE(run) == 0 && sweep_undecodable(cache, addr, flag) < 0)
        Py_CLEAR(run);
    PyBuffer_Release(&code);
    return run;
}


/* What a scan's one-at-a-time paths share (the fixed-size words, a length decoder's) */
typedef struct {
    cs_disasm_fn disasm;
    cs_free_fn free_insns;
    unsigned long long handle;
    const size_map *map;
    PyObject *cache, *flag, *kept;
    PyTypeObject *type;
    const sweep_rule *r;
    uint64_t lo, hi;
    cs_insn last;
    int have_last, failed;
} scan_state;

/* capstone's decode of the one instruction at `at` (code, n bytes): its size noted, and it
 * kept when `ask` and the rule keeps it (by its text too), and the scan's last; 0 where
 * nothing decodes (noted, None kept in the cache there) */
static unsigned scan_one(scan_state *c, const uint8_t *code, size_t n, uint64_t at, int ask)
{
    cs_insn *one = NULL;
    size_t got = c->disasm((csh)c->handle, code, n, at, 1, &one);
    sweep_scan_decoded += got;
    if (got == 0) {
        size_note(c->map, at, SIZE_UNDECODABLE);
        c->failed |= sweep_undecodable(c->cache, at, c->flag) < 0;
        c->have_last = 0;
        if (one != NULL)
            c->free_insns(one, got);
        return 0;
    }
    size_note(c->map, at, one->size);
    int keep = ask ? sweep_keeps(c->r, one, c->lo, c->hi, 0, NULL) : 0;
    if (keep > 0) {
        PyObject *held = sweep_held(c->type, one, c->cache, c->flag);
        if (held == NULL || PyList_Append(c->kept, held) < 0)
            c->failed = 1;
        Py_XDECREF(held);
    }
    c->failed |= keep < 0;
    c->last = *one;
    c->have_last = 1;
    unsigned size = one->size;
    c->free_insns(one, got);
    return size;
}


/* scan(disasm, free, handle, data, base, addr, stop, count, align, alt, cache, insn_type,
 *      rule, lo, hi, sizes) -> (kept, next, last)
 *
 * Decoder.scan's sweep in C: the instructions back to back from addr while they start
 * before stop, in data (the code at base), each capstone call given the bytes up to stop
 * (+16: room for the last) and decoding at most count (0: all; Thumb: a call also ends after
 * an IT instruction, whose state capstone would carry); where nothing decodes, None kept in
 * cache there and the sweep goes on `align` bytes further.  kept: the instructions the rule
 * keeps in a function [lo, hi), as insn_type tuples, each kept in cache (one there already
 * is that one); next: where the sweep stopped (stop or past it); last: the last instruction
 * (kept in cache too) when the sweep ended on one, None when it ended on undecodable bytes.
 * Every size decoded, or an undecodable spot, is noted in the size map `sizes`. */
static PyObject *sweep_scan(PyObject *self, PyObject *args) {
    (void)self;
    unsigned long long disasm_addr, free_addr, handle, base, addr, stop, align, lo, hi;
    Py_buffer data, sizes;
    Py_ssize_t count;
    int alt;
    PyObject *cache, *insn_type, *rule_obj;
    if (!PyArg_ParseTuple(args, "KKKy*KKKnKpO!O!OKKw*", &disasm_addr, &free_addr, &handle,
                          &data, &base, &addr, &stop, &count, &align, &alt, &PyDict_Type,
                          &cache, &PyType_Type, &insn_type, &rule_obj, &lo, &hi, &sizes))
        return NULL;
    size_map map = {(uint8_t *)sizes.buf, base, sizes.len == data.len ? (uint64_t)sizes.len : 0};
    PyTypeObject *type = (PyTypeObject *)insn_type;
    PyObject *kept = NULL, *result = NULL;
    const sweep_rule *r = sweep_rule_of(rule_obj, insn_type);
    if (r == NULL)
        goto done;
    if (align == 0 || addr < base) {
        PyErr_SetString(PyExc_ValueError, "scan: align 0, or addr before the code");
        goto done;
    }
    cs_disasm_fn disasm = (cs_disasm_fn)(uintptr_t)disasm_addr;
    cs_free_fn free_insns = (cs_free_fn)(uintptr_t)free_addr;
    PyObject *flag = alt ? Py_True : Py_False;
    const uint8_t *bytes = (const uint8_t *)data.buf;
    kept = PyList_New(0);
    if (kept == NULL)
        goto done;
    scan_state c = {.disasm = disasm, .free_insns = free_insns, .handle = handle, .map = &map,
                    .cache = cache, .flag = flag, .kept = kept, .type = type, .r = r,
                    .lo = lo, .hi = hi};
    uint64_t at = addr;
    if (r->fixed_size != 0 && r->fixed_size == align) {
        /* fixed-size words and an encoding filter: a word the filter leaves out is never
         * decoded (the sweep goes on one word further whether it decodes or not, and its
         * size is the word's either way), only the kept ones and the last (which says
         * whether the sweep ended on an instruction) */
        for (; at < stop && !c.failed; at += align) {
            uint64_t off = at - base;
            if (off + align > (uint64_t)data.len) { /* past the code: nothing decodes */
                c.have_last = 0;
                continue;
            }
            cs_insn word; /* (no text: a TARGET check below reads none, keeps it) */
            word.mnemonic[0] = word.op_str[0] = '\0';
            word.address = at;
            word.size = (uint16_t)align;
            memcpy(word.bytes, bytes + off, align);
            int keep = sweep_keeps(r, &word, 0, 0, 0, NULL); /* (by encoding: no text read) */
            if (keep < 0) {
                c.failed = 1;
                break;
            }
            if (!keep && at + align < stop) {
                size_note(&map, at, align);
                continue;
            }
            scan_one(&c, bytes + off, align, at, keep); /* (a TARGET's text) */
        }
    }
    if (r->lengths != LENGTHS_NONE) {
        /* a length decoder (x86len.c, s390len.c): an instruction it knows the rule leaves
         * out is passed over by its length, undecoded, unless it is the last (which says
         * whether the sweep ended on an instruction); capstone decodes the others, one at a
         * time */
        while (at < stop && !c.failed) {
            uint64_t off = at - base;
            uint64_t want = stop - at + 16;
            uint64_t left = off < (uint64_t)data.len ? data.len - off : 0;
            unsigned len = left > 0 ? sweep_length(r, bytes + off, (size_t)left) : 0;
            if (len > 0 && at + len < stop) {
                size_note(&map, at, len);
                at += len;
                continue;
            }
            /* (past the code: no bytes, nothing decodes) */
            unsigned size = scan_one(&c, left > 0 ? bytes + off : bytes,
                                     (size_t)(want < left ? want : left), at, 1);
            at += size ? size : align;
        }
    }
    while (at < stop && !c.failed) {
        uint64_t off = at - base;
        uint64_t want = stop - at + 16, left = off < (uint64_t)data.len ? data.len - off : 0;
        cs_insn *insns = NULL;
        size_t got = left > 0 ? disasm((csh)handle, bytes + off, want < left ? want : left, at,
                                       (size_t)(count < 0 ? 0 : count), &insns) : 0;
        sweep_scan_decoded += got;
        if (got == 0) { /* nothing decodes at `at`: kept as such (Decoder._decode_stretch) */
            c.failed = sweep_undecodable(cache, at, flag) < 0;
            size_note(&map, at, SIZE_UNDECODABLE);
            if (insns != NULL)
                free_insns(insns, got);
            c.have_last = 0;
            at += align;
            continue;
        }
        int ended = 0;
        for (size_t i = 0; i < got; i++) {
            const cs_insn *ci = &insns[i];
            size_note(&map, ci->address, ci->size);
            int keep = sweep_keeps(r, ci, lo, hi, 0, NULL);
            if (keep < 0) {
                c.failed = 1;
                break;
            }
            if (keep) {
                PyObject *held = sweep_held(type, ci, cache, flag);
                c.failed = held == NULL || PyList_Append(kept, held) < 0;
                Py_XDECREF(held);
                if (c.failed)
                    break;
            }
            c.last = *ci;
            c.have_last = 1;
            at = ci->address + ci->size;
            if (at >= stop) {
                ended = 1;
                break;
            }
            if (alt && ci->mnemonic[0] == 'i' && ci->mnemonic[1] == 't')
                break; /* a new capstone call after an IT: its state is not carried */
        }
        free_insns(insns, got);
        if (ended)
            break;
    }
    if (c.failed)
        goto done;
    PyObject *last_obj = Py_None;
    Py_INCREF(last_obj);
    if (c.have_last) {
        Py_DECREF(last_obj);
        last_obj = sweep_held(type, &c.last, cache, flag);
        if (last_obj == NULL)
            goto done;
    }
    result = Py_BuildValue("(OKN)", kept, at, last_obj);

done:
    Py_XDECREF(kept);
    PyBuffer_Release(&data);
    PyBuffer_Release(&sizes);
    return result;
}


typedef bool (*cs_disasm_iter_fn)(csh, const uint8_t **, size_t *, uint64_t *, cs_insn *);

/* A conditional branch to target that a descent from entry follows (descent.py `branch`),
 * when its target lies in the code range [base, base + len): 1 (pushed on todo, put in
 * followed unless it is the entry), 0 (the descent's to handle), -1 (a Python error) */
static int walk_follow(const sweep_rule *r, uint64_t entry, uint64_t base, uint64_t len,
                       int64_t target, PyObject *is_entry, PyObject *todo,
                       PyObject *followed)
{
    uint64_t to = (uint64_t)target & r->code_mask;
    if (target < 0 || to < entry || to < base || to - base >= len)
        return 0;
    PyObject *key = PyLong_FromUnsignedLongLong(to);
    if (key == NULL)
        return -1;
    if (to != entry) {
        PyObject *known = PyObject_CallOneArg(is_entry, key);
        int leaves = known == NULL ? -1 : PyObject_IsTrue(known);
        Py_XDECREF(known);
        if (leaves != 0) {
            Py_DECREF(key);
            return leaves < 0 ? -1 : 0;
        }
    }
    int bad = PyList_Append(todo, key) < 0 || (to != entry && PySet_Add(followed, key) < 0);
    Py_DECREF(key);
    return bad ? -1 : 1;
}
typedef cs_insn *(*cs_malloc_fn)(csh);

/* walk(iter, malloc, free, handle, data, base, addr, alt, cache, insn_type, rule, sizes,
 *      seen, entry, is_entry, todo, followed) -> (insn, at, branches, calls)
 *
 * Recursive descent's straight run in C (discover/descent.py; the Python loop there is the
 * reference): from addr in data (the code at base), one instruction at a time
 * (cs_disasm_iter: no more is decoded than is walked), the instructions the rule leaves out
 * whatever the function's extent (a TARGET is kept: lo = hi = 0), each put in seen
 * (address -> size), until an address seen already, or the first instruction the rule
 * keeps.  insn: that one, as an insn_type tuple kept in cache (one there already is that
 * one), or None where the walk stopped at a seen address, where nothing decodes (None kept
 * in cache there, as insn_at does) or where the code ends; at: where it stopped; branches:
 * (address, target) of the conditional direct branches walked past (SweepKind.BRANCH,
 * branch_encodings) that the walk leaves to the descent, in order.  An unconditional
 * direct jump (SweepKind.JUMP, jump_encodings) into the function ends the walk there, its
 * target followed as a branch's (insn None); one out of it is the instruction kept.
 * calls: the direct calls walked past (SweepKind.CALL, call_encodings), as insn_type
 * tuples kept in cache, in order: the descent makes their sites.  A branch into the
 * descent's function (entered at entry) whose target lies in data is followed here, as
 * descent.py `branch` does: its target (code_mask applied) pushed on todo, and put in
 * followed unless it is the entry; into the function means not below the entry and, past
 * it, not a known function entry (is_entry(target) false); the others are the descent's
 * (a site, or code in another range).  Each size decoded is noted in the size map
 * `sizes`. */
static PyObject *sweep_walk(PyObject *self, PyObject *args) {
    (void)self;
    unsigned long long iter_addr, malloc_addr, free_addr, handle, base, addr;
    Py_buffer data, sizes_map;
    unsigned long long entry;
    int alt;
    PyObject *cache, *insn_type, *rule_obj, *seen, *is_entry, *todo, *followed;
    if (!PyArg_ParseTuple(args, "KKKKy*KKpO!O!Ow*O!KOO!O!", &iter_addr, &malloc_addr,
                          &free_addr, &handle, &data, &base, &addr, &alt, &PyDict_Type,
                          &cache, &PyType_Type, &insn_type, &rule_obj, &sizes_map,
                          &PyDict_Type, &seen, &entry, &is_entry, &PyList_Type, &todo,
                          &PySet_Type, &followed))
        return NULL;
    size_map map = {(uint8_t *)sizes_map.buf, base,
                    sizes_map.len == data.len ? (uint64_t)sizes_map.len : 0};
    PyTypeObject *type = (PyTypeObject *)insn_type;
    cs_disasm_iter_fn disasm_iter = (cs_disasm_iter_fn)(uintptr_t)iter_addr;
    cs_malloc_fn insn_malloc = (cs_malloc_fn)(uintptr_t)malloc_addr;
    cs_free_fn free_insns = (cs_free_fn)(uintptr_t)free_addr;
    PyObject *result = NULL, *kept = Py_None, *branches = PyList_New(0), *calls = NULL;
    cs_insn *ci = NULL;
    Py_INCREF(kept);
    calls = branches == NULL ? NULL : PyList_New(0);
    const sweep_rule *r = calls == NULL ? NULL : sweep_rule_of(rule_obj, insn_type);
    if (r == NULL)
        goto done;
    ci = insn_malloc((csh)handle);
    if (ci == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    PyObject *flag = alt ? Py_True : Py_False;
    uint64_t at = addr;
    sweep_walks++;
    for (;;) {
        if (at < base || at - base >= (uint64_t)data.len)
            break; /* outside the code: nothing decodes */
        PyObject *key = PyLong_FromUnsignedLongLong(at);
        int known = key == NULL ? -1 : PyDict_Contains(seen, key);
        if (known != 0) { /* seen already (or an error) */
            Py_XDECREF(key);
            if (known < 0)
                goto done;
            break;
        }
        const uint8_t *code = (const uint8_t *)data.buf + (at - base);
        size_t left = (size_t)data.len - (size_t)(at - base);
        unsigned len = sweep_length(r, code, left);
        if (len > 0) { /* one the rule leaves out (x86len.c, s390len.c): passed over */
            size_note(&map, at, len);
            PyObject *size = PyLong_FromLong((long)len);
            int bad = size == NULL || PyDict_SetItem(seen, key, size) < 0;
            Py_XDECREF(size);
            Py_DECREF(key);
            if (bad)
                goto done;
            at += len;
            continue;
        }
        uint64_t next = at;
        if (!disasm_iter((csh)handle, &code, &left, &next, ci)) {
            Py_DECREF(key);
            size_note(&map, at, SIZE_UNDECODABLE);
            if (sweep_undecodable(cache, at, flag) < 0)
                goto done;
            break;
        }
        size_note(&map, at, ci->size);
        int64_t target = 0;
        int keep = sweep_keeps(r, ci, 0, 0, 1, &target);
        if (keep < 0) {
            Py_DECREF(key);
            goto done;
        }
        int local_jump = 0; /* an unconditional jump into the function: followed here */
        if (keep == 3) {
            local_jump = walk_follow(r, entry, base, (uint64_t)data.len, target, is_entry,
                                     todo, followed);
            if (local_jump < 0) {
                Py_DECREF(key);
                goto done;
            }
            keep = local_jump ? 0 : 1; /* (a jump out of it: the descent's, a site) */
        }
        if (keep == 1) {
            Py_DECREF(key);
            Py_DECREF(kept);
            kept = sweep_held(type, ci, cache, flag);
            if (kept == NULL)
                goto done;
            break;
        }
        if (keep == 4) { /* a direct call: walked past, handed back (the descent's site) */
            PyObject *held = sweep_held(type, ci, cache, flag);
            int bad = held == NULL || PyList_Append(calls, held) < 0;
            Py_XDECREF(held);
            if (bad) {
                Py_DECREF(key);
                goto done;
            }
        }
        PyObject *size = PyLong_FromLong(ci->size);
        int bad = size == NULL || PyDict_SetItem(seen, key, size) < 0;
        Py_XDECREF(size);
        Py_DECREF(key);
        if (bad)
            goto done;
        if (keep == 2) { /* a conditional branch: walked past, followed or handed back */
            int followed_here = walk_follow(r, entry, base, (uint64_t)data.len, target,
                                            is_entry, todo, followed);
            if (followed_here < 0)
                goto done;
            if (!followed_here) {
                PyObject *pair = Py_BuildValue("(KL)", (unsigned long long)at,
                                               (long long)target);
                bad = pair == NULL || PyList_Append(branches, pair) < 0;
                Py_XDECREF(pair);
                if (bad)
                    goto done;
            }
        }
        at = next;
        if (local_jump)
            break; /* (the straight run ends: its target is on todo) */
    }
    result = Py_BuildValue("(OKOO)", kept, at, branches, calls);

done:
    if (ci != NULL)
        free_insns(ci, 1);
    Py_XDECREF(kept);
    Py_XDECREF(branches);
    Py_XDECREF(calls);
    PyBuffer_Release(&data);
    PyBuffer_Release(&sizes_map);
    return result;
}


/* count(iter, malloc, free, handle, data, base, sizes, addr, size, align) -> int
 *
 * How many instructions start in [addr, addr + size) of data (the code at base), back to
 * back from addr, an undecodable spot counting as one and skipped by align
 * (Decoder.insn_starts, the reference): each instruction's size read from the size map
 * (sizes, one byte per byte of data) where a sweep noted it, else decoded alone and noted
 * (Thumb: an instruction's size never depends on an IT block before it). */
static PyObject *sweep_count(PyObject *self, PyObject *args) {
    (void)self;
    unsigned long long iter_addr, malloc_addr, free_addr, handle, base, addr, size, align;
    Py_buffer data, sizes;
    if (!PyArg_ParseTuple(args, "KKKKy*Kw*KKK", &iter_addr, &malloc_addr, &free_addr,
                          &handle, &data, &base, &sizes, &addr, &size, &align))
        return NULL;
    PyObject *result = NULL;
    cs_insn *ci = NULL;
    if (align == 0 || sizes.len != data.len) {
        PyErr_SetString(PyExc_ValueError, "count: align 0, or a size map not the code's size");
        goto done;
    }
    cs_disasm_iter_fn disasm_iter = (cs_disasm_iter_fn)(uintptr_t)iter_addr;
    cs_malloc_fn insn_malloc = (cs_malloc_fn)(uintptr_t)malloc_addr;
    size_map map = {(uint8_t *)sizes.buf, base, (uint64_t)sizes.len};
    uint64_t at = addr, end = addr + size;
    long long n = 0;
    while (at < end) {
        unsigned known = size_at(&map, at);
        if (known == 0 && at >= base && at - base < (uint64_t)data.len) {
            if (ci == NULL && (ci = insn_malloc((csh)handle)) == NULL) {
                PyErr_NoMemory();
                goto done;
            }
            const uint8_t *code = (const uint8_t *)data.buf + (at - base);
            size_t left = (size_t)data.len - (size_t)(at - base);
            uint64_t next = at;
            known = disasm_iter((csh)handle, &code, &left, &next, ci) ? ci->size
                                                                        : SIZE_UNDECODABLE;
            size_note(&map, at, known);
        }
        n++;
        at += known == 0 || known == SIZE_UNDECODABLE ? align : known;
    }
    result = PyLong_FromLongLong(n);

done:
    if (ci != NULL)
        ((cs_free_fn)(uintptr_t)free_addr)(ci, 1);
    PyBuffer_Release(&data);
    PyBuffer_Release(&sizes);
    return result;
}

/* number(op_str) -> int | None: sweep_number, for tests/test_sweep_filter.py to hold it to
 * discover/sweep.py last_operand_number (None there for a magnitude of 2^63 or more too) */
static PyObject *sweep_number_py(PyObject *self, PyObject *args) {
    (void)self;
    const char *op_str;
    if (!PyArg_ParseTuple(args, "s", &op_str))
        return NULL;
    int64_t value;
    if (sweep_number(op_str, &value) != 0)
        Py_RETURN_NONE;
    return PyLong_FromLongLong(value);
}

#endif

/* stats() -> (instructions decoded by scans, walks): counts since the module was loaded */
static PyObject *sweep_stats(PyObject *self, PyObject *args) {
    (void)self;
    (void)args;
    return Py_BuildValue("(KK)", sweep_scan_decoded, sweep_walks);
}

/* lengths(data, rule) -> bytes: the rule's length decoder (sweep_length) at every offset
 * of data (0: not known there), for tests against capstone */
static PyObject *sweep_lengths(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer data;
    PyObject *rule_obj, *insn_type;
    if (!PyArg_ParseTuple(args, "y*OO", &data, &rule_obj, &insn_type))
        return NULL;
    const sweep_rule *r = sweep_rule_of(rule_obj, insn_type);
    PyObject *out = r == NULL ? NULL : PyBytes_FromStringAndSize(NULL, data.len);
    if (out != NULL) {
        uint8_t *lengths = (uint8_t *)PyBytes_AS_STRING(out);
        const uint8_t *bytes = (const uint8_t *)data.buf;
        for (Py_ssize_t i = 0; i < data.len; i++)
            lengths[i] = (uint8_t)sweep_length(r, bytes + i, (size_t)(data.len - i));
    }
    PyBuffer_Release(&data);
    return out;
}

static PyMethodDef sweep_methods[] = {
#ifdef SWEEP_CAPSTONE
    {"stretch", sweep_stretch, METH_VARARGS,
     "Decode a stretch of code into the decoder's instruction table (decode.py)."},
    {"count", sweep_count, METH_VARARGS,
     "Count the instructions of a block (decode.py Decoder.block_count)."},
    {"walk", sweep_walk, METH_VARARGS,
     "Walk straight-line code to the first instruction a SweepRule keeps (descent.py)."},
    {"stats", sweep_stats, METH_NOARGS,
     "(instructions decoded by scans, straight runs walked) so far (tests)."},
    {"number", sweep_number_py, METH_VARARGS,
     "The last operand of an operand text as a number (tests)."},
    {"lengths", sweep_lengths, METH_VARARGS,
     "A SweepRule's length decoder at every offset of the code (tests)."},
    {"scan", sweep_scan, METH_VARARGS,
     "Sweep code, keeping the instructions a SweepRule keeps (decode.py Decoder.scan)."},
#endif
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef sweep_module = {
    PyModuleDef_HEAD_INIT, "_sweep",
    "Discovery's sweep loop in C; emutrace/discover/decode.py keeps the Python reference.",
    -1, sweep_methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__sweep(void) { return PyModule_Create(&sweep_module); }
