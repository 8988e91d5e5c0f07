/* cp0_mips.c - the CP0 exception registers as a MIPS kernel sees them (mips/cp0,
 * mipsel/cp0; with start_mips.S): EBase as _start set it, the software-writable
 * bits of Cause, EPC written and read back, and inside a syscall's handler
 * EPC (the syscall's own address), Cause (BD, ExcCode) and Status.EXL, which
 * eret clears; then a syscall in a branch's delay slot (EPC = the branch, Cause.BD:
 * the handler resumes at the branch's target, as Linux's compute_return_epc).  Its console under qemu-system-mips(el) -M malta is the oracle
 * (tests/test_kernel.py). */
#include "kern.h"

#define CP0_READ(reg, sel) ({ unsigned long v_; \
    __asm__ volatile("mfc0 %0, $" #reg ", " #sel : "=r"(v_)); v_; })
#define CP0_WRITE(reg, sel, v) \
    __asm__ volatile("mtc0 %0, $" #reg ", " #sel "\n\tehb" : : "r"((unsigned long)(v)))

/* MIPS32 PRA vol. III §9.31: Cause.BD 31, DC 27, IV 23, WP 22, IP1..0 9..8, ExcCode 6..2 */
#define CAUSE_WRITABLE 0x08c00300ul
#define CAUSE_TRAP (0x80000000ul | 0x7cul)

static unsigned long handler_epc, handler_cause, handler_status;

/* long trap_in_delay_slot(long arg): `b 1f` with the syscall in its delay slot. */
long trap_in_delay_slot(long arg);
__asm__(
    "    .text\n"
    "    .set push\n"
    "    .set noreorder\n"
    "    .global trap_in_delay_slot\n"
    "    .type trap_in_delay_slot, @function\n"
    "trap_in_delay_slot:\n"
    "    b 1f\n"
    "    syscall\n"
    "1:  jr $ra\n"
    "    nop\n"
    "    .size trap_in_delay_slot, . - trap_in_delay_slot\n"
    "    .set pop\n");

void kputs(const char *s)
{
    while (*s)
        uart_putc(*s++);
}

void kput_hex(unsigned long v)
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

static void report(const char *what, unsigned long value)
{
    kputs(what);
    kputs(" = ");
    kput_hex(value);
    kputs("\n");
}

long trap_handler(unsigned long cause, long arg)
{
    (void)cause;
    handler_epc = CP0_READ(14, 0);
    handler_cause = CP0_READ(13, 0) & CAUSE_TRAP;
    handler_status = CP0_READ(12, 0) & 0x6;     /* ERL, EXL */
    if (handler_cause & 0x80000000ul) {
        /* BD: EPC is a branch (here `b`: target = EPC + 4 + offset × 4); vec_general
         * adds 4 to EPC, so leave it 4 before the target */
        short offset = (short)(*(unsigned int *)handler_epc & 0xffff);
        CP0_WRITE(14, 0, handler_epc + 4 + offset * 4 - 4);
    }
    return arg + 1;
}

void kmain(void)
{
    kputs("emutrace mini-kernel\n");
    report("ebase", CP0_READ(15, 1));
    CP0_WRITE(13, 0, 0x08800300);               /* DC, IV, IP1, IP0 (not WP) */
    report("cause writable", CP0_READ(13, 0) & CAUSE_WRITABLE);
    CP0_WRITE(13, 0, 0);
    report("cause cleared", CP0_READ(13, 0) & CAUSE_WRITABLE);
    CP0_WRITE(14, 0, 0x80123454);
    report("epc", CP0_READ(14, 0));
    report("trap returned", arch_trap(0x40));
    report("handler epc - arch_trap", handler_epc - (unsigned long)arch_trap);
    report("handler cause", handler_cause);
    report("handler status", handler_status);
    report("status after eret", CP0_READ(12, 0) & 0x6);
    report("delay-slot trap returned", trap_in_delay_slot(0x50));
    report("handler epc - trap_in_delay_slot",
           handler_epc - (unsigned long)trap_in_delay_slot);
    report("handler cause", handler_cause);
    kputs("bye\n");
    system_off();
}
