/* timer_riscv64.S - a machine timer interrupt on QEMU `-M virt -bios none` (and emutrace's
 * virt-riscv64), no C: mtimecmp = mtime + 10 ms (CLINT, 10 MHz), mie.MTIE and mstatus.MIE
 * on, then `wfi`; the interrupt enters mtvec in vectored mode (BASE + 4 × 7, privileged
 * spec 1.10 §3.1.12), which prints mcause's interrupt bit and code and powers off. */
    .section .text.boot, "ax"
    .global _start
    .type _start, @function
_start:
    la sp, stack_top
    la t0, vectors
    ori t0, t0, 1               /* MODE = 1: vectored */
    csrw mtvec, t0
    li t0, 0x200bff8            /* CLINT mtime */
    ld t1, 0(t0)
    li t2, 100000               /* 10 ms at 10 MHz */
    add t1, t1, t2
    li t0, 0x2004000            /* CLINT mtimecmp (hart 0) */
    sd t1, 0(t0)
    li t0, 1 << 7               /* mie.MTIE */
    csrs mie, t0
    la a0, msg_wait
    call puts
    csrsi mstatus, 1 << 3       /* mstatus.MIE */
1:  wfi
    j 1b
    .size _start, . - _start

    .balign 64
    .option push
    .option norvc               /* 4-byte jumps: the slots are 4 bytes apart */
vectors:                        /* vectored mtvec: cause N at BASE + 4 × N */
    .rept 7
    j .
    .endr
    j timer                     /* + 4 × 7: machine timer interrupt */
    .option pop

    .type timer, @function
timer:
    la a0, msg_tick
    call puts
    csrr t3, mcause
    srli a0, t3, 63             /* the interrupt bit */
    call putdigit
    andi a0, t3, 0xf            /* the code: 7 */
    call putdigit
    li t0, 0x100000
    li t1, 0x5555               /* sifive_test FINISHER_PASS */
    sw t1, 0(t0)
2:  j 2b
    .size timer, . - timer

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
    addi t2, a0, '0'
    sb t2, 0(t1)
    li t2, '\n'
    sb t2, 0(t1)
    ret
    .size putdigit, . - putdigit

    .section .rodata
msg_wait: .asciz "timer armed, waiting for an interrupt\n"
msg_tick: .asciz "timer interrupt, mcause interrupt bit then code:\n"

    .bss
    .balign 16
    .space 4096
stack_top:
