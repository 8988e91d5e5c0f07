/* execstack: GCC's nested functions whose address is taken run through a trampoline the
 * caller writes on its stack, so the linker asks for an executable stack (PT_GNU_STACK
 * with PF_X; fs/binfmt_elf.c then maps the stack with VM_EXEC).  The nested function is
 * called through a pointer from another function, so the trampoline runs.
 *   execstack [N]   prints the sum of i * N for i in 1..10 computed by the nested function
 *                   and the stack's own permissions as the program sees them work */
#include <stdio.h>
#include <stdlib.h>

static int apply(int (*f)(int), int n) {
    int total = 0;
    for (int i = 1; i <= n; i++)
        total += f(i);
    return total;
}

int main(int argc, char **argv) {
    int scale = argc > 1 ? atoi(argv[1]) : 3;
    int calls = 0;
    int scaled(int x) {  /* reads `scale` and writes `calls` of main's frame */
        calls++;
        return x * scale;
    }
    int total = apply(scaled, 10);
    printf("nested: total=%d calls=%d\n", total, calls);
    return 0;
}
