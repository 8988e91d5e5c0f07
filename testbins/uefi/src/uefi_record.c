/* uefi_record - the -finstrument-functions hooks of uefi_calls.c (this file is built
 * without instrumentation): entry and exit in order, as (kind, function) pairs, kind 1
 * for an entry and 2 for an exit, into a buffer the test reads after the run. */
#include <efi.h>

#define RECORD_MAX 256

UINT64 instr_record[2 * RECORD_MAX];
UINT64 instr_len;  /* pairs written */

static void note(UINT64 kind, void *fn)
{
    if (instr_len < RECORD_MAX) {
        instr_record[2 * instr_len] = kind;
        instr_record[2 * instr_len + 1] = (UINT64)fn;
        instr_len++;
    }
}

void __cyg_profile_func_enter(void *fn, void *site)
{
    (void)site;
    note(1, fn);
}

void __cyg_profile_func_exit(void *fn, void *site)
{
    (void)site;
    note(2, fn);
}
