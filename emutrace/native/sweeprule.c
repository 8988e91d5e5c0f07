/* The sweep filter's rule in C: the reading of a SweepRule (discover/sweep.py, the
 * reference) and its verdict on one decoded instruction, for sweep.c's scan and walk.  Only
 * built where capstone's header is (sweep.c's SWEEP_CAPSTONE). */
#if defined(__has_include)
#if __has_include(<capstone/capstone.h>)
#define SWEEPRULE_CAPSTONE 1
#endif
#endif

#ifdef SWEEPRULE_CAPSTONE

#include "sweeprule.h"
#include "s390len.h"
#include "x86len.h"

#include <string.h>

#define SWEEP_KIND_SLOTS 1024 /* mnemonics kept per rule (x86 has ~1,500; a sweep meets few) */

/* The last operand of op_str (after its last comma, blanks and '#' dropped) as a number:
 * -?(0x hex | decimal without a leading 0 | 0) filling it (discover/sweep.py
 * last_operand_number).  0 and *value where it is one; -1 where it is none or its
 * magnitude reaches 2^63 (the rule then keeps the instruction: its target is not known).
 * (The hex digits are checked as they come: `0x` alone is none, as in Python.) */
int sweep_number(const char *op_str, int64_t *value) {
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


/* The (size, mask, value) tuples of SweepRule attribute `name` into *out (0), or a Python
 * error (-1) */
static int sweep_words_read(PyObject *rule_obj, const char *name, sweep_words *out) {
    PyObject *list = PyObject_GetAttrString(rule_obj, name);
    int ok = list != NULL && PyTuple_Check(list);
    if (list != NULL && !ok)
        PyErr_Format(PyExc_TypeError, "%s: a tuple of (size, mask, value) expected", name);
    Py_ssize_t n = ok ? PyTuple_GET_SIZE(list) : 0;
    out->w = ok && n > 0 ? PyMem_Calloc((size_t)n, sizeof *out->w) : NULL;
    if (n > 0 && out->w == NULL) {
        PyErr_NoMemory();
        ok = 0;
    }
    for (Py_ssize_t e = 0; ok && e < n; e++) {
        PyObject *enc = PyTuple_GET_ITEM(list, e);
        if (!PyTuple_Check(enc) || PyTuple_GET_SIZE(enc) != 3) {
            PyErr_Format(PyExc_TypeError, "%s: a tuple of (size, mask, value) expected", name);
            ok = 0;
            break;
        }
        out->w[e].size = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(enc, 0));
        out->w[e].mask = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(enc, 1));
        out->w[e].value = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(enc, 2));
        ok = !PyErr_Occurred();
    }
    out->n = ok ? (size_t)n : 0;
    Py_XDECREF(list);
    return ok ? 0 : -1;
}

/* Read a SweepRule's attributes into r (0), or set a Python error (-1); release with
 * sweep_rule_release either way. */
