/* start_ppc.S - QEMU `-M bamboo -kernel` (PowerPC 440EP, Book E) and emutrace's bamboo:
 * entered at the ELF entry, in supervisor mode, with QEMU's initial TLB entry mapping
 * virtual = physical.  The console is UART0, an NS16550 at 0xef600300
 * (hw/ppc/ppc440_bamboo.c).  Interrupts (Book E 1.0 §7.6): the vector is
 * IVPR[0:15] || IVORn[16:27] || 0b0000, SRR0/SRR1 hold the resume address and the MSR,
 * ESR says why a program interrupt happened; `rfi` returns.  IVOR8: system call, SRR0 =
 * the instruction after `sc`; IVOR6: program interrupt, SRR0 = the instruction. */
    .section .text.boot, "ax"
    .global _start
    .type _start, @function
_start:
    lis 1, stack_top@ha
    addi 1, 1, stack_top@l
    li 0, 0
    stwu 0, -16(1)              /* a terminating back chain (SVR4 ABI) */
    lis 3, _start@h
    mtspr 63, 3                 /* IVPR: the vectors lie in the kernel's first 64 KiB */
    li 3, vec_sc - _start
    mtspr 408, 3                /* IVOR8: system call */
    li 3, vec_program - _start
    mtspr 406, 3                /* IVOR6: program */
    bl kmain
1:  b 1b
    .size _start, . - _start

/* The system call and program handlers: trap_handler(cause = ESR, arg = r3) on the
 * interrupted stack (the caller of arch_trap/arch_probe expects the call-clobbered
 * registers clobbered), its result in r3; the program handler resumes after the
 * instruction (SRR0 + 4). */
    .balign 16
    .global vec_sc
    .type vec_sc, @function
vec_sc:
    stwu 1, -16(1)
    mflr 0
    stw 0, 20(1)
    mr 4, 3
    mfspr 3, 62                 /* ESR */
    bl trap_handler
    lwz 0, 20(1)
    mtlr 0
    addi 1, 1, 16
    rfi
    .size vec_sc, . - vec_sc

    .balign 16
    .global vec_program
    .type vec_program, @function
vec_program:
    stwu 1, -16(1)
    mflr 0
    stw 0, 20(1)
    mr 4, 3
    mfspr 3, 62                 /* ESR: PIL for an illegal instruction */
    bl trap_handler
    mfspr 5, 26                 /* SRR0: the illegal instruction ... */
    addi 5, 5, 4
    mtspr 26, 5                 /* ... resume after it */
    lwz 0, 20(1)
    mtlr 0
    addi 1, 1, 16
    rfi
    .size vec_program, . - vec_program

    .text
    .global uart_putc
    .type uart_putc, @function
uart_putc:
    lis 4, 0xef60
    stb 3, 0x300(4)             /* 16550 THR */
    blr
    .size uart_putc, . - uart_putc

/* long arch_trap(long arg): sc with arg in r3, the handler's value in r3. */
    .global arch_trap
    .type arch_trap, @function
arch_trap:
    sc
    blr
    .size arch_trap, . - arch_trap

/* long arch_probe(long arg): an illegal instruction (primary opcode 0); the program
 * handler returns past it. */
    .global arch_probe
    .type arch_probe, @function
arch_probe:
    .long 0
    blr
    .size arch_probe, . - arch_probe

/* system_off: DBCR0[RST] = 0b11, a system reset (QEMU store_40x_dbcr0), which QEMU's
 * -no-reboot turns into an exit with status 0. */
    .global system_off
    .type system_off, @function
system_off:
    lis 3, 0x3000
    mtspr 308, 3                /* DBCR0 */
1:  b 1b
    .size system_off, . - system_off

    .bss
    .balign 16
    .space 16384
stack_top:
