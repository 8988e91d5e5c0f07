/* start_i386.S - QEMU `-M pc -kernel` (multiboot) and emutrace's pc-i386: entered
 * in 32-bit protected mode, paging off.  COM1 (16550) at port 0x3f8; QEMU's
 * isa-debug-exit at port 0xf4 powers off (QEMU exits with (value << 1) | 1). */
    .section .multiboot, "a"
    .balign 4
    .long 0x1BADB002                /* Multiboot 0.6.96 §3.1.1: magic */
    .long 0                         /* flags */
    .long -0x1BADB002               /* checksum */

    .section .text.boot, "ax"
    .global _start
    .type _start, @function
_start:
    lgdt gdt_desc                   /* our own flat GDT: code 0x08, data 0x10 */
    ljmp $0x08, $1f
1:  mov $0x10, %ax
    mov %ax, %ds
    mov %ax, %es
    mov %ax, %ss
    mov %ax, %fs
    mov %ax, %gs
    mov $stack_top, %esp
    lea idt + 8 * 0x80, %edi        /* IDT gate 0x80 → vec_int80 (SDM vol. 3 §6.11) */
    mov $vec_int80, %eax
    movw %ax, (%edi)
    movw $0x08, 2(%edi)
    movw $0x8E00, 4(%edi)           /* present, DPL 0, 32-bit interrupt gate */
    shr $16, %eax
    movw %ax, 6(%edi)
    lea idt + 8 * 6, %edi           /* gate 6 (#UD) → vec_ud */
    mov $vec_ud, %eax
    movw %ax, (%edi)
    movw $0x08, 2(%edi)
    movw $0x8E00, 4(%edi)
    shr $16, %eax
    movw %ax, 6(%edi)
    lidt idt_desc
    call kmain
2:  jmp 2b
    .size _start, . - _start

    .text
    .global uart_putc
    .type uart_putc, @function
uart_putc:
    movl 4(%esp), %eax
    movw $0x3f8, %dx                /* COM1 THR */
    outb %al, %dx
    ret
    .size uart_putc, . - uart_putc

/* long arch_trap(long arg): int $0x80 with arg in eax, result in eax. */
    .global arch_trap
    .type arch_trap, @function
arch_trap:
    movl 4(%esp), %eax
    int $0x80
    ret
    .size arch_trap, . - arch_trap

/* long arch_probe(long arg): UD2 (#UD, a fault: the saved EIP is the UD2); the
 * handler returns past it. */
    .global arch_probe
    .type arch_probe, @function
arch_probe:
    movl 4(%esp), %eax
    ud2
    ret
    .size arch_probe, . - arch_probe

    .global system_off
    .type system_off, @function
system_off:
    movw $0xf4, %dx                 /* isa-debug-exit */
    xorl %eax, %eax
    outl %eax, %dx
3:  hlt
    jmp 3b
    .size system_off, . - system_off

    .global vec_int80
    .type vec_int80, @function
vec_int80:
    pushl %ecx
    pushl %edx
    pushl %eax                      /* trap_handler(cause = vector 0x80, arg = eax) */
    pushl $0x80
    call trap_handler
    addl $8, %esp
    popl %edx
    popl %ecx
    iret                            /* EIP, CS, EFLAGS from the stack */
    .size vec_int80, . - vec_int80

    .global vec_ud
    .type vec_ud, @function
vec_ud:
    pushl %ecx
    pushl %edx
    pushl %eax                      /* trap_handler(cause = vector 6, arg = eax) */
    pushl $6
    call trap_handler
    addl $8, %esp
    popl %edx
    popl %ecx
    addl $2, (%esp)                 /* skip the 2-byte UD2 */
    iret
    .size vec_ud, . - vec_ud

    .section .rodata
    .balign 8
gdt:
    .quad 0
    .quad 0x00CF9A000000FFFF        /* 0x08: code, base 0, 4 GiB, 32-bit */
    .quad 0x00CF92000000FFFF        /* 0x10: data */
gdt_desc:
    .word 3 * 8 - 1
    .long gdt
idt_desc:
    .word 256 * 8 - 1
    .long idt

    .bss
    .balign 16
idt:
    .space 256 * 8
    .space 16384
stack_top:
