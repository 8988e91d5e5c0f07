/* emutrace native hot path: the entry backend's probes under emulation (entryprobe.c).
 *
 * hotpath.c asks ep_trap at a breakpoint its site table did not finish and ep_block at every
 * block before anything else (hook delivery: ep_enter at every block that starts at a
 * hooked probe); it writes the call record ep_trap asks for itself (the
 * argument snapshot is hotpath.c's), and tells ep_returned each return it finished.
 */
#ifndef EMUTRACE_ENTRYPROBE_H
#define EMUTRACE_ENTRYPROBE_H

#include <stddef.h>
#include <stdint.h>

#include "abi.h"

typedef struct ep_state ep_state;

/* ep_trap's and ep_enter's answers (EP_NONE: ep_enter's, no hooked probe there) */
enum { EP_PYTHON = 0, EP_STEP = 1, EP_CALL = 2, EP_NONE = 3 };
/* ep_block's answers */
enum { EP_GO = 0, EP_COUNT = 1, EP_RESTARTED = 2 };

typedef struct {
    uint64_t ra, call_sp, entry_sp, target;  /* the call record: Call(ra, target, call_sp) */
} ep_call;

int ep_trap(ep_state *e, uint64_t addr, ep_call *out);
/* the ptrace loop's: the frame rule at a probe, the step-over left to the caller */
int ep_decide(ep_state *e, uint64_t addr, ep_call *out, uint8_t *orig);
int ep_probe_at(const ep_state *e, uint64_t addr);
/* hook delivery: a block starts at addr, the probed instruction not run yet; the frame rule
 * of the hooked probe there, if any (no step-over: nothing was written) */
int ep_enter(ep_state *e, uint64_t addr, ep_call *out);
int ep_hooked_at(const ep_state *e, uint64_t addr);
uint64_t ep_hooked_count(const ep_state *e);
int ep_block(ep_state *e, uint64_t addr, uint32_t attention);
void ep_returned(ep_state *e, uint64_t target);

/* the table as Python fills it (backends/entry_native.py; the ptrace loop's pl_entry_*
 * wrappers), and the port the frame rule reads through when it is not Unicorn's */
struct core_ops;
ep_state *ep_new(uc_engine *uc, void *reg_read, void *reg_write, void *mem_read,
                 void *mem_write, void *ctl, int32_t pc_reg, int32_t sp_reg, int32_t link_reg,
                 uint32_t word, uint32_t big_endian, uint64_t push, uint64_t code_mask,
                 int32_t mode_reg, uint64_t mode_bit);
void ep_bind_port(ep_state *e, const struct core_ops *ops, void *port);
void ep_free(ep_state *e);
int ep_probe_add(ep_state *e, uint64_t addr, uint64_t func, const uint8_t *orig,
                 const uint8_t *bp, uint32_t len, uint32_t pc_bits);
void ep_probe_active(ep_state *e, uint64_t addr, uint32_t on);
void ep_set(ep_state *e, uint32_t hold, uint64_t process_entry, uint64_t handler_entry);
int ep_frames_splice(ep_state *e, uint64_t keep, uint64_t n, const uint64_t *words);
uint32_t ep_dirty(const ep_state *e);
uint64_t ep_depth(const ep_state *e);
const ep_frame *ep_frames(const ep_state *e);
void ep_clean(ep_state *e);
uint64_t ep_counter(const ep_state *e, uint32_t which);

#endif
