/* deleg_riscv64.S - trap delegation on QEMU `-M virt -bios none` (and emutrace's
 * virt-riscv64), no C: M-mode delegates illegal instructions to S-mode (medeleg bit 2),
 * drops to S-mode with mret, S-mode runs an UNIMP (delegated: enters stvec, scause 2,
 * sret past it), then an ecall from S-mode (not delegated: enters mtvec, mcause 9),
 * whose M-mode handler powers off through sifive_test.  Privileged spec 1.10 §3.1.8,
 * §3.2.2, §4.1. */
    .section .text.boot, "ax"
    .global _start
    .type _start, @function
_start:
    la sp, stack_top
    li t0, -1
    csrw pmpaddr0, t0           /* PMP entry 0: all memory, R/W/X for S-mode too */
    li t0, 0x1f                 /* NAPOT | X | W | R */
    csrw pmpcfg0, t0
    la t0, m_trap
    csrw mtvec, t0
    la t0, s_trap
    csrw stvec, t0
    li t0, 1 << 2               /* illegal instruction → S-mode */
    csrw medeleg, t0
    li t0, 3 << 11              /* mstatus.MPP = S (01) */
    csrc mstatus, t0
    li t0, 1 << 11
    csrs mstatus, t0
    la t0, s_main
    csrw mepc, t0
    la a0, msg_m
    call puts
    mret
    .size _start, . - _start

    .type s_main, @function
s_main:
    la a0, msg_s
    call puts
    .word 0xc0001073            /* UNIMP (4 bytes): delegated to s_trap */
    la a0, msg_back
    call puts
    ecall                       /* from S-mode: mcause 9, to m_trap */
1:  j 1b
    .size s_main, . - s_main

    .balign 4
    .type s_trap, @function
s_trap:
    la a0, msg_strap
    call puts
    csrr a0, scause
    call putdigit
    csrr t0, sepc               /* past the UNIMP */
    addi t0, t0, 4
    csrw sepc, t0
    csrr t0, sstatus            /* SPP (bit 8): the trap came from S-mode */
    srli a0, t0, 8
    andi a0, a0, 1
    call putdigit
    sret
    .size s_trap, . - s_trap

    .balign 4
    .type m_trap, @function
m_trap:
    la a0, msg_mtrap
    call puts
    csrr a0, mcause
    call putdigit
    csrr t0, mstatus            /* MPP (bits 12:11): 1 = from S-mode */
    srli a0, t0, 11
    andi a0, a0, 3
    call putdigit
    li t0, 0x100000
    li t1, 0x5555               /* sifive_test FINISHER_PASS */
    sw t1, 0(t0)
2:  j 2b
    .size m_trap, . - m_trap

/* puts(a0): NUL-terminated string to the 16550 THR; putdigit(a0): one hex digit, '\n' */
    .type puts, @function
puts:
    li t1, 0x10000000
3:  lbu t2, 0(a0)
    beqz t2, 4f
    sb t2, 0(t1)
    addi a0, a0, 1
    j 3b
4:  ret
    .size puts, . - puts

    .type putdigit, @function
putdigit:
    li t1, 0x10000000
    la t2, hexdigits
    add t2, t2, a0
    lbu t2, 0(t2)
    sb t2, 0(t1)
    li t2, '\n'
    sb t2, 0(t1)
    ret
    .size putdigit, . - putdigit

    .section .rodata
hexdigits: .ascii "0123456789abcdef"
msg_m:     .asciz "M-mode: delegating illegal instructions\n"
msg_s:     .asciz "S-mode: running UNIMP\n"
msg_strap: .asciz "S trap, scause then SPP:\n"
msg_back:  .asciz "S-mode: back, ecall to M\n"
msg_mtrap: .asciz "M trap, mcause then MPP:\n"

    .bss
    .balign 16
    .space 4096
stack_top:
