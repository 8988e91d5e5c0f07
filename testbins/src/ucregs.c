/* ucregs: what a swapcontext round trip must keep, checked by the program itself.
 * main keeps many values live across swapcontext (GCC holds them in the callee-saved
 * registers: r14-r31, f14-f31 on ppc32), the coroutine fills those registers with other
 * values before switching back; a resumed getcontext returns again; each context keeps
 * its own signal mask; a size below sizeof(ucontext_t) is refused (ppc32 Linux:
 * sys_swapcontext's EINVAL).  Prints what it found, then "ok" or "BAD". */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <unistd.h>

static ucontext_t main_ctx, co_ctx, again_ctx;
static char co_stack[65536];
static volatile long lin = 3;
static volatile double din = 1.5;
static volatile long lout;
static volatile double dout;
static int co_blocked;

void co_body(void) {
  long a0 = lin * 101, a1 = lin * 103, a2 = lin * 107, a3 = lin * 109, a4 = lin * 113;
  long a5 = lin * 127, a6 = lin * 131, a7 = lin * 137, a8 = lin * 139, a9 = lin * 149;
  double e0 = din * 7, e1 = din * 11, e2 = din * 13, e3 = din * 17, e4 = din * 19;
  double e5 = din * 23, e6 = din * 29, e7 = din * 31;
  sigset_t now;
  sigprocmask(SIG_BLOCK, NULL, &now);
  co_blocked = sigismember(&now, SIGUSR2);
  swapcontext(&co_ctx, &main_ctx);
  lout = a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7 + a8 + a9;
  dout = e0 + e1 + e2 + e3 + e4 + e5 + e6 + e7;
}

int main(void) {
  int bad = 0;
  volatile int passes = 0;
  getcontext(&again_ctx);
  if (++passes < 3) setcontext(&again_ctx);
  printf("getcontext returned %d times\n", passes);
  bad |= passes != 3;

  sigset_t usr2, now;
  sigemptyset(&usr2);
  sigaddset(&usr2, SIGUSR2);
  sigprocmask(SIG_BLOCK, &usr2, NULL);
  getcontext(&co_ctx);  /* the coroutine's mask: SIGUSR2 blocked */
  sigprocmask(SIG_UNBLOCK, &usr2, NULL);
  co_ctx.uc_stack.ss_sp = co_stack;
  co_ctx.uc_stack.ss_size = sizeof co_stack;
  co_ctx.uc_link = &main_ctx;
  makecontext(&co_ctx, co_body, 0);

  long b0 = lin * 2, b1 = lin * 3, b2 = lin * 5, b3 = lin * 7, b4 = lin * 11;
  long b5 = lin * 13, b6 = lin * 17, b7 = lin * 19, b8 = lin * 23, b9 = lin * 29;
  double f0 = din * 2, f1 = din * 3, f2 = din * 5, f3 = din * 7, f4 = din * 11;
  double f5 = din * 13, f6 = din * 17, f7 = din * 19;
  swapcontext(&main_ctx, &co_ctx);
  sigprocmask(SIG_BLOCK, NULL, &now);
  long lsum = b0 + b1 + b2 + b3 + b4 + b5 + b6 + b7 + b8 + b9;
  double dsum = f0 + f1 + f2 + f3 + f4 + f5 + f6 + f7;
  printf("kept across the switch: %ld %g\n", lsum, dsum);
  printf("masks: coroutine %d, main %d\n", co_blocked, sigismember(&now, SIGUSR2));
  bad |= lsum != 3 * 129 || dsum != 1.5 * 77 || co_blocked != 1 || sigismember(&now, SIGUSR2);

  swapcontext(&main_ctx, &co_ctx);  /* the coroutine finishes, uc_link brings us back */
  printf("coroutine's own: %ld %g\n", lout, dout);
  bad |= lout != 3 * 1216 || dout != 1.5 * 150;

  errno = 0;
  long r = syscall(SYS_swapcontext, NULL, NULL, 16L);
  printf("size 16: %ld %s\n", r, errno == EINVAL ? "EINVAL" : "?");
  bad |= r != -1 || errno != EINVAL;
  puts(bad ? "BAD" : "ok");
  return bad;
}
