/* hard_int80 - `int $0x80` from 64-bit code runs the i386 system calls.
 * Built at test time by tests/test_hardening_int80.py with x86_64-linux-gnu-gcc and run
 * natively on the x86_64 host as the oracle (not a committed binary). */
#include <stdio.h>
#include <unistd.h>

static long int80(long nr, long a, long b, long c)
{
    long ret = nr;
    __asm__ volatile("int $0x80" : "+a"(ret) : "b"(a), "c"(b), "d"(c) : "memory");
    return ret;
}

static const char msg[] = "hello from int80\n";

int main(void)
{
    char on_stack[8] = "stack\n";
    long wrote = int80(4, 1, (long)msg, sizeof msg - 1);       /* i386 write */
    long pid = int80(20, 0, 0, 0);                             /* i386 getpid */
    long bad = int80(9999, 0, 0, 0);                           /* no such call */
    long high = int80(4, 1, (long)on_stack, 6);                /* pointer cut to 32 bits */
    long fd = int80(41, 1, 0, 0);                              /* i386 dup */
    printf("write = %ld\npid matches = %d\nbad = %#lx\nhigh = %ld\ndup = %ld\n", wrote,
           pid == getpid(), (unsigned long)bad, high, fd);
    return 0;
}
