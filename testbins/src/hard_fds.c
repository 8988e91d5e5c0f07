/* hard_fds - a program that uses up its descriptors: opens /dev/null until EMFILE (as
 * many as RLIMIT_NOFILE allows), then pipe, fork (the child prints and exits), dup2 and
 * F_DUPFD at the limit, and a close that lets pipe work again.  Prints each result and
 * errno name, so a native run on an x86_64 Linux host is the oracle. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "hard_show.h"

int main(void)
{
    struct rlimit lim;
    int fds[2], last = -1, fd;
    long opened = 0;
    getrlimit(RLIMIT_NOFILE, &lim);
    while ((fd = open("/dev/null", O_RDONLY)) >= 0) {
        last = fd;
        opened++;
    }
    show("open at the limit", fd);
    show("all numbers below the limit used", opened + 3 == (long)lim.rlim_cur);
    show("last is limit - 1", last == (long)lim.rlim_cur - 1);
    show("pipe", pipe(fds));
    show("dup2 to the limit", dup2(0, (int)lim.rlim_cur));
    show("F_DUPFD from the limit", fcntl(0, F_DUPFD, (int)lim.rlim_cur));
    pid_t child = fork();
    if (child == 0) {
        show("in the child", 0);
        _exit(3);
    }
    int status = 0;
    waitpid(child, &status, 0);
    show("child status", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    close(last);
    close(last - 1);
    show("pipe after two closes", pipe(fds));
    return 0;
}
