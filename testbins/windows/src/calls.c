/* calls.c - a Windows console program (mingw-w64): recursion and calls through a pointer,
 * each function counting its entries; prints the count and the result ("calls 8 132"). */
#include <stdio.h>
static int calls_made;
static int fact(int n) { calls_made++; return n < 2 ? 1 : n * fact(n - 1); }
static int twice(int x) { calls_made++; return 2 * x; }
static int apply(int (*f)(int), int x) { calls_made++; return f(f(x)); }
int main(void) { int r = fact(5) + apply(twice, 3); printf("calls %d %d\n", calls_made, r); return 0; }
