/* x86 instruction lengths without capstone, for the common instructions a linear sweep or
 * a descent's walk passes over (sweep.c): one table lookup per opcode instead of a decode
 * and a printed mnemonic.  Conservative by design: it answers only for encodings it knows
 * capstone decodes, with the length capstone gives; anything else (VEX/EVEX, x87, LOCK,
 * most prefixed 0F opcodes, forms some CPUs reject) is "not known" and capstone decodes it.
 * tests/test_disasm.py holds it to capstone at every byte offset of the x86 test programs. */
#ifndef EMUTRACE_X86LEN_H
#define EMUTRACE_X86LEN_H

#include <stddef.h>
#include <stdint.h>

/* The length of the instruction at code (n bytes available) in 64-bit mode (mode64) or
 * 32-bit mode, where it is one of those known here, which are never one the classifier reads
 * (CALL, JMP, Jcc, JrCXZ, LOOPcc, RET, RETF, HLT, INT3, UD0/1/2: Intel SDM vol. 2) whatever
 * their prefixes; 0 otherwise (capstone's). */
unsigned x86_length(const uint8_t *code, size_t n, int mode64);

#endif
