/* threads.c - POSIX threads under emutrace's scheduler.
 *
 * Three workers, created by main, wait on a condition variable until main
 * says go, then each adds its share to a total under a mutex (yielding
 * while it holds it, so that the others block on the mutex's futex) and
 * returns an exit code that main reads with pthread_join.  Before it lets
 * them go, main's timed wait on a condition variable nobody signals times
 * out.  A __thread variable checks that every thread has its own TLS.
 * `threads deadlock` instead makes two threads take two mutexes in opposite
 * orders: each waits for the other forever (emutrace ends such a run).
 * `threads pipe`: main reads a pipe that a thread it created writes.
 * `threads spin`: main spins, with no system call, until a thread it created
 * has counted to a million and set a flag (only preemption lets it finish).  stdout is the same on
 * every ISA and under qemu-user.
 *
 * The program records its own calls (compiled with -finstrument-functions;
 * the two hooks below are not instrumented): one line per event,
 *     "<tid> > 0x<function>\n"   on entry,   "<tid> < 0x<function>\n"   on exit,
 * appended to one buffer (an atomic index: threads never overwrite each
 * other) and written at exit, after main has returned (a destructor), to
 * $CALLTRACE_OUT, or to stderr when it is unset or empty.  Sorting the lines of each tid apart gives
 * each thread's own call sequence: the oracle of a traced run.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define NOINSTR __attribute__((no_instrument_function))
#define WORKERS 3

void __cyg_profile_func_enter(void *fn, void *site) NOINSTR;
void __cyg_profile_func_exit(void *fn, void *site) NOINSTR;

static char trace_buf[1 << 16];
static unsigned trace_len;

NOINSTR static void trace_line(char dir, void *fn)
{
    char line[48];
    char *p = line + sizeof line;
    uintptr_t v = (uintptr_t)fn;
    unsigned tid = (unsigned)gettid();
    *--p = '\n';
    do { *--p = "0123456789abcdef"[v & 15]; v >>= 4; } while (v);
    *--p = 'x'; *--p = '0'; *--p = ' '; *--p = dir; *--p = ' ';
    do { *--p = (char)('0' + tid % 10); tid /= 10; } while (tid);
    unsigned n = (unsigned)(line + sizeof line - p);
    unsigned at = __atomic_fetch_add(&trace_len, n, __ATOMIC_RELAXED);
    if (at + n <= sizeof trace_buf)
        memcpy(trace_buf + at, p, n);
}

void __cyg_profile_func_enter(void *fn, void *site) { (void)site; trace_line('>', fn); }
void __cyg_profile_func_exit(void *fn, void *site) { (void)site; trace_line('<', fn); }

__attribute__((destructor)) NOINSTR static void trace_flush(void)
{
    const char *path = getenv("CALLTRACE_OUT");
    int fd = path && path[0] ? open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644) : 2;
    unsigned len = trace_len < sizeof trace_buf ? trace_len : sizeof trace_buf;
    for (unsigned off = 0; fd >= 0 && off < len;) {
        ssize_t n = write(fd, trace_buf + off, len - off);
        if (n <= 0)
            break;
        off += (unsigned)n;
    }
}

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t go_cond = PTHREAD_COND_INITIALIZER;
static pthread_cond_t never_cond = PTHREAD_COND_INITIALIZER;
static int go, waiting;
static long total;
static __thread long mine;

static long work(int id)
{
    long sum = 0;
    for (int i = 1; i <= 100 * (id + 1); i++)
        sum += i % 7;
    return sum;
}

static void add(long value)
{
    pthread_mutex_lock(&lock);
    long before = total;
    sched_yield(); /* the others now block on the mutex */
    total = before + value;
    pthread_mutex_unlock(&lock);
}

static void wait_for_go(void)
{
    pthread_mutex_lock(&lock);
    waiting++;
    while (!go)
        pthread_cond_wait(&go_cond, &lock);
    pthread_mutex_unlock(&lock);
}

