/* Discovery's sweep loop in C (issue 9 item 5: a program's first traced run).
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

typedef size_t (*cs_disasm_fn)(csh, const uint8_t *, size_t, uint64_t, size_t, cs_insn **);
typedef void (*cs_free_fn)(cs_insn *, size_t);

/* The sizes of the instructions decoded so far in one range of code (Decoder._size_map):
 * one byte per code byte, at an instruction's first: its size; SIZE_UNDECODABLE where
 * nothing decodes; 0 where nothing was decoded yet.  Block counts read it
 * (sweep_count), so a block of code a sweep went through is not decoded again. */
#define SIZE_UNDECODABLE 0xFF

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
    if (run != NULL && PyList_GET_SIZE(run) == 0) {
        PyObject *key = Py_BuildValue("(KO)", addr, flag);
        if (key == NULL || PyDict_SetItem(cache, key, Py_None) < 0)
            Py_CLEAR(run);
        Py_XDECREF(key);
    }
    PyBuffer_Release(&code);
    return run;
}


/* The last operand of op_str (after its last comma, blanks and '#' dropped) as a number:
 * -?(0x hex | decimal without a leading 0 | 0) filling it (discover/sweep.py
 * last_operand_number).  0 and *value where it is one; -1 where it is none or its
 * magnitude reaches 2^63 (the rule then keeps the instruction: its target is not known).
 * (The hex digits are checked as they come: `0x` alone is none, as in Python.) */
static int sweep_number(const char *op_str, int64_t *value) {
    const char *p = strrchr(op_str, ',');
    p = p == NULL ? op_str : p + 1;
    while (*p == ' ' || *p == '\t')
        p++;
    while (*p == '#')
        p++;
    const char *end = p + strlen(p);
    while (end > p && (end[-1] == ' ' || end[-1] == '\t'))
        end--;
    int negative = p < end && *p == '-';
    p += negative;
    if (p == end)
        return -1;
    uint64_t v = 0;
    if (end - p > 2 && p[0] == '0' && (p[1] == 'x' || p[1] == 'X')) {
        for (const char *q = p + 2; q < end; q++) {
            int d = *q >= '0' && *q <= '9' ? *q - '0'
                    : *q >= 'a' && *q <= 'f' ? *q - 'a' + 10
                    : *q >= 'A' && *q <= 'F' ? *q - 'A' + 10 : -1;
            if (d < 0 || v > ((uint64_t)INT64_MAX - (uint64_t)d) >> 4)
                return -1;
            v = v << 4 | (uint64_t)d;
        }
    } else {
        if (p[0] == '0' && end - p > 1)
            return -1;
        for (const char *q = p; q < end; q++) {
            if (*q < '0' || *q > '9' || v > ((uint64_t)INT64_MAX - (uint64_t)(*q - '0')) / 10)
                return -1;
            v = v * 10 + (uint64_t)(*q - '0');
        }
    }
    *value = negative ? -(int64_t)v : (int64_t)v;
    return 0;
}

/* The rule of one scan (discover/sweep.py SweepRule), read from its attributes once. */
typedef struct {
    PyObject *kinds;    /* dict: mnemonic -> kind (filled through kind()) */
    PyObject *rule;     /* for rule.kind(mnemonic) on a mnemonic not in kinds */
    PyObject *marks;    /* tuple of str */
    PyObject *encodings; /* tuple of (size, mask, value) */
    PyObject *stop_encodings; /* the same, of STOPs (kept by walk) */
    PyObject *target_encodings; /* the same, of direct JUMP/BRANCHes: TARGET */
    PyObject *branch_encodings; /* among those, the conditional branches: BRANCH */
    int relative; /* a TARGET's number is an offset from the instruction */
    unsigned fixed_size; /* every instruction this size, an encoding filter: scan by words */
    int big;
    uint64_t code_mask;
} sweep_rule;

/* Read a SweepRule's attributes into r (0), or set a Python error (-1); release with
 * sweep_rule_release either way. */
