/* calls_tail.c - the `tail` scenario's own functions.
 *
 * This translation unit is compiled with -O2 -foptimize-sibling-calls
 * (the rest of `calls` uses -O1 -fno-optimize-sibling-calls), so every
 * `return f(...)` below is a real jump into f, which then returns
 * straight to our caller's caller.  tail_leaf is the only one that
 * returns by itself.
 */
#include "calls.h"

long tail_leaf(long x)
{
    return x * 3 + 1;
}

/* start -> mid -> end -> leaf: three sibling jumps in a row. */
long tail_chain_end(long x)
{
    return tail_leaf(x + 3);
}

long tail_chain_mid(long x)
{
    return tail_chain_end(x * 2);
}

long tail_chain_start(long x)
{
    return tail_chain_mid(x + 1);
}

/* Mutual tail recursion: ping and pong jump into each other n times. */
long tail_ping(long n, long acc)
{
    if (n <= 0)
        return acc;
    return tail_pong(n - 1, acc + 2);
}

long tail_pong(long n, long acc)
{
    if (n <= 0)
        return acc;
    return tail_ping(n - 1, acc * 3 % 1000);
}

/* Indirect sibling call: jump through a function pointer. */
long tail_dispatch(binop_fn fn, long a, long b)
{
    return fn(a + 1, b + 1);
}
