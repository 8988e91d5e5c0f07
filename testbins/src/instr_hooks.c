/* instr_hooks.c - the self-recording part of calls.instr.
 *
 * calls.c and calls_tail.c are compiled with -finstrument-functions, so
 * every function of the program calls __cyg_profile_func_enter on entry
 * and __cyg_profile_func_exit before returning.  This file (compiled
 * without instrumentation, and every function marked
 * no_instrument_function as well) appends one line per event to a static
 * buffer:
 *     "> 0x<hex address of the function>\n"   on entry
 *     "< 0x<hex address of the function>\n"   on exit
 * (lowercase hex, no padding; the address is the function's symbol value,
 * so on ARM a Thumb function's address has bit 0 set, like its symbol).
 *
 * The buffer goes to the file named by $CALLTRACE_OUT (created or
 * truncated), or to stderr (fd 2) when that variable is unset or empty.
 * It is written when full, at exit (atexit handler: normal return from
 * main and exit() from anywhere), by calltrace_flush() for code that
 * leaves through _exit, and from a handler of the fatal signals SEGV, BUS,
 * ILL, FPE, which then lets the signal kill the process as before.
 * Only raw open/write are used, never stdio, so nothing here recurses or
 * disturbs the program's own buffered output.
 */
#include <fcntl.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define NOINSTR __attribute__((no_instrument_function))

void __cyg_profile_func_enter(void *fn, void *call_site) NOINSTR;
void __cyg_profile_func_exit(void *fn, void *call_site) NOINSTR;
void calltrace_flush(void) NOINSTR;

static char trace_buf[1 << 20];
static size_t trace_len;
static int trace_fd = -1; /* -1: not opened yet, -2: open failed */

NOINSTR static int trace_open(void)
{
    if (trace_fd == -1) {
        const char *path = getenv("CALLTRACE_OUT");
        if (path && path[0])
            trace_fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        else
            trace_fd = 2;
        if (trace_fd < 0)
            trace_fd = -2;
    }
    return trace_fd;
}

void calltrace_flush(void)
{
    int fd = trace_open();
    size_t off = 0;
    while (fd >= 0 && off < trace_len) {
        ssize_t n = write(fd, trace_buf + off, trace_len - off);
        if (n <= 0)
            break;
        off += (size_t)n;
    }
    trace_len = 0;
}

NOINSTR static void trace_event(char dir, void *fn)
{
    char tmp[2 * sizeof(uintptr_t)];
    uintptr_t v = (uintptr_t)fn;
    int n = 0;

    if (trace_len + sizeof tmp + 8 > sizeof trace_buf)
        calltrace_flush();
    do {
        tmp[n++] = "0123456789abcdef"[v & 15];
        v >>= 4;
    } while (v);
    char *p = trace_buf + trace_len;
    *p++ = dir;
    *p++ = ' ';
    *p++ = '0';
    *p++ = 'x';
    while (n > 0)
        *p++ = tmp[--n];
    *p++ = '\n';
    trace_len = (size_t)(p - trace_buf);
}

void __cyg_profile_func_enter(void *fn, void *call_site)
{
    (void)call_site;
    trace_event('>', fn);
}

void __cyg_profile_func_exit(void *fn, void *call_site)
{
    (void)call_site;
    trace_event('<', fn);
}

NOINSTR static void calltrace_at_exit(void)
{
    calltrace_flush();
}

/* Installed with SA_RESETHAND: after the flush, returning re-executes the
 * faulting instruction, which now gets the default action (death by the
 * same signal, same exit status as the uninstrumented program). */
NOINSTR static void calltrace_on_fatal_signal(int sig)
{
    (void)sig;
    calltrace_flush();
}

__attribute__((constructor)) NOINSTR static void calltrace_init(void)
{
    static const int fatal[] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE};
    struct sigaction sa;

    memset(&sa, 0, sizeof sa);
    sa.sa_handler = calltrace_on_fatal_signal;
    sa.sa_flags = SA_RESETHAND | SA_NODEFER;
    for (unsigned i = 0; i < sizeof fatal / sizeof fatal[0]; i++)
        sigaction(fatal[i], &sa, NULL);
    atexit(calltrace_at_exit);
}
