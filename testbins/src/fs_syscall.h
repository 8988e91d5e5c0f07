/* fs_syscall.h - raw Linux system calls for the freestanding tier.
 *
 * One section per ISA.  Every stub returns the kernel's result in the
 * Linux convention: >= 0 on success, -errno on failure (the ISAs that
 * report errors through a flag, MIPS a3 and PowerPC CR0.SO, are
 * normalised here).  Only write and exit_group are needed by the
 * programs; the numbers are hard-coded so the header needs nothing but
 * the compiler.
 */
#ifndef FS_SYSCALL_H
#define FS_SYSCALL_H

typedef unsigned long fs_size_t;

#if defined(__x86_64__)
/* syscall: rax = nr, args rdi rsi rdx; kernel clobbers rcx and r11. */
#define FS_NR_write 1
#define FS_NR_exit_group 231
static inline long fs_syscall3(long nr, long a, long b, long c)
{
    long ret;
    __asm__ volatile("syscall"
                     : "=a"(ret)
                     : "a"(nr), "D"(a), "S"(b), "d"(c)
                     : "rcx", "r11", "memory");
    return ret;
}

#elif defined(__i386__)
/* int $0x80: eax = nr, args ebx ecx edx. */
#define FS_NR_write 4
#define FS_NR_exit_group 252
static inline long fs_syscall3(long nr, long a, long b, long c)
{
    long ret;
    __asm__ volatile("int $0x80"
                     : "=a"(ret)
                     : "a"(nr), "b"(a), "c"(b), "d"(c)
                     : "memory");
    return ret;
}

#elif defined(__aarch64__)
/* svc #0: x8 = nr, args x0 x1 x2, result x0. */
#define FS_NR_write 64
#define FS_NR_exit_group 94
static inline long fs_syscall3(long nr, long a, long b, long c)
{
    register long x8 __asm__("x8") = nr;
    register long x0 __asm__("x0") = a;
    register long x1 __asm__("x1") = b;
    register long x2 __asm__("x2") = c;
    __asm__ volatile("svc #0" : "+r"(x0) : "r"(x8), "r"(x1), "r"(x2) : "memory");
    return x0;
}

#elif defined(__arm__)
/* EABI svc #0: r7 = nr, args r0 r1 r2, result r0. */
#define FS_NR_write 4
#define FS_NR_exit_group 248
static inline long fs_syscall3(long nr, long a, long b, long c)
{
    register long r7 __asm__("r7") = nr;
    register long r0 __asm__("r0") = a;
    register long r1 __asm__("r1") = b;
    register long r2 __asm__("r2") = c;
    __asm__ volatile("svc #0" : "+r"(r0) : "r"(r7), "r"(r1), "r"(r2) : "memory");
    return r0;
}

#elif defined(__mips__) && !defined(__mips64)
/* o32 syscall: v0 = nr, args a0 a1 a2; result v0, a3 != 0 means v0 is
 * a positive errno.  The kernel may clobber at, v1, t0-t9, hi, lo. */
#define FS_NR_write 4004
#define FS_NR_exit_group 4246
static inline long fs_syscall3(long nr, long a, long b, long c)
{
    register long v0 __asm__("$2") = nr;
    register long a0 __asm__("$4") = a;
    register long a1 __asm__("$5") = b;
    register long a2 __asm__("$6") = c;
    register long a3 __asm__("$7");
    __asm__ volatile(".set push\n\t.set noreorder\n\tsyscall\n\t.set pop"
                     : "+r"(v0), "=r"(a3)
                     : "r"(a0), "r"(a1), "r"(a2)
                     : "$1", "$3", "$8", "$9", "$10", "$11", "$12", "$13",
                       "$14", "$15", "$24", "$25", "hi", "lo", "memory");
    return a3 ? -v0 : v0;
}

#elif defined(__mips__) && defined(__mips64) && _MIPS_SIM == _ABI64
/* n64 syscall: v0 = nr (5000 + n), args a0 a1 a2; result v0, a3 != 0
 * means v0 is a positive errno.  The kernel may clobber at, v1, $8-$15,
 * t8, t9, hi, lo. */
#define FS_NR_write 5001
#define FS_NR_exit_group 5205
static inline long fs_syscall3(long nr, long a, long b, long c)
{
    register long v0 __asm__("$2") = nr;
    register long a0 __asm__("$4") = a;
    register long a1 __asm__("$5") = b;
    register long a2 __asm__("$6") = c;
    register long a3 __asm__("$7");
    __asm__ volatile(".set push\n\t.set noreorder\n\tsyscall\n\t.set pop"
                     : "+r"(v0), "=r"(a3)
                     : "r"(a0), "r"(a1), "r"(a2)
                     : "$1", "$3", "$8", "$9", "$10", "$11", "$12", "$13",
                       "$14", "$15", "$24", "$25", "hi", "lo", "memory");
    return a3 ? -v0 : v0;
}

#elif defined(__riscv) && __riscv_xlen == 64
/* ecall: a7 = nr, args a0 a1 a2, result a0. */
#define FS_NR_write 64
#define FS_NR_exit_group 94
static inline long fs_syscall3(long nr, long a, long b, long c)
{
    register long a7 __asm__("a7") = nr;
    register long a0 __asm__("a0") = a;
    register long a1 __asm__("a1") = b;
    register long a2 __asm__("a2") = c;
    __asm__ volatile("ecall" : "+r"(a0) : "r"(a7), "r"(a1), "r"(a2) : "memory");
    return a0;
}

#elif defined(__powerpc__)
/* sc (ppc and ppc64le alike): r0 = nr, args r3 r4 r5, result r3;
 * CR0.SO set means r3 is a positive errno.  The kernel may clobber
 * r0, r4-r12, ctr, xer and cr0. */
#define FS_NR_write 4
#define FS_NR_exit_group 234
static inline long fs_syscall3(long nr, long a, long b, long c)
{
    register long r0 __asm__("r0") = nr;
    register long r3 __asm__("r3") = a;
    register long r4 __asm__("r4") = b;
    register long r5 __asm__("r5") = c;
    __asm__ volatile("sc\n\t"
                     "bns+ 1f\n\t"
                     "neg %1, %1\n"
                     "1:"
                     : "+r"(r0), "+r"(r3), "+r"(r4), "+r"(r5)
                     :
                     : "r6", "r7", "r8", "r9", "r10", "r11", "r12",
                       "ctr", "xer", "cr0", "memory");
    return r3;
}

#elif defined(__s390x__)
/* svc 0: r1 = nr, args r2 r3 r4, result r2. */
#define FS_NR_write 4
#define FS_NR_exit_group 248
static inline long fs_syscall3(long nr, long a, long b, long c)
{
    register long r1 __asm__("r1") = nr;
    register long r2 __asm__("r2") = a;
    register long r3 __asm__("r3") = b;
    register long r4 __asm__("r4") = c;
    __asm__ volatile("svc 0" : "+r"(r2) : "r"(r1), "r"(r3), "r"(r4) : "memory");
    return r2;
}

#elif defined(__m68k__)
/* trap #0: d0 = nr, args d1 d2 d3, result d0 (arch/m68k/kernel/entry.S). */
#define FS_NR_write 4
#define FS_NR_exit_group 247
static inline long fs_syscall3(long nr, long a, long b, long c)
{
    register long d0 __asm__("d0") = nr;
    register long d1 __asm__("d1") = a;
    register long d2 __asm__("d2") = b;
    register long d3 __asm__("d3") = c;
    __asm__ volatile("trap #0" : "+r"(d0) : "r"(d1), "r"(d2), "r"(d3) : "memory");
    return d0;
}

#elif defined(__sparc__) && defined(__arch64__)
/* ta 0x6d: g1 = nr, args o0 o1 o2, result o0; the carry of %xcc set means o0 is a
 * positive errno (arch/sparc/kernel/syscalls.S). */
#define FS_NR_write 4
#define FS_NR_exit_group 188
static inline long fs_syscall3(long nr, long a, long b, long c)
{
    register long g1 __asm__("g1") = nr;
    register long o0 __asm__("o0") = a;
    register long o1 __asm__("o1") = b;
    register long o2 __asm__("o2") = c;
    __asm__ volatile("ta 0x6d\n\t"
                     "bcc,pt %%xcc, 1f\n\t"
                     " nop\n\t"
                     "sub %%g0, %%o0, %%o0\n"
                     "1:"
                     : "+r"(o0) : "r"(g1), "r"(o1), "r"(o2) : "memory", "cc");
    return o0;
}

#else
#error "fs_syscall.h: unsupported ISA"
#endif

static inline long fs_sys_write(int fd, const void *buf, fs_size_t len)
{
    return fs_syscall3(FS_NR_write, fd, (long)buf, (long)len);
}

__attribute__((noreturn)) static inline void fs_sys_exit_group(int status)
{
    for (;;)
        fs_syscall3(FS_NR_exit_group, status, 0, 0);
}

#endif /* FS_SYSCALL_H */
