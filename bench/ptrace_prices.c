/* The kernel's price of each ptrace round trip the native target pays, measured with a
 * minimal C tracer (no Python): the cost model's `vm` prices (emutrace/cost/anchors.py)
 * against this machine now.  Built and run by bench/bench_ptrace_prices.py.
 *
 *     ptrace_prices N      prints "name nanoseconds-per-event" lines
 *
 * Each measurement forks a child that stops itself (PTRACE_TRACEME + SIGSTOP) and then
 * runs a loop the tracer drives N times:
 *   int3         the child executes int3; the tracer waitpid()s the SIGTRAP stop and
 *                PTRACE_CONTs (ptrace(2): a signal-delivery-stop, two context switches)
 *   int3_regs    the same plus PTRACE_GETREGS and PTRACE_SETREGS at every stop (what a
 *                tracer that simulates the displaced call does)
 *   singlestep   PTRACE_SINGLESTEP + waitpid over the child's loop, per instruction
 *   singleblock  PTRACE_SINGLEBLOCK + waitpid, per stop (per instruction when the
 *                hypervisor drops DEBUGCTL.BTF)
 *   dr0_hit      DR0 = a function the child calls, DR7 enables it as an execute
 *                breakpoint (Intel SDM vol. 3 §18.2); per hit: waitpid + PTRACE_CONT
 *   poketext     PTRACE_POKETEXT of one code word of the stopped child (arming a site)
 *   dr_write     PTRACE_POKEUSER of DR0 and of DR7 (one hardware slot re-programmed)
 *   getppid      one system call, for scale
 */
#define _GNU_SOURCE
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/user.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef PTRACE_SINGLEBLOCK
#define PTRACE_SINGLEBLOCK 33 /* <asm/ptrace-abi.h>, x86 */
#endif

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static void die(const char *what)
{
    perror(what);
    exit(1);
}

__attribute__((noinline)) void target_function(void)
{
    __asm__ volatile("" ::: "memory");
}

static void child_body(int kind)
{
    if (ptrace(PTRACE_TRACEME, 0, 0, 0) == -1)
        _exit(2);
    raise(SIGSTOP);
    for (;;) {
        if (kind == 0)
            __asm__ volatile("int3");
        else if (kind == 1)
            target_function();
        else
            __asm__ volatile("nop; nop; nop; nop" ::: "memory");
    }
}

static pid_t start_child(int kind)
{
    pid_t pid = fork();
    if (pid < 0)
        die("fork");
    if (pid == 0)
        child_body(kind);
    int status;
    if (waitpid(pid, &status, 0) != pid || !WIFSTOPPED(status))
        die("waitpid (first stop)");
    ptrace(PTRACE_SETOPTIONS, pid, 0, PTRACE_O_EXITKILL);
    return pid;
}

static void stop_child(pid_t pid)
{
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
}

static void wait_trap(pid_t pid)
{
    int status;
    if (waitpid(pid, &status, 0) != pid || !WIFSTOPPED(status) || WSTOPSIG(status) != SIGTRAP) {
        fprintf(stderr, "unexpected status %#x\n", status);
        exit(1);
    }
}

/* int3 stops; with_regs: GETREGS + SETREGS at each */
static double int3_stops(long n, int with_regs)
{
    pid_t pid = start_child(0);
    struct user_regs_struct regs;
    ptrace(PTRACE_CONT, pid, 0, 0);
    wait_trap(pid);
    double t0 = now();
    for (long i = 0; i < n; i++) {
        if (with_regs) {
            ptrace(PTRACE_GETREGS, pid, 0, &regs);
            ptrace(PTRACE_SETREGS, pid, 0, &regs);
        }
        ptrace(PTRACE_CONT, pid, 0, 0);
        wait_trap(pid);
    }
    double t = now() - t0;
    stop_child(pid);
    return t / n;
}

static double steps(long n, int request)
{
    pid_t pid = start_child(2);
    double t0 = now();
    for (long i = 0; i < n; i++) {
        ptrace(request, pid, 0, 0);
        wait_trap(pid);
    }
    double t = now() - t0;
    stop_child(pid);
    return t / n;
}

static const size_t DR0 = offsetof(struct user, u_debugreg[0]);
static const size_t DR7 = offsetof(struct user, u_debugreg[7]);

static double dr0_hits(long n)
{
    pid_t pid = start_child(1);
    /* the child is a fork of this process: target_function is at the same address */
    if (ptrace(PTRACE_POKEUSER, pid, DR0, (void *)target_function) == -1)
        die("POKEUSER DR0");
    if (ptrace(PTRACE_POKEUSER, pid, DR7, (void *)1L) == -1) /* L0, execute, length 1 */
        die("POKEUSER DR7");
    ptrace(PTRACE_CONT, pid, 0, 0);
    wait_trap(pid);
    double t0 = now();
    for (long i = 0; i < n; i++) {
        ptrace(PTRACE_CONT, pid, 0, 0);
        wait_trap(pid);
    }
    double t = now() - t0;
    stop_child(pid);
    return t / n;
}

static double pokes(long n, int dr)
{
    pid_t pid = start_child(2);
    long word = ptrace(PTRACE_PEEKTEXT, pid, (void *)target_function, 0);
    double t0 = now();
    for (long i = 0; i < n; i++) {
        if (dr) {
            if (ptrace(PTRACE_POKEUSER, pid, DR0, (void *)target_function) == -1 ||
                ptrace(PTRACE_POKEUSER, pid, DR7, (void *)(i & 1 ? 1L : 0L)) == -1)
                die("POKEUSER");
        } else if (ptrace(PTRACE_POKETEXT, pid, (void *)target_function, (void *)word) == -1) {
            die("POKETEXT");
        }
    }
    double t = now() - t0;
    stop_child(pid);
    return t / n;
}

static double syscalls(long n)
{
    double t0 = now();
    for (long i = 0; i < n; i++)
        getppid();
    return (now() - t0) / n;
}

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 2000;
    if (n < 1)
        n = 1;
    printf("int3 %.0f\n", 1e9 * int3_stops(n, 0));
    printf("int3_regs %.0f\n", 1e9 * int3_stops(n, 1));
    printf("singlestep %.0f\n", 1e9 * steps(n, PTRACE_SINGLESTEP));
    printf("singleblock %.0f\n", 1e9 * steps(n, PTRACE_SINGLEBLOCK));
    printf("dr0_hit %.0f\n", 1e9 * dr0_hits(n));
    printf("poketext %.0f\n", 1e9 * pokes(n, 0));
    printf("dr_write %.0f\n", 1e9 * pokes(n, 1));
    printf("getppid %.0f\n", 1e9 * syscalls(n * 100));
    return 0;
}
