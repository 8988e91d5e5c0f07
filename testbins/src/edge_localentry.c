/* edge_localentry (ppc64le) - ELFv2 global vs local entry points.
 *
 * An ELFv2 function that needs the TOC pointer (r2) starts with a
 * two-instruction global entry "addis r2,r12,..; addi r2,r2,.." and a
 * local entry 8 bytes later (st_other in the symbol says so).  Direct
 * calls from the same TOC ("bl f") go to the local entry, f+8; calls
 * through a function pointer ("mtctr r12; bctrl") go to the global entry
 * with r12 = f.  A tracer must map both addresses to f.  le_scale needs
 * no TOC and has a single entry.
 */
#include "fs_rt.h"

typedef long (*unop_fn)(long);

long le_total;

long le_accumulate(long x) /* global data: two entry points */
{
    le_total += x;
    return le_total;
}

long le_scale(long x) /* no TOC use: one entry point */
{
    return x * 7;
}

long le_call_ptr(unop_fn fn, long x)
{
    return fn(x);
}

int main(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fs_puts("edge_localentry: ELFv2 entry points\n");
    fs_print_kv("direct le_accumulate(30)", le_accumulate(30));
    fs_print_kv("pointer le_accumulate(12)", le_call_ptr(le_accumulate, 12));
    fs_print_kv("direct le_scale(6)", le_scale(6));
    fs_print_kv("pointer le_scale(5)", le_call_ptr(le_scale, 5));
    fs_print_kv("le_total", le_total);
    fs_puts("edge_localentry: done\n");
    return 0;
}