static int sweep_rule_read(PyObject *rule_obj, sweep_rule *r) {
    r->rule = rule_obj;
    r->kinds = PyObject_GetAttrString(rule_obj, "kinds");
    r->marks = PyObject_GetAttrString(rule_obj, "marks");
    r->encodings = PyObject_GetAttrString(rule_obj, "encodings");
    r->stop_encodings = PyObject_GetAttrString(rule_obj, "stop_encodings");
    r->target_encodings = PyObject_GetAttrString(rule_obj, "target_encodings");
    r->branch_encodings = PyObject_GetAttrString(rule_obj, "branch_encodings");
    PyObject *relative = PyObject_GetAttrString(rule_obj, "relative");
    PyObject *fixed = PyObject_GetAttrString(rule_obj, "fixed_size");
    PyObject *big = PyObject_GetAttrString(rule_obj, "big");
    PyObject *mask = PyObject_GetAttrString(rule_obj, "code_mask");
    int ok = r->kinds != NULL && r->marks != NULL && r->encodings != NULL &&
             r->stop_encodings != NULL && r->target_encodings != NULL &&
             r->branch_encodings != NULL && relative != NULL &&
             fixed != NULL && big != NULL && mask != NULL;
    if (ok && (!PyDict_Check(r->kinds) || !PyTuple_Check(r->marks) ||
               !PyTuple_Check(r->encodings) || !PyTuple_Check(r->stop_encodings) ||
               !PyTuple_Check(r->target_encodings) || !PyTuple_Check(r->branch_encodings))) {
        PyErr_SetString(PyExc_TypeError, "a SweepRule expected");
        ok = 0;
    }
    PyObject *lists[4] = {r->encodings, r->stop_encodings, r->target_encodings,
                          r->branch_encodings};
    for (int l = 0; ok && l < 4; l++) {
        for (Py_ssize_t e = 0; ok && e < PyTuple_GET_SIZE(lists[l]); e++) {
            PyObject *enc = PyTuple_GET_ITEM(lists[l], e);
            if (!PyTuple_Check(enc) || PyTuple_GET_SIZE(enc) != 3) {
                PyErr_SetString(PyExc_TypeError, "encodings are (size, mask, value)");
                ok = 0;
            }
        }
    }
    if (ok) {
        r->relative = PyObject_IsTrue(relative);
        long size = PyLong_AsLong(fixed);
        r->fixed_size = size == 2 || size == 4 || size == 8 ? (unsigned)size : 0;
        r->big = PyObject_IsTrue(big);
        /* code_mask may be -1 (all bits) or ~1 (ARM): its low 64 bits */
        r->code_mask = PyLong_AsUnsignedLongLongMask(mask);
        ok = !PyErr_Occurred();
    }
    Py_XDECREF(relative);
    Py_XDECREF(fixed);
    Py_XDECREF(big);
    Py_XDECREF(mask);
    return ok ? 0 : -1;
}

static void sweep_rule_release(sweep_rule *r) {
    Py_CLEAR(r->kinds);
    Py_CLEAR(r->marks);
    Py_CLEAR(r->encodings);
    Py_CLEAR(r->stop_encodings);
    Py_CLEAR(r->target_encodings);
    Py_CLEAR(r->branch_encodings);
}

/* The rule last read, kept with a reference to its object: a sweep asks with the same
 * SweepRule thousands of times (descent: once per straight run), and its attributes are
 * never reassigned (its `kinds` dict grows in place). */
static PyObject *sweep_last_obj;
static sweep_rule sweep_last;

/* rule_obj's rule (the cached one), or NULL with a Python error; insn_type checked too */
static const sweep_rule *sweep_rule_of(PyObject *rule_obj, PyObject *insn_type) {
    if (!PyType_IsSubtype((PyTypeObject *)insn_type, &PyTuple_Type)) {
        PyErr_SetString(PyExc_TypeError, "insn_type must be a tuple type");
        return NULL;
    }
    if (rule_obj == sweep_last_obj)
        return &sweep_last;
    sweep_rule fresh = {0};
    if (sweep_rule_read(rule_obj, &fresh) < 0) {
        sweep_rule_release(&fresh);
        return NULL;
    }
    sweep_rule_release(&sweep_last);
    Py_XDECREF(sweep_last_obj);
    Py_INCREF(rule_obj);
    sweep_last_obj = rule_obj;
    sweep_last = fresh;
    return &sweep_last;
}

enum {
    KIND_PLAIN = 0, KIND_TARGET = 1, KIND_CLASSIFY = 2, KIND_OPERANDS = 3, KIND_STOP = 4,
    KIND_BRANCH = 5
};

