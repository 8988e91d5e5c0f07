/* isadep: a program whose call path depends on the ISA, for `emutrace diff`.  Each
 * scenario takes one branch or the other by an ABI fact and prints which:
 *
 *   char    plain char is signed or unsigned       (unsigned: aarch64 arm ppc ppc64le
 *                                                   riscv64 s390x)
 *   endian  the byte order                         (big: mips ppc s390x)
 *   long    sizeof(long)                           (4: i386 arm mips mipsel ppc)
 *   same    nothing ISA-dependent: equal everywhere
 *
 * Built -O1 without inlining or sibling calls, like calls (Makefile). */
#include <stdio.h>
#include <string.h>

int char_is_signed(int v) { printf("char: signed (%d)\n", v); return v; }
int char_is_unsigned(int v) { printf("char: unsigned (%d)\n", v); return v; }

int classify(char c)
{
    if (c < 0)
        return char_is_signed(c);
    return char_is_unsigned(c);
}

int little_endian(unsigned first) { printf("endian: little (%u)\n", first); return 1; }
int big_endian(unsigned first) { printf("endian: big (%u)\n", first); return 2; }

int byte_order(unsigned value)
{
    unsigned char first;
    memcpy(&first, &value, 1);
    if (first == (value & 0xff))
        return little_endian(first);
    return big_endian(first);
}

long long_is_64(unsigned long v) { printf("long: 64 bits (%lu)\n", v); return 64; }
long long_is_32(unsigned long v) { printf("long: 32 bits (%lu)\n", v); return 32; }

long long_size(void)
{
    unsigned long v = (unsigned long)sizeof(long);
    if (v == 8)
        return long_is_64(v);
    return long_is_32(v);
}

int square(int x) { return x * x; }

int sum_squares(int n)
{
    int s = 0;
    for (int i = 1; i <= n; i++)
        s += square(i);
    return s;
}

int main(int argc, char **argv)
{
    const char *what = argc > 1 ? argv[1] : "all";
    int all = strcmp(what, "all") == 0;
    volatile int c200 = 200;
    if (all || strcmp(what, "char") == 0)
        classify((char)c200);
    if (all || strcmp(what, "endian") == 0)
        byte_order(0x11223344u);
    if (all || strcmp(what, "long") == 0)
        long_size();
    if (all || strcmp(what, "same") == 0)
        printf("same: %d\n", sum_squares(4));
    return 0;
}
