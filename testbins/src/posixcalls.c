/* posixcalls: common POSIX calls of the C library, each printed by the program as
 * `name(args) = result` in the notation a tracer with their prototypes shows (strings
 * quoted, modes in octal): the oracle of emutrace's bundled libc table (the values
 * the program passed and got, whatever the calls' success).  Run it in an empty writable
 * directory. */
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

int main(void) {
    int fd = creat("posix-a", 0640);
    printf("creat(\"posix-a\", 0640) = %d\n", fd);
    printf("chmod(\"posix-a\", 0600) = %d\n", chmod("posix-a", 0600));
    printf("fchmod(%d, 0644) = %d\n", fd, fchmod(fd, 0644));
    int copy = dup(fd);
    printf("dup(%d) = %d\n", fd, copy);
    printf("dup2(%d, 9) = %d\n", copy, dup2(copy, 9));
    printf("close(9) = %d\n", close(9));
    printf("close(%d) = %d\n", copy, close(copy));
    printf("close(%d) = %d\n", fd, close(fd));
    printf("link(\"posix-a\", \"posix-b\") = %d\n", link("posix-a", "posix-b"));
    printf("symlink(\"posix-b\", \"posix-c\") = %d\n", symlink("posix-b", "posix-c"));
    char buf[64];
    printf("readlink(\"posix-c\", %p, %u) = %ld\n", (void *)buf, (unsigned)sizeof buf,
           (long)readlink("posix-c", buf, sizeof buf));
    printf("rename(\"posix-b\", \"posix-d\") = %d\n", rename("posix-b", "posix-d"));
    printf("unlink(\"posix-c\") = %d\n", unlink("posix-c"));
    printf("remove(\"posix-d\") = %d\n", remove("posix-d"));
    printf("mkdir(\"posix-dir\", 0750) = %d\n", mkdir("posix-dir", 0750));
    printf("rmdir(\"posix-dir\") = %d\n", rmdir("posix-dir"));
    printf("unlink(\"posix-a\") = %d\n", unlink("posix-a"));
    printf("umask(022) = 0%o\n", (unsigned)umask(022));
    printf("umask(027) = 0%o\n", (unsigned)umask(027));
    pid_t me = getpid();
    printf("kill(%d, 0) = %d\n", (int)me, kill(me, 0));
    printf("isatty(-1) = %d\n", isatty(-1));
    printf("alarm(0) = %u\n", alarm(0));
    return 0;
}
