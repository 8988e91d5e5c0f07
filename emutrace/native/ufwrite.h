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

/* what the hot path offers: one finished call or return (hotpath.c nt_event's fields) */
typedef struct {
    int call;           /* 1: a call, 0: a return */
    uint64_t time, site, target, sp, after;
    const uint64_t *regs;  /* call: the argument words; return: the return registers */
} uw_event;

/* 1: the writer took the event (nothing for Python to do); 0: Python's, nothing changed.
 * drain: called first when the byte buffer lacks room for one record. */
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
