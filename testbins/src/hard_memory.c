/* hard_memory - memory and file-mode requests Linux refuses:
 * prints each result and errno name; a native run on an x86_64 host with less than 64 GiB
 * of RAM + swap (overcommit heuristic) is the oracle, except the "mode" line (emutrace
 * strips set-user-ID/set-group-ID bits by design).  Needs a writable current directory.
 * hard_memory loop: malloc 1 MiB blocks until refused (run it under a memory cap). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "hard_show.h"

int main(int argc, char **argv)
{
    if (argc > 1 && !strcmp(argv[1], "loop")) { /* malloc 1 MiB blocks until refused */
        long n = 0;
        while (n < 100000 && malloc(1 << 20) != NULL)
            n++;
        printf("allocated %ld MiB\n", n);
        return 0;
    }
    void *p = mmap(NULL, 64ULL << 30, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                   -1, 0);
    show("mmap 64 GiB", p == MAP_FAILED ? -1 : 0);
    show("sbrk 64 GiB", sbrk(64LL << 30) == (void *)-1 ? -1 : 0);
    show("malloc 64 GiB is NULL", malloc(64ULL << 30) == NULL);
    const char *tmp = "hard_memory.tmp";
    int fd = open(tmp, O_CREAT | O_WRONLY | O_TRUNC, 06755);
    write(fd, "0123456789", 10);
    struct stat st;
    fstat(fd, &st);
    close(fd);
    printf("mode = %o\n", (unsigned)(st.st_mode & 07777));
    fd = open(tmp, O_RDONLY);
    p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    show("mmap shared writable of O_RDONLY", p == MAP_FAILED ? -1 : 0);
    p = mmap(NULL, 4096, PROT_READ, MAP_SHARED, fd, 0);
    show("mmap shared read-only of O_RDONLY", p == MAP_FAILED ? -1 : 0);
    p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
    show("mmap private writable of O_RDONLY", p == MAP_FAILED ? -1 : 0);
    close(fd);
    unlink(tmp);
    return 0;
}
