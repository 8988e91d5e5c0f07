/* timer_mips.c - the CP0 timer interrupt (mips/timer, mipsel/timer; with
 * start_mips.S): Compare armed 1 ms ahead of Count, Status.IM7 and IE set, `wait`
 * until the interrupt came;
 * Count reaching Compare raises IP7 (IntCtl.IPTI = 7 on the 24Kf), which enters
 * EBase + 0x180 with Cause.ExcCode 0 and Cause.TI; the handler acknowledges it by
 * writing Compare.  Its console under qemu-system-mips(el) -M malta is the oracle
 * (tests/test_kernel_mips.py). */
#include "kern.h"

#define CP0_READ(reg, sel) ({ unsigned long v_; \
    __asm__ volatile("mfc0 %0, $" #reg ", " #sel : "=r"(v_)); v_; })
#define CP0_WRITE(reg, sel, v) \
    __asm__ volatile("mtc0 %0, $" #reg ", " #sel "\n\tehb" : : "r"((unsigned long)(v)))

#define CAUSE_TI 0x40000000ul
#define CAUSE_IP7 0x00008000ul
#define STATUS_IE_IM7 0x00008001ul
#define TICKS_1MS 160000ul   /* QEMU's Malta: Count at 160 MHz (320 MHz / 2) */

static unsigned long interrupt_cause;
static volatile unsigned long interrupts;

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

/* vec_general: cause = Cause.ExcCode (0: an interrupt) */
long trap_handler(unsigned long cause, long arg)
{
    if (cause == 0) {
        interrupts++;
        interrupt_cause = CP0_READ(13, 0) & (CAUSE_TI | CAUSE_IP7 | 0x7cul);
        CP0_WRITE(11, 0, CP0_READ(9, 0) - 1);   /* acknowledge: next match ~27 s away */
        /* EPC is the instruction after the wait, or the wait itself when the interrupt
         * came just before it: skip that (Linux's wait rollback); vec_general adds 4 */
        unsigned long epc = CP0_READ(14, 0);
        if (*(unsigned int *)epc == 0x42000020u)
            epc += 4;
        CP0_WRITE(14, 0, epc - 4);
    }
    return arg;
}

void kmain(void)
{
    kputs("emutrace mini-kernel\n");
    CP0_WRITE(11, 0, CP0_READ(9, 0) + TICKS_1MS);
    /* vec_general keeps only ra: while interrupts are on, nothing may live in a
     * caller-saved register, so the wait loop is assembly on s0/s1 (saved by the C
     * handler).  IM7 and IE on; `wait` until the handler counted the interrupt; `di`. */
    __asm__ volatile(
        "    .set push\n"
        "    .set noreorder\n"
        "    la $16, interrupts\n"
        "    mfc0 $17, $12\n"
        "    ori $17, $17, 0x8001\n"
        "    mtc0 $17, $12\n"
        "    ehb\n"
        "1:  lw $17, 0($16)\n"
        "    bnez $17, 2f\n"
        "    nop\n"
        "    wait\n"
        "    b 1b\n"
        "    nop\n"
        "2:  di\n"
        "    ehb\n"
        "    .set pop\n"
        : : : "$16", "$17", "memory");
    CP0_WRITE(12, 0, CP0_READ(12, 0) & ~STATUS_IE_IM7);
    report("interrupts", interrupts);
    report("interrupt cause (TI, IP7, ExcCode)", interrupt_cause);
    report("cause after compare written", CP0_READ(13, 0) & (CAUSE_TI | CAUSE_IP7));
    kputs("bye\n");
    system_off();
}
