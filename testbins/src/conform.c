/* conform: the uftrace conformance program (tests/test_uftrace_conformance.py).  Each
 * scenario, named by argv[1], is a small call pattern; Debian's uftrace traces a native
 * -pg build of this file and emutrace the cross builds of every ISA, and the two call
 * graphs of the program's own functions (main and c_*) must be the same.  Calls are made
 * one per statement so that every ISA's compiler makes them in the same order. */
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <ucontext.h>
#include <unistd.h>

int c_leaf(int a, int b) { return a * 3 + b; }
int c_middle(int n) { return c_leaf(n, 1) + c_leaf(n, 2); }
int c_fact(int n) { return n <= 1 ? 1 : n * c_fact(n - 1); }

long long c_wide(long long a, unsigned b) { return a * 5 + b; }
char c_letter(char c, short s) { return (char)(c + s); }
double c_scale(double x, int z) { return x * 2 + z; }
float c_halve(float f) { return f / 2; }
unsigned long c_strlen(const char *s) { return strlen(s); }
const char *c_pick(int i) { return i ? "yes" : "no"; }

static jmp_buf c_env;
/* longjmp ends every descent: GCC sees no return from the recursion */
#pragma GCC diagnostic ignored "-Winfinite-recursion"
void c_jump_down(int n) {
  if (n == 0) longjmp(c_env, 7);
  else c_jump_down(n - 1);
}
int c_setjmp_case(void) { int r = setjmp(c_env); if (r == 0) c_jump_down(3); return r; }

/* (results kept: GCC drops a call to a function it finds const whose result is unused) */
static volatile int c_sink;
static ucontext_t c_main_ctx, c_co_ctx;
static char c_co_stack[65536];
void c_co_body(void) {
  c_sink = c_leaf(5, 5);
  swapcontext(&c_co_ctx, &c_main_ctx);
  c_sink = c_leaf(6, 6);
}
int c_context_case(void) {
  getcontext(&c_co_ctx);
  c_co_ctx.uc_stack.ss_sp = c_co_stack;
  c_co_ctx.uc_stack.ss_size = sizeof c_co_stack;
  c_co_ctx.uc_link = &c_main_ctx;
  makecontext(&c_co_ctx, c_co_body, 0);
  swapcontext(&c_main_ctx, &c_co_ctx);
  c_sink = c_leaf(1, 1);
  swapcontext(&c_main_ctx, &c_co_ctx);
  return c_leaf(2, 2);
}

/* SIGALRM: 14 on every ISA (SIGUSR1 is 16 on MIPS) */
static volatile int c_signalled;
void c_on_signal(int sig) { c_signalled = c_leaf(sig, 0); }
int c_signal_case(void) { signal(SIGALRM, c_on_signal); raise(SIGALRM); return c_signalled; }

int c_child_work(int n) { return c_fact(n); }
int c_fork_case(void) {
  pid_t pid = fork();
  if (pid == 0) _exit(c_child_work(3) == 6 ? 0 : 1);
  int status;
  waitpid(pid, &status, 0);
  return c_leaf(WEXITSTATUS(status), 0);
}

void *c_thread_body(void *arg) { return (void *)(long)c_fact((int)(long)arg); }
int c_thread_case(void) {
  pthread_t t;
  void *r;
  pthread_create(&t, NULL, c_thread_body, (void *)4L);
  pthread_join(t, &r);
  return (int)(long)r;
}

/* floats: long double (x87 80-bit on x86, IEEE binary128 on aarch64, riscv64 and s390x, IBM
 * double-double on ppc and ppc64le, double on arm and mips) and structs with floating-point
 * members, each followed by an int and a double that must come from the right registers or
 * stack slots.  Each function prints what it received (%Lf and %f: what uftrace shows). */
struct c_dd { double a, b; };
struct c_fff { float a, b, c; };
struct c_dl { double d; long l; };
struct c_fi { float f; int i; };
long double c_ldouble(long double x, int n, double d) {
  printf("c_ldouble(%Lf, %d, %f)\n", x, n, d);
  return x * n + d;
}
double c_dd_sum(struct c_dd s, int i, double x) {
  printf("c_dd_sum({%f, %f}, %d, %f)\n", s.a, s.b, i, x);
  return s.a + s.b + i + x;
}
double c_fff_sum(struct c_fff s, int i, double x) {
  printf("c_fff_sum({%f, %f, %f}, %d, %f)\n", s.a, s.b, s.c, i, x);
  return s.a + s.b + s.c + i + x;
}
double c_dl_sum(struct c_dl s, int i, double x) {
  printf("c_dl_sum({%f, %ld}, %d, %f)\n", s.d, s.l, i, x);
  return s.d + s.l + i + x;
}
double c_fi_sum(struct c_fi s, int i, double x) {
  printf("c_fi_sum({%f, %d}, %d, %f)\n", s.f, s.i, i, x);
  return s.f + s.i + i + x;
}
/* FP registers running out: seven doubles before a {double,double} (AArch64: too few v
 * registers left, the struct and x on the stack; x86-64: the struct in memory, x in
 * %xmm7; RISC-V: the integer convention); ARM VFP back-filling around a {float,float,float}
 * (a in s0, b in d1, the struct in s4-s6, y back in s1) */
