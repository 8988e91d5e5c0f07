/* savres.c - functions that keep many values live across calls, so that -Os on PowerPC
 * saves and restores the non-volatile registers with GCC's out-of-line routines
 * (_savegpr0_N / _restgpr0_N, _savegpr_N / _restgpr_N) and RISC-V -msave-restore with
 * __riscv_save_N / __riscv_restore_N; exit through a call to a noreturn function at the
 * very end of a function. */
#include <stdio.h>
#include <stdlib.h>

long mix(long a, long b);
long mix(long a, long b) { return a * 31 + b; }

long spill(long n);
long spill(long n)
{
    long a = n + 1, b = n + 2, c = n + 3, d = n + 4, e = n + 5, f = n + 6, g = n + 7;
    long h = n + 8, i = n + 9, j = n + 10, k = n + 11, l = n + 12, m = n + 13;
    long x = mix(a, b);
    x = mix(x, c);
    if (n > 0)
        x += spill(n - 1);
    x = mix(x, d + e + f + g + h + i + j + k + l + m);
    return x + a + b + c + d + e + f + g + h + i + j + k + l + m;
}

void finish(long v) __attribute__((noreturn));
void finish(long v)
{
    printf("savres: %ld\n", v);
    fflush(stdout);
    exit((int)(v & 7));
}

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 6;
    finish(spill(n));
}
