/* hard_sandbox - a hostile guest for the native target's kernel sandbox: it first installs
 * a seccomp filter of its own that answers SECCOMP_RET_TRACE with data 1 for every call
 * (filters run newest first and the first action of the highest precedence wins, with its
 * data: seccomp(2), so the tracer is shown this filter's data, not its own), then tries,
 * with raw system calls, to escape: a write outside the writable directory (open, and a
 * file handle), ptrace-attach and kill of a host process, a mount, FIFREEZE on the file
 * system of the current directory, a read outside the sandbox root (directly and through
 * /proc/1/root); last it leaves a child behind, cloned with CLONE_UNTRACED.
 *
 * usage: [HARD_SANDBOX_NO_FILTER=1] hard_sandbox HOST_PID OUTSIDE_FILE MOUNT_DIR
 * Prints one "what = ret [ERRNO]" line per try (hard_show.h). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/filter.h>
#include <linux/fs.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "hard_show.h"

static long sys(long nr, long a, long b, long c, long d, long e)
{
    long ret = syscall(nr, a, b, c, d, e);
    return ret;
}

static long own_filter(void)
{
    /* one instruction: every call returns SECCOMP_RET_TRACE | 1 */
    struct sock_filter insns[] = {BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_TRACE | 1)};
    struct sock_fprog prog = {1, insns};
    prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
    return sys(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, (long)&prog, 0, 0);
}

static long write_through_handle(const char *path)
{
    struct {
        struct file_handle fh;
        unsigned char bytes[MAX_HANDLE_SZ];
    } h;
    int mount_id;
    h.fh.handle_bytes = MAX_HANDLE_SZ;
    long ret = sys(SYS_name_to_handle_at, AT_FDCWD, (long)path, (long)&h, (long)&mount_id, 0);
    show("name_to_handle_at outside", ret);
    /* the mount is named by any descriptor on it: the current directory's (same fs) */
    long here = sys(SYS_open, (long)".", O_RDONLY | O_DIRECTORY, 0, 0, 0);
    long fd = sys(SYS_open_by_handle_at, here, (long)&h, O_WRONLY, 0, 0);
    show("open_by_handle_at outside", fd);
    if (fd >= 0)
        show("write through handle", sys(SYS_write, fd, (long)"escaped\n", 8, 0, 0));
    return fd;
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: hard_sandbox HOST_PID OUTSIDE_FILE MOUNT_DIR\n");
        return 2;
    }
    long host = atol(argv[1]);
    const char *outside = argv[2];
    char buf[64];

    /* (without a tracer its TRACE answers would be ENOSYS: the kernel layer's test runs
     * the program alone with HARD_SANDBOX_NO_FILTER set) */
    if (!getenv("HARD_SANDBOX_NO_FILTER"))
        show("own seccomp filter", own_filter());
    long fd = sys(SYS_open, (long)outside, O_WRONLY | O_APPEND, 0, 0, 0);
    show("open outside for writing", fd);
    if (fd >= 0)
        show("write outside", sys(SYS_write, fd, (long)"escaped\n", 8, 0, 0));
    write_through_handle(outside);
    show("ptrace attach host", sys(SYS_ptrace, PTRACE_ATTACH, host, 0, 0, 0));
    show("kill host", sys(SYS_kill, host, SIGKILL, 0, 0, 0));
    show("mount tmpfs", sys(SYS_mount, (long)"none", (long)argv[3], (long)"tmpfs", 0, 0));
    /* the current directory's file system (the tests run it on the host's root fs) */
    long here = sys(SYS_open, (long)".", O_RDONLY | O_DIRECTORY, 0, 0, 0);
    long frozen = sys(SYS_ioctl, here, FIFREEZE, 0, 0, 0);
    show("ioctl FIFREEZE", frozen);
    if (frozen == 0)  /* never leave the host's file system frozen */
        show("ioctl FITHAW", sys(SYS_ioctl, here, FITHAW, 0, 0, 0));
    fd = sys(SYS_open, (long)outside, O_RDONLY, 0, 0, 0);
    show("open outside for reading", fd);
    if (fd >= 0) {
        long n = sys(SYS_read, fd, (long)buf, sizeof buf - 1, 0, 0);
        show("read outside", n);
        if (n > 0) {
            buf[n] = 0;
            printf("read: %s\n", buf);
        }
    }
    snprintf(buf, sizeof buf, "/proc/1/root%s", outside);
    fd = sys(SYS_open, (long)buf, O_RDONLY, 0, 0, 0);
    show("open /proc/1/root outside", fd);
    if (fd >= 0) {
        long n = sys(SYS_read, fd, (long)buf, sizeof buf - 1, 0, 0);
        if (n > 0) {
            buf[n] = 0;
            printf("read: %s\n", buf);
        }
    }
    /* a child the tracer is never told of (CLONE_UNTRACED): it must end with the run */
    long child = sys(SYS_clone, CLONE_UNTRACED | SIGCHLD, 0, 0, 0, 0);
    if (child == 0)
        for (;;)
            pause();
    show("clone untraced", child > 0 ? 1 : child);
    return 0;
}
