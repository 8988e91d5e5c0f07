/* sigctx: what a signal handler sees of the interrupted program through its ucontext, and
 * what it may change there, each step printed for comparison with
 * qemu-user on every ISA: the interrupted PC and SP, the result register of the
 * interrupted system call changed by the handler, uc_sigmask changed by the handler (the
 * mask after the return), uc_stack, a SIGSEGV handler on a sigaltstack that moves the PC
 * to a landing function (twice: the mask comes back through siglongjmp), SIGALRM delivered
 * to a loop that makes no system call, children stopped by SIGSTOP and SIGTSTP (default
 * action) and continued. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <sys/wait.h>
#include <unistd.h>

/* the per-ISA names of the resume address, the stack pointer, the system-call result
 * register (glibc <sys/ucontext.h>) and, where the ABI has one, the register a callee
 * expects its own address in (MIPS t9, ELFv2 r12) */
#if defined(__x86_64__)
#define UC_PC(u) (u)->uc_mcontext.gregs[REG_RIP]
#define UC_SP(u) (u)->uc_mcontext.gregs[REG_RSP]
#define UC_RET(u) (u)->uc_mcontext.gregs[REG_RAX]
#define CALL_BIAS 8 /* the call's return address below a 16-aligned SP */
#elif defined(__i386__)
#define UC_PC(u) (u)->uc_mcontext.gregs[REG_EIP]
#define UC_SP(u) (u)->uc_mcontext.gregs[REG_ESP]
#define UC_RET(u) (u)->uc_mcontext.gregs[REG_EAX]
#define CALL_BIAS 4
#elif defined(__aarch64__)
#define UC_PC(u) (u)->uc_mcontext.pc
#define UC_SP(u) (u)->uc_mcontext.sp
#define UC_RET(u) (u)->uc_mcontext.regs[0]
#elif defined(__arm__)
#define UC_PC(u) (u)->uc_mcontext.arm_pc
#define UC_SP(u) (u)->uc_mcontext.arm_sp
#define UC_RET(u) (u)->uc_mcontext.arm_r0
#define PC_OF(f) ((uintptr_t)(f) & ~(uintptr_t)1) /* the Thumb bit lives in cpsr */
#elif defined(__mips__)
#define UC_PC(u) (u)->uc_mcontext.pc
#define UC_SP(u) (u)->uc_mcontext.gregs[29]
#define UC_RET(u) (u)->uc_mcontext.gregs[2]
#define UC_CALLREG(u) (u)->uc_mcontext.gregs[25]
#elif defined(__riscv)
#define UC_PC(u) (u)->uc_mcontext.__gregs[REG_PC]
#define UC_SP(u) (u)->uc_mcontext.__gregs[REG_SP]
#define UC_RET(u) (u)->uc_mcontext.__gregs[REG_A0]
#elif defined(__powerpc64__)
#define UC_PC(u) (u)->uc_mcontext.gp_regs[32]
#define UC_SP(u) (u)->uc_mcontext.gp_regs[1]
#define UC_RET(u) (u)->uc_mcontext.gp_regs[3]
#define UC_CALLREG(u) (u)->uc_mcontext.gp_regs[12]
#elif defined(__powerpc__)
#define UC_PC(u) (u)->uc_mcontext.uc_regs->gregs[32]
#define UC_SP(u) (u)->uc_mcontext.uc_regs->gregs[1]
#define UC_RET(u) (u)->uc_mcontext.uc_regs->gregs[3]
#elif defined(__s390x__)
#define UC_PC(u) (u)->uc_mcontext.psw.addr
#define UC_SP(u) (u)->uc_mcontext.gregs[15]
#define UC_RET(u) (u)->uc_mcontext.gregs[2]
#elif defined(__m68k__)
/* glibc sys/ucontext.h (m68k): gregs d0-d7, a0-a7 (sp), pc, ps */
#define UC_PC(u) (u)->uc_mcontext.gregs[16]
#define UC_SP(u) (u)->uc_mcontext.gregs[15]
#define UC_RET(u) (u)->uc_mcontext.gregs[0]
#else
#error "unknown ISA"
#endif
#ifndef CALL_BIAS
#define CALL_BIAS 0
#endif
#ifndef PC_OF
#define PC_OF(f) ((uintptr_t)(f))
#endif

static volatile sig_atomic_t pc_in_syscall, sp_above, stack_seen;
static volatile uintptr_t seen_ss_sp, seen_ss_size;
static volatile int seen_ss_flags;
static char alt_stack[65536];

/* SIGUSR1 at the return of kill() made with syscall(): the handler checks the interrupted
 * PC lies in syscall() and the SP above its own frame, then changes the result to 42 */
static void on_usr1(int sig, siginfo_t *info, void *ucv)
{
    ucontext_t *uc = ucv;
    char here;
    (void)sig;
    (void)info;
    uintptr_t pc = UC_PC(uc), fn = PC_OF(syscall);
    pc_in_syscall = pc >= fn && pc < fn + 512;
    sp_above = (uintptr_t)UC_SP(uc) > (uintptr_t)&here
               && (uintptr_t)UC_SP(uc) - (uintptr_t)&here < 65536;
    UC_RET(uc) = 42;
}

