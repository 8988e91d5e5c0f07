/* edge_pcthunk (i386) - position-independent i386 code and its PC thunks.
 *
 * i386 has no PC-relative data addressing, so -fPIC code gets its own
 * address by calling __x86.get_pc_thunk.{ax,bx,cx,dx}: a two-instruction
 * function "mov (%esp), %reg; ret".  These calls are not calls in the
 * source; a tracer should show them (or filter them by name) without
 * losing its call depth.  Every function below that touches a global,
 * a string literal or a function address needs one.
 */
#include "fs_rt.h"

typedef int (*int_fn)(int);

int pt_counter;

int pt_bump(int by)
{
    pt_counter += by;
    return pt_counter;
}

int pt_twice(int x) { return 2 * x; }
int pt_plus7(int x) { return x + 7; }

static int_fn pt_table[] = {pt_bump, pt_twice, pt_plus7};

int pt_apply(unsigned index, int x)
{
    return pt_table[index % 3](x);
}

int main(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fs_puts("edge_pcthunk: -fPIC i386 code\n");
    fs_print_kv("pt_bump(40)", pt_bump(40));
    fs_print_kv("pt_bump(2)", pt_bump(2));
    fs_print_kv("pt_apply(0, 8)", pt_apply(0, 8));
    fs_print_kv("pt_apply(1, 21)", pt_apply(1, 21));
    fs_print_kv("pt_apply(2, 35)", pt_apply(2, 35));
    fs_print_kv("pt_counter", pt_counter);
    fs_puts("edge_pcthunk: done\n");
    return 0;
}
