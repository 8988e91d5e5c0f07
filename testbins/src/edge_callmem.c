/* edge_callmem (x86_64) - indirect calls through memory operands.
 *
 * The call target is loaded from memory by the call instruction itself,
 * so a tracer must evaluate the memory operand (not a register) to know
 * the callee:
 *   call_table_indexed(i, x)  call *ec_table(,%rax,8)   (SIB, absolute)
 *   call_through_pointer(p,x) call *(%rax)
 *   call_rip_relative(x)      call *ec_slot(%rip)
 *   call_stack_slot(f, x)     call *8(%rsp)
 */
#include "fs_rt.h"

typedef long (*unop_fn)(long);

long ec_double(long x) { return 2 * x; }
long ec_square(long x) { return x * x; }
long ec_negate(long x) { return -x; }
long ec_add100(long x) { return x + 100; }

unop_fn ec_table[4] = {ec_double, ec_square, ec_negate, ec_add100};
unop_fn ec_slot = ec_add100;

long call_table_indexed(long index, long x);
long call_through_pointer(unop_fn *slot, long x);
long call_rip_relative(long x);
long call_stack_slot(unop_fn fn, long x);

/* Each helper keeps %rsp 16-byte aligned at its call. */
__asm__(".text\n"
        ".globl call_table_indexed\n"
        ".type call_table_indexed,@function\n"
        "call_table_indexed:\n"
        "  sub $8, %rsp\n"
        "  mov %rdi, %rax\n"
        "  mov %rsi, %rdi\n"
        "  call *ec_table(,%rax,8)\n"
        "  add $8, %rsp\n"
        "  ret\n"
        ".size call_table_indexed, .-call_table_indexed\n"
        "\n"
        ".globl call_through_pointer\n"
        ".type call_through_pointer,@function\n"
        "call_through_pointer:\n"
        "  sub $8, %rsp\n"
        "  mov %rdi, %rax\n"
        "  mov %rsi, %rdi\n"
        "  call *(%rax)\n"
        "  add $8, %rsp\n"
        "  ret\n"
        ".size call_through_pointer, .-call_through_pointer\n"
        "\n"
        ".globl call_rip_relative\n"
        ".type call_rip_relative,@function\n"
        "call_rip_relative:\n"
        "  sub $8, %rsp\n"
        "  call *ec_slot(%rip)\n"
        "  add $8, %rsp\n"
        "  ret\n"
        ".size call_rip_relative, .-call_rip_relative\n"
        "\n"
        ".globl call_stack_slot\n"
        ".type call_stack_slot,@function\n"
        "call_stack_slot:\n"
        "  sub $24, %rsp\n"
        "  mov %rdi, 8(%rsp)\n"
        "  mov %rsi, %rdi\n"
        "  call *8(%rsp)\n"
        "  add $24, %rsp\n"
        "  ret\n"
        ".size call_stack_slot, .-call_stack_slot\n");

int main(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fs_puts("edge_callmem: call through memory operands\n");
    fs_print_kv("call_table_indexed(0, 21)", call_table_indexed(0, 21));
    fs_print_kv("call_table_indexed(1, 7)", call_table_indexed(1, 7));
    fs_print_kv("call_table_indexed(2, -42)", call_table_indexed(2, -42));
    fs_print_kv("call_table_indexed(3, -58)", call_table_indexed(3, -58));
    fs_print_kv("call_through_pointer(&ec_table[1], 9)",
                call_through_pointer(&ec_table[1], 9));
    fs_print_kv("call_rip_relative(-1)", call_rip_relative(-1));
    fs_print_kv("call_stack_slot(ec_negate, 5)", call_stack_slot(ec_negate, 5));
    fs_puts("edge_callmem: done\n");
    return 0;
}
