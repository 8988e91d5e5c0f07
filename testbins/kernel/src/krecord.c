/* krecord.c - the self-record of the -finstrument-functions build (compiled
 * without instrumentation).  Every instrumented function calls the hooks
 * below on entry and exit; they append the function's address to a table,
 * and record_dump prints it after the line "== record ==", one event per line:
 *     "> 0x<hex address>" on entry, "< 0x<hex address>" on exit
 * (the format of testbins/README.md's calls.instr record). */
#include "kern.h"

#define NOINSTR __attribute__((no_instrument_function))
#define MAX_EVENTS 1024

void __cyg_profile_func_enter(void *fn, void *call_site) NOINSTR;
void __cyg_profile_func_exit(void *fn, void *call_site) NOINSTR;

static unsigned long events[MAX_EVENTS]; /* function addresses */
static unsigned char exits[MAX_EVENTS];   /* 1: an exit (x86 code may lie at odd addresses) */
static unsigned int count;

NOINSTR static void add(unsigned long fn, unsigned char exit)
{
    if (count < MAX_EVENTS) {
        exits[count] = exit;
        events[count++] = fn;
    }
}

void __cyg_profile_func_enter(void *fn, void *call_site)
{
    (void)call_site;
    add((unsigned long)fn, 0);
}

void __cyg_profile_func_exit(void *fn, void *call_site)
{
    (void)call_site;
    add((unsigned long)fn, 1);
}

void record_dump(void)
{
    unsigned int i;
    kputs("== record ==\n");
    for (i = 0; i < count; i++) {
        kputs(exits[i] ? "< " : "> ");
        kput_hex(events[i]);
        kputs("\n");
    }
}
