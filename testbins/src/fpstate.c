/* fpstate: the x87 control word and MXCSR a program starts with (Linux: 0x37f and 0x1f80,
 * arch/x86/kernel/fpu/core.c fpstate_init_fx), what fork and a new thread inherit (a copy
 * of the caller's), and what execve gives the new image (the initial state again).
 *   fpstate show      the state, and sums whose value depends on the x87 precision
 *                     control and the SSE rounding mode
 *   fpstate all       show; then change both (double precision, round toward zero) and
 *                     show them in a forked child, a new thread and after execve of
 *                     /proc/self/exe show */
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static unsigned get_cw(void) {
    unsigned short cw;
    __asm__ volatile("fnstcw %0" : "=m"(cw));
    return cw;
}

static void set_cw(unsigned short cw) {
    __asm__ volatile("fldcw %0" : : "m"(cw));
}

static unsigned get_mxcsr(void) {
    unsigned m;
    __asm__ volatile("stmxcsr %0" : "=m"(m));
    return m;
}

static void set_mxcsr(unsigned m) {
    __asm__ volatile("ldmxcsr %0" : : "m"(m));
}

/* 1 + 2^-60 - 1 in x87 registers: 2^-60 at 64-bit precision, 0 at 53 or 24 bits.  The
 * control word is first stored and loaded back, as every float-to-integer conversion of
 * i386 code does (fnstcw, fldcw with round-toward-zero, fistp, fldcw of the saved word),
 * so that the precision in force is the control word's */
static long double x87_sum(void) {
    volatile long double one = 1.0L, tiny = 0x1p-60L;
    long double r;
    unsigned short cw;
    __asm__ volatile("fnstcw %1\n\tfldcw %1\n\t"
                     "fldt %2\n\tfldt %3\n\tfaddp\n\tfldt %2\n\tfsubrp\n\tfstpt %0"
                     : "=m"(r), "=m"(cw) : "m"(one), "m"(tiny));
    return r;
}

/* 1/10 by SSE2 (i386 too: the function's own target): to nearest it rounds up, toward
 * zero down */
__attribute__((target("sse2"))) static double sse_tenth(void) {
    volatile double one = 1.0, ten = 10.0;
    double r;
    __asm__ volatile("movsd %1, %%xmm0\n\tdivsd %2, %%xmm0\n\tmovsd %%xmm0, %0"
                     : "=m"(r) : "m"(one), "m"(ten) : "xmm0");
    return r;
}

static void show(const char *who) {
    unsigned cw = get_cw(), mxcsr = get_mxcsr();  /* before the sums set sticky flags */
    long double sum = x87_sum();
    double tenth = sse_tenth();
    /* MXCSR's control bits only: its exception flags (bits 0-5) are sticky results of
     * earlier SSE arithmetic, which Unicorn's CPU (QEMU 5.0) does not record */
    printf("%s: cw=%#x mxcsr=%#x x87_sum=%La sse_tenth=%a\n", who, cw, mxcsr & ~0x3fu, sum,
           tenth);
    fflush(stdout);
}

static void *thread_main(void *unused) {
    (void)unused;
    show("thread");
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 2 || strcmp(argv[1], "show") == 0) {
        show(argc < 3 ? "start" : argv[2]);
        return 0;
    }
    if (strcmp(argv[1], "all") != 0) {
        fprintf(stderr, "usage: fpstate show|all\n");
        return 2;
    }
    show("start");
    set_cw(0x27f);      /* precision control 10: double */
    set_mxcsr(0x7f80);  /* rounding control 11: toward zero */
    show("changed");
    pid_t pid = fork();
    if (pid == 0) {
        show("fork");
        _exit(0);
    }
    int status;
    waitpid(pid, &status, 0);
    pthread_t t;
    pthread_create(&t, NULL, thread_main, NULL);
    pthread_join(t, NULL);
    char *args[] = {argv[0], "show", "exec", NULL};
    execv("/proc/self/exe", args);
    perror("execv");
    return 1;
}