static int sweep_rule_read(PyObject *rule_obj, sweep_rule *r) {
    r->rule = rule_obj;
    r->kinds = PyObject_GetAttrString(rule_obj, "kinds");
    r->marks = PyObject_GetAttrString(rule_obj, "marks");
    PyObject *relative = PyObject_GetAttrString(rule_obj, "relative");
    PyObject *fixed = PyObject_GetAttrString(rule_obj, "fixed_size");
    PyObject *big = PyObject_GetAttrString(rule_obj, "big");
    PyObject *mask = PyObject_GetAttrString(rule_obj, "code_mask");
    PyObject *lengths = PyObject_GetAttrString(rule_obj, "lengths");
    int ok = r->kinds != NULL && r->marks != NULL && relative != NULL && fixed != NULL &&
             big != NULL && mask != NULL && lengths != NULL;
    if (ok && (!PyDict_Check(r->kinds) || !PyTuple_Check(r->marks))) {
        PyErr_SetString(PyExc_TypeError, "a SweepRule expected");
        ok = 0;
    }
    r->slots = ok ? PyMem_Calloc(SWEEP_KIND_SLOTS, sizeof *r->slots) : NULL;
    if (ok && r->slots == NULL) {
        PyErr_NoMemory();
        ok = 0;
    }
    ok = ok && sweep_words_read(rule_obj, "encodings", &r->encodings) == 0 &&
         sweep_words_read(rule_obj, "stop_encodings", &r->stops) == 0 &&
         sweep_words_read(rule_obj, "target_encodings", &r->targets) == 0 &&
         sweep_words_read(rule_obj, "branch_encodings", &r->branches) == 0 &&
         sweep_words_read(rule_obj, "jump_encodings", &r->jumps) == 0 &&
         sweep_words_read(rule_obj, "call_encodings", &r->calls) == 0;
    if (ok) {
        r->n_marks = (size_t)PyTuple_GET_SIZE(r->marks);
        r->marks_utf8 = r->n_marks ? PyMem_Calloc(r->n_marks, sizeof *r->marks_utf8) : NULL;
        if (r->n_marks && r->marks_utf8 == NULL) {
            PyErr_NoMemory();
            ok = 0;
        }
        for (size_t m = 0; ok && m < r->n_marks; m++) {
            /* (the str's own UTF-8, alive while the tuple is held) */
            r->marks_utf8[m] = PyUnicode_AsUTF8(PyTuple_GET_ITEM(r->marks, (Py_ssize_t)m));
            ok = r->marks_utf8[m] != NULL;
        }
    }
    if (ok) {
        r->relative = PyObject_IsTrue(relative);
        long size = PyLong_AsLong(fixed);
        r->fixed_size = size == 2 || size == 4 || size == 8 ? (unsigned)size : 0;
        r->big = PyObject_IsTrue(big);
        /* code_mask may be -1 (all bits) or ~1 (ARM): its low 64 bits */
        r->code_mask = PyLong_AsUnsignedLongLongMask(mask);
        const char *name = PyUnicode_AsUTF8(lengths);
        r->lengths = name == NULL ? LENGTHS_NONE
                     : strcmp(name, "x86_64") == 0 ? LENGTHS_X86_64
                     : strcmp(name, "i386") == 0 ? LENGTHS_I386
                     : strcmp(name, "s390x") == 0 ? LENGTHS_S390X : LENGTHS_NONE;
        ok = !PyErr_Occurred();
    }
    Py_XDECREF(lengths);
    Py_XDECREF(relative);
    Py_XDECREF(fixed);
    Py_XDECREF(big);
    Py_XDECREF(mask);
    return ok ? 0 : -1;
}

static void sweep_rule_release(sweep_rule *r) {
    PyMem_Free(r->slots);
    Py_CLEAR(r->kinds);
    Py_CLEAR(r->marks);
    PyMem_Free(r->marks_utf8);
    sweep_words *lists[6] = {&r->encodings, &r->stops, &r->targets, &r->branches,
                             &r->jumps, &r->calls};
    for (int l = 0; l < 6; l++)
        PyMem_Free(lists[l]->w);
    *r = (sweep_rule){0};
}

/* The rule last read, kept with a reference to its object: a sweep asks with the same
 * SweepRule thousands of times (descent: once per straight run), and its attributes are
 * never reassigned (its `kinds` dict grows in place). */
static PyObject *sweep_last_obj;
static sweep_rule sweep_last;

