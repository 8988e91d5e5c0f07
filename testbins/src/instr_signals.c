/* instr_signals.c - what signals.instr adds to the recording hooks (instr_hooks.c), for a
 * program whose handlers leave by siglongjmp and which ends by a fatal raise():
 *
 *   "~ 0x<hex return address>\n"   siglongjmp is called (from that address): the
 *                                  innermost open frame of the record is left by a
 *                                  non-local jump, it never writes its "<" line
 *
 * and the record is flushed before a raise() of a signal whose action is SIG_DFL in the
 * first process (the program's last step kills it: no atexit flush; its forked children,
 * which raise too, flush nothing, so the file holds the first process's record only).
 * Linked with -Wl,--wrap=siglongjmp -Wl,--wrap=raise; compiled without instrumentation, in
 * place of instr_hooks.c, which it includes (its trace_event is file-local). */
#include "instr_hooks.c"

#include <setjmp.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

int __real_raise(int sig);
int __wrap_raise(int sig) NOINSTR;
void __real_siglongjmp(sigjmp_buf env, int val) __attribute__((noreturn));
void __wrap_siglongjmp(sigjmp_buf env, int val) NOINSTR __attribute__((noreturn));

static pid_t first_pid;

__attribute__((constructor)) NOINSTR static void instr_signals_init(void)
{
    first_pid = getpid();
}

int __wrap_raise(int sig)
{
    struct sigaction now;
    if (getpid() == first_pid && sigaction(sig, NULL, &now) == 0
        && now.sa_handler == SIG_DFL)
        calltrace_flush();
    return __real_raise(sig);
}

void __wrap_siglongjmp(sigjmp_buf env, int val)
{
    trace_event('~', __builtin_return_address(0));
    __real_siglongjmp(env, val);
}
