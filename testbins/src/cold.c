/* cold.c - hot/cold partitioning forced on every function with an unlikely path, so that
 * -O2 -freorder-blocks-and-partition moves those paths into `f.cold` parts (a local FUNC
 * symbol in .text.unlikely, reached by jumps) that the run then executes:
 *   work:   a loop whose unlikely branch (every 4th item) runs in work.cold, calls the
 *           cold function report() from there and jumps back into the hot part;
 *   settle: an unlikely early exit through settle.cold (calls report, then returns);
 *   pick:   an unlikely path in pick.cold that calls report, then odd_one (no sibling
 *           call: -finstrument-functions runs the exit hook after it).
 * report() is __attribute__((cold)): a whole function in .text.unlikely.  `cold [N]`
 * prints one line; the exit status is 0.  (GCC doc, -freorder-blocks-and-partition and
 * the `cold` attribute.) */
#include <stdio.h>
#include <stdlib.h>

#define UNLIKELY(x) __builtin_expect(!!(x), 0)

long report(long v) __attribute__((cold, noinline));
long report(long v)
{
    printf("cold: report %ld\n", v);
    return v / 2;
}

long work(long n) __attribute__((noinline));
long work(long n)
{
    long s = 0;
    for (long i = 1; i <= n; i++) {
        if (UNLIKELY(i % 4 == 0))
            s -= report(i);
        s += i * i;
    }
    return s;
}

long settle(long v) __attribute__((noinline));
long settle(long v)
{
    if (UNLIKELY(v < 0)) {
        report(v);
        return -1;
    }
    return v % 97;
}

long odd_one(long v) __attribute__((noinline));
long odd_one(long v)
{
    return v * 3 + 1;
}

long pick(long v) __attribute__((noinline));
long pick(long v)
{
    if (UNLIKELY(v & 1)) {
        report(v);
        return odd_one(v + 2);
    }
    return v / 2;
}

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 9;
    long total = work(n) + settle(n) + settle(-n) + pick(n) + pick(n + 1);
    printf("cold: %ld\n", total);
    return 0;
}