/* 1: the instruction word matches one of encodings ((size, mask, value) tuples); -1: error */
static int sweep_matches(PyObject *encodings, const cs_insn *ci, uint64_t word) {
    for (Py_ssize_t e = 0; e < PyTuple_GET_SIZE(encodings); e++) {
        PyObject *enc = PyTuple_GET_ITEM(encodings, e);
        unsigned long long size = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(enc, 0));
        unsigned long long mask = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(enc, 1));
        unsigned long long value = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(enc, 2));
        if (PyErr_Occurred())
            return -1;
        if (size == ci->size && (word & mask) == value)
            return 1;
    }
    return 0;
}

/* The direct target in op_str (discover/sweep.py SweepRule._target): 0 and *target, or -1
 * where it is not known (no number, negative) */
static int sweep_target(const sweep_rule *r, const cs_insn *ci, int64_t *target) {
    int64_t number;
    if (sweep_number(ci->op_str, &number) != 0)
        return -1;
    if (r->relative)
        number += (int64_t)ci->address; /* (addresses are below 2^63) */
    if (number < 0)
        return -1;
    *target = number;
    return 0;
}

/* 1: the direct target in op_str is outside [lo, hi) or not known; 0: inside */
static int sweep_target_leaves(const sweep_rule *r, const cs_insn *ci, uint64_t lo,
                               uint64_t hi) {
    int64_t number;
    if (sweep_target(r, ci, &number) != 0)
        return 1;
    uint64_t target = (uint64_t)number & r->code_mask;
    return !(lo <= target && target < hi);
}

/* 1: the classifier must read the instruction (SweepRule.keeps; stops: every STOP too);
 * 0: not; -1: a Python error.  branch (recursive descent's walk, with stops): 2 and the
 * target in *branch for a conditional direct branch whose target is known
 * (SweepRule.branch_target). */
