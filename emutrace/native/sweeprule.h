/* The sweep filter's rule in C (discover/sweep.py SweepRule is its reference): which
 * instructions function discovery's sweep hands Python (sweep.c's scan, walk).  Built into
 * the _sweep extension with sweep.c. */
#ifndef EMUTRACE_SWEEPRULE_H
#define EMUTRACE_SWEEPRULE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <capstone/capstone.h>
#include <stdint.h>

/* (size, mask, value) words of one of a SweepFilter's encodings lists, as C numbers */
typedef struct {
    size_t n;
    struct sweep_word { uint64_t size, mask, value; } *w;
} sweep_words;

/* A mnemonic's kind, kept in C (capstone's mnemonic field is 32 bytes with its NUL) */
struct sweep_kind_slot {
    char mnemonic[32];
    int kind;
};

/* The rule of one scan (discover/sweep.py SweepRule), read from its attributes once. */
typedef struct {
    PyObject *kinds;    /* dict: mnemonic -> kind (filled through kind()) */
    PyObject *rule;     /* for rule.kind(mnemonic) on a mnemonic not in kinds */
    struct sweep_kind_slot *slots; /* the kinds asked so far, by mnemonic (open addressing) */
    PyObject *marks;    /* tuple of str (held: marks_utf8 points into them) */
    const char **marks_utf8;
    size_t n_marks;
    sweep_words encodings; /* every word the classifier may read as a transfer */
    sweep_words stops;     /* STOPs (kept by walk) */
    sweep_words targets;   /* direct JUMP/BRANCHes: TARGET */
    sweep_words branches;  /* among those, the conditional branches: BRANCH */
    sweep_words jumps;     /* and the unconditional jumps: JUMP */
    sweep_words calls;     /* among `encodings`, the direct calls: CALL */
    int relative; /* a TARGET's number is an offset from the instruction */
    unsigned fixed_size; /* every instruction this size, an encoding filter: scan by words */
    int big;
    uint64_t code_mask;
    int lengths; /* SweepFilter.lengths: a LENGTHS_ value */
} sweep_rule;

/* the length decoders SweepFilter.lengths names (x86len.h, s390len.h) */
enum { LENGTHS_NONE = 0, LENGTHS_X86_64, LENGTHS_I386, LENGTHS_S390X };

/* The length of the instruction at code (n bytes) by the rule's length decoder, where it
 * knows the instruction never to be one the rule keeps; 0 otherwise (capstone's). */
unsigned sweep_length(const sweep_rule *r, const uint8_t *code, size_t n);

/* SweepKind's values (isa/base.py) */
enum {
    KIND_PLAIN = 0, KIND_TARGET = 1, KIND_CLASSIFY = 2, KIND_OPERANDS = 3, KIND_STOP = 4,
    KIND_BRANCH = 5, KIND_JUMP = 6, KIND_CALL = 7
};

/* The last operand of op_str as a number (last_operand_number): 0 and *value, or -1 */
int sweep_number(const char *op_str, int64_t *value);

/* rule_obj's rule (read once and kept), or NULL with a Python error; insn_type checked too */
const sweep_rule *sweep_rule_of(PyObject *rule_obj, PyObject *insn_type);

/* 1: the classifier must read the instruction; 0: not; 2 (branch given): a conditional
 * direct branch whose target is in *branch; 3 (branch given): an unconditional direct jump
 * whose target is in *branch; 4 (branch given): a direct call whose target is in *branch;
 * -1: a Python error (asking rule.kind) */
int sweep_keeps(const sweep_rule *r, const cs_insn *ci, uint64_t lo, uint64_t hi, int stops,
                int64_t *branch);

#endif
