/* fs_rt.h - the whole runtime of the freestanding tier (no libc).
 *
 * Include it from exactly one translation unit per program.  It provides
 *   _start     per-ISA entry (asm): clears the frame/link registers, sets
 *              up what the ABI needs (gp on MIPS/RISC-V, r2 on ppc64le),
 *              aligns the stack and calls fs_entry(sp);
 *   fs_entry   calls main(argc, argv) and exit_group(main's result);
 *   fs_streq / fs_puts / fs_put_dec / fs_put_hex / fs_print_kv  output helpers on
 *              top of write(1, ...).
 */
#ifndef FS_RT_H
#define FS_RT_H

#include "fs_syscall.h"

int main(int argc, char **argv);
void fs_entry(long *sp) __attribute__((noreturn, used));

#if defined(__x86_64__)
__asm__(".text\n"
        ".globl _start\n"
        ".type _start,@function\n"
        "_start:\n"
        "  xor %ebp, %ebp\n"
        "  mov %rsp, %rdi\n"
        "  and $-16, %rsp\n"
        "  call fs_entry\n"
        "  hlt\n"
        ".size _start, .-_start\n");
#elif defined(__i386__)
__asm__(".text\n"
        ".globl _start\n"
        ".type _start,@function\n"
        "_start:\n"
        "  xor %ebp, %ebp\n"
        "  mov %esp, %eax\n"
        "  and $-16, %esp\n"
        "  sub $12, %esp\n"
        "  push %eax\n"
        "  call fs_entry\n"
        "  hlt\n"
        ".size _start, .-_start\n");
#elif defined(__aarch64__)
__asm__(".text\n"
        ".globl _start\n"
        ".type _start,%function\n"
        "_start:\n"
        "  mov x29, #0\n"
        "  mov x30, #0\n"
        "  mov x0, sp\n"
        "  bl fs_entry\n"
        "  brk #0\n"
        ".size _start, .-_start\n");
#elif defined(__arm__)
/* _start is ARM code; fs_entry is Thumb in the default armhf build, the
 * linker turns the bl into blx. */
__asm__(".text\n"
        ".syntax unified\n"
        ".arm\n"
        ".globl _start\n"
        ".type _start,%function\n"
        "_start:\n"
        "  mov fp, #0\n"
        "  mov lr, #0\n"
        "  mov r0, sp\n"
        "  bic sp, sp, #7\n"
        "  bl fs_entry\n"
        "  udf #0\n"
        ".size _start, .-_start\n");
#elif defined(__mips__) && defined(__mips64)
/* n64: the callee derives gp from its own address in $25 (t9), and code lies above
 * 4 GiB (dla: the full 64-bit address); no argument save area */
__asm__(".text\n"
        ".globl _start\n"
        ".type _start,@function\n"
        ".set push\n"
        ".set noreorder\n"
        ".option pic0\n"
        "_start:\n"
        "  move $30, $0\n"
        "  move $31, $0\n"
        "  move $4, $29\n"
        "  li $12, -16\n"
        "  and $29, $29, $12\n"
        "  dla $25, fs_entry\n"
        "  jalr $25\n"
        "  nop\n"
        "  break\n"
        ".option pic2\n"
        ".set pop\n"
        ".size _start, .-_start\n");
#elif defined(__mips__)
__asm__(".text\n"
        ".globl _start\n"
        ".type _start,@function\n"
        ".set push\n"
        ".set noreorder\n"
        ".option pic0\n" /* plain jal, no .cprestore (non-PIC static) */
        "_start:\n"
        "  move $fp, $0\n"
        "  move $ra, $0\n"
        "  lui $gp, %hi(_gp)\n"
        "  addiu $gp, $gp, %lo(_gp)\n"
        "  move $a0, $sp\n"
        "  li $t0, -8\n"
        "  and $sp, $sp, $t0\n"
        "  jal fs_entry\n"
        "  addiu $sp, $sp, -16\n" /* delay slot: o32 argument save area */
        "  break\n"
        ".option pic2\n" /* back to the mode gcc's -mno-shared -KPIC uses */
        ".set pop\n"
        ".size _start, .-_start\n");
#elif defined(__riscv)
__asm__(".text\n"
        ".globl _start\n"
        ".type _start,@function\n"
        "_start:\n"
        ".option push\n"
        ".option norelax\n"
        "  la gp, __global_pointer$\n"
        ".option pop\n"
        "  li ra, 0\n"
        "  li s0, 0\n"
        "  mv a0, sp\n"
        "  andi sp, sp, -16\n"
        "  call fs_entry\n"
        "  ebreak\n"
        ".size _start, .-_start\n");
#elif defined(__powerpc64__) && _CALL_ELF != 2
/* ELFv1: _start is a function descriptor in .opd (code address, TOC, environment); the
 * kernel reads the entry and r2 from it.  A 112-byte frame: the 48-byte header and the
 * parameter save area of fs_entry's call */
