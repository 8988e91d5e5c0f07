/* execrel: a program exec'd by a relative path.  `execrel show` prints what the new
 * image sees: /proc/self/exe (absolute: the kernel's d_path of the file), AT_EXECFN (the
 * path as given to execve) and argv[0].  `execrel MODE PATH` runs `PATH show` by a
 * relative PATH through MODE (fork, vfork, thread, spawn) and prints the child's status.
 * Static glibc reads /proc/self/exe before main (_dl_non_dynamic_init → _dl_get_origin)
 * and asserts it is absolute, so "show" prints at all only where the exe path is. */
#include <pthread.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

static const char *tail(const char *path) {
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

static int show(const char *argv0) {
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n < 0) {
        perror("readlink");
        return 1;
    }
    exe[n] = '\0';
    /* the directory depends on where the tests run: its absoluteness and the file's name */
    printf("exe: absolute=%d name=%s\n", exe[0] == '/', tail(exe));
    const char *execfn = (const char *)getauxval(AT_EXECFN);
    printf("execfn: %s\n", execfn ? execfn : "(none)");
    printf("argv0: %s\n", argv0);
    return 0;
}

static const char *target;

static void run_child(void) {
    char *args[] = {(char *)target, "show", NULL};
    execve(target, args, environ);
    _exit(127);
}

static void *exec_thread(void *unused) {
    (void)unused;
    run_child();
    return NULL;
}

static int report(const char *mode, pid_t pid) {
    int status;
    if (pid < 0 || waitpid(pid, &status, 0) != pid) {
        printf("%s: no child\n", mode);
        return 1;
    }
    printf("%s: exited=%d status=%d\n", mode, WIFEXITED(status), WEXITSTATUS(status));
    return 0;
}

int main(int argc, char **argv) {
    if (argc >= 2 && strcmp(argv[1], "show") == 0)
        return show(argv[0]);
    if (argc < 3) {
        fprintf(stderr, "usage: execrel show | execrel fork|vfork|thread|spawn PATH\n");
        return 2;
    }
    const char *mode = argv[1];
    target = argv[2];
    fflush(stdout);
    pid_t pid = -1;
    if (strcmp(mode, "fork") == 0) {
        pid = fork();
        if (pid == 0)
            run_child();
    } else if (strcmp(mode, "vfork") == 0) {
        pid = vfork();
        if (pid == 0)
            run_child();
    } else if (strcmp(mode, "thread") == 0) {
        /* a second thread execs: the process (its main thread too) becomes the new image */
        pid = fork();
        if (pid == 0) {
            pthread_t t;
            if (pthread_create(&t, NULL, exec_thread, NULL) != 0)
                _exit(126);
            pthread_join(t, NULL);
            _exit(125);
        }
    } else if (strcmp(mode, "spawn") == 0) {
        char *args[] = {(char *)target, "show", NULL};
        if (posix_spawn(&pid, target, NULL, NULL, args, environ) != 0)
            pid = -1;
    } else {
        fprintf(stderr, "execrel: unknown mode %s\n", mode);
        return 2;
    }
    return report(mode, pid);
}