/* rule_obj's rule (the cached one), or NULL with a Python error; insn_type checked too */
const sweep_rule *sweep_rule_of(PyObject *rule_obj, PyObject *insn_type) {
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


/* Does the instruction word (of ci's size) match one of words? */
static int sweep_matches(const sweep_words *words, const cs_insn *ci, uint64_t word) {
    for (size_t e = 0; e < words->n; e++)
        if (words->w[e].size == ci->size && (word & words->w[e].mask) == words->w[e].value)
            return 1;
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

/* The kind of a mnemonic from Python (SweepRule.kinds, else rule.kind(mnemonic)); -1 with a
 * Python error */
static long sweep_kind_asked(const sweep_rule *r, const char *text) {
    PyObject *mnemonic = PyUnicode_FromString(text);
    if (mnemonic == NULL)
        return -1;
    PyObject *found = PyDict_GetItemWithError(r->kinds, mnemonic); /* borrowed */
    long kind = -1;
    if (found != NULL) {
        kind = PyLong_AsLong(found);
    } else if (!PyErr_Occurred()) {
        PyObject *asked = PyObject_CallMethod(r->rule, "kind", "O", mnemonic);
        kind = asked == NULL ? -1 : PyLong_AsLong(asked);
        Py_XDECREF(asked);
    }
    Py_DECREF(mnemonic);
    /* (-1 from Python itself, not an error: no kind says that; the classifier reads it) */
    return kind == -1 && !PyErr_Occurred() ? KIND_CLASSIFY : kind;
}

/* The kind of a mnemonic: asked from Python once per distinct mnemonic (a sweep meets a few
 * hundred, in tens of thousands of instructions), then kept in r->slots; -1 with a Python
 * error */
static long sweep_kind(const sweep_rule *r, const char *mnemonic) {
    size_t len = strnlen(mnemonic, sizeof r->slots[0].mnemonic);
    if (r->slots == NULL || len == sizeof r->slots[0].mnemonic)
        return sweep_kind_asked(r, mnemonic);
    uint32_t h = 2166136261u; /* FNV-1a */
    for (size_t i = 0; i < len; i++)
        h = (h ^ (uint8_t)mnemonic[i]) * 16777619u;
    for (uint32_t probe = 0; probe < SWEEP_KIND_SLOTS; probe++) {
        struct sweep_kind_slot *slot = &r->slots[(h + probe) % SWEEP_KIND_SLOTS];
        if (slot->mnemonic[0] == '\0') {
            long kind = sweep_kind_asked(r, mnemonic);
            if (kind >= 0) {
                memcpy(slot->mnemonic, mnemonic, len + 1);
                slot->kind = (int)kind;
            }
            return kind;
        }
        if (strcmp(slot->mnemonic, mnemonic) == 0)
            return slot->kind;
    }
    return sweep_kind_asked(r, mnemonic); /* (the table is full) */
}

/* 1: the classifier must read the instruction (SweepRule.keeps; stops: every STOP too);
 * 0: not; -1: a Python error (asking rule.kind).  branch (recursive descent's walk, with
 * stops): 2 and the
 * target in *branch for a conditional direct branch whose target is known
 * (SweepRule.branch_target). */
int sweep_keeps(const sweep_rule *r, const cs_insn *ci, uint64_t lo, uint64_t hi,
                int stops, int64_t *branch) {
    uint64_t word = 0; /* the instruction's bytes as a number in the ISA's byte order */
    for (int i = 0; i < ci->size && i < 8; i++) {
        int at = r->big ? i : ci->size - 1 - i;
        word = word << 8 | ci->bytes[at];
    }
    if (stops && sweep_matches(&r->stops, ci, word))
        return 1;
    if (r->encodings.n > 0) {
        if (!sweep_matches(&r->encodings, ci, word))
            return 0;
        if (!sweep_matches(&r->targets, ci, word))
            return branch != NULL && sweep_matches(&r->calls, ci, word) &&
                   sweep_target(r, ci, branch) == 0 ? 4 : 1;
        if (branch != NULL && sweep_matches(&r->branches, ci, word) &&
            sweep_target(r, ci, branch) == 0)
            return 2;
        if (branch != NULL && sweep_matches(&r->jumps, ci, word) &&
            sweep_target(r, ci, branch) == 0)
            return 3;
        return sweep_target_leaves(r, ci, lo, hi);
    }
    long kind = sweep_kind(r, ci->mnemonic);
    if (kind == -1)
        return -1;
    if (kind == KIND_PLAIN)
        return 0;
    if (kind == KIND_STOP)
        return stops;
    if (kind == KIND_OPERANDS) {
        for (size_t m = 0; m < r->n_marks; m++)
            if (strstr(ci->op_str, r->marks_utf8[m]) != NULL)
                return 1;
        return 0;
    }
    if ((kind == KIND_BRANCH || kind == KIND_JUMP || kind == KIND_CALL) && branch != NULL
        && sweep_target(r, ci, branch) == 0)
        return kind == KIND_BRANCH ? 2 : kind == KIND_JUMP ? 3 : 4;
    if (kind == KIND_TARGET || kind == KIND_BRANCH || kind == KIND_JUMP)
        return sweep_target_leaves(r, ci, lo, hi);
    return 1;
}

#endif /* SWEEPRULE_CAPSTONE */

unsigned sweep_length(const sweep_rule *r, const uint8_t *code, size_t n)
{
    switch (r->lengths) {
    case LENGTHS_X86_64:
    case LENGTHS_I386:
        return x86_length(code, n < 15 ? n : 15, r->lengths == LENGTHS_X86_64);
    case LENGTHS_S390X:
        return s390_length(code, n < 6 ? n : 6);
    default:
        return 0;
    }
}