__asm__(".section .opd,\"aw\"\n"
        ".align 3\n"
        ".globl _start\n"
        ".type _start,@function\n"
        "_start:\n"
        "  .quad .L._start, .TOC.@tocbase, 0\n"
        ".text\n"
        ".L._start:\n"
        "  mr 3, 1\n"
        "  clrrdi 1, 1, 4\n"
        "  li 0, 0\n"
        "  stdu 1, -112(1)\n"
        "  std 0, 0(1)\n"
        "  mtlr 0\n"
        "  bl fs_entry\n"
        "  nop\n"
        "  trap\n"
        ".size _start, .-.L._start\n");
#elif defined(__powerpc64__)
__asm__(".text\n"
        ".globl _start\n"
        ".type _start,@function\n"
        "_start:\n"
        "  bcl 20, 31, 1f\n"
        "1:\n"
        "  mflr 12\n"
        "  addis 2, 12, (.TOC.-1b)@ha\n"
        "  addi 2, 2, (.TOC.-1b)@l\n"
        "  mr 3, 1\n"
        "  clrrdi 1, 1, 4\n"
        "  li 0, 0\n"
        "  stdu 1, -32(1)\n"
        "  std 0, 0(1)\n"
        "  mtlr 0\n"
        "  bl fs_entry\n"
        "  nop\n"
        "  trap\n"
        ".size _start, .-_start\n");
#elif defined(__powerpc__)
__asm__(".text\n"
        ".globl _start\n"
        ".type _start,@function\n"
        "_start:\n"
        "  mr 3, 1\n"
        "  clrrwi 1, 1, 4\n"
        "  li 0, 0\n"
        "  stwu 1, -16(1)\n"
        "  stw 0, 0(1)\n"
        "  mtlr 0\n"
        "  bl fs_entry\n"
        "  trap\n"
        ".size _start, .-_start\n");
#elif defined(__s390x__)
__asm__(".text\n"
        ".globl _start\n"
        ".type _start,@function\n"
        "_start:\n"
        "  lgr %r2, %r15\n"
        "  aghi %r15, -160\n"
        "  xc 0(8,%r15), 0(%r15)\n"
        "  brasl %r14, fs_entry\n"
        "  .long 0\n"
        ".size _start, .-_start\n");
#elif defined(__m68k__)
/* SysV m68k: the argument on the stack; a6 (the frame pointer) cleared */
__asm__(".text\n"
        ".globl _start\n"
        ".type _start,@function\n"
        "_start:\n"
        "  sub.l %a6, %a6\n"
        "  move.l %sp, %a0\n"
        "  move.l %a0, -(%sp)\n"
        "  jsr fs_entry\n"
        "  illegal\n"
        ".size _start, .-_start\n");
#elif defined(__sparc__) && defined(__arch64__)
/* 64-bit: argc lies at sp + 2047 (the stack bias) + 128 (the window save area); a frame
 * of 192 bytes below it for fs_entry's window and argument dump */
__asm__(".text\n"
        ".globl _start\n"
        ".type _start,@function\n"
        "_start:\n"
        "  mov %g0, %fp\n"
        "  add %sp, 2175, %o0\n"
        "  sub %sp, 192, %sp\n"
        "  call fs_entry\n"
        "  nop\n"
        "  illtrap 0\n"
        ".size _start, .-_start\n");
#else
#error "fs_rt.h: unsupported ISA"
#endif

void fs_entry(long *sp)
{
    int argc = (int)sp[0];
    char **argv = (char **)(sp + 1);
    fs_sys_exit_group(main(argc, argv));
}

__attribute__((unused)) static fs_size_t fs_strlen(const char *s)
{
    fs_size_t n = 0;
    while (s[n])
        n++;
    return n;
}

__attribute__((unused)) static int fs_streq(const char *a, const char *b)
{
    while (*a && *a == *b) {
        a++;
        b++;
    }
    return *a == *b;
}

__attribute__((unused)) static void fs_puts(const char *s)
{
    fs_sys_write(1, s, fs_strlen(s));
}

__attribute__((unused)) static void fs_put_dec(long v)
{
    char buf[24];
    int i = sizeof buf;
    unsigned long u = v < 0 ? 0UL - (unsigned long)v : (unsigned long)v;
    do {
        buf[--i] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (v < 0)
        buf[--i] = '-';
    fs_sys_write(1, buf + i, sizeof buf - i);
}

__attribute__((unused)) static void fs_put_hex(unsigned long v)
{
    char buf[2 + 2 * sizeof v];
    int i = sizeof buf;
    do {
        buf[--i] = "0123456789abcdef"[v & 15];
        v >>= 4;
    } while (v);
    buf[--i] = 'x';
    buf[--i] = '0';
    fs_sys_write(1, buf + i, sizeof buf - i);
}

/* "<label> = <decimal>\n" */
__attribute__((unused)) static void fs_print_kv(const char *label, long v)
{
    fs_puts(label);
    fs_puts(" = ");
    fs_put_dec(v);
    fs_puts("\n");
}

#endif /* FS_RT_H */
