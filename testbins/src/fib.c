/* fib - benchmark program: prints fib(N) computed recursively.
 * usage: fib [N]   (N defaults to 25) */
#include <stdio.h>
#include <stdlib.h>

__attribute__((noinline)) long fib(long n)
{
    if (n < 2)
        return n;
    return fib(n - 1) + fib(n - 2);
}

int main(int argc, char **argv)
{
    long n = argc > 1 ? strtol(argv[1], NULL, 10) : 25;
    printf("fib(%ld) = %ld\n", n, fib(n));
    return 0;
}
