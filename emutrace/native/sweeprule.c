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

#include <string.h>

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
int sweep_keeps(const sweep_rule *r, const cs_insn *ci, uint64_t lo, uint64_t hi,
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

#endif /* SWEEPRULE_CAPSTONE */
