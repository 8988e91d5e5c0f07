/* kern.h - what the portable mini-kernel needs from its board (start_<isa>.S)
 * and from its recorder (krecord.c in the -finstrument-functions build,
 * knorecord.c in the plain one). */
#ifndef KERN_H
#define KERN_H

#define NOINSTR_DECL __attribute__((no_instrument_function))

void uart_putc(char c) NOINSTR_DECL;          /* start_<isa>.S */
long arch_trap(long arg) NOINSTR_DECL;        /* start_<isa>.S: svc/ecall, returns the handler's value */
long arch_probe(long arg) NOINSTR_DECL;       /* start_<isa>.S: an undefined instruction, skipped */
void system_off(void) NOINSTR_DECL __attribute__((noreturn)); /* start_<isa>.S */
void record_dump(void) NOINSTR_DECL;          /* krecord.c / knorecord.c */
void kputs(const char *s) NOINSTR_DECL;
void kput_hex(unsigned long v) NOINSTR_DECL;
void kmain(void);
long trap_handler(unsigned long cause, long arg);

#endif
