/* threadwait.c - a blocking system call blocks only its own thread.
 *
 * 1. Thread A poll()s a pipe that thread B writes after some computation,
 *    then select()s a second pipe that B writes after more computation; then
 *    a poll with a 5 ms timeout of a pipe nobody writes times out.
 * 2. The main thread wait4()s a forked child that exits only after it has
 *    read a byte that thread C writes after its own computation (so the
 *    child can end only if C runs while main waits); then waitid()s a second
 *    child the same way.
 * 3. Thread D writes 200000 bytes to a pipe in one write() (three times the
 *    pipe's capacity: the write blocks on the full pipe) that main reads.
 * `threadwait sleep` instead: thread S nanosleep()s 2 ms, then sets a flag that
 *    main spins on with no system call (S must wake while main still runs).
 * Every line is printed by one thread after the event that orders it (a
 * poll's return, a join, a wait), so stdout is the same on every ISA and
 * under qemu-user, where the threads truly run at once.  No wall-clock value
 * is printed.  Exit status 0 when every step went as Linux does it.
 */
#define _GNU_SOURCE
#include <malloc.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/select.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static int ping[2], pong[2], silent[2], feed[2], bulk[2];

#define BULK 200000
static unsigned char bulk_out[BULK], bulk_in[4096];

static long compute(long rounds)
{
    volatile long sum = 0;
    for (long i = 1; i <= rounds; i++)
        sum += i % 13;
    return sum;
}

static void *poller(void *arg)
{
    (void)arg;
    struct pollfd one = { .fd = ping[0], .events = POLLIN };
    int n = poll(&one, 1, -1); /* empty until B writes */
    char buf[16];
    ssize_t got = read(ping[0], buf, sizeof buf);
    printf("A: poll returned %d, revents %s, read %d bytes: %.*s\n", n,
           one.revents == POLLIN ? "POLLIN" : "other", (int)got,
           (int)(got > 0 ? got : 0), buf);

    fd_set readable;
    FD_ZERO(&readable);
    FD_SET(pong[0], &readable);
    struct timeval ten = { .tv_sec = 10, .tv_usec = 0 };
    n = select(pong[0] + 1, &readable, NULL, NULL, &ten); /* empty until B writes */
    got = read(pong[0], buf, sizeof buf);
    printf("A: select returned %d, pong %s, read %d bytes: %.*s\n", n,
           FD_ISSET(pong[0], &readable) ? "set" : "clear", (int)got,
           (int)(got > 0 ? got : 0), buf);
    struct pollfd quiet = { .fd = silent[0], .events = POLLIN };
    n = poll(&quiet, 1, 5); /* nobody writes this pipe: times out */
    printf("A: poll of the silent pipe returned %d, revents %#x\n", n, quiet.revents);

    return (void *)(intptr_t)1;
}

static void *writer(void *arg)
{
    (void)arg;
    long first = compute(500);
    if (write(ping[1], "ping", 4) != 4)
        return (void *)(intptr_t)90;
    long second = compute(800);
    if (write(pong[1], "pong", 4) != 4)
        return (void *)(intptr_t)91;
    return (void *)(intptr_t)(first + second == 7771 ? 2 : 92);
}

static void *feeder(void *arg)
{
    long rounds = (long)(intptr_t)arg;
    long sum = compute(rounds);
    char byte = (char)(sum % 100);
    printf("C: computed %ld while main waits\n", sum);
    fflush(stdout);
    if (write(feed[1], &byte, 1) != 1)
        return (void *)(intptr_t)93;
    return (void *)(intptr_t)3;
}

static void *bulk_writer(void *arg)
{
    (void)arg;
    memset(bulk_out, 'b', BULK - 1);
    bulk_out[BULK - 1] = 'e';
    ssize_t n = write(bulk[1], bulk_out, BULK); /* blocks until main has read enough */
    close(bulk[1]);
    return (void *)(intptr_t)(n == BULK ? 4 : 94);
}

static int woke;

static void *sleeper(void *arg)
{
    (void)arg;
    struct timespec two_ms = { .tv_sec = 0, .tv_nsec = 2000000 };
    int rc = nanosleep(&two_ms, NULL);
    __atomic_store_n(&woke, 1, __ATOMIC_SEQ_CST);
    return (void *)(intptr_t)(rc == 0 ? 5 : 95);
}

static int sleep_while_main_spins(void)
{
    pthread_t s;
    void *code;
    long rounds = 0;
    if (pthread_create(&s, NULL, sleeper, NULL))
        return 1;
    while (!__atomic_load_n(&woke, __ATOMIC_SEQ_CST))
        rounds++;
    pthread_join(s, &code);
    printf("main: spun until the sleeper woke; sleeper exit %ld\n", (long)(intptr_t)code);
    return rounds > 0 ? 0 : 2;
}

static pid_t child_reading_feed(void)
{
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        char byte = 0;
        if (read(feed[0], &byte, 1) != 1) /* until thread C writes */
            _exit(99);
        _exit(byte);
    }
    return pid;
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "sleep") == 0)
        return sleep_while_main_spins();
    pthread_t a, b, c;
    pthread_attr_t small; /* 256 KiB stacks: less for an emulator to map and unmap */
    void *code;
    mallopt(M_ARENA_MAX, 1); /* no 64 MiB arena per thread: the same, mapped once */
    if (pthread_attr_init(&small) || pthread_attr_setstacksize(&small, 256 * 1024))
        return 1;
    if (pipe(ping) || pipe(pong) || pipe(silent) || pipe(feed) || pipe(bulk))
        return 1;

    if (pthread_create(&a, &small, poller, NULL) || pthread_create(&b, &small, writer, NULL))
        return 1;
    pthread_join(a, &code);
    printf("main: poller exit %ld\n", (long)(intptr_t)code);
    pthread_join(b, &code);
    printf("main: writer exit %ld\n", (long)(intptr_t)code);

    pid_t pid = child_reading_feed();
    if (pid < 0 || pthread_create(&c, &small, feeder, (void *)(intptr_t)1000))
        return 1;
    int status = 0;
    pid_t done = wait4(pid, &status, 0, NULL);
    printf("main: wait4 %s, exited %d, status %d\n", done == pid ? "got the child" : "failed",
           WIFEXITED(status), WEXITSTATUS(status));
    pthread_join(c, &code);
    printf("main: feeder exit %ld\n", (long)(intptr_t)code);

    pid = child_reading_feed();
    if (pid < 0 || pthread_create(&c, &small, feeder, (void *)(intptr_t)1200))
        return 1;
    siginfo_t info;
    memset(&info, 0, sizeof info);
    int rc = waitid(P_PID, (id_t)pid, &info, WEXITED);
    printf("main: waitid %d, %s, code %s, status %d\n", rc,
           info.si_pid == pid ? "got the child" : "other pid",
           info.si_code == CLD_EXITED ? "CLD_EXITED" : "other", info.si_status);
    pthread_join(c, &code);
    printf("main: feeder exit %ld\n", (long)(intptr_t)code);

    pthread_t d;
    if (pthread_create(&d, &small, bulk_writer, NULL))
        return 1;
    long total = 0;
    char last = 0;
    ssize_t got;
    while ((got = read(bulk[0], bulk_in, sizeof bulk_in)) > 0) { /* until D closes */
        total += got;
        last = (char)bulk_in[got - 1];
    }
    pthread_join(d, &code);
    printf("main: read %ld bytes through a full pipe, the last %c; bulk writer exit %ld\n",
           total, last, (long)(intptr_t)code);
    return 0;
}
