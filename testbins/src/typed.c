/* typed: functions whose parameters and return values have the C types emutrace's typed
 * argument capture shows (char of both signednesses, unsigned long, double and float,
 * const char *, an enum, _Bool, a small struct by value).  Each callee prints what it
 * received, so the program's own output (under qemu-user) is the oracle for the values
 * emutrace reads at the call.  Built -O1 without inlining or sibling calls (Makefile). */
#include <stdio.h>

enum colour { RED, GREEN = 5, BLUE };

struct pair {
    int x;
    int y;
};

int take_char(char c)
{
    printf("take_char %d\n", c);
    return c;
}

int take_schar(signed char c)
{
    printf("take_schar %d\n", c);
    return c;
}

unsigned take_uchar(unsigned char c)
{
    printf("take_uchar %u\n", c);
    return c;
}

unsigned long take_ulong(unsigned long v)
{
    printf("take_ulong %lu\n", v);
    return v / 3;
}

long take_long(long v)
{
    printf("take_long %ld\n", v);
    return v * 2;
}

double scale(double x, int n)
{
    printf("scale %.17g %d\n", x, n);
    return x * n;
}

float halve(float f)
{
    printf("halve %.9g\n", (double)f);
    return f / 2;
}

unsigned long measure(const char *s)
{
    unsigned long n = 0;
    while (s[n])
        n++;
    printf("measure \"%s\" %lu\n", s, n);
    return n;
}

const char *colour_name(enum colour c)
{
    printf("colour_name %d\n", (int)c);
    return c == RED ? "red" : c == GREEN ? "green" : "blue";
}

_Bool is_big(long v)
{
    printf("is_big %ld\n", v);
    return v > 1000;
}

int sum_pair(struct pair p)
{
    printf("sum_pair %d %d\n", p.x, p.y);
    return p.x + p.y;
}

int main(void)
{
    volatile int c200 = 200;
    take_char((char)c200);
    take_char('A');
    take_schar((signed char)c200);
    take_uchar((unsigned char)c200);
    take_ulong(3000000000UL);
    take_long(-42);
    scale(1.5, 3);
    halve(2.5f);
    measure("hi\tthere");
    colour_name(GREEN);
    colour_name(BLUE);
    is_big(5000);
    is_big(7);
    struct pair p = {3, -4};
    sum_pair(p);
    return 0;
}
