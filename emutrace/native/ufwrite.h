/* emutrace native record writer: the shadow stack's common cases and uftrace records in C
 * (ufwrite.c).  The hot path (hotpath.c) offers it every call and return it finished; it
 * either takes the event whole — shadow stack, tail-call bookkeeping, record bytes — or
 * leaves it, untouched, to the Python reference (trace/shadow.py, backends/tails.py,
 * trace/uftrace_write.py).
 */
#ifndef EMUTRACE_UFWRITE_H
#define EMUTRACE_UFWRITE_H

#include <stdint.h>

typedef struct uw_state uw_state;

/* the `char *` values the hot path copied for an event (hotpath.c string_read: what
 * ArgReader.string reads, at most 65 bytes, to the NUL): word i's copy when bit i of mask is
 * set, len[i] bytes at bytes[i], or len[i] == UW_STRING_NONE for NULL or unreadable memory */
#define UW_STRING_NONE 0xffff
#define UW_STRING_WORDS 8
typedef struct {
    uint32_t mask;
    uint16_t len[UW_STRING_WORDS];
    const uint8_t *bytes[UW_STRING_WORDS];
} uw_strings;

/* what the hot path offers: one finished call or return (hotpath.c nt_event's fields) */
typedef struct {
    int call;           /* 1: a call, 0: a return */
    uint64_t time, site, target, sp, after;
    const uint64_t *regs;  /* call: the argument words; return: the return registers */
    const uw_strings *strings;  /* NULL: none copied (a plan with a string then declines) */
} uw_event;

/* how a plan writes a value (uw_callee_plan's forms, uw_return_plan's form) */
enum {
    UW_NUMBER = 0,  /* its size in bytes, little-endian, padded to 4 */
    UW_TEXT = 1,    /* uftrace's `/s`: u16 length, the text (the copy's bytes as UTF-8 of
                       Latin-1, or `NULL`, or `<0x...>` for an unreadable pointer), padded
                       to 4 (uftrace_args.py pack_one) */
    UW_COPY = 2     /* the spill file's string: the word in 8 bytes, then u16 length or
                       UW_STRING_NONE, the copy's bytes, padded to 4 (trace/spill.py) */
};

/* 1: the writer took the event (nothing for Python to do); 0: Python's, nothing changed.
 * drain: called first when the byte buffer lacks room for one record. */
/* records deeper than uftrace's depth field holds (1,024 frames; uw_set_deep) */
enum {
    UW_DEEP_PYTHON = 0,  /* left to Python (the default) */
    UW_DEEP_COUNT = 1,   /* a uftrace directory: not written, entries counted */
    UW_DEEP_DEPTH = 2    /* the spill file: written with their depth after the record */
};

int uw_take(uw_state *u, const uw_event *e, void (*drain)(void));
int uw_enabled(const uw_state *u);

/* the same for a jump to a function entry (TailRule.is_tail; ShadowStack's TailCall): the
 * event's fields as a call's, `after` unused */
int uw_take_tail(uw_state *u, const uw_event *e, void (*drain)(void));

/* the snapshot words (argument registers, then stack words) uw_take will read from a call
 * to target at sp returning to after, or -1: it will leave that call to Python.  Nothing
 * changes between this and uw_take but what drain does, so uw_take then takes the call. */
int uw_call_words(uw_state *u, uint64_t target, uint64_t sp, uint64_t after,
                  void (*drain)(void));

#endif
