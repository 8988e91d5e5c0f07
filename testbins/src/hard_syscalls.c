/* hard_syscalls - system calls given hostile arguments: prints
 * each call's result and errno name, so a native run on an x86_64 Linux host is the oracle.
 * Needs a writable current directory (creates and removes hard_syscalls.tmp). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include "hard_show.h"

static char longpath[10000];

int main(void)
{
    const char *tmp = "hard_syscalls.tmp";
    int fd = open(tmp, O_CREAT | O_RDWR | O_TRUNC, 0644);
    show("open tmp", fd < 0 ? -1 : 0);
    show("write bad pointer", write(1, (void *)0xdead0000, 10));
    show("write 2^40 bad pointer", write(fd, (void *)0xdead0000, 1ULL << 40));
    show("lseek 5 GiB", lseek(fd, 5LL << 30, SEEK_SET));
    show("lseek bad whence", lseek(fd, 0, 99));
    show("lseek negative", lseek(fd, -10, SEEK_SET));
    show("ftruncate -1", ftruncate(fd, -1));
    static char small[16]; /* low in .bss: access_ok passes, natively and emulated */
    show("pread 2^40 at 0", pread(fd, small, 1ULL << 40, 0));
    struct iovec iov = {small, 1ULL << 40};
    lseek(fd, 0, SEEK_SET);
    show("readv 2^40", readv(fd, &iov, 1));
    memset(longpath, 'a', 9999);
    show("open 9999-byte path", open(longpath, O_RDONLY));
    sigset_t set;
    sigemptyset(&set);
    show("rt_sigprocmask sigsetsize 2^40",
         syscall(SYS_rt_sigprocmask, SIG_BLOCK, &set, NULL, 1ULL << 40));
    show("dup2 to -1", dup2(0, -1));
    show("fcntl F_DUPFD 2^62", syscall(SYS_fcntl, 0, F_DUPFD, 1ULL << 62));
    close(fd);
    unlink(tmp);
    /* SIGKILL and SIGSTOP cannot be blocked (signal(7)): the kernel drops them from any
     * new mask.  Raw system calls: glibc's wrapper filters its own internal signals. */
    sigset_t all, now;
    sigfillset(&all);
    syscall(SYS_rt_sigprocmask, SIG_SETMASK, &all, NULL, 8);
    syscall(SYS_rt_sigprocmask, SIG_SETMASK, NULL, &now, 8);
    show("SIGKILL blocked after blocking all", sigismember(&now, SIGKILL));
    show("SIGSTOP blocked after blocking all", sigismember(&now, SIGSTOP));
    show("SIGTERM blocked after blocking all", sigismember(&now, SIGTERM));
    sigemptyset(&all);
    syscall(SYS_rt_sigprocmask, SIG_SETMASK, &all, NULL, 8);
    signal(SIGUSR1, SIG_IGN);
    show("raise ignored SIGUSR1", raise(SIGUSR1));
    return 0;
}
