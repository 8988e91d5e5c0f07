/* uefi_calls - a UEFI application (gnu-efi, x86_64) whose calls emutrace traces under
 * Qiling's UEFI layer: recursion, calls through a function pointer, a call chain.  Built
 * with -finstrument-functions: each entry and exit of these functions is written by
 * uefi_record.c into `instr_record` (its own record, read from memory after the run,
 * since Qiling 1.4.6 serves no console).  efi_main returns EFI_SUCCESS when the
 * results are right, EFI_LOAD_ERROR otherwise. */
#include <efi.h>

__attribute__((noinline)) UINT64 fact(UINT64 n)
{
    return n < 2 ? 1 : n * fact(n - 1);
}

__attribute__((noinline)) UINT64 twice(UINT64 x)
{
    return 2 * x;
}

__attribute__((noinline)) UINT64 apply(UINT64 (*f)(UINT64), UINT64 x)
{
    return f(f(x));
}

__attribute__((noinline)) UINT64 chain3(UINT64 x)
{
    return x + 3;
}

__attribute__((noinline)) UINT64 chain2(UINT64 x)
{
    return chain3(x) + 2;
}

__attribute__((noinline)) UINT64 chain1(UINT64 x)
{
    return chain2(x) + 1;
}

EFI_STATUS EFIAPI efi_main(EFI_HANDLE image, EFI_SYSTEM_TABLE *st)
{
    (void)image;
    (void)st;
    UINT64 r = fact(6) + apply(twice, 5) + chain1(10);
    return r == 720 + 20 + 16 ? EFI_SUCCESS : EFI_LOAD_ERROR;
}
