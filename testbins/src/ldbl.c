/* ldbl: long double results beyond the range of a double (x87 %st(0) on i386 and x86_64),
 * for a tracer that shows return values.  Each function's value is printed by the program
 * as a long double and as the double C converts it to (round to nearest: beyond the double
 * range it is inf, below it 0 or a subnormal). */
#include <stdio.h>

__attribute__((noinline)) long double ld_huge(int k) { return 0x1p16000L * k; }
__attribute__((noinline)) long double ld_big(int k) { return 0x1p1100L * k; }
__attribute__((noinline)) long double ld_tiny(int k) { return 0x1p-16000L * k; }
__attribute__((noinline)) long double ld_subnormal(int k) { return 0x1p-1070L * k; }
__attribute__((noinline)) long double ld_neg_huge(int k) { return -0x1p16383L * k; }
__attribute__((noinline)) long double ld_plain(int k) { return 0.5L * k; }

int main(void) {
    struct { const char *name; long double (*f)(int); } fns[] = {
        {"ld_huge", ld_huge}, {"ld_big", ld_big}, {"ld_tiny", ld_tiny},
        {"ld_subnormal", ld_subnormal}, {"ld_neg_huge", ld_neg_huge}, {"ld_plain", ld_plain},
    };
    for (unsigned i = 0; i < sizeof fns / sizeof fns[0]; i++) {
        long double v = fns[i].f(1);
        printf("%s: %La double=%a\n", fns[i].name, v, (double)v);
    }
    return 0;
}
