/* start_s390x.S - QEMU `-M s390-ccw-virtio -kernel` (and emutrace's s390-ccw): entered
 * at the ELF entry in z/Architecture mode (64-bit addressing), DAT off, prefix 0.
 * The console is the SCLP ASCII console (QEMU hw/char/sclpconsole.c): a Write Event Data
 * service call (SERVC, SCLP command 0x00760005) with an SCCB holding one event buffer of
 * type 0x1a; QEMU completes it before SERVC ends, so the response code is not polled.
 * Interrupts swap PSWs through the lowcore (z/Architecture Principles of Operation,
 * SA22-7832, ch. 6 "Interruptions", fig. 3-2 "Assigned storage locations"): SVC old/new
 * PSW at 0x140/0x1c0, program old/new PSW at 0x150/0x1d0, SVC code at 0x8a, program
 * interruption code at 0x8e, its ILC halfword at 0x8c. */
    .section .text.boot, "ax"
    .global _start
    .type _start, @function
_start:
    larl %r15, stack_top
    aghi %r15, -160             /* ELF ABI s390x: 160-byte register save area */
    larl %r1, new_psws
    mvc 0x1c0(16, %r0), 0(%r1)  /* SVC new PSW */
    mvc 0x1d0(16, %r0), 16(%r1) /* program new PSW */
    brasl %r14, kmain
1:  j 1b
    .size _start, . - _start

    .text
/* uart_putc(c): one character through the SCLP ASCII console. */
    .global uart_putc
    .type uart_putc, @function
uart_putc:
    larl %r1, sccb
    larl %r3, sccb_head
    mvc 0(16, %r1), 0(%r3)      /* SCCB header + event buffer header */
    stc %r2, 14(%r1)            /* the character */
    llilf %r0, 0x00760005       /* SCLP_CMD_WRITE_EVENT_DATA */
    .insn rre, 0xb2200000, %r0, %r1  /* SERVC r0, r1 (no mnemonic in binutils) */
    br %r14
    .size uart_putc, . - uart_putc

/* long arch_trap(long arg): svc 0x42 with arg in r2; the handler's value comes back in r2. */
    .global arch_trap
    .type arch_trap, @function
arch_trap:
    svc 0x42
    br %r14
    .size arch_trap, . - arch_trap

/* long arch_probe(long arg): an invalid opcode (0x0000, 2 bytes): operation exception,
 * a suppressing program check, so the old PSW points past it (PoP 6-26, "Operation
 * Exception"); the handler returns there. */
    .global arch_probe
    .type arch_probe, @function
arch_probe:
    .short 0x0000
    br %r14
    .size arch_probe, . - arch_probe

/* system_off: a disabled wait PSW whose address ends in 0xfff: QEMU's "quiesce" special
 * wait (target/s390x/helper.c is_special_wait_psw) shuts the machine down cleanly. */
    .global system_off
    .type system_off, @function
system_off:
    larl %r1, off_psw
    lpswe 0(%r1)
    .size system_off, . - system_off

/* The SVC and program interruption handlers: trap_handler(cause, arg) with cause = the
 * interruption code (SVC number, program interruption code), then back through the old
 * PSW (LPSWE).  The interrupted function's r2 is the argument and gets the result; the
 * other call-clobbered registers are saved on the interrupted stack below its frame. */
    .global vec_svc
    .type vec_svc, @function
vec_svc:
    stmg %r0, %r15, 0x200(%r0)  /* save the registers in the lowcore's free save area */
    lgr %r3, %r2                /* arg */
    llgh %r2, 0x8a(%r0)         /* SVC interruption code */
    aghi %r15, -160
    brasl %r14, trap_handler
    stg %r2, 0x210(%r0)         /* the result becomes the interrupted r2 */
    lmg %r0, %r15, 0x200(%r0)
    lpswe 0x140(%r0)            /* SVC old PSW */
    .size vec_svc, . - vec_svc

    .global vec_pgm
    .type vec_pgm, @function
vec_pgm:
    stmg %r0, %r15, 0x200(%r0)
    lgr %r3, %r2
    llgh %r2, 0x8e(%r0)         /* program interruption code */
    aghi %r15, -160
    brasl %r14, trap_handler
    stg %r2, 0x210(%r0)
    lmg %r0, %r15, 0x200(%r0)
    lpswe 0x150(%r0)            /* program old PSW */
    .size vec_pgm, . - vec_pgm

    .section .rodata
    .balign 8
new_psws:                       /* 64-bit addressing (EA|BA), interrupts off, DAT off */
    .quad 0x0000000180000000, vec_svc
    .quad 0x0000000180000000, vec_pgm
off_psw:                        /* wait state (bit 14), EA|BA, address ...fff */
    .quad 0x0002000180000000, 0xfff
sccb_head:
    .short 15                   /* SCCB length: 8 header + 6 event header + 1 */
    .byte 0, 0, 0, 0            /* function code 0 (normal write), control mask */
    .short 0                    /* response code */
    .short 7                    /* event buffer length */
    .byte 0x1a, 0               /* type: ASCII console data */
    .short 0

    .bss
    .balign 4096
sccb:
    .space 4096                 /* an SCCB must not cross a page (QEMU hw/s390x/sclp.c) */
    .balign 16
    .space 16384
stack_top:
