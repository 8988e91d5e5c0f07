/* hard_files - file calls at the sandbox's edges: an unnamed O_TMPFILE file named later
 * through /proc/self/fd with linkat(AT_SYMLINK_FOLLOW), metadata calls on descriptors
 * (fchmod, fchown to the owner, futimens with UTIME_OMIT), a FIFO by mknod, truncate,
 * fsync.  Prints each result and errno name, so a native run on an x86_64 Linux host is
 * the oracle.  Needs a writable current directory (creates and removes hard_files.*). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "hard_show.h"

int main(void)
{
    char magic[64];
    struct stat st;
    int fd = open(".", O_TMPFILE | O_RDWR, 0600);
    show("open O_TMPFILE", fd < 0 ? -1 : 0);
    show("open O_TMPFILE read-only", open(".", O_TMPFILE | O_RDONLY, 0600));
    show("write", write(fd, "abc", 3));
    show("fstat links", fstat(fd, &st) < 0 ? -1 : (long)st.st_nlink);
    snprintf(magic, sizeof magic, "/proc/self/fd/%d", fd);
    show("linkat fd", linkat(AT_FDCWD, magic, AT_FDCWD, "hard_files.named", AT_SYMLINK_FOLLOW));
    show("stat named size", stat("hard_files.named", &st) < 0 ? -1 : (long)st.st_size);
    show("linkat again", linkat(AT_FDCWD, magic, AT_FDCWD, "hard_files.named", AT_SYMLINK_FOLLOW));
    show("fchmod 0640", fchmod(fd, 0640));
    show("stat mode", stat("hard_files.named", &st) < 0 ? -1 : (long)(st.st_mode & 07777));
    show("fchown to owner", fchown(fd, st.st_uid, st.st_gid));
    show("fchown -1 -1", fchown(fd, (uid_t)-1, (gid_t)-1));
    struct timespec times[2] = {{1000000000, 5}, {0, UTIME_OMIT}};
    long before = (long)st.st_mtime;
    show("futimens omit mtime", futimens(fd, times));
    show("stat atime", stat("hard_files.named", &st) < 0 ? -1 : (long)st.st_atime);
    show("mtime kept", stat("hard_files.named", &st) < 0 ? -1 : (long)(st.st_mtime == before));
    struct timespec both[2] = {{1200000000, 0}, {1300000000, 0}};
    show("utimensat", utimensat(AT_FDCWD, "hard_files.named", both, 0));
    show("stat mtime", stat("hard_files.named", &st) < 0 ? -1 : (long)st.st_mtime);
    show("utimensat bad nsec", utimensat(AT_FDCWD, "hard_files.named",
                                         (struct timespec[2]){{0, 2000000000}, {0, 0}}, 0));
    show("truncate 1", truncate("hard_files.named", 1));
    show("truncate -1", truncate("hard_files.named", -1));
    show("stat size", stat("hard_files.named", &st) < 0 ? -1 : (long)st.st_size);
    show("fsync", fsync(fd));
    show("fdatasync", fdatasync(fd));
    show("mknod fifo", mknod("hard_files.fifo", S_IFIFO | 0600, 0));
    show("stat fifo", stat("hard_files.fifo", &st) < 0 ? -1 : (long)S_ISFIFO(st.st_mode));
    show("mknod fifo again", mknod("hard_files.fifo", S_IFIFO | 0600, 0));
    show("symlink", symlink("hard_files.named", "hard_files.link"));
    show("lstat link", lstat("hard_files.link", &st) < 0 ? -1 : (long)S_ISLNK(st.st_mode));
    show("link", link("hard_files.named", "hard_files.hard"));
    show("stat links", stat("hard_files.named", &st) < 0 ? -1 : (long)st.st_nlink);
    show("chmod missing", chmod("hard_files.missing", 0600));
    show("fchmodat nofollow", fchmodat(AT_FDCWD, "hard_files.link", 0600, AT_SYMLINK_NOFOLLOW));
    unlink("hard_files.named");
    unlink("hard_files.fifo");
    unlink("hard_files.link");
    unlink("hard_files.hard");
    return 0;
}
