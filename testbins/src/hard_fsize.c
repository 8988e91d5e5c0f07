/* hard_fsize - RLIMIT_FSIZE: a write that would pass the limit is cut at it, one at the
 * limit is EFBIG with SIGXFSZ (ignored, then caught, then the default action ends the
 * process: exit by signal 25); ftruncate past it likewise; the limit is kept across
 * execve (the program runs itself again with an argument).  Prints each result and errno
 * name, so a native run on an x86_64 Linux host is the oracle.  Needs a writable current
 * directory (creates and removes hard_fsize.tmp). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "hard_show.h"

static volatile sig_atomic_t caught;

static void on_xfsz(int sig)
{
    caught = sig;
}

int main(int argc, char **argv)
{
    struct rlimit lim;
    if (argc > 1) {  /* after execve */
        getrlimit(RLIMIT_FSIZE, &lim);
        show("limit kept across execve", (long)lim.rlim_cur);
        int fd = open("hard_fsize.tmp", O_WRONLY | O_APPEND);
        signal(SIGXFSZ, SIG_DFL);
        show("write at the limit, default action", write(fd, "z", 1));
        return 0;  /* not reached */
    }
    lim.rlim_cur = 10;
    lim.rlim_max = RLIM_INFINITY;
    show("setrlimit", setrlimit(RLIMIT_FSIZE, &lim));
    show("soft > hard", setrlimit(RLIMIT_FSIZE, &(struct rlimit){20, 10}));
    getrlimit(RLIMIT_FSIZE, &lim);
    show("getrlimit", (long)lim.rlim_cur);
    int fd = open("hard_fsize.tmp", O_CREAT | O_WRONLY | O_TRUNC, 0644);
    signal(SIGXFSZ, SIG_IGN);
    show("write 16 under a limit of 10", write(fd, "0123456789abcdef", 16));
    show("write at the limit, ignored", write(fd, "x", 1));
    show("pwrite before it", pwrite(fd, "AB", 2, 8));
    show("pwrite across it", pwrite(fd, "CDE", 3, 9));
    show("ftruncate past it", ftruncate(fd, 11));
    show("ftruncate below it", ftruncate(fd, 5));
    signal(SIGXFSZ, on_xfsz);
    lseek(fd, 10, SEEK_SET);
    show("write at the limit, caught", write(fd, "y", 1));
    show("handler ran with", caught);
    show("ftruncate to the limit", ftruncate(fd, 10));
    close(fd);
    execl("/proc/self/exe", argv[0], "again", (char *)NULL);
    show("execl", -1);
    return 1;
}