static void *worker(void *arg)
{
    int id = (int)(intptr_t)arg;
    mine = id;
    wait_for_go();
    add(work(id));
    if (mine != id)
        return (void *)(intptr_t)99; /* TLS shared with another thread */
    return (void *)(intptr_t)(10 * id + 1);
}

static pthread_mutex_t first = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t second = PTHREAD_MUTEX_INITIALIZER;

static int second_taken;

static void *take_in_other_order(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&second);
    __atomic_store_n(&second_taken, 1, __ATOMIC_SEQ_CST);
    pthread_mutex_lock(&first);
    return NULL;
}

static int deadlock(void)
{
    pthread_t other;
    pthread_mutex_lock(&first);
    pthread_create(&other, NULL, take_in_other_order, NULL);
    while (!__atomic_load_n(&second_taken, __ATOMIC_SEQ_CST))
        sched_yield();
    pthread_mutex_lock(&second);
    printf("no deadlock\n");
    return 1;
}

static int pipe_fds[2];

static void *writer(void *arg)
{
    (void)arg;
    sched_yield();
    if (write(pipe_fds[1], "through the pipe", 16) != 16)
        return (void *)1;
    return NULL;
}

static int read_pipe(void)
{
    pthread_t other;
    char buf[32];
    if (pipe(pipe_fds) != 0 || pthread_create(&other, NULL, writer, NULL) != 0)
        return 1;
    ssize_t n = read(pipe_fds[0], buf, sizeof buf); /* empty until the thread writes */
    void *code;
    pthread_join(other, &code);
    printf("read %d bytes: %.*s; writer exit %ld\n", (int)n, (int)(n > 0 ? n : 0), buf,
           (long)(intptr_t)code);
    return 0;
}

static int spun;

static void *counter(void *arg)
{
    volatile long n = 0;
    (void)arg;
    while (n < 1000000)
        n++;
    __atomic_store_n(&spun, 1, __ATOMIC_SEQ_CST);
    return (void *)(intptr_t)(n / 1000);
}

static int spin(void)
{
    pthread_t other;
    void *code;
    long rounds = 0;
    if (pthread_create(&other, NULL, counter, NULL) != 0)
        return 1;
    while (!__atomic_load_n(&spun, __ATOMIC_SEQ_CST))
        rounds++;
    pthread_join(other, &code);
    printf("spun until the flag; counter exit %ld\n", (long)(intptr_t)code);
    return rounds > 0 ? 0 : 2;
}

int main(int argc, char **argv)
{
    pthread_t t[WORKERS];
    if (argc > 1 && strcmp(argv[1], "deadlock") == 0)
        return deadlock();
    if (argc > 1 && strcmp(argv[1], "pipe") == 0)
        return read_pipe();
    if (argc > 1 && strcmp(argv[1], "spin") == 0)
        return spin();
    mine = 42;
    for (int i = 0; i < WORKERS; i++)
        if (pthread_create(&t[i], NULL, worker, (void *)(intptr_t)i) != 0) {
            printf("pthread_create failed\n");
            return 1;
        }
    for (;;) { /* until every worker waits on the condition variable */
        pthread_mutex_lock(&lock);
        int all = waiting == WORKERS;
        if (all) {
            /* every worker waits: a timed wait that nobody ends times out */
            struct timespec until;
            clock_gettime(CLOCK_REALTIME, &until);
            until.tv_nsec += 2000000;
            if (until.tv_nsec >= 1000000000) {
                until.tv_sec++;
                until.tv_nsec -= 1000000000;
            }
            int rc = pthread_cond_timedwait(&never_cond, &lock, &until);
            printf("timedwait %s\n", rc == ETIMEDOUT ? "ETIMEDOUT" : "did not time out");
            go = 1;
            pthread_cond_broadcast(&go_cond);
        }
        pthread_mutex_unlock(&lock);
        if (all)
            break;
        sched_yield();
    }
    for (int i = 0; i < WORKERS; i++) {
        void *code;
        pthread_join(t[i], &code);
        printf("thread %d exit %ld\n", i, (long)(intptr_t)code);
    }
    printf("total=%ld main tls=%ld\n", total, mine);
    return 0;
}