static int sweep_keeps(const sweep_rule *r, const cs_insn *ci, uint64_t lo, uint64_t hi,
                       int stops, int64_t *branch) {
    uint64_t word = 0; /* the instruction's bytes as a number in the ISA's byte order */
    for (int i = 0; i < ci->size && i < 8; i++) {
        int at = r->big ? i : ci->size - 1 - i;
        word = word << 8 | ci->bytes[at];
    }
    if (stops) {
        int stop = sweep_matches(r->stop_encodings, ci, word);
        if (stop != 0)
            return stop;
    }
    if (PyTuple_GET_SIZE(r->encodings) > 0) {
        int match = sweep_matches(r->encodings, ci, word);
        if (match <= 0)
            return match;
        int target = sweep_matches(r->target_encodings, ci, word);
        if (target <= 0)
            return !target ? 1 : -1;
        if (branch != NULL) {
            int cond = sweep_matches(r->branch_encodings, ci, word);
            if (cond < 0)
                return -1;
            if (cond && sweep_target(r, ci, branch) == 0)
                return 2;
        }
        return sweep_target_leaves(r, ci, lo, hi);
    }
    PyObject *mnemonic = PyUnicode_FromString(ci->mnemonic);
    if (mnemonic == NULL)
        return -1;
    PyObject *found = PyDict_GetItemWithError(r->kinds, mnemonic); /* borrowed */
    long kind;
    if (found != NULL) {
        kind = PyLong_AsLong(found);
    } else if (PyErr_Occurred()) {
        Py_DECREF(mnemonic);
        return -1;
    } else {
        PyObject *asked = PyObject_CallMethod(r->rule, "kind", "O", mnemonic);
        kind = asked == NULL ? -1 : PyLong_AsLong(asked);
        Py_XDECREF(asked);
    }
    Py_DECREF(mnemonic);
    if (kind == -1 && PyErr_Occurred())
        return -1;
    if (kind == KIND_PLAIN)
        return 0;
    if (kind == KIND_STOP)
        return stops;
    if (kind == KIND_OPERANDS) {
        for (Py_ssize_t m = 0; m < PyTuple_GET_SIZE(r->marks); m++) {
            const char *mark = PyUnicode_AsUTF8(PyTuple_GET_ITEM(r->marks, m));
            if (mark == NULL)
                return -1;
            if (strstr(ci->op_str, mark) != NULL)
                return 1;
        }
        return 0;
    }
    if (kind == KIND_BRANCH && branch != NULL && sweep_target(r, ci, branch) == 0)
        return 2;
    if (kind == KIND_TARGET || kind == KIND_BRANCH)
        return sweep_target_leaves(r, ci, lo, hi);
    return 1;
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
    cs_insn last;
    int have_last = 0, failed = 0;
    uint64_t at = addr;
    if (r->fixed_size != 0 && r->fixed_size == align) {
        /* fixed-size words and an encoding filter: a word the filter leaves out is never
         * decoded (the sweep goes on one word further whether it decodes or not, and its
         * size is the word's either way), only the kept ones and the last (which says
         * whether the sweep ended on an instruction) */
        for (; at < stop && !failed; at += align) {
            uint64_t off = at - base;
            if (off + align > (uint64_t)data.len) { /* past the code: nothing decodes */
                have_last = 0;
                continue;
            }
            cs_insn word; /* (no text: a TARGET check below reads none, keeps it) */
            word.mnemonic[0] = word.op_str[0] = '\0';
            word.address = at;
            word.size = (uint16_t)align;
            memcpy(word.bytes, bytes + off, align);
            int keep = sweep_keeps(r, &word, 0, 0, 0, NULL); /* (by encoding: no text read) */
            if (keep < 0) {
                failed = 1;
                break;
            }
            if (!keep && at + align < stop) {
                size_note(&map, at, align);
                continue;
            }
            cs_insn *one = NULL;
            size_t got = disasm((csh)handle, bytes + off, align, at, 1, &one);
            if (got == 0) {
                size_note(&map, at, SIZE_UNDECODABLE);
                PyObject *key = Py_BuildValue("(KO)", at, flag);
                if (key == NULL || PyDict_SetItem(cache, key, Py_None) < 0)
                    failed = 1;
                Py_XDECREF(key);
                have_last = 0;
                if (one != NULL)
                    free_insns(one, got);
                continue;
            }
            size_note(&map, at, one->size);
            keep = keep ? sweep_keeps(r, one, lo, hi, 0, NULL) : 0; /* (a TARGET's text) */
            if (keep > 0) {
                PyObject *insn = sweep_insn(type, one, one->bytes, one->address, flag);
                PyObject *held = insn == NULL ? NULL : sweep_keep(cache, insn, flag);
                Py_XDECREF(insn);
                if (held == NULL || PyList_Append(kept, held) < 0)
                    failed = 1;
                Py_XDECREF(held);
            }
            failed |= keep < 0;
            last = *one;
            have_last = 1;
            free_insns(one, got);
        }
    }
    while (at < stop && !failed) {
        uint64_t off = at - base;
        uint64_t want = stop - at + 16, left = off < (uint64_t)data.len ? data.len - off : 0;
        cs_insn *insns = NULL;
        size_t got = left > 0 ? disasm((csh)handle, bytes + off, want < left ? want : left, at,
                                       (size_t)(count < 0 ? 0 : count), &insns) : 0;
        if (got == 0) { /* nothing decodes at `at`: kept as such (Decoder._decode_stretch) */
            PyObject *key = Py_BuildValue("(KO)", at, flag);
            if (key == NULL || PyDict_SetItem(cache, key, Py_None) < 0)
                failed = 1;
            Py_XDECREF(key);
            size_note(&map, at, SIZE_UNDECODABLE);
            if (insns != NULL)
                free_insns(insns, got);
            have_last = 0;
            at += align;
            continue;
        }
        int ended = 0;
        for (size_t i = 0; i < got; i++) {
            const cs_insn *ci = &insns[i];
            size_note(&map, ci->address, ci->size);
            int keep = sweep_keeps(r, ci, lo, hi, 0, NULL);
            if (keep < 0) {
                failed = 1;
                break;
            }
            if (keep) {
                PyObject *insn = sweep_insn(type, ci, ci->bytes, ci->address, flag);
                PyObject *one = insn == NULL ? NULL : sweep_keep(cache, insn, flag);
                Py_XDECREF(insn);
                if (one == NULL || PyList_Append(kept, one) < 0) {
                    Py_XDECREF(one);
                    failed = 1;
                    break;
                }
                Py_DECREF(one);
            }
            last = *ci;
            have_last = 1;
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
    if (failed)
        goto done;
    PyObject *last_obj = Py_None;
    Py_INCREF(last_obj);
    if (have_last) {
        PyObject *insn = sweep_insn(type, &last, last.bytes, last.address, flag);
        Py_DECREF(last_obj);
        last_obj = insn == NULL ? NULL : sweep_keep(cache, insn, flag);
        Py_XDECREF(insn);
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
typedef cs_insn *(*cs_malloc_fn)(csh);

/* walk(iter, malloc, free, handle, data, base, addr, alt, cache, insn_type, rule, sizes,
 *      seen) -> (insn, at, branches)
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
 * branch_encodings), in order: the descent follows or makes sites of them itself.  Each
 * size decoded is noted in the size map `sizes`. */
static PyObject *sweep_walk(PyObject *self, PyObject *args) {
    (void)self;
    unsigned long long iter_addr, malloc_addr, free_addr, handle, base, addr;
    Py_buffer data, sizes_map;
    int alt;
    PyObject *cache, *insn_type, *rule_obj, *seen;
    if (!PyArg_ParseTuple(args, "KKKKy*KKpO!O!Ow*O!", &iter_addr, &malloc_addr, &free_addr,
                          &handle, &data, &base, &addr, &alt, &PyDict_Type, &cache,
                          &PyType_Type, &insn_type, &rule_obj, &sizes_map, &PyDict_Type,
                          &seen))
        return NULL;
    size_map map = {(uint8_t *)sizes_map.buf, base,
                    sizes_map.len == data.len ? (uint64_t)sizes_map.len : 0};
    PyTypeObject *type = (PyTypeObject *)insn_type;
    cs_disasm_iter_fn disasm_iter = (cs_disasm_iter_fn)(uintptr_t)iter_addr;
    cs_malloc_fn insn_malloc = (cs_malloc_fn)(uintptr_t)malloc_addr;
    cs_free_fn free_insns = (cs_free_fn)(uintptr_t)free_addr;
    PyObject *result = NULL, *kept = Py_None, *branches = PyList_New(0);
    cs_insn *ci = NULL;
    Py_INCREF(kept);
    const sweep_rule *r = branches == NULL ? NULL : sweep_rule_of(rule_obj, insn_type);
    if (r == NULL)
        goto done;
    ci = insn_malloc((csh)handle);
    if (ci == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    PyObject *flag = alt ? Py_True : Py_False;
    uint64_t at = addr;
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
        uint64_t next = at;
        if (!disasm_iter((csh)handle, &code, &left, &next, ci)) {
            Py_DECREF(key);
            size_note(&map, at, SIZE_UNDECODABLE);
            PyObject *where = Py_BuildValue("(KO)", at, flag);
            int bad = where == NULL || PyDict_SetItem(cache, where, Py_None) < 0;
            Py_XDECREF(where);
            if (bad)
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
        if (keep == 1) {
            Py_DECREF(key);
            PyObject *insn = sweep_insn(type, ci, ci->bytes, ci->address, flag);
            Py_DECREF(kept);
            kept = insn == NULL ? NULL : sweep_keep(cache, insn, flag);
            Py_XDECREF(insn);
            if (kept == NULL)
                goto done;
            break;
        }
        PyObject *size = PyLong_FromLong(ci->size);
        int bad = size == NULL || PyDict_SetItem(seen, key, size) < 0;
        Py_XDECREF(size);
        Py_DECREF(key);
        if (bad)
            goto done;
        if (keep == 2) { /* a conditional branch: walked past, its target handed back */
            PyObject *pair = Py_BuildValue("(KL)", (unsigned long long)at, (long long)target);
            bad = pair == NULL || PyList_Append(branches, pair) < 0;
            Py_XDECREF(pair);
            if (bad)
                goto done;
        }
        at = next;
    }
    result = Py_BuildValue("(OKO)", kept, at, branches);

done:
    if (ci != NULL)
        free_insns(ci, 1);
    Py_XDECREF(kept);
    Py_XDECREF(branches);
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

static PyMethodDef sweep_methods[] = {
#ifdef SWEEP_CAPSTONE
    {"stretch", sweep_stretch, METH_VARARGS,
     "Decode a stretch of code into the decoder's instruction table (decode.py)."},
    {"count", sweep_count, METH_VARARGS,
     "Count the instructions of a block (decode.py Decoder.block_count)."},
    {"walk", sweep_walk, METH_VARARGS,
     "Walk straight-line code to the first instruction a SweepRule keeps (descent.py)."},
    {"number", sweep_number_py, METH_VARARGS,
     "The last operand of an operand text as a number (tests)."},
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
