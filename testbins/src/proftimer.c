/* proftimer: the CPU-time interval timers.  `proftimer prof` arms ITIMER_PROF (SIGPROF),
 * `proftimer virtual` ITIMER_VIRTUAL (SIGVTALRM), both with a 10 ms value and interval,
 * and spins without a system call until the handler has run three times; then it reads
 * the timer back (getitimer, and the old value setitimer returns when it disarms it) and
 * prints what a correct timer shows whatever the machine's speed. */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

static volatile sig_atomic_t ticks;

static void on_tick(int sig) {
    (void)sig;
    ticks++;
}

/* `proftimer exec`: both timers armed at 10 s, then execve of the program itself with
 * `after`, which reads them: execve(2) keeps the interval timers */
static int exec_kept(char **argv) {
    struct itimerval on = {{0, 20000}, {10, 0}}, now;
    if (strcmp(argv[1], "exec") == 0) {
        setitimer(ITIMER_PROF, &on, NULL);
        setitimer(ITIMER_VIRTUAL, &on, NULL);
        execl("/proc/self/exe", argv[0], "after", (char *)NULL);
        perror("execl");
        return 1;
    }
    for (int which = ITIMER_VIRTUAL; which <= ITIMER_PROF; which++) {
        getitimer(which, &now);
        printf("after exec %s: interval=%ldus running=%d\n",
               which == ITIMER_PROF ? "prof" : "virtual", (long)now.it_interval.tv_usec,
               now.it_value.tv_sec > 0 && now.it_value.tv_sec <= 10);
    }
    return 0;
}

/* `proftimer fork`: ITIMER_PROF armed at 10 s, then fork: the child's timer is disarmed
 * (fork(2)), the parent's still runs */
static int fork_drops(void) {
    struct itimerval on = {{0, 20000}, {10, 0}}, now;
    setitimer(ITIMER_PROF, &on, NULL);
    fflush(stdout);
    pid_t pid = fork();
    getitimer(ITIMER_PROF, &now);
    printf("%s: interval=%ldus running=%d\n", pid == 0 ? "child" : "parent",
           (long)now.it_interval.tv_usec, now.it_value.tv_sec > 0 || now.it_value.tv_usec > 0);
    if (pid == 0)
        return 0;
    int status;
    waitpid(pid, &status, 0);
    return 0;
}

int main(int argc, char **argv) {
    if (argc > 1 && (strcmp(argv[1], "exec") == 0 || strcmp(argv[1], "after") == 0))
        return exec_kept(argv);
    if (argc > 1 && strcmp(argv[1], "fork") == 0)
        return fork_drops();
    int prof = !(argc > 1 && strcmp(argv[1], "virtual") == 0);
    int which = prof ? ITIMER_PROF : ITIMER_VIRTUAL;
    int sig = prof ? SIGPROF : SIGVTALRM;
    const char *name = prof ? "prof" : "virtual";
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_tick;
    sigaction(sig, &sa, NULL);

    struct itimerval on = {{0, 10000}, {0, 10000}}, now, old, off;
    memset(&off, 0, sizeof off);
    if (setitimer(which, &on, NULL) != 0) {
        perror("setitimer");
        return 1;
    }
    if (getitimer(which, &now) != 0) {
        perror("getitimer");
        return 1;
    }
    /* the value left: running, under a second (Linux rounds it to its tick: 10 to 14 ms) */
    printf("%s: armed interval=%ldus running=%d\n", name, (long)now.it_interval.tv_usec,
           now.it_value.tv_sec == 0 && now.it_value.tv_usec > 0);
    volatile unsigned long spins = 0;
    while (ticks < 3)
        spins++;
    setitimer(which, &off, &old);
    printf("%s: ticks>=3 old_interval=%ldus\n", name, (long)old.it_interval.tv_usec);
    getitimer(which, &now);
    printf("%s: disarmed value=%ld.%06ld\n", name, (long)now.it_value.tv_sec,
           (long)now.it_value.tv_usec);
    return 0;
}