double c_late_pair(double a, double b, double c, double d, double e, double f, double g,
                   struct c_dd s, int i, double x) {
  printf("c_late_pair(%f, %f, %f, %f, %f, %f, %f, {%f, %f}, %d, %f)\n", a, b, c, d, e, f, g,
         s.a, s.b, i, x);
  return a + b + c + d + e + f + g + s.a + s.b + i + x;
}
double c_backfill(float a, double b, struct c_fff s, int i, float y) {
  printf("c_backfill(%f, %f, {%f, %f, %f}, %d, %f)\n", a, b, s.a, s.b, s.c, i, y);
  return a + b + s.a + s.b + s.c + i + y;
}
/* struct results with floating-point members: in FP registers where the ABI says (x86-64
 * SSE eightbytes, AArch64/ARM VFP/ELFv2 homogeneous aggregates, RISC-V flattening), else
 * in integer registers or memory; each prints what it returns */
struct c_dd c_make_dd(double a, int i) {
  struct c_dd r = {a * i, -a};
  printf("c_make_dd(%f, %d) = {%f, %f}\n", a, i, r.a, r.b);
  return r;
}
struct c_fff c_make_fff(float a, int i) {
  struct c_fff r = {a, a * i, -a};
  printf("c_make_fff(%f, %d) = {%f, %f, %f}\n", a, i, r.a, r.b, r.c);
  return r;
}
struct c_fi c_make_fi(float f, int i) {
  struct c_fi r = {f * 2, i + 1};
  printf("c_make_fi(%f, %d) = {%f, %d}\n", f, i, r.f, r.i);
  return r;
}
int c_floats_case(void) {
  /* 2^60 + 1: exact in a 64-bit or 113-bit significand, not in a double's 53 bits */
  long double q = c_ldouble(1152921504606846977.0L, 3, -0.25);
  struct c_dd dd = {1.25, -2.5};
  struct c_fff fff = {0.5f, 1.5f, -2.75f};
  struct c_dl dl = {3.75, -7};
  struct c_fi fi = {4.5f, 9};
  double a = c_dd_sum(dd, 10, 0.125);
  double b = c_fff_sum(fff, 11, 0.25);
  double c = c_dl_sum(dl, 12, 0.375);
  double d = c_fi_sum(fi, 13, 0.5);
  double e = c_late_pair(1, 2, 3, 4, 5, 6, 7, dd, 14, 0.625);
  double f = c_backfill(0.75f, 8.5, fff, 15, -1.25f);
  struct c_dd md = c_make_dd(2.5, 3);
  struct c_fff mf = c_make_fff(1.5f, 4);
  struct c_fi mi = c_make_fi(-0.75f, 41);
  c_sink = (int)(md.a + mf.b + mi.f + mi.i);
  printf("%Lf %f %f %f %f %f %f\n", q, a, b, c, d, e, f);
  return 0;
}

int main(int argc, char **argv) {
  const char *what = argc > 1 ? argv[1] : "calls";
  if (!strcmp(what, "calls")) {
    int m = c_middle(4);
    int f = c_fact(5);
    printf("%d %d\n", m, f);
  }
  else if (!strcmp(what, "args")) {
    long long w = c_wide(-3, 9);
    char l = c_letter('a', 2);
    double d = c_scale(1.5, 3);
    float h = c_halve(5.0f);
    unsigned long n = c_strlen("hello");
    const char *p = c_pick(1);
    printf("%lld %c %g %g %lu %s\n", w, l, d, (double)h, n, p);
  }
  else if (!strcmp(what, "longjmp")) printf("%d\n", c_setjmp_case());
  else if (!strcmp(what, "context")) printf("%d\n", c_context_case());
  else if (!strcmp(what, "signal")) printf("%d\n", c_signal_case());
  else if (!strcmp(what, "fork")) printf("%d\n", c_fork_case());
  else if (!strcmp(what, "thread")) printf("%d\n", c_thread_case());
  else if (!strcmp(what, "floats")) c_floats_case();
  else return 2;
  return 0;
}
