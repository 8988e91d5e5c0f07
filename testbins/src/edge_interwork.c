/* edge_interwork (arm) - ARM and Thumb code calling each other.
 *
 * Function symbols of Thumb code have bit 0 set (st_value | 1); a call
 * into Thumb switches the CPU to Thumb state (blx, bx to an odd address,
 * pop {pc} / ldr pc of an odd address), a call into ARM code switches
 * back.  Covered here:
 *   - C-level direct calls ARM->Thumb and Thumb->ARM (the linker rewrites
 *     bl into blx <imm>);
 *   - calls through function pointers from both states (blx <reg>);
 *   - hand-written "blx <label>" in each state and returns by
 *     "pop {..., pc}" and "bx lr" across states.
 */
#include "fs_rt.h"

typedef long (*unop_fn)(long);

#define ARM_CODE __attribute__((target("arm"), noinline))
#define THUMB_CODE __attribute__((target("thumb"), noinline))

ARM_CODE long arm_square(long x) { return x * x; }
THUMB_CODE long thumb_add3(long x) { return x + 3; }

ARM_CODE long arm_calls_thumb(long x)
{
    long r = thumb_add3(x);
    return r * 2;
}

THUMB_CODE long thumb_calls_arm(long x)
{
    long r = arm_square(x);
    return r + 1;
}

ARM_CODE long arm_call_ptr(unop_fn fn, long x)
{
    long r = fn(x);
    return r;
}

THUMB_CODE long thumb_call_ptr(unop_fn fn, long x)
{
    long r = fn(x);
    return r;
}

/* asm_arm_blx_thumb(x) = thumb_add3(x)   : ARM code, blx <imm> to Thumb
 * asm_thumb_blx_arm(x) = arm_square(x)   : Thumb code, blx <imm> to ARM
 * asm_thumb_leaf(x)    = x - 100         : Thumb leaf, returns with bx lr */
long asm_arm_blx_thumb(long x);
long asm_thumb_blx_arm(long x);
long asm_thumb_leaf(long x);

__asm__(".text\n"
        ".syntax unified\n"
        ".arm\n"
        ".p2align 2\n"
        ".globl asm_arm_blx_thumb\n"
        ".type asm_arm_blx_thumb,%function\n"
        "asm_arm_blx_thumb:\n"
        "  push {r4, lr}\n"
        "  blx thumb_add3\n"
        "  pop {r4, pc}\n"
        ".size asm_arm_blx_thumb, .-asm_arm_blx_thumb\n"
        "\n"
        ".thumb\n"
        ".p2align 1\n"
        ".globl asm_thumb_blx_arm\n"
        ".type asm_thumb_blx_arm,%function\n"
        ".thumb_func\n"
        "asm_thumb_blx_arm:\n"
        "  push {r4, lr}\n"
        "  blx arm_square\n"
        "  pop {r4, pc}\n"
        ".size asm_thumb_blx_arm, .-asm_thumb_blx_arm\n"
        "\n"
        ".globl asm_thumb_leaf\n"
        ".type asm_thumb_leaf,%function\n"
        ".thumb_func\n"
        "asm_thumb_leaf:\n"
        "  subs r0, r0, #100\n"
        "  bx lr\n"
        ".size asm_thumb_leaf, .-asm_thumb_leaf\n");

ARM_CODE int main(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fs_puts("edge_interwork: ARM <-> Thumb calls\n");
    fs_print_kv("arm_calls_thumb(4)", arm_calls_thumb(4));
    fs_print_kv("thumb_calls_arm(6)", thumb_calls_arm(6));
    fs_print_kv("arm_call_ptr(thumb_add3, 39)", arm_call_ptr(thumb_add3, 39));
    fs_print_kv("arm_call_ptr(arm_square, 7)", arm_call_ptr(arm_square, 7));
    fs_print_kv("thumb_call_ptr(arm_square, 8)", thumb_call_ptr(arm_square, 8));
    fs_print_kv("thumb_call_ptr(thumb_add3, 1)", thumb_call_ptr(thumb_add3, 1));
    fs_print_kv("thumb_call_ptr(asm_thumb_leaf, 142)",
                thumb_call_ptr(asm_thumb_leaf, 142));
    fs_print_kv("asm_arm_blx_thumb(10)", asm_arm_blx_thumb(10));
    fs_print_kv("asm_thumb_blx_arm(12)", asm_thumb_blx_arm(12));
    fs_puts("edge_interwork: done\n");
    return 0;
}
