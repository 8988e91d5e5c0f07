/* edge_exrl (s390x) - calls executed through EXECUTE RELATIVE LONG.
 *
 * EXRL runs a single "target" instruction that lives elsewhere in the
 * text (never reached by normal flow).  When the target is a branch and
 * save instruction, the call goes to the branch target and the return
 * address in r14 is the instruction after the EXRL, not after the target.
 *
 *   edge_exrl [all]    both cases below (default)
 *   edge_exrl basr     BASR target: "basr %r14,%r1" executed via EXRL
 *   edge_exrl brasl    BRASL target: its relative offset counts from the
 *                      target instruction's address, not the EXRL's
 *                      (z/Architecture PoP; QEMU before 8.0 had bugs here)
 * A plain direct call is printed first for comparison.
 */
#include "fs_rt.h"

typedef long (*unop_fn)(long);

long ex_add_ten(long x) { return x + 10; }
long ex_square(long x) { return x * x; }

/* long ex_call_basr(unop_fn fn, long x): fn(x) via EXRL of BASR. */
long ex_call_basr(unop_fn fn, long x);
/* long ex_call_brasl(long x): ex_add_ten(x) via EXRL of BRASL. */
long ex_call_brasl(long x);

__asm__(".text\n"
        ".globl ex_call_basr\n"
        ".type ex_call_basr,@function\n"
        "ex_call_basr:\n"
        "  stmg %r14, %r15, 112(%r15)\n"
        "  aghi %r15, -160\n"
        "  lgr %r1, %r2\n"          /* r1 = fn */
        "  lgr %r2, %r3\n"          /* r2 = x  */
        "  exrl %r0, .Lex_basr_target\n"
        "  lmg %r14, %r15, 272(%r15)\n"
        "  br %r14\n"
        ".size ex_call_basr, .-ex_call_basr\n"
        "\n"
        ".globl ex_call_brasl\n"
        ".type ex_call_brasl,@function\n"
        "ex_call_brasl:\n"
        "  stmg %r14, %r15, 112(%r15)\n"
        "  aghi %r15, -160\n"
        "  exrl %r0, .Lex_brasl_target\n"
        "  lmg %r14, %r15, 272(%r15)\n"
        "  br %r14\n"
        ".size ex_call_brasl, .-ex_call_brasl\n"
        "\n"
        /* EXRL targets: data-like islands in .text, never run directly. */
        "ex_targets:\n"
        ".Lex_basr_target:\n"
        "  basr %r14, %r1\n"
        ".Lex_brasl_target:\n"
        "  brasl %r14, ex_add_ten\n"
        "  .long 0\n"
        ".size ex_targets, .-ex_targets\n");

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "all";
    int basr = !fs_streq(mode, "brasl");
    int brasl = !fs_streq(mode, "basr");
    fs_puts("edge_exrl: EXRL-executed calls\n");
    fs_print_kv("direct ex_add_ten(32)", ex_add_ten(32));
    if (basr) {
        fs_print_kv("exrl basr ex_add_ten(32)", ex_call_basr(ex_add_ten, 32));
        fs_print_kv("exrl basr ex_square(9)", ex_call_basr(ex_square, 9));
    }
    if (brasl)
        fs_print_kv("exrl brasl ex_add_ten(5)", ex_call_brasl(5));
    fs_puts("edge_exrl: done\n");
    return 0;
}
