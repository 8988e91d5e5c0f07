/* start_riscv64.S - QEMU `-M virt -bios none` (and emutrace's virt-riscv64):
 * entered in M-mode with a0 = hart id.  NS16550 THR at 0x1000_0000, the
 * sifive_test finisher at 0x10_0000 (QEMU hw/riscv/virt.c memmap). */
    .section .text.boot, "ax"
    .global _start
    .type _start, @function
_start:
    la sp, stack_top
    la t0, vec_trap
    csrw mtvec, t0              /* direct mode: every trap enters vec_trap */
    call kmain
1:  j 1b
    .size _start, . - _start

    .text
    .global uart_putc
    .type uart_putc, @function
uart_putc:
    li t0, 0x10000000
    sb a0, 0(t0)                /* 16550 THR */
    ret
    .size uart_putc, . - uart_putc

/* long arch_trap(long arg): ecall with arg in a0, result in a0. */
    .global arch_trap
    .type arch_trap, @function
arch_trap:
    addi sp, sp, -16
    sd ra, 8(sp)
    ecall
    ld ra, 8(sp)
    addi sp, sp, 16
    ret
    .size arch_trap, . - arch_trap

/* long arch_probe(long arg): UNIMP (csrrw x0, cycle, x0: a write to a read-only CSR is
 * an illegal instruction); vec_trap returns past it. */
    .global arch_probe
    .type arch_probe, @function
arch_probe:
    .word 0xc0001073            /* 4-byte UNIMP (the assembler would pick the 2-byte c.unimp) */
    ret
    .size arch_probe, . - arch_probe

    .global system_off
    .type system_off, @function
system_off:
    li t0, 0x100000
    li t1, 0x5555               /* FINISHER_PASS */
    sw t1, 0(t0)
1:  wfi
    j 1b
    .size system_off, . - system_off

    .balign 4
    .global vec_trap
    .type vec_trap, @function
vec_trap:
    addi sp, sp, -16
    sd ra, 8(sp)
    mv a1, a0                   /* trap_handler(cause = mcause, arg = a0) */
    csrr a0, mcause
    call trap_handler
    csrr t0, mepc               /* resume after the 4-byte ecall or unimp */
    addi t0, t0, 4
    csrw mepc, t0
    ld ra, 8(sp)
    addi sp, sp, 16
    mret
    .size vec_trap, . - vec_trap

    .bss
    .balign 16
    .space 16384
stack_top:
