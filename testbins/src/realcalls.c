/* realcalls: the system calls real programs (shells, coreutils) make beyond the C start-up,
 * each printed with its result and errno name, so that a run under emutrace can be compared
 * line by line with qemu-user.  Run it in a directory it may write to,
 * with stdin not a terminal and no controlling terminal (a new session). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysinfo.h>
#include <sys/times.h>
#include <sys/xattr.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

static void show(const char *what, long rc)
{
    if (rc < 0)
        printf("%s = %ld %s\n", what, rc, strerrorname_np(errno));
    else
        printf("%s = %ld\n", what, rc);
    fflush(stdout);
}

static void machine(void)
{
    struct sysinfo si;
    struct rusage ru;
    struct tms t;
    show("sysinfo", sysinfo(&si));
    unsigned long long ram = (unsigned long long)si.totalram * si.mem_unit;
    printf("sysinfo sane = %d\n", si.mem_unit && !(si.mem_unit & (si.mem_unit - 1))
           && ram > (1ull << 24) && si.freeram <= si.totalram && si.procs > 0);
    show("getrusage self", getrusage(RUSAGE_SELF, &ru));
    printf("rusage sane = %d\n", ru.ru_utime.tv_usec < 1000000 && ru.ru_maxrss >= 0);
    show("getrusage children", getrusage(RUSAGE_CHILDREN, &ru));
    show("getrusage 99", getrusage(99, &ru));
    clock_t c = times(&t);
    printf("times sane = %d\n", c != (clock_t)-1 && t.tms_cutime == 0);
    struct rlimit rl;
    show("getrlimit nofile", getrlimit(RLIMIT_NOFILE, &rl));
    printf("rlimit sane = %d\n", rl.rlim_cur <= rl.rlim_max && rl.rlim_cur > 2);
    show("prlimit other pid", prlimit(1, RLIMIT_NOFILE, NULL, &rl));
}

static void groups(void)
{
    pid_t pid = getpid();
    printf("getpgid(0) == getpgrp() = %d\n", getpgid(0) == getpgrp());
    printf("getsid(0) > 0 = %d\n", getsid(0) > 0);
    show("setpgid(0, 0)", setpgid(0, 0));
    printf("leader = %d\n", getpgrp() == pid && getpgid(pid) == pid);
    show("setsid as group leader", setsid());
    show("getpgid(-1)", getpgid(-1));
}

static void descriptors(void)
{
    struct sockaddr_storage sa;
    socklen_t len = sizeof sa;
    show("getpeername(0)", getpeername(0, (struct sockaddr *)&sa, &len));
    show("getsockname(1)", getsockname(1, (struct sockaddr *)&sa, &len));
    show("getpeername(99)", getpeername(99, (struct sockaddr *)&sa, &len));
    show("shutdown(0)", shutdown(0, SHUT_RDWR));
    struct termios tio;
    show("tcgetattr(0)", tcgetattr(0, &tio));
    show("open /dev/tty", open("/dev/tty", O_RDWR));
    int fd = open("xattr_file", O_CREAT | O_WRONLY | O_TRUNC, 0644);
    show("write", write(fd, "twelve bytes", 12));
    close(fd);
    char value[64];
    show("lgetxattr missing", lgetxattr("xattr_file", "user.none", value, sizeof value));
    show("getxattr missing file", getxattr("no_such_file", "user.none", value, sizeof value));
    struct statx stx;
    show("statx", statx(AT_FDCWD, "xattr_file", 0, STATX_BASIC_STATS, &stx));
    printf("statx size = %llu regular = %d\n", (unsigned long long)stx.stx_size,
           S_ISREG(stx.stx_mode));
}

static void waiting(void)
{
    int p[2];
    show("pipe", pipe(p));
    struct pollfd fds[3] = {{p[0], POLLIN, 0}, {99, POLLIN, 0}, {-1, POLLIN, 0}};
    show("poll empty", poll(fds, 3, 10));
    printf("revents = %#x %#x %#x\n", fds[0].revents, fds[1].revents, fds[2].revents);
    show("write", write(p[1], "x", 1));
    show("poll ready", poll(fds, 1, -1));
    printf("revents = %#x\n", fds[0].revents);
    struct timespec zero = {0, 0};
    show("ppoll ready", ppoll(fds, 1, &zero, NULL));
    fd_set r;
    FD_ZERO(&r);
    FD_SET(p[0], &r);
    struct timeval tv = {0, 1000};
    show("select ready", select(p[0] + 1, &r, NULL, NULL, &tv));
    printf("isset = %d\n", FD_ISSET(p[0], &r));
    char c;
    show("read", read(p[0], &c, 1));
    FD_ZERO(&r);
    FD_SET(p[0], &r);
    tv.tv_usec = 1000;
    show("select empty", select(p[0] + 1, &r, NULL, NULL, &tv));
    FD_ZERO(&r);
    FD_SET(p[0], &r);
    show("pselect empty", pselect(p[0] + 1, &r, NULL, NULL, &zero, NULL));
    FD_ZERO(&r);
    FD_SET(40, &r);
    show("select bad fd", select(41, &r, NULL, NULL, &tv));
    close(p[1]);
    show("poll hung up", poll(fds, 1, 0));
    printf("revents = %#x\n", fds[0].revents);
    struct timespec ms = {0, 1000000}, now;
    show("nanosleep", nanosleep(&ms, NULL));
    clock_gettime(CLOCK_MONOTONIC, &now);
    now.tv_nsec += 1000000;
    if (now.tv_nsec >= 1000000000) {
        now.tv_sec++;
        now.tv_nsec -= 1000000000;
    }
    show("clock_nanosleep abs", clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &now, NULL));
}

int main(void)
{
    machine();
    groups();
    descriptors();
    waiting();
    return 0;
}
