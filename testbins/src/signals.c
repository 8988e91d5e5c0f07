/* signals: signal handlers and process signals, each step printed, for comparison with
 * qemu-user on every ISA: a handler run by raise/kill, SA_SIGINFO's
 * siginfo, blocking and sigpending, SA_RESETHAND, sigsuspend woken by SIGCHLD from a child,
 * alarm + pause, a child killed by SIGPIPE and by kill(), the handler's return to where
 * the program was (locals intact). */
#define _GNU_SOURCE
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static volatile sig_atomic_t hits, last, info_signo, chld;

static void on_signal(int sig)
{
    hits++;
    last = sig;
}

static void on_info(int sig, siginfo_t *info, void *uc)
{
    (void)uc;
    hits++;
    last = sig;
    info_signo = info->si_signo;
}

static void on_chld(int sig)
{
    (void)sig;
    chld++;
}

#define BAD_ADDRESS ((volatile int *)(uintptr_t)0x10)
static sigjmp_buf recover;
static volatile sig_atomic_t fault_addr_ok, on_alt;
static char alt_stack[65536];

static void on_segv(int sig, siginfo_t *info, void *uc)
{
    (void)uc;
    char here;
    fault_addr_ok = sig == SIGSEGV && info->si_addr == (void *)BAD_ADDRESS;
    on_alt = &here >= alt_stack && &here < alt_stack + sizeof alt_stack;
    siglongjmp(recover, 1);
}

static void status(const char *what, int st)
{
    if (WIFEXITED(st))
        printf("%s: exited %d\n", what, WEXITSTATUS(st));
    else if (WIFSIGNALED(st))
        printf("%s: killed by %s\n", what, sigabbrev_np(WTERMSIG(st)));
    fflush(stdout);
}

int main(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGUSR1, &sa, NULL);
    long before = 12345;
    raise(SIGUSR1);
    printf("raise: hits=%d last=%s local=%ld\n", hits, sigabbrev_np(last), before);
    kill(getpid(), SIGUSR1);
    printf("kill: hits=%d\n", hits);

    sa.sa_sigaction = on_info;
    sa.sa_flags = SA_SIGINFO;
    sigaction(SIGUSR2, &sa, NULL);
    raise(SIGUSR2);
    printf("siginfo: signo=%s\n", sigabbrev_np(info_signo));

    sigset_t block, pending, old;
    sigemptyset(&block);
    sigaddset(&block, SIGUSR1);
    sigprocmask(SIG_BLOCK, &block, &old);
    raise(SIGUSR1);
    sigpending(&pending);
    printf("blocked: hits=%d pending=%d\n", hits, sigismember(&pending, SIGUSR1));
    sigprocmask(SIG_SETMASK, &old, NULL);
    printf("unblocked: hits=%d\n", hits);

    struct sigaction got;
    sa.sa_handler = on_signal;
    sa.sa_flags = SA_RESETHAND;
    sigaction(SIGHUP, &sa, NULL);
    raise(SIGHUP);
    sigaction(SIGHUP, NULL, &got);
    printf("resethand: hits=%d now default=%d\n", hits, got.sa_handler == SIG_DFL);

    sa.sa_handler = on_chld;
    sa.sa_flags = 0;
    sigaction(SIGCHLD, &sa, NULL);
    sigprocmask(SIG_BLOCK, &(sigset_t){0}, &old);
    sigset_t chldmask;
    sigemptyset(&chldmask);
    sigaddset(&chldmask, SIGCHLD);
    sigprocmask(SIG_BLOCK, &chldmask, &old);
    pid_t pid = fork();
    if (pid == 0)
        _exit(7);
    while (!chld)
        sigsuspend(&old);
    sigprocmask(SIG_SETMASK, &old, NULL);
    int st;
    waitpid(pid, &st, 0);
    printf("sigsuspend: chld=%d\n", chld);
    status("child", st);

    sa.sa_handler = on_signal;
    sigaction(SIGALRM, &sa, NULL);
    alarm(1);
    pause();
    printf("alarm: last=%s\n", sigabbrev_np(last));

    int p[2];
    pipe(p);
    close(p[0]); /* before the fork: nobody can read, whoever runs first */
    pid = fork();
    if (pid == 0) {
        signal(SIGPIPE, SIG_DFL);
        write(p[1], "x", 1);
        _exit(0);
    }
    close(p[1]);
    waitpid(pid, &st, 0);
    status("writer to a closed pipe", st);

    pid = fork();
    if (pid == 0) {
        pause();
        _exit(0);
    }
    kill(pid, SIGTERM);
    waitpid(pid, &st, 0);
    status("paused child", st);

    siginfo_t si;
    pid = fork();
    if (pid == 0)
        _exit(3);
    memset(&si, 0xff, sizeof si);
    printf("waitid = %d", waitid(P_PID, pid, &si, WEXITED));
    printf(" signo=%s code=%s status=%d pid ok=%d\n", sigabbrev_np(si.si_signo),
           si.si_code == CLD_EXITED ? "CLD_EXITED" : "?", si.si_status, si.si_pid == pid);
    pid = fork();
    if (pid == 0) {
        signal(SIGUSR1, SIG_DFL);
        raise(SIGUSR1);
        _exit(0);
    }
    printf("waitid = %d", waitid(P_ALL, 0, &si, WEXITED));
    printf(" code=%s status=%s\n", si.si_code == CLD_KILLED ? "CLD_KILLED" : "?",
           sigabbrev_np(si.si_status));
    memset(&si, 0xff, sizeof si);
    int rc = waitid(P_ALL, 0, &si, WEXITED | WNOHANG);
    printf("waitid no child = %d %s\n", rc, strerrorname_np(errno));

    stack_t ss = {.ss_sp = alt_stack, .ss_size = sizeof alt_stack, .ss_flags = 0};
    printf("sigaltstack = %d\n", sigaltstack(&ss, NULL));
    sa.sa_sigaction = on_segv;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGSEGV, &sa, NULL);
    for (int round = 0; round < 2; round++) {
        if (sigsetjmp(recover, 1) == 0) {
            *BAD_ADDRESS = 1;
            printf("no fault\n");
        } else {
            printf("recovered from SIGSEGV %d: si_addr ok=%d on altstack=%d\n", round,
                   fault_addr_ok, on_alt);
        }
    }

    signal(SIGUSR1, SIG_DFL);
    fflush(stdout);
    raise(SIGUSR1);
    printf("not reached\n");
    return 0;
}
