/* start_ppc64le.S - QEMU `-M pseries -bios kernel.bin` (the raw image replaces SLOF: it
 * loads at 0 and starts at 0x100, big-endian, hw/ppc/spapr.c SPAPR_ENTRY_POINT) and
 * emutrace's pseries (the ELF, started at its entry 0x100 little-endian): a 64-bit
 * little-endian kernel linked at 0, so that its own interrupt vectors are the
 * architected ones (Power ISA 3.0 Book III §7.5: program
 * interrupt at 0x700, system call at 0xc00; SRR0 = the resume address, SRR1 = the MSR
 * with bits 33:36 and 42:47 holding why, MSR[LE] = LPCR[ILE]).  The console and the
 * power-off are PAPR hypercalls (`sc 1`, r3 = the hcall number): H_PUT_TERM_CHAR (0x58,
 * vterm 0 = QEMU's default vty), H_SET_MODE (0x31c: interrupts taken little-endian) and
 * H_RTAS (0xf000) with the RTAS call "power-off" (QEMU's token 0x2003). */

/* A word for a CPU still running big-endian (as QEMU starts it) */
    .macro be_word w
    .byte (\w >> 24) & 0xff, (\w >> 16) & 0xff, (\w >> 8) & 0xff, \w & 0xff
    .endm

    .section .text.boot, "ax"
    .org 0x100                  /* the entry point; below it nothing runs */
    .global _start
    .type _start, @function
_start:
    /* Endianness switch: read big-endian, the first word is `b .+8` and runs the
     * byte-swapped code below, which flips MSR[LE] and returns to 1f with rfid; read
     * little-endian it is `tdi 0,0,0x48` (never traps) and the branch skips it. */
    .long 0x08000048
    b 1f
    be_word 0x7d6000a6          /* mfmsr r11 */
    be_word 0x696b0001          /* xori r11, r11, 1 (MSR[LE]) */
    be_word 0x39400000          /* li r10, 0 */
    be_word 0x7d410164          /* mtmsrd r10, 1 (EE = RI = 0) */
    be_word 0x429f0005          /* bcl 20, 31, .+4 */
    be_word 0x7d4802a6          /* mflr r10 (= the address of this word) */
    be_word 0x394a0014          /* addi r10, r10, 20 (-> 1f) */
    be_word 0x7d5a03a6          /* mtsrr0 r10 */
    be_word 0x7d7b03a6          /* mtsrr1 r11 */
    be_word 0x4c000024          /* rfid */
1:  lis 1, stack_top@ha
    addi 1, 1, stack_top@l
    li 0, 0
    stdu 0, -32(1)              /* a terminating back chain (ELFv2 minimum frame) */
    lis 2, .TOC.@ha
    addi 2, 2, .TOC.@l
    li 3, 0x31c                 /* H_SET_MODE */
    li 4, 1                     /* mflags: H_SET_MODE_ENDIAN_LITTLE */
    li 5, 4                     /* resource: H_SET_MODE_RESOURCE_LE */
    li 6, 0
    li 7, 0
    sc 1
    bl kmain
    nop
2:  b 2b
    .size _start, . - _start

/* The program and system-call handlers: trap_handler(cause = SRR1's interrupt bits,
 * arg = r3) on the interrupted stack, its result in r3; the program handler resumes
 * after the instruction (SRR0 + 4). */
    .org 0x700
    .global vec_program
    .type vec_program, @function
vec_program:
    mflr 0
    std 0, 16(1)
    stdu 1, -32(1)
    mr 4, 3
    mfspr 3, 27                 /* SRR1 */
    lis 5, 0x783f
    and 3, 3, 5                 /* bits 33:36, 42:47: 0x80000 = illegal instruction */
    bl trap_handler
    nop
    mfspr 5, 26                 /* SRR0: the illegal instruction ... */
    addi 5, 5, 4
    mtspr 26, 5                 /* ... resume after it */
    addi 1, 1, 32
    ld 0, 16(1)
    mtlr 0
    rfid
    .size vec_program, . - vec_program

    .org 0xc00
    .global vec_sc
    .type vec_sc, @function
vec_sc:
    mflr 0
    std 0, 16(1)
    stdu 1, -32(1)
    mr 4, 3
    mfspr 3, 27                 /* SRR1 */
    lis 5, 0x783f
    and 3, 3, 5                 /* 0 for a system call */
    bl trap_handler
    nop
    addi 1, 1, 32
    ld 0, 16(1)
    mtlr 0
    rfid
    .size vec_sc, . - vec_sc

    .text
/* uart_putc(c): H_PUT_TERM_CHAR(vterm 0, length 1, the character in r6's top byte). */
    .global uart_putc
    .type uart_putc, @function
uart_putc:
    sldi 6, 3, 56
    li 3, 0x58
    li 4, 0
    li 5, 1
    sc 1
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

/* system_off: H_RTAS with the RTAS argument block of "power-off" (big-endian words:
 * token, nargs = 2, nret = 1, two zero arguments, the status returned). */
    .global system_off
    .type system_off, @function
system_off:
    li 3, 0
    ori 3, 3, 0xf000            /* H_RTAS (KVMPPC_H_RTAS) */
    lis 4, rtas_power_off@ha
    addi 4, 4, rtas_power_off@l
    sc 1
1:  b 1b
    .size system_off, . - system_off

    .data
    .balign 8
rtas_power_off:
    be_word 0x2003              /* QEMU's RTAS_POWER_OFF token */
    be_word 2
    be_word 1
    be_word 0
    be_word 0
    be_word 0

    .bss
    .balign 16
    .space 16384
stack_top:
