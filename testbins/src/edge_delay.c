/* edge_delay (mips, mipsel) - calls and returns whose delay slot does work.
 *
 * On MIPS the instruction after a jump/branch (the delay slot) executes
 * before the jump lands.  Each helper below puts real work there: the
 * argument of a call is computed in the call's delay slot, and results
 * or the stack pop are computed in the delay slot of "jr $ra".  A tracer
 * that stops at the call instruction itself, instead of after its delay
 * slot, sees the wrong argument; one that treats "jr $ra" as the end of
 * the function before its slot has run sees the wrong return value.
 *
 *   md_add_one(x)        returns x + 1, computed in jr $ra's delay slot
 *   md_call_jal(x)       jal  md_add_one, delay slot a0 = 2*x
 *   md_call_bal(x)       bal  md_add_one, delay slot a0 = x - 1
 *   md_call_jalr(fn, x)  jalr fn,          delay slot a0 = x + 10
 *   md_call_c(x)         jal  md_square_c (C code), delay slot a0 = x + 3
 */
#include "fs_rt.h"

typedef long (*unop_fn)(long);

long md_add_one(long x);
long md_call_jal(long x);
long md_call_bal(long x);
long md_call_jalr(unop_fn fn, long x);
long md_call_c(long x);

long md_square_c(long x)
{
    return x * x;
}

long md_negate_c(long x)
{
    return -x;
}

/* Frames: 24 bytes = 16-byte o32 argument area + saved $ra (+ pad). */
__asm__(".text\n"
        ".set push\n"
        ".set noreorder\n"
        ".set nomacro\n"
        ".option pic0\n"
        "\n"
        ".globl md_add_one\n"
        ".type md_add_one,@function\n"
        "md_add_one:\n"
        "  jr $ra\n"
        "  addiu $v0, $a0, 1\n"      /* delay slot: the result */
        ".size md_add_one, .-md_add_one\n"
        "\n"
        ".globl md_call_jal\n"
        ".type md_call_jal,@function\n"
        "md_call_jal:\n"
        "  addiu $sp, $sp, -24\n"
        "  sw $ra, 20($sp)\n"
        "  jal md_add_one\n"
        "  sll $a0, $a0, 1\n"        /* delay slot: the argument */
        "  lw $ra, 20($sp)\n"
        "  jr $ra\n"
        "  addiu $sp, $sp, 24\n"     /* delay slot: pop the frame */
        ".size md_call_jal, .-md_call_jal\n"
        "\n"
        ".globl md_call_bal\n"
        ".type md_call_bal,@function\n"
        "md_call_bal:\n"
        "  addiu $sp, $sp, -24\n"
        "  sw $ra, 20($sp)\n"
        "  bal md_add_one\n"
        "  addiu $a0, $a0, -1\n"     /* delay slot: the argument */
        "  lw $ra, 20($sp)\n"
        "  jr $ra\n"
        "  addiu $sp, $sp, 24\n"
        ".size md_call_bal, .-md_call_bal\n"
        "\n"
        ".globl md_call_jalr\n"
        ".type md_call_jalr,@function\n"
        "md_call_jalr:\n"
        "  addiu $sp, $sp, -24\n"
        "  sw $ra, 20($sp)\n"
        "  move $t9, $a0\n"
        "  jalr $t9\n"
        "  addiu $a0, $a1, 10\n"     /* delay slot: the argument */
        "  lw $ra, 20($sp)\n"
        "  jr $ra\n"
        "  addiu $sp, $sp, 24\n"
        ".size md_call_jalr, .-md_call_jalr\n"
        "\n"
        ".globl md_call_c\n"
        ".type md_call_c,@function\n"
        "md_call_c:\n"
        "  addiu $sp, $sp, -24\n"
        "  sw $ra, 20($sp)\n"
        "  jal md_square_c\n"
        "  addiu $a0, $a0, 3\n"      /* delay slot: the argument */
        "  lw $ra, 20($sp)\n"
        "  jr $ra\n"
        "  addiu $sp, $sp, 24\n"
        ".size md_call_c, .-md_call_c\n"
        "\n"
        ".option pic2\n"
        ".set pop\n");

int main(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fs_puts("edge_delay: delay-slot calls\n");
    fs_print_kv("md_add_one(41)", md_add_one(41));
    fs_print_kv("md_call_jal(20)", md_call_jal(20));
    fs_print_kv("md_call_bal(42)", md_call_bal(42));
    fs_print_kv("md_call_jalr(md_square_c, -4)", md_call_jalr(md_square_c, -4));
    fs_print_kv("md_call_jalr(md_negate_c, 32)", md_call_jalr(md_negate_c, 32));
    fs_print_kv("md_call_c(4)", md_call_c(4));
    fs_puts("edge_delay: done\n");
    return 0;
}
