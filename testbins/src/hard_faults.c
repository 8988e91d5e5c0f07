/* hard_faults MODE - CPU faults as Linux reports them:
 * div: integer division by zero (SIGFPE); int80: `int $0x80` from 64-bit code. */
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv)
{
    volatile int zero = 0;
    if (argc > 1 && !strcmp(argv[1], "div"))
        return 10 / zero;
    if (argc > 1 && !strcmp(argv[1], "int80")) {
        long ret = 20; /* i386 getpid */
        __asm__ volatile("int $0x80" : "+a"(ret) : : "memory");
        printf("int80 = %ld\n", ret > 0 ? 1L : ret);
        return 0;
    }
    return 1;
}
