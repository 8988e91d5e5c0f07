/* A crash inside the emulator library (Unicorn's own SIGSEGV, SIGBUS, SIGILL, SIGFPE or
 * abort) ends the emulation, not the emutrace process: `cg_emu_start` stands in for
 * Unicorn's uc_emu_start and marks a landing point with sigsetjmp; the fault handler jumps
 * back to it when the fault came from this thread while it ran emulation code, and
 * `cg_emu_start` returns CG_CRASHED.  Python then finishes the run as after any other stop:
 * the trace recorded so far is written, one line says what crashed, the exit status is
 * emutrace's own (emutrace/native/crashguard.py, ARCHITECTURE.md "Emulator crashes").
 *
 * Only a fault taken while the thread does not hold Python's GIL is jumped out of: Unicorn
 * runs with the GIL released (ctypes releases it around the call), so the interpreter's
 * state is whole.  A fault inside Python code (a hook body, the GIL held) or outside
 * emulation is not ours: the previous action (Python's faulthandler, or the default) is put
 * back and takes it.  The jump leaves Unicorn's own state inconsistent: after a crash
 * every cg_emu_start returns CG_CRASHED at once, and the instance is never run again. */

#define _GNU_SOURCE /* sigaction, siginfo_t, sigaltstack, sigjmp_buf under -std=c11 */
#include <setjmp.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "abi.h" /* CG_CRASHED */

typedef int (*cg_emu_start_fn)(void *uc, uint64_t begin, uint64_t until, uint64_t timeout,
                               size_t count);
typedef int (*cg_gil_held_fn)(void);

static const int guarded[] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT};
#define N_GUARDED (sizeof guarded / sizeof guarded[0])

static cg_emu_start_fn real_emu_start;
static cg_gil_held_fn gil_held; /* Python's PyGILState_Check */
static struct sigaction previous[N_GUARDED];
static _Thread_local sigjmp_buf *landing; /* set while this thread runs emulation */
static volatile sig_atomic_t crash_signal;
static void *volatile crash_address;
static char alt_stack[1 << 16]; /* the handler runs here: a crash may be a stack overflow */

static int guarded_index(int sig)
{
    for (size_t i = 0; i < N_GUARDED; i++)
        if (guarded[i] == sig)
            return (int)i;
    return -1;
}

static void on_fault(int sig, siginfo_t *info, void *context)
{
    (void)context;
    sigjmp_buf *to = landing;
    if (to != NULL && !gil_held()) {
        landing = NULL;
        crash_signal = sig;
        crash_address = info->si_addr;
        siglongjmp(*to, 1);
    }
    /* not a crash of the emulator: the action that was there before takes it */
    int i = guarded_index(sig);
    if (i >= 0)
        sigaction(sig, &previous[i], NULL);
    if (info->si_code <= 0) /* sent (kill, raise, abort): sent again, delivered on return */
        raise(sig);
    /* a fault: the instruction runs again on return and faults into that action */
}

/* Install the handlers; `emu_start` is the library's uc_emu_start, `gil_check` Python's
 * PyGILState_Check.  Returns 0, or -1 when a handler could not be installed. */
int cg_install(void *emu_start, void *gil_check)
{
    real_emu_start = (cg_emu_start_fn)emu_start;
    gil_held = (cg_gil_held_fn)gil_check;
    stack_t stack = {.ss_sp = alt_stack, .ss_size = sizeof alt_stack, .ss_flags = 0};
    stack_t old;
    if (sigaltstack(NULL, &old) == 0 && (old.ss_flags & SS_DISABLE))
        sigaltstack(&stack, NULL); /* (faulthandler's own, when it has one, stays) */
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_sigaction = on_fault;
    action.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&action.sa_mask);
    for (size_t i = 0; i < N_GUARDED; i++)
        if (sigaction(guarded[i], &action, &previous[i]) != 0)
            return -1;
    return 0;
}

/* uc_emu_start with a landing point for a crash (above). */
int cg_emu_start(void *uc, uint64_t begin, uint64_t until, uint64_t timeout, size_t count)
{
    if (crash_signal)
        return CG_CRASHED;
    sigjmp_buf here;
    if (sigsetjmp(here, 1)) /* the mask is restored: the signal is unblocked again */
        return CG_CRASHED;
    landing = &here;
    int status = real_emu_start(uc, begin, until, timeout, count);
    landing = NULL;
    return status;
}

int cg_crash_signal(void) { return crash_signal; }

uint64_t cg_crash_address(void) { return (uint64_t)(uintptr_t)crash_address; }

/* A Unicorn code hook that crashes as a bug inside the library would: a write through a
 * NULL pointer, in C, with the GIL released (tests/test_emulator_crash.py installs it). */
void cg_test_crash_hook(void *uc, uint64_t address, uint32_t size, void *user_data)
{
    (void)uc, (void)address, (void)size, (void)user_data;
    volatile int *volatile nowhere = NULL;
    *nowhere = 1;
}
