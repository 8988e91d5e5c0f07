/* instr_sites.c - the self-recording part of the optimised tier (calls.O0.instr,
 * calls.Os.instr, calls.O3.instr, calls.split.instr, calls.msr.instr).
 *
 * As instr_hooks.c, plus the call site: each line is
 *     "> 0x<function> 0x<site>\n"   on entry
 *     "< 0x<function> 0x<site>\n"   on exit
 * where <function> is the address GCC passes (the ORIGINAL function's address, also in
 * an inlined copy or a clone) and <site> is the return address of the hook call, i.e. a
 * code address inside the machine function that holds the instrumented body.  A reader
 * maps <site> to its symbol: when that symbol is not <function> (nor a clone of it,
 * `f.constprop.0`, `f.isra.0`, `f.part.0`, `f.cold`), the event comes from a copy of
 * <function> inlined into another function: no call happened at the machine level.
 * Output: $CALLTRACE_OUT or stderr, written with raw write(2) at exit, when the buffer is
 * full, and from a fatal-signal handler (see instr_hooks.c).
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

NOINSTR static char *put_hex(char *p, uintptr_t v)
{
    char tmp[2 * sizeof(uintptr_t)];
    int n = 0;
    do {
        tmp[n++] = "0123456789abcdef"[v & 15];
        v >>= 4;
    } while (v);
    *p++ = '0';
    *p++ = 'x';
    while (n > 0)
        *p++ = tmp[--n];
    return p;
}

NOINSTR static void trace_event(char dir, void *fn, void *site)
{
    if (trace_len + 4 * sizeof(uintptr_t) + 16 > sizeof trace_buf)
        calltrace_flush();
    char *p = trace_buf + trace_len;
    *p++ = dir;
    *p++ = ' ';
    p = put_hex(p, (uintptr_t)fn);
    *p++ = ' ';
    p = put_hex(p, (uintptr_t)site);
    *p++ = '\n';
    trace_len = (size_t)(p - trace_buf);
}

void __cyg_profile_func_enter(void *fn, void *call_site)
{
    (void)call_site;
    trace_event('>', fn, __builtin_return_address(0));
}

void __cyg_profile_func_exit(void *fn, void *call_site)
{
    (void)call_site;
    trace_event('<', fn, __builtin_return_address(0));
}

NOINSTR static void calltrace_at_exit(void)
{
    calltrace_flush();
}

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
