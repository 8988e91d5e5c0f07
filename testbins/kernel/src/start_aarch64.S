/* start_aarch64.S - QEMU `-M virt` (and emutrace's virt-arm64): entered at EL1
 * with the MMU off.  PL011 data register at 0x0900_0000 (QEMU hw/arm/virt.c
 * memmap VIRT_UART); PSCI over hvc (the virt DTB's conduit) powers off. */
    .section .text.boot, "ax"
    .global _start
    .type _start, %function
_start:
    ldr x0, =stack_top
    mov sp, x0
    adr x0, vectors
    msr vbar_el1, x0          /* Arm ARM D1.10: exceptions to EL1 use VBAR_EL1 */
    isb
    bl kmain
1:  b 1b
    .size _start, . - _start

    .text
    .global uart_putc
    .type uart_putc, %function
uart_putc:
    mov x1, #0x09000000
    strb w0, [x1]             /* PL011 UARTDR (TRM DDI 0183 3.3.1) */
    ret
    .size uart_putc, . - uart_putc

/* long arch_trap(long arg): svc #0x42 with arg in x0; the handler's result
 * comes back in x0.  The vector calls C, so every caller-saved register is
 * clobbered, as by a call. */
    .global arch_trap
    .type arch_trap, %function
arch_trap:
    stp x29, x30, [sp, #-16]!
    svc #0x42
    ldp x29, x30, [sp], #16
    ret
    .size arch_trap, . - arch_trap

/* long arch_probe(long arg): UDF #0 (Arm ARM C6.2.365); the handler skips it. */
    .global arch_probe
    .type arch_probe, %function
arch_probe:
    udf #0
    ret
    .size arch_probe, . - arch_probe

    .global system_off
    .type system_off, %function
system_off:
    ldr x0, =0x84000008       /* PSCI 0.2 SYSTEM_OFF (DEN0022 5.1.9) */
    hvc #0
1:  wfi
    b 1b
    .size system_off, . - system_off

/* The vector table (Arm ARM D1.10.2): 16 entries of 0x80 bytes; a synchronous
 * exception from the current EL with SP_EL1 enters at +0x200. */
    .balign 2048
vectors:
    .rept 4
    b .
    .balign 0x80
    .endr
    .global vec_sync_el1h
    .type vec_sync_el1h, %function
vec_sync_el1h:
    stp x29, x30, [sp, #-32]!
    str x19, [sp, #16]
    mrs x19, esr_el1
    lsr x19, x19, #26
    mov x1, x0                /* trap_handler(cause = ESR_EL1.EC, arg = x0) */
    mov x0, x19
    bl trap_handler
    cbnz x19, 1f              /* EC 0 (unknown: UDF): ELR is the instruction, skip it */
    mrs x1, elr_el1
    add x1, x1, #4
    msr elr_el1, x1
1:  ldr x19, [sp, #16]
    ldp x29, x30, [sp], #32
    eret                      /* back to ELR_EL1 with SPSR_EL1 */
    .size vec_sync_el1h, . - vec_sync_el1h
    .balign 0x80
    .rept 11
    b .
    .balign 0x80
    .endr

    .bss
    .balign 16
    .space 16384
stack_top:
