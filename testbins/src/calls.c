/* calls - the main test program of the static-glibc tier.
 *
 * usage: calls [SCENARIO [ARG]]     (SCENARIO defaults to "all")
 *
 * Every scenario prints deterministic lines (no addresses, no time) and
 * has a small, fixed call graph made of functions with meaningful names.
 * Built with -O1 -fno-inline -fno-optimize-sibling-calls, so each call
 * written here is a real call instruction; calls_tail.c is the exception
 * (see there).
 *
 * Rule kept throughout: at most one call to a program function per
 * expression, so the call order does not depend on the ISA's argument
 * evaluation order.
 */
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "calls.h"

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

/* ------------------------------------------------------------ recursion */

long fact(long n)
{
    if (n <= 1)
        return 1;
    return n * fact(n - 1);
}

long fib(long n)
{
    if (n < 2)
        return n;
    long a = fib(n - 1);
    long b = fib(n - 2);
    return a + b;
}

int is_odd(unsigned n);

int is_even(unsigned n)
{
    if (n == 0)
        return 1;
    return is_odd(n - 1);
}

int is_odd(unsigned n)
{
    if (n == 0)
        return 0;
    return is_even(n - 1);
}

void scenario_recursion(const char *arg)
{
    (void)arg;
    long f = fact(10);
    printf("recursion: fact(10) = %ld\n", f);
    long g = fib(12);
    printf("recursion: fib(12) = %ld\n", g);
    int e = is_even(10);
    printf("recursion: is_even(10) = %d\n", e);
    int o = is_odd(7);
    printf("recursion: is_odd(7) = %d\n", o);
}

/* ---------------------------------------------------------------- fnptr */

long op_add(long a, long b) { return a + b; }
long op_sub(long a, long b) { return a - b; }
long op_mul(long a, long b) { return a * b; }
long op_max(long a, long b) { return a > b ? a : b; }
long op_xor(long a, long b) { return a ^ b; }

struct named_op {
    const char *name;
    binop_fn fn;
};

static const struct named_op op_table[] = {
    {"add", op_add}, {"sub", op_sub}, {"mul", op_mul},
    {"max", op_max}, {"xor", op_xor},
};

long apply_twice(binop_fn fn, long a, long b)
{
    long once = fn(a, b);
    return fn(once, b);
}

void scenario_fnptr(const char *arg)
{
    (void)arg;
    long acc = 5;
    for (unsigned i = 0; i < ARRAY_LEN(op_table); i++) {
        long b = (long)i + 3;
        long r = op_table[i].fn(acc, b);
        printf("fnptr: %s(%ld, %ld) = %ld\n", op_table[i].name, acc, b, r);
        acc = r;
    }
    long t = apply_twice(op_mul, 3, 4);
    printf("fnptr: apply_twice(mul, 3, 4) = %ld\n", t);
}

/* ---------------------------------------------------------------- qsort */

int compare_ints(const void *pa, const void *pb)
{
    int a = *(const int *)pa;
    int b = *(const int *)pb;
    return (a > b) - (a < b);
}

int compare_names(const void *pa, const void *pb)
{
    return strcmp(*(const char *const *)pa, *(const char *const *)pb);
}

static const int unsorted_ints[] = {42, 7, 19, 3, 88, 23, 61, 5, 14, 36};
static const char *const unsorted_names[] = {
    "x86_64", "i386", "aarch64", "arm", "mips",
    "mipsel", "riscv64", "ppc", "ppc64le", "s390x",
};

void print_ints(const char *label, const int *v, unsigned n)
{
    printf("qsort: %s", label);
    for (unsigned i = 0; i < n; i++)
        printf(" %d", v[i]);
    printf("\n");
}

int find_int(const int *sorted, unsigned n, int key)
{
    const int *hit = bsearch(&key, sorted, n, sizeof *sorted, compare_ints);
    return hit ? (int)(hit - sorted) : -1;
}

void scenario_qsort(const char *arg)
{
    (void)arg;
    int ints[ARRAY_LEN(unsorted_ints)];
    const char *names[ARRAY_LEN(unsorted_names)];
    memcpy(ints, unsorted_ints, sizeof ints);
    memcpy(names, unsorted_names, sizeof names);

    qsort(ints, ARRAY_LEN(ints), sizeof ints[0], compare_ints);
    print_ints("sorted", ints, ARRAY_LEN(ints));
    int at23 = find_int(ints, ARRAY_LEN(ints), 23);
    printf("qsort: bsearch 23 -> index %d\n", at23);
    int at24 = find_int(ints, ARRAY_LEN(ints), 24);
    printf("qsort: bsearch 24 -> index %d\n", at24);

    qsort(names, ARRAY_LEN(names), sizeof names[0], compare_names);
    printf("qsort: names");
    for (unsigned i = 0; i < ARRAY_LEN(names); i++)
        printf(" %s", names[i]);
    printf("\n");
}

/* -------------------------------------------------------------- varargs */

long sum_varargs(int count, ...)
{
    va_list ap;
    long total = 0;
    va_start(ap, count);
    for (int i = 0; i < count; i++)
        total += va_arg(ap, long);
    va_end(ap);
    return total;
}

double average_doubles(int count, ...)
{
    va_list ap;
    double total = 0.0;
    va_start(ap, count);
    for (int i = 0; i < count; i++)
        total += va_arg(ap, double);
    va_end(ap);
    return total / count;
}

int format_into(char *buf, size_t size, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, size, fmt, ap);
    va_end(ap);
    return n;
}

void scenario_varargs(const char *arg)
{
    (void)arg;
    char buf[64];
    long s = sum_varargs(5, 10L, 20L, 30L, 40L, 50L);
    printf("varargs: sum_varargs(10..50) = %ld\n", s);
    long s9 = sum_varargs(9, 1L, 2L, 3L, 4L, 5L, 6L, 7L, 8L, 9L);
    printf("varargs: sum_varargs(1..9) = %ld\n", s9);
    double avg = average_doubles(4, 1.5, 2.5, 3.25, 4.75);
    printf("varargs: average_doubles = %.3f\n", avg);
    int n = format_into(buf, sizeof buf, "%s-%d-%05.1f-%c", "fmt", 42, 3.5, 'z');
    printf("varargs: format_into -> \"%s\" (%d chars)\n", buf, n);
    int t = format_into(buf, 8, "%s/%s", "truncated", "output");
    printf("varargs: format_into(size 8) -> \"%s\" (%d chars wanted)\n", buf, t);
}

/* --------------------------------------------------------------- struct */

struct point {
    int x;
    int y;
};

struct record {
    long values[6];
    char tag[16];
};

struct point make_point(int x, int y)
{
    struct point p = {x, y};
    return p;
}

struct point add_points(struct point a, struct point b)
{
    struct point r = {a.x + b.x, a.y + b.y};
    return r;
}

struct record make_record(const char *tag, long base)
{
    struct record r;
    for (int i = 0; i < 6; i++)
        r.values[i] = base + i * i;
    for (int i = 0; i < 15; i++) {
        r.tag[i] = tag[i];
        if (!tag[i])
            break;
    }
    r.tag[15] = '\0';
    return r;
}

long sum_record(struct record r)
{
    long total = 0;
    for (int i = 0; i < 6; i++)
        total += r.values[i];
    return total;
}

struct record scale_record(struct record r, long k)
{
    for (int i = 0; i < 6; i++)
        r.values[i] *= k;
    r.tag[0] = (char)(r.tag[0] - 'a' + 'A');
    return r;
}

void scenario_struct(const char *arg)
{
    (void)arg;
    struct point a = make_point(3, -4);
    struct point b = make_point(10, 20);
    struct point c = add_points(a, b);
    printf("struct: add_points((3,-4), (10,20)) = (%d, %d)\n", c.x, c.y);
    struct record r = make_record("record", 100);
    long s = sum_record(r);
    printf("struct: make_record(\"%s\", 100) sum = %ld\n", r.tag, s);
    struct record r3 = scale_record(r, 3);
    long s3 = sum_record(r3);
    printf("struct: scale_record(x3) \"%s\" values[5] = %ld sum = %ld\n",
           r3.tag, r3.values[5], s3);
    printf("struct: original unchanged: values[5] = %ld\n", r.values[5]);
}

/* --------------------------------------------------------------- args9 */

long combine9(long a1, long a2, long a3, long a4, long a5, long a6, long a7,
              long a8, long a9)
{
    return a1 * 1 + a2 * 2 + a3 * 3 + a4 * 4 + a5 * 5 + a6 * 6 + a7 * 7 +
           a8 * 8 + a9 * 9;
}

long long mixed9(char a, short b, int c, long d, unsigned char e,
                 unsigned short f, unsigned g, long long h, int i)
{
    return (long long)a + b * 10LL + c * 100LL + d * 1000LL + e * 10000LL +
           f * 100000LL + g * 1000000LL + h * 10000000LL + i * 100000000LL;
}

void scenario_args9(const char *arg)
{
    (void)arg;
    long r = combine9(11, 22, 33, 44, 55, 66, 77, 88, 99);
    printf("args9: combine9(11, 22, ..., 99) = %ld\n", r);
    long q = combine9(-1, 2, -3, 4, -5, 6, -7, 8, -9);
    printf("args9: combine9(-1, 2, ..., -9) = %ld\n", q);
    long long m = mixed9(1, 2, 3, 4, 5, 6, 7, 8, 9);
    printf("args9: mixed9(1, ..., 9) = %lld\n", m);
}

/* ------------------------------------------------------------- longjmp */

static jmp_buf jump_target;

void jump_level5(int v)
{
    longjmp(jump_target, v);
}

void jump_level4(int v) { jump_level5(v + 1); }
void jump_level3(int v) { jump_level4(v + 1); }
void jump_level2(int v) { jump_level3(v + 1); }
void jump_level1(int v) { jump_level2(v + 1); }

void scenario_longjmp(const char *arg)
{
    (void)arg;
    volatile int stage = 0;
    int rv = setjmp(jump_target);
    if (rv == 0) {
        stage = 1;
        jump_level1(1);
        stage = 2; /* not reached */
    }
    printf("longjmp: setjmp returned %d at stage %d\n", rv, stage);
}

/* -------------------------------------------------------------- fileio */

static const char fileio_text[] =
    "line one\n"
    "line two\n"
    "the third and last line\n";

int fileio_write_all(int fd, const char *buf, size_t len)
{
    while (len > 0) {
        ssize_t n = write(fd, buf, len);
        if (n <= 0)
            return -1;
        buf += n;
        len -= (size_t)n;
    }
    return 0;
}

long fileio_read_all(int fd, char *buf, size_t cap)
{
    size_t got = 0;
    while (got < cap) {
        ssize_t n = read(fd, buf + got, cap - got);
        if (n < 0)
            return -1;
        if (n == 0)
            break;
        got += (size_t)n;
    }
    return (long)got;
}

void scenario_fileio(const char *arg)
{
    const char *path = arg ? arg : "calls-out.txt";
    char buf[128];
    struct stat st;

    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) {
        printf("fileio: open failed\n");
        return;
    }
    int w = fileio_write_all(fd, fileio_text, sizeof fileio_text - 1);
    long end = (long)lseek(fd, 0, SEEK_CUR);
    printf("fileio: write %s, offset now %ld\n", w == 0 ? "ok" : "failed", end);

    lseek(fd, 0, SEEK_SET);
    long n = fileio_read_all(fd, buf, sizeof buf - 1);
    buf[n < 0 ? 0 : n] = '\0';
    printf("fileio: read back %ld bytes:\n%s", n, buf);

    int s = fstat(fd, &st);
    printf("fileio: fstat %s, size %ld\n", s == 0 ? "ok" : "failed",
           (long)st.st_size);

    long pos = (long)lseek(fd, 9, SEEK_SET);
    long m = fileio_read_all(fd, buf, 8);
    buf[m < 0 ? 0 : m] = '\0';
    printf("fileio: at offset %ld: \"%s\"\n", pos, buf);

    close(fd);
    int u = unlink(path);
    printf("fileio: unlink %s\n", u == 0 ? "ok" : "failed");
}

/* ---------------------------------------------------------------- heap */

void fill_words(uint32_t *p, size_t from, size_t to)
{
    for (size_t i = from; i < to; i++)
        p[i] = (uint32_t)i * 2654435761u;
}

uint32_t checksum_words(const uint32_t *p, size_t n)
{
    uint32_t h = 2166136261u; /* FNV-1a over 32-bit words */
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 16777619u;
    return h;
}

unsigned small_blocks_total(unsigned count)
{
    char *blocks[32];
    unsigned total = 0;
    for (unsigned i = 0; i < count && i < 32; i++) {
        blocks[i] = malloc(8 + i * 24);
        memset(blocks[i], 'a' + (int)(i % 26), 7 + i * 24);
        blocks[i][7 + i * 24] = '\0';
    }
    for (unsigned i = 0; i < count && i < 32; i++) {
        total += (unsigned)strlen(blocks[i]);
        free(blocks[i]);
    }
    return total;
}

void scenario_heap(const char *arg)
{
    (void)arg;
    size_t words = 16;
    unsigned reallocs = 0;
    uint32_t *buf = malloc(words * sizeof *buf);
    if (!buf) {
        printf("heap: malloc failed\n");
        return;
    }
    fill_words(buf, 0, words);
    while (words < ((size_t)1 << 19)) { /* up to 2 MiB */
        size_t more = words * 2;
        uint32_t *grown = realloc(buf, more * sizeof *buf);
        if (!grown) {
            printf("heap: realloc failed\n");
            free(buf);
            return;
        }
        buf = grown;
        fill_words(buf, words, more);
        words = more;
        reallocs++;
    }
    uint32_t sum = checksum_words(buf, words);
    printf("heap: %u reallocs, %lu bytes, checksum 0x%08x\n", reallocs,
           (unsigned long)(words * sizeof *buf), (unsigned)sum);
    uint32_t head = checksum_words(buf, 16);
    printf("heap: first 16 words checksum 0x%08x\n", (unsigned)head);
    free(buf);
    unsigned total = small_blocks_total(32);
    printf("heap: 32 small blocks, %u bytes of text\n", total);
}

/* --------------------------------------------------------------- float */

double mean_of(const double *v, int n)
{
    double total = 0.0;
    for (int i = 0; i < n; i++)
        total += v[i];
    return total / n;
}

double poly_eval(double x)
{
    /* 2x^3 - 3x^2 + 0.5x - 7 by Horner */
    return ((2.0 * x - 3.0) * x + 0.5) * x - 7.0;
}

double divide(double a, double b)
{
    return a / b;
}

void scenario_float(const char *arg)
{
    (void)arg;
    static const double values[] = {1.5, 2.25, -3.125, 10.0, 0.375};
    double mean = mean_of(values, 5);
    printf("float: mean %f %e %g\n", mean, mean, mean);
    double p = poly_eval(1.75);
    printf("float: poly(1.75) %f %e %g\n", p, p, p);
    double third = divide(1.0, 3.0);
    printf("float: 1/3 %f %e %g %.15g\n", third, third, third, third);
    double big = divide(6.02214076e23, 1000.0);
    printf("float: big %f %e %g\n", big, big, big);
    double tiny = divide(1.0, 1048576.0);
    printf("float: tiny %f %e %g\n", tiny, tiny, tiny);
    double neg = divide(-22.0, 7.0);
    printf("float: -22/7 %.3f %.2e %g (int %d)\n", neg, neg, neg, (int)neg);
}

/* ---------------------------------------------------------------- tail */

void scenario_tail(const char *arg)
{
    (void)arg;
    long chain = tail_chain_start(5);
    printf("tail: tail_chain_start(5) = %ld\n", chain);
    long pp = tail_ping(7, 1);
    printf("tail: tail_ping(7, 1) = %ld\n", pp);
    long d = tail_dispatch(op_mul, 6, 7);
    printf("tail: tail_dispatch(mul, 6, 7) = %ld\n", d);
}

/* ---------------------------------------------------------------- deep */

long deep_recurse(long depth)
{
    if (depth <= 0)
        return 0;
    long below = deep_recurse(depth - 1);
    return below + depth;
}

void scenario_deep(const char *arg)
{
    long depth = arg ? strtol(arg, NULL, 10) : 10000;
    long sum = deep_recurse(depth);
    printf("deep: depth %ld, sum %ld\n", depth, sum);
}

/* -------------------------------------------------------------- exit42 */

void exit_inner(int code)
{
    printf("exit42: exit(%d) from exit_inner\n", code);
    exit(code);
}

void exit_outer(void)
{
    exit_inner(42);
}

void scenario_exit42(const char *arg)
{
    (void)arg;
    exit_outer();
}

/* --------------------------------------------------------------- crash */

int *volatile null_pointer = NULL;

int crash_deref(int *p)
{
    return *p;
}

void scenario_crash(const char *arg)
{
    (void)arg;
    printf("crash: dereferencing NULL\n");
    fflush(stdout);
    int v = crash_deref(null_pointer);
    printf("crash: survived with %d\n", v);
}

/* ---------------------------------------------------------------- main */

struct scenario {
    const char *name;
    void (*run)(const char *arg);
    int in_all;
};

static const struct scenario scenarios[] = {
    {"recursion", scenario_recursion, 1},
    {"fnptr", scenario_fnptr, 1},
    {"qsort", scenario_qsort, 1},
    {"varargs", scenario_varargs, 1},
    {"struct", scenario_struct, 1},
    {"args9", scenario_args9, 1},
    {"longjmp", scenario_longjmp, 1},
    {"fileio", scenario_fileio, 1},
    {"heap", scenario_heap, 1},
    {"float", scenario_float, 1},
    {"tail", scenario_tail, 1},
    {"deep", scenario_deep, 1},
    {"exit42", scenario_exit42, 0},
    {"crash", scenario_crash, 0},
};

void run_scenario(const struct scenario *s, const char *arg)
{
    printf("== %s ==\n", s->name);
    s->run(arg);
}

/* `all`: every scenario with in_all set, in table order.  ARG is passed
 * to fileio only (its file name); deep keeps its default depth. */
void run_all(const char *arg)
{
    for (unsigned i = 0; i < ARRAY_LEN(scenarios); i++) {
        if (!scenarios[i].in_all)
            continue;
        int is_fileio = strcmp(scenarios[i].name, "fileio") == 0;
        run_scenario(&scenarios[i], is_fileio ? arg : NULL);
    }
    printf("== all done ==\n");
}

int main(int argc, char **argv)
{
    const char *name = argc > 1 ? argv[1] : "all";
    const char *arg = argc > 2 ? argv[2] : NULL;

    if (strcmp(name, "all") == 0) {
        run_all(arg);
        return 0;
    }
    for (unsigned i = 0; i < ARRAY_LEN(scenarios); i++) {
        if (strcmp(name, scenarios[i].name) == 0) {
            run_scenario(&scenarios[i], arg);
            return 0;
        }
    }
    fprintf(stderr, "calls: unknown scenario '%s'; one of: all", name);
    for (unsigned i = 0; i < ARRAY_LEN(scenarios); i++)
        fprintf(stderr, " %s", scenarios[i].name);
    fprintf(stderr, "\n");
    return 2;
}
