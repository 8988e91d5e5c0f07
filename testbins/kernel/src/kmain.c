/* kmain.c - the portable part of the emutrace mini-kernels (testbins/kernel).
 *
 * Runs at the board's RAM address with the MMU off, no libc.  Prints through
 * uart_putc (per board, start_<isa>.S), computes with a few functions,
 * recursion and calls through function pointers, makes one trap into its own
 * vector (arch_trap: svc / ecall / int) and runs one undefined instruction
 * (arch_probe), whose handlers call trap_handler below,
 * prints the record of the -finstrument-functions build (record_dump; empty in
 * the plain build) and powers off (system_off: PSCI SYSTEM_OFF or sifive_test).
 * Numbers are printed in hex: no division (no libgcc).
 */
#include "kern.h"

#define NOINSTR __attribute__((no_instrument_function))

NOINSTR void kputs(const char *s)
{
    while (*s)
        uart_putc(*s++);
}

NOINSTR void kput_hex(unsigned long v)
{
    char buf[2 + 2 * sizeof(unsigned long) + 1];
    int i = sizeof(buf) - 1;
    buf[i] = 0;
    do {
        buf[--i] = "0123456789abcdef"[v & 15];
        v >>= 4;
    } while (v);
    buf[--i] = 'x';
    buf[--i] = '0';
    kputs(buf + i);
}

int fib(int n)
{
    return n < 2 ? n : fib(n - 1) + fib(n - 2);
}

int add(int a, int b) { return a + b; }
int sub(int a, int b) { return a - b; }

int apply(int (*op)(int, int), int a, int b)
{
    return op(a, b);
}

void report(const char *what, unsigned long value)
{
    kputs(what);
    kputs(" = ");
    kput_hex(value);
    kputs("\n");
}

/* Called from the trap vector: cause is the ISA's own (ESR_EL1.EC on aarch64,
 * the mode in SPSR on arm, mcause on riscv64), arg the trap's first argument. */
long trap_handler(unsigned long cause, long arg)
{
    report("trap cause", cause);
    report("trap arg", arg);
    return arg * 2 + 1;
}

long do_trap(long arg)
{
    return arch_trap(arg);
}

/* An undefined instruction, as a kernel probing for a feature runs one: the handler
 * skips it and its result is what arch_probe returns. */
long do_probe(long arg)
{
    return arch_probe(arg);
}

void kmain(void)
{
    kputs("emutrace mini-kernel\n");
    report("fib(7)", fib(7));
    report("apply(add, 40, 2)", apply(add, 40, 2));
    report("apply(sub, 40, 2)", apply(sub, 40, 2));
    report("trap returned", do_trap(20));
    report("probe returned", do_probe(7));
    kputs("bye\n");
    record_dump();
    system_off();
}
