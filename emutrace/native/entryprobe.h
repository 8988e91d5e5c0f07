/* emutrace native hot path: the entry backend's probes under emulation (entryprobe.c).
 *
 * hotpath.c asks ep_trap at a breakpoint its site table did not finish and ep_block at every
 * block before anything else (hook delivery: ep_enter at every block that starts at a
 * hooked probe); it writes the call record ep_trap asks for itself (the
 * argument snapshot is hotpath.c's), and tells ep_returned each return it finished.
 */
#ifndef EMUTRACE_ENTRYPROBE_H
#define EMUTRACE_ENTRYPROBE_H

#include <stdint.h>

typedef struct ep_state ep_state;

/* ep_trap's and ep_enter's answers (EP_NONE: ep_enter's, no hooked probe there) */
enum { EP_PYTHON = 0, EP_STEP = 1, EP_CALL = 2, EP_NONE = 3 };
/* ep_block's answers */
enum { EP_GO = 0, EP_COUNT = 1, EP_RESTARTED = 2 };

typedef struct {
    uint64_t ra, call_sp, entry_sp, target;  /* the call record: Call(ra, target, call_sp) */
} ep_call;

int ep_trap(ep_state *e, uint64_t addr, ep_call *out);
/* hook delivery: a block starts at addr, the probed instruction not run yet; the frame rule
 * of the hooked probe there, if any (no step-over: nothing was written) */
int ep_enter(ep_state *e, uint64_t addr, ep_call *out);
int ep_hooked_at(const ep_state *e, uint64_t addr);
uint64_t ep_hooked_count(const ep_state *e);
int ep_block(ep_state *e, uint64_t addr, uint32_t attention);
void ep_returned(ep_state *e, uint64_t target);

#endif
