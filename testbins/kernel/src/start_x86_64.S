/* start_x86_64.S - QEMU `-M pc -kernel` (multiboot) and emutrace's pc-x86_64.
 * QEMU refuses a 64-bit multiboot ELF, but loads any file whose multiboot header has the
 * a.out kludge (flag 16: load addresses in the header, Multiboot 0.6.96 §3.1.3) and enters
 * its entry_addr, mb_start32, in 32-bit protected mode; that code builds identity page
 * tables (2 MiB pages, first 1 GiB), enables PAE, EFER.LME and paging (Intel SDM vol. 3
 * §9.8.5) and jumps to the ELF entry _start in 64-bit mode.  emutrace's board starts at the
 * ELF entry directly: Unicorn's UC_MODE_64 resets into long mode with flat addressing.
 * From _start on both run the same code.  COM1 at port 0x3f8, isa-debug-exit at 0xf4. */
    .section .multiboot, "a"
    .balign 4
mb_header:
    .long 0x1BADB002                /* magic */
    .long 0x00010000                /* flags: the address fields below are valid */
    .long -(0x1BADB002 + 0x00010000)
    .long mb_header                 /* header_addr */
    .long KERNEL_BASE               /* load_addr: the file from .text on */
    .long _edata                    /* load_end_addr */
    .long _end                      /* bss_end_addr: QEMU zeroes the bss */
    .long mb_start32                /* entry_addr */

    .section .text.boot, "ax"
    .code32
mb_start32:
    lgdt gdt_desc
    mov $pdpt + 3, %eax             /* PML4[0] → PDPT (present, writable) */
    mov %eax, pml4
    mov $pd + 3, %eax               /* PDPT[0] → PD */
    mov %eax, pdpt
    xor %ecx, %ecx                  /* PD[i] = i × 2 MiB, present, writable, PS */
1:  mov %ecx, %eax
    shl $21, %eax
    or $0x83, %eax
    mov %eax, pd(, %ecx, 8)
    inc %ecx
    cmp $512, %ecx
    jne 1b
    mov $pml4, %eax
    mov %eax, %cr3
    mov %cr4, %eax
    or $0x20, %eax                  /* CR4.PAE */
    mov %eax, %cr4
    mov $0xC0000080, %ecx           /* IA32_EFER */
    rdmsr
    or $0x100, %eax                 /* LME */
    wrmsr
    mov %cr0, %eax
    or $0x80000001, %eax            /* PG | PE */
    mov %eax, %cr0
    ljmp $0x08, $_start

    .code64
    .global _start
    .type _start, @function
_start:
    lgdt gdt_desc                   /* the same GDT under emutrace, where no 32-bit code ran */
    mov $0x10, %ax
    mov %ax, %ds
    mov %ax, %es
    mov %ax, %ss
    mov $stack_top, %rsp
    pushq $0x08                     /* CS = 0x08, the 64-bit code segment */
    lea 2f(%rip), %rax
    pushq %rax
    lretq
2:  lea idt + 16 * 0x80, %rdi       /* gate 0x80 → vec_int80 (SDM vol. 3 §6.14.1) */
    mov $vec_int80, %rax
    call set_gate
    lea idt + 16 * 6, %rdi          /* gate 6 (#UD) → vec_ud */
    mov $vec_ud, %rax
    call set_gate
    lidt idt_desc
    call kmain
3:  jmp 3b
    .size _start, . - _start

/* set_gate: the 64-bit interrupt gate at rdi for the handler at rax, selector 0x08 */
    .type set_gate, @function
set_gate:
    movw %ax, (%rdi)
    movw $0x08, 2(%rdi)
    movw $0x8E00, 4(%rdi)           /* present, DPL 0, 64-bit interrupt gate */
    shr $16, %rax
    movw %ax, 6(%rdi)
    shr $16, %rax
    movl %eax, 8(%rdi)
    movl $0, 12(%rdi)
    ret
    .size set_gate, . - set_gate

    .text
    .global uart_putc
    .type uart_putc, @function
uart_putc:
    mov %edi, %eax
    mov $0x3f8, %dx                 /* COM1 THR */
    outb %al, %dx
    ret
    .size uart_putc, . - uart_putc

/* long arch_trap(long arg): int $0x80 with arg in rdi, result in rax. */
    .global arch_trap
    .type arch_trap, @function
arch_trap:
    int $0x80
    ret
    .size arch_trap, . - arch_trap

/* long arch_probe(long arg): UD2 (#UD, a fault: the saved RIP is the UD2); the handler
 * returns past it. */
    .global arch_probe
    .type arch_probe, @function
arch_probe:
    ud2
    ret
    .size arch_probe, . - arch_probe

    .global system_off
    .type system_off, @function
system_off:
    mov $0xf4, %dx                  /* isa-debug-exit */
    xor %eax, %eax
    outl %eax, %dx
4:  hlt
    jmp 4b
    .size system_off, . - system_off

/* The handlers: trap_handler(cause = the vector, arg = rdi), the value in rax; the
 * caller-saved registers the C call may clobber are saved (arch_trap's caller expects
 * only rax changed, as by a call that returns it). */
    .global vec_int80
    .type vec_int80, @function
vec_int80:
    push %rdi
    push %rsi
    push %rdx
    push %rcx
    push %r8
    push %r9
    push %r10
    push %r11
    mov %rdi, %rsi
    mov $0x80, %edi
    call trap_handler
    pop %r11
    pop %r10
    pop %r9
    pop %r8
    pop %rcx
    pop %rdx
    pop %rsi
    pop %rdi
    iretq                           /* RIP, CS, RFLAGS, RSP, SS from the stack */
    .size vec_int80, . - vec_int80

    .global vec_ud
    .type vec_ud, @function
vec_ud:
    push %rdi
    push %rsi
    push %rdx
    push %rcx
    push %r8
    push %r9
    push %r10
    push %r11
    mov %rdi, %rsi
    mov $6, %edi
    call trap_handler
    pop %r11
    pop %r10
    pop %r9
    pop %r8
    pop %rcx
    pop %rdx
    pop %rsi
    pop %rdi
    addq $2, (%rsp)                 /* skip the 2-byte UD2 */
    iretq
    .size vec_ud, . - vec_ud

    .section .rodata
    .balign 8
gdt:
    .quad 0
    .quad 0x00AF9A000000FFFF        /* 0x08: 64-bit code (L = 1) */
    .quad 0x00CF92000000FFFF        /* 0x10: data */
gdt_desc:
    .word 3 * 8 - 1
    .quad gdt
idt_desc:
    .word 256 * 16 - 1
    .quad idt

    .bss
    .balign 4096
pml4: .space 4096
pdpt: .space 4096
pd:   .space 4096
idt:  .space 256 * 16
    .balign 16
    .space 16384
stack_top:
