/* hard_confine - the confinement suite's guest, run the same way natively and under
 * emulation (tests/test_confine_suite.py): with raw system calls it tries what a process in a
 * sandbox must not manage, and what it must, and prints one "what = ret [ERRNO]" line per
 * try (hard_show.h):
 *
 *   - writes to a canary file outside the writable directory (open, truncate, rename over it)
 *   - signals and ptrace-attaches a host process, reads its /proc entry
 *   - a directory descriptor and the current directory follow their directory through a
 *     rename (openat and a relative open land in the new name, getcwd says it)
 *   - leaves a child behind that writes WRITABLE/orphan after the parent has exited
 *
 * usage: hard_confine WRITABLE_DIR CANARY HOST_PID   (run with WRITABLE_DIR as the cwd) */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "hard_show.h"

static long sys(long nr, long a, long b, long c, long d)
{
    return syscall(nr, a, b, c, d);
}

static void escapes(const char *canary, long host)
{
    char path[64];
    show("open canary for writing", sys(SYS_open, (long)canary, O_WRONLY | O_APPEND, 0, 0));
    show("truncate canary", sys(SYS_truncate, (long)canary, 0, 0, 0));
    show("rename over canary", sys(SYS_rename, (long)"mine", (long)canary, 0, 0));
    show("kill host", sys(SYS_kill, host, 0, 0, 0));
    show("ptrace attach host", sys(SYS_ptrace, PTRACE_ATTACH, host, 0, 0));
    snprintf(path, sizeof path, "/proc/%ld/status", host);
    show("open host /proc entry", sys(SYS_open, (long)path, O_RDONLY, 0, 0));
}

/* `d` is opened and entered, then renamed to `e`: both descriptors name the directory, not
 * its old path (Linux: a struct path, fs/namei.c) */
static void renamed_directory(void)
{
    char cwd[4096];
    sys(SYS_mkdir, (long)"d", 0755, 0, 0);
    long dirfd = sys(SYS_open, (long)"d", O_RDONLY | O_DIRECTORY, 0, 0);
    show("open d", dirfd < 0 ? dirfd : 0);
    show("chdir d", sys(SYS_chdir, (long)"d", 0, 0, 0));
    show("rename d to e", sys(SYS_rename, (long)"../d", (long)"../e", 0, 0));
    long fd = sys(SYS_openat, dirfd, (long)"by-dirfd", O_WRONLY | O_CREAT | O_EXCL, 0644);
    show("openat dirfd after rename", fd < 0 ? fd : 0);
    fd = sys(SYS_open, (long)"by-cwd", O_WRONLY | O_CREAT | O_EXCL, 0644, 0);
    show("open in cwd after rename", fd < 0 ? fd : 0);
    long n = sys(SYS_getcwd, (long)cwd, sizeof cwd, 0, 0);
    const char *last = strrchr(cwd, '/');
    show("getcwd names e", n > 0 && last && strcmp(last, "/e") == 0);
    struct stat st;
    show("e/by-dirfd exists", sys(SYS_stat, (long)"../e/by-dirfd", (long)&st, 0, 0));
    show("e/by-cwd exists", sys(SYS_stat, (long)"../e/by-cwd", (long)&st, 0, 0));
    show("fchdir dirfd", sys(SYS_fchdir, dirfd, 0, 0, 0));
    n = sys(SYS_getcwd, (long)cwd, sizeof cwd, 0, 0);
    last = strrchr(cwd, '/');
    show("getcwd after fchdir names e", n > 0 && last && strcmp(last, "/e") == 0);
    sys(SYS_chdir, (long)"..", 0, 0, 0);
}

/* the child outlives its parent, which exits normally: it is reparented and runs on
 * (Linux: exit(2), "the process's children are inherited by init or a subreaper") */
static void orphan(void)
{
    long child = sys(SYS_fork, 0, 0, 0, 0);
    if (child == 0) {
        struct timespec pause_for = {0, 300 * 1000 * 1000};
        sys(SYS_nanosleep, (long)&pause_for, 0, 0, 0);
        long fd = sys(SYS_open, (long)"orphan", O_WRONLY | O_CREAT | O_TRUNC, 0644, 0);
        sys(SYS_write, fd, (long)"ran on\n", 7, 0);
        sys(SYS_exit_group, 0, 0, 0, 0);
    }
    show("fork orphan", child > 0 ? 1 : child);
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: hard_confine WRITABLE_DIR CANARY HOST_PID\n");
        return 2;
    }
    if (chdir(argv[1]) != 0)
        return 2;
    long fd = sys(SYS_open, (long)"mine", O_WRONLY | O_CREAT | O_TRUNC, 0644, 0);
    show("create in writable", fd < 0 ? fd : 0);
    escapes(argv[2], atol(argv[3]));
    renamed_directory();
    orphan();
    return 0;
}
