/* start_arm.S - QEMU `-M virt` (and emutrace's virt-arm), A32, entered in SVC
 * mode with the MMU off.  PL011 at 0x0900_0000; PSCI over hvc powers off. */
    .syntax unified
    .arm
    .section .text.boot, "ax"
    .global _start
    .type _start, %function
_start:
    cps #0x1b                   /* Undefined mode: its own banked SP */
    ldr sp, =und_stack_top
    cps #0x13                   /* back to Supervisor mode */
    ldr sp, =stack_top
    ldr r0, =vectors
    mcr p15, 0, r0, c12, c0, 0  /* VBAR (Arm ARM B4.1.156) */
    isb
    bl kmain
1:  b 1b
    .size _start, . - _start

    .text
    .global uart_putc
    .type uart_putc, %function
uart_putc:
    mov r1, #0x09000000
    strb r0, [r1]               /* PL011 UARTDR */
    bx lr
    .size uart_putc, . - uart_putc

/* long arch_trap(long arg): svc #0x42 in SVC mode; the exception overwrites
 * LR_svc, so it is saved around the svc. */
    .global arch_trap
    .type arch_trap, %function
arch_trap:
    push {r4, lr}
    svc #0x42
    pop {r4, lr}
    bx lr
    .size arch_trap, . - arch_trap

/* long arch_probe(long arg): UDF #0 (Arm ARM A8.8.247); the handler returns past it. */
    .global arch_probe
    .type arch_probe, %function
arch_probe:
    udf #0
    bx lr
    .size arch_probe, . - arch_probe

    .global system_off
    .type system_off, %function
system_off:
    ldr r0, =0x84000008         /* PSCI SYSTEM_OFF */
    hvc #0
1:  wfi
    b 1b
    .size system_off, . - system_off

/* Vectors (Arm ARM B1.8.1): reset at +0, undefined at +4, supervisor call at
 * +8.  The SVC handler starts right at its vector and runs on over the slots
 * of the vectors this kernel never takes (aborts, IRQ, FIQ), so the vector is
 * a function entry, not a branch to one. */
    .balign 32
vectors:
    b .
    b und_entry                 /* a branch to code that is no function symbol */
    .global vec_svc
    .type vec_svc, %function
vec_svc:
    push {r1-r3, r12, lr}
    mov r1, r0                  /* trap_handler(cause = SPSR.M, arg = r0) */
    mrs r0, spsr
    and r0, r0, #0x1f
    bl trap_handler
    pop {r1-r3, r12, lr}
    eret                        /* ARMv7VE outside Hyp: SUBS PC, LR, #0 (B9.3.3) */
    .size vec_svc, . - vec_svc

und_entry:                      /* LR_und = the UDF + 4: return there */
    push {r1-r3, r12, lr}
    mov r1, r0                  /* trap_handler(cause = CPSR.M = Undefined, arg = r0) */
    mrs r0, cpsr
    and r0, r0, #0x1f
    bl trap_handler
    pop {r1-r3, r12, lr}
    eret

    .bss
    .balign 16
/* Undefined mode's stack lies below Supervisor mode's: the handler's calls are then
 * deeper than the interrupted frames, as on one stack (emutrace's shadow stack has no
 * exception frames yet: a call above them would read as an unwind; README, kernel images) */
    .space 1024
und_stack_top:
    .space 16384
stack_top:
