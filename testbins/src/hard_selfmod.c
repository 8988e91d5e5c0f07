/* A program that reads its own code and rewrites it.  Its stdout is the
 * same natively, under qemu-user and under every emutrace backend: a checksum of code that
 * has run (armed: breakpoints must stay hidden from loads), a copy of a function that has run
 * called from an executable page, and a function that has run overwritten in place (text
 * made writable with mprotect) with another's code, then called again. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

__attribute__((noinline)) int answer(int x) { return x * 6; }
__attribute__((noinline)) int helper(int x) { return x + 1; }
__attribute__((noinline)) int caller(int x) { return helper(x) * 2 + helper(x + 2); }
__attribute__((noinline)) int patchme(int x) { return helper(x) + helper(x + 1) + caller(x) + 3; }

static unsigned checksum(const volatile unsigned char *p, size_t n)
{
	unsigned h = 2166136261u; /* FNV-1a */
	for (size_t i = 0; i < n; i++)
		h = (h ^ p[i]) * 16777619u;
	return h;
}

int main(void)
{
	typedef int (*fn)(int);
	printf("answer %d caller %d patchme %d\n", answer(7), caller(3), patchme(3));
	/* 1. self-reading: code that ran (its calls and returns are armed under int3) */
	printf("code sums %08x %08x\n", checksum((const unsigned char *)(uintptr_t)caller, 24),
	       checksum((const unsigned char *)(uintptr_t)patchme, 24));
	/* 2. a copy of a function that ran, called on a fresh executable page */
	long page = sysconf(_SC_PAGESIZE);
	unsigned char *copy = mmap(0, page, PROT_READ | PROT_WRITE | PROT_EXEC,
				   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (copy == MAP_FAILED)
		return 2;
	memcpy(copy, (const void *)(uintptr_t)answer, 32);
	__builtin___clear_cache((char *)copy, (char *)copy + 32);
	printf("copy %d\n", ((fn)(uintptr_t)copy)(7));
	/* 3. a function that ran, overwritten in place by answer's code, called again */
	uintptr_t at = (uintptr_t)patchme & ~(uintptr_t)(page - 1);
	if (mprotect((void *)at, 2 * page, PROT_READ | PROT_WRITE | PROT_EXEC) != 0)
		return 3;
	volatile uintptr_t target = (uintptr_t)patchme; /* the store is not dead */
	memcpy((void *)target, copy, 16);
	__builtin___clear_cache((char *)target, (char *)target + 16);
	fn again = patchme;
	__asm__ volatile("" : "+r"(again)); /* no constant folding of the call */
	printf("overwritten %d\n", again(7));
	printf("caller still %d\n", caller(4));
	return 0;
}