/* SIGUSR2 handler: blocks SIGHUP for the interrupted program by its uc_sigmask */
static void on_usr2(int sig, siginfo_t *info, void *ucv)
{
    ucontext_t *uc = ucv;
    (void)sig;
    (void)info;
    sigaddset(&uc->uc_sigmask, SIGHUP);
    seen_ss_sp = (uintptr_t)uc->uc_stack.ss_sp;
    seen_ss_size = uc->uc_stack.ss_size;
    seen_ss_flags = uc->uc_stack.ss_flags;
    stack_seen = 1;
}

static sigjmp_buf back;
static volatile sig_atomic_t landed, handler_on_alt, interrupted_off_alt;
#define BAD_ADDRESS ((volatile int *)(uintptr_t)0x10)

static void landing(void)
{
    landed++;
    siglongjmp(back, 1);
}

/* SIGSEGV on the alternate stack: the PC moves to landing(), the SP below the fault's */
static void on_segv(int sig, siginfo_t *info, void *ucv)
{
    ucontext_t *uc = ucv;
    char here;
    (void)sig;
    (void)info;
    handler_on_alt = &here >= alt_stack && &here < alt_stack + sizeof alt_stack;
    uintptr_t sp = UC_SP(uc);
    interrupted_off_alt = sp < (uintptr_t)alt_stack || sp > (uintptr_t)alt_stack + sizeof alt_stack;
    UC_SP(uc) = ((sp - 512) & ~(uintptr_t)15) - CALL_BIAS;
    UC_PC(uc) = PC_OF(landing);
#ifdef UC_CALLREG
    UC_CALLREG(uc) = (uintptr_t)landing;
#endif
}

static volatile sig_atomic_t rang;

static void on_alarm(int sig)
{
    (void)sig;
    rang = 1;
}

/* a child stops itself with `sig` (default action: stop); the parent sees it stopped,
 * continues it with SIGCONT and sees it exit */
static void stopped_child(int sig)
{
    int st;
    pid_t pid = fork();
    if (pid == 0) {
        raise(sig);
        _exit(5);
    }
    waitpid(pid, &st, WUNTRACED);
    printf("%s: stopped=%d by %s", sigabbrev_np(sig), WIFSTOPPED(st),
           WIFSTOPPED(st) ? sigabbrev_np(WSTOPSIG(st)) : "-");
    kill(pid, SIGCONT);
    waitpid(pid, &st, 0);
    printf(", after SIGCONT exited=%d status=%d\n", WIFEXITED(st), WEXITSTATUS(st));
    fflush(stdout);
}

static void mask_has(const char *what, int sig)
{
    sigset_t now;
    sigprocmask(SIG_BLOCK, NULL, &now);
    printf("%s: %s blocked=%d\n", what, sigabbrev_np(sig), sigismember(&now, sig));
}

int main(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_flags = SA_SIGINFO;
    sa.sa_sigaction = on_usr1;
    sigaction(SIGUSR1, &sa, NULL);
    long r = syscall(SYS_kill, getpid(), SIGUSR1);
    printf("kill returned %ld (the handler's 42): pc in syscall()=%d sp above handler=%d\n",
           r, pc_in_syscall, sp_above);

    stack_t ss = {.ss_sp = alt_stack, .ss_size = sizeof alt_stack, .ss_flags = 0};
    sigaltstack(&ss, NULL);
    sa.sa_sigaction = on_usr2;
    sigaction(SIGUSR2, &sa, NULL);
    mask_has("before", SIGHUP);
    raise(SIGUSR2);
    mask_has("after the handler added it to uc_sigmask", SIGHUP);
    printf("uc_stack: seen=%d ss_sp ok=%d ss_size=%lu ss_flags=%d\n", stack_seen,
           seen_ss_sp == (uintptr_t)alt_stack, (unsigned long)seen_ss_size, seen_ss_flags);

    sa.sa_sigaction = on_segv;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigaction(SIGSEGV, &sa, NULL);
    for (int round = 0; round < 2; round++) {
        if (sigsetjmp(back, 1) == 0) {
            *BAD_ADDRESS = 1;
            printf("no fault\n");
        } else {
            printf("SIGSEGV %d: landed=%d handler on altstack=%d interrupted off it=%d\n",
                   round, landed, handler_on_alt, interrupted_off_alt);
        }
    }

    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alarm;
    sigaction(SIGALRM, &sa, NULL);
    alarm(1);
    unsigned long spins = 0;
    while (!rang) /* no system call: the signal arrives between blocks */
        spins++;
    printf("alarm interrupted a loop without system calls: rang=%d\n", rang);
    fflush(stdout);
    stopped_child(SIGSTOP);
    stopped_child(SIGTSTP);
    return 0;
}
