/* hello_fs - freestanding tier: no libc, own _start, raw syscalls.
 *
 * Computes a few values with recursion and through function pointers,
 * prints them with write(1, ...) and exits with status 7 via exit_group.
 */
#include "fs_rt.h"

typedef long (*binop_fn)(long, long);

long fs_fact(long n)
{
    return n <= 1 ? 1 : n * fs_fact(n - 1);
}

long fs_fib(long n)
{
    return n < 2 ? n : fs_fib(n - 1) + fs_fib(n - 2);
}

long op_add(long a, long b) { return a + b; }
long op_sub(long a, long b) { return a - b; }
long op_mul(long a, long b) { return a * b; }

long apply_binop(binop_fn fn, long a, long b)
{
    return fn(a, b);
}

struct named_binop {
    const char *label;
    binop_fn fn;
};

static const struct named_binop binops[] = {
    {"add(6,7)", op_add},
    {"sub(6,7)", op_sub},
    {"mul(6,7)", op_mul},
};

int main(int argc, char **argv)
{
    (void)argv;
    fs_puts("hello_fs: freestanding, no libc\n");
    fs_print_kv("argc", argc);
    fs_print_kv("fact(10)", fs_fact(10));
    fs_print_kv("fib(10)", fs_fib(10));
    for (unsigned i = 0; i < sizeof binops / sizeof binops[0]; i++)
        fs_print_kv(binops[i].label, apply_binop(binops[i].fn, 6, 7));
    fs_puts("hello_fs: exit 7\n");
    return 7;
}
