/* calls.h - shared declarations of the `calls` test program. */
#ifndef CALLS_H
#define CALLS_H

typedef long (*binop_fn)(long, long);

/* calls_tail.c: compiled with sibling-call optimisation, so each of
 * these ends in a jump (not a call) to the next one. */
long tail_chain_start(long x);
long tail_chain_mid(long x);
long tail_chain_end(long x);
long tail_leaf(long x);
long tail_ping(long n, long acc);
long tail_pong(long n, long acc);
long tail_dispatch(binop_fn fn, long a, long b);

#endif /* CALLS_H */
