/* s390x instruction lengths without capstone, for the common instructions that are never
 * branches (sweep.c, as x86len.h for x86): 0 where not known here (capstone decodes it).
 * tests/test_disasm.py holds it to capstone at every halfword of the s390x test programs. */
#ifndef EMUTRACE_S390LEN_H
#define EMUTRACE_S390LEN_H

#include <stddef.h>
#include <stdint.h>

/* The length of the instruction at code (n bytes available), 0 where not known here. */
unsigned s390_length(const uint8_t *code, size_t n);

#endif
