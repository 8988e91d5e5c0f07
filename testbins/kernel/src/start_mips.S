/* start_mips.S - QEMU `-M malta -kernel` (and emutrace's malta / maltael), both
 * endiannesses: entered at the ELF entry in kernel mode, from the boot code QEMU
 * writes into the flash, with Status.BEV and Status.ERL still set from reset.
 * Console: the PIIX4's COM1 16550 at ISA I/O 0x3f8, which that boot code maps at
 * physical 0x1800_0000 (the GT-64120's PCI I/O window); power-off: the Malta FPGA's
 * SOFTRES register at physical 0x1f00_0500 (writing 0x42 resets the board; QEMU
 * -no-reboot exits).  Devices are reached through kseg1 (uncached, physical +
 * 0xa000_0000), code and data run in kseg0 (MIPS32 PRA vol. III §4.3). */
    .set noreorder
    .set mips32r2
    .section .text.boot, "ax"
    .global _start
    .type _start, @function
_start:
    la $sp, stack_top
    la $t0, _start
    mtc0 $t0, $15, 1            /* EBase = _start's page (written while BEV = 1) */
    li $t0, 0x10000000          /* Status: CU0; BEV, ERL, EXL, IE = 0 (kernel mode) */
    mtc0 $t0, $12
    ehb
    jal kmain
    nop
1:  b 1b
    nop
    .size _start, . - _start

/* The general exception vector, EBase + 0x180 with Status.BEV = 0 (MIPS32 PRA
 * vol. III §6.2.1): calls trap_handler(Cause.ExcCode, a0), resumes after the
 * 4-byte syscall or reserved instruction (neither sits in a delay slot here). */
    .org 0x180
    .global vec_general
    .type vec_general, @function
vec_general:
    addiu $sp, $sp, -24
    sw $ra, 20($sp)
    move $a1, $a0
    mfc0 $a0, $13               /* Cause */
    srl $a0, $a0, 2
    jal trap_handler
    andi $a0, $a0, 0x1f         /* (delay slot) Cause.ExcCode: 8 Sys, 10 RI */
    mfc0 $t0, $14               /* EPC */
    addiu $t0, $t0, 4
    mtc0 $t0, $14
    lw $ra, 20($sp)
    addiu $sp, $sp, 24
    ehb
    eret                        /* PC = EPC, Status.EXL = 0; v0 = the handler's value */
    .size vec_general, . - vec_general

    .text
    .global uart_putc
    .type uart_putc, @function
uart_putc:
    li $t0, 0xb80003f8          /* COM1 THR: physical 0x1800_03f8 through kseg1 */
    jr $ra
    sb $a0, 0($t0)
    .size uart_putc, . - uart_putc

/* long arch_trap(long arg): syscall with arg in a0, the handler's result in v0. */
    .global arch_trap
    .type arch_trap, @function
arch_trap:
    syscall
    jr $ra
    nop
    .size arch_trap, . - arch_trap

/* long arch_probe(long arg): LD, a MIPS64 instruction, is reserved on a MIPS32 CPU
 * (MIPS64 vol. II "LD": Reserved Instruction on 32-bit processors); vec_general
 * returns past it. */
    .global arch_probe
    .type arch_probe, @function
arch_probe:
    .word 0xdc000000            /* ld $zero, 0($zero) */
    jr $ra
    nop
    .size arch_probe, . - arch_probe

    .global system_off
    .type system_off, @function
system_off:
    li $t0, 0xbf000500          /* Malta FPGA SOFTRES */
    li $t1, 0x42
    sw $t1, 0($t0)
1:  wait
    b 1b
    nop
    .size system_off, . - system_off

    .bss
    .balign 16
    .space 16384
stack_top:
