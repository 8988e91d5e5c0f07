/* edge_compressed (riscv64) - calls and returns in compressed (RVC) form.
 *
 * 2-byte instructions change the return address: after "c.jalr rs" ra is
 * the call's address + 2, not + 4.  Covered here:
 *   rc_add_one(x)           leaf, returns with c.jr ra
 *   rc_call_compressed(f,x) calls f(x) with c.jalr, returns with c.jr ra
 *   rc_call_full(f,x)       the same with 4-byte jalr / jalr x0,0(ra)
 *   rc_tail_compressed(f,x) tail jump to f with c.jr (no call)
 *   rc_jump_compressed(x)   tail jump to rc_add_one with c.j
 * C code compiled for rv64gc uses c.jr ra for its own returns too.
 */
#include "fs_rt.h"

typedef long (*unop_fn)(long);

long rc_add_one(long x);
long rc_call_compressed(unop_fn fn, long x);
long rc_call_full(unop_fn fn, long x);
long rc_tail_compressed(unop_fn fn, long x);
long rc_jump_compressed(long x);

long rc_times3(long x)
{
    return x * 3;
}

__asm__(".text\n"
        ".option push\n"
        ".option rvc\n"
        ".option norelax\n"
        ".p2align 1\n"
        ".globl rc_add_one\n"
        ".type rc_add_one,@function\n"
        "rc_add_one:\n"
        "  c.addi a0, 1\n"
        "  c.jr ra\n"
        ".size rc_add_one, .-rc_add_one\n"
        "\n"
        ".globl rc_call_compressed\n"
        ".type rc_call_compressed,@function\n"
        "rc_call_compressed:\n"
        "  c.addi16sp sp, -16\n"
        "  c.sdsp ra, 8(sp)\n"
        "  c.mv t0, a0\n"
        "  c.mv a0, a1\n"
        "  c.jalr t0\n"
        "  c.ldsp ra, 8(sp)\n"
        "  c.addi16sp sp, 16\n"
        "  c.jr ra\n"
        ".size rc_call_compressed, .-rc_call_compressed\n"
        "\n"
        ".globl rc_tail_compressed\n"
        ".type rc_tail_compressed,@function\n"
        "rc_tail_compressed:\n"
        "  c.mv t0, a0\n"
        "  c.mv a0, a1\n"
        "  c.jr t0\n"
        ".size rc_tail_compressed, .-rc_tail_compressed\n"
        "\n"
        ".globl rc_jump_compressed\n"
        ".type rc_jump_compressed,@function\n"
        "rc_jump_compressed:\n"
        "  c.addi a0, 2\n"
        "  c.j rc_add_one\n"
        ".size rc_jump_compressed, .-rc_jump_compressed\n"
        "\n"
        ".option norvc\n" /* 4-byte forms, still only 2-byte aligned */
        ".globl rc_call_full\n"
        ".type rc_call_full,@function\n"
        "rc_call_full:\n"
        "  addi sp, sp, -16\n"
        "  sd ra, 8(sp)\n"
        "  addi t0, a0, 0\n"
        "  addi a0, a1, 0\n"
        "  jalr ra, 0(t0)\n"
        "  ld ra, 8(sp)\n"
        "  addi sp, sp, 16\n"
        "  jalr x0, 0(ra)\n"
        ".size rc_call_full, .-rc_call_full\n"
        ".option pop\n");

int main(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fs_puts("edge_compressed: RVC calls and returns\n");
    fs_print_kv("rc_add_one(41)", rc_add_one(41));
    fs_print_kv("rc_call_compressed(rc_times3, 14)", rc_call_compressed(rc_times3, 14));
    fs_print_kv("rc_call_compressed(rc_add_one, 9)", rc_call_compressed(rc_add_one, 9));
    fs_print_kv("rc_call_full(rc_times3, 5)", rc_call_full(rc_times3, 5));
    fs_print_kv("rc_call_full(rc_add_one, 99)", rc_call_full(rc_add_one, 99));
    fs_print_kv("rc_tail_compressed(rc_times3, 11)", rc_tail_compressed(rc_times3, 11));
    fs_print_kv("rc_jump_compressed(39)", rc_jump_compressed(39));
    fs_puts("edge_compressed: done\n");
    return 0;
}
