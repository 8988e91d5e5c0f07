/* emutrace native record writer (see ufwrite.h): per call or return the hot path finished,
 * the shadow stack's common case (trace/shadow.py), TailRule's bookkeeping
 * (backends/tails.py called/returned) and the uftrace record bytes
 * (trace/uftrace_write.py pack_record + uftrace_args.py pack_values), all without Python.
 *
 * Python stays the reference and the owner of everything unusual.  The writer takes an
 * event only when the Python code would do exactly this:
 *   call at sp S:   no open frame has an sp deeper than or equal to S (nothing to unwind,
 *                   shadow.py policy 3; but for the top frame at S itself when policy 3's
 *                   exception keeps it: no callee yet, another return address), S within
 *                   UW_STACK_SWITCH of the top frame's sp (policy 8), depth <
 *                   MAX_STACK unless the sink says how it keeps deeper records (uw_set_deep:
 *                   a uftrace directory counts them, the spill file writes their depth),
 *                   the callee has a plan whose strings (`char *` values) the event
 *                   carries copies of
 *                   (its argument layout in the record, taught by Python after it wrote
 *                   one such call itself);
 *   tail call (a jump to a function entry, the step hot path's) at sp S: no open frame's
 *                   sp is deeper than S, the depth and plan as a call's, and
 *                   the running function is not already the target;
 *   return at sp S: the top frame's sp is not deeper than S, its return address (its
 *                   call's, or for a tail chain the call's that began it) is where this
 *                   return goes, and the return site has a plan for the function of every
 *                   frame it closes (the top one, and those below it while the one closed
 *                   was entered by a tail call), the depth and strings as a call's.
 * Everything else returns 0 before anything changed, and the hot path hands the event to
 * Python.  Python disables the writer while a signal or exception frame is open (policies
 * 6 and 7) and whenever the records go to another sink than the one it was made for.
 *
 * Both stacks live in arrays that grow with depth only; the record bytes go into a fixed
 * buffer Python takes (appending them to the sink's stream in order) when it is full and
 * at every slow path.  `low` marks say from which index a stack changed since Python last
 * looked, so exchanging state costs what changed, not the depth.
 */
#include "ufwrite.h"

#include "abi.h"
#include "addrmap.h"

#include <stdlib.h>
#include <string.h>

#define UW_MAX_ITEMS UW_STRING_WORDS
#define UW_MAX_STACK 1024  /* uftrace_write.py MAX_STACK: uftrace's depth field holds less */
#define UW_MAGIC 5         /* uftrace.h RECORD_MAGIC */
#define UW_MAGIC_DEEP 6    /* the spill file's record deeper than that: its depth follows */
/* shadow.py STACK_SWITCH (policy 8): an sp this far below the top frame's is another
 * stack (swapcontext, a coroutine's): Python's */
#define UW_STACK_SWITCH 2000000u
#define UW_STRING_BYTES 65 /* the longest copy (trace/values.py STRING_LIMIT + 1) */
#define UW_MAX_TEXT (2 * UW_STRING_BYTES)  /* its UTF-8: two bytes per Latin-1 byte */
/* the bytes of one value at most: a number 8; UW_TEXT 2 + the text, padded; UW_COPY the
 * word, 2 + the copy, padded */
#define UW_MAX_VALUE (2 + UW_MAX_TEXT)
#define UW_MAX_RECORD (16 + 8 + UW_MAX_ITEMS * UW_MAX_VALUE + 8)

typedef struct {
    uint64_t func;  /* a return plan: the function whose frame it closes */
    uint64_t site;  /* a return plan: its return instruction */
    uint32_t n;     /* values written (0: none) */
    uint32_t payload;  /* 0: the record has no values (no name uftrace matches, or another
                          layout than the function's first) */
    uint32_t words;    /* snapshot words the record reads: 1 + the highest reg[i] (0: none) */
    uint32_t strings;  /* bit reg[i]: item i is a string (its copy must come with the event) */
    uint32_t max_bytes;  /* the record's bytes at most */
    uint8_t reg[UW_MAX_ITEMS], size[UW_MAX_ITEMS], form[UW_MAX_ITEMS];
    uint64_t mask[UW_MAX_ITEMS];
} uw_plan;

struct uw_state {
    int enabled;
    uint64_t code_mask;  /* TailRule.mask */
    uw_frame *frames;
    size_t n, cap, low;
    uw_tail *tails;
    size_t nt, tcap, tlow;
    addrmap callees, returns;
    uw_plan *plans;
    size_t nplans, plans_cap;
    uint8_t *buf;
    size_t len, buf_cap;
    uint64_t records, last_time;
    uint32_t deep;          /* records at depth >= UW_MAX_STACK: ufwrite.h UW_DEEP_* */
    uint64_t not_recorded;  /* UW_DEEP_COUNT: entries not written since uw_bytes_clear */
    uw_plan no_values;      /* (all zero) the plan of a record not written (`unrecorded`) */
    int changed;  /* a stack changed since Python last looked (uw_clean) */
};

/* ------------------------------------------------------------------ API for Python */
void uw_free(uw_state *u);

uw_state *uw_new(uint32_t buf_bytes, uint64_t code_mask)
{
    uw_state *u = calloc(1, sizeof *u);
    if (!u)
        return NULL;
    u->code_mask = code_mask;
    u->cap = u->tcap = 64;
    u->plans_cap = 64;
    u->buf_cap = buf_bytes < 4096 ? 4096 : buf_bytes;
    u->frames = calloc(u->cap, sizeof *u->frames);
    u->tails = calloc(u->tcap, sizeof *u->tails);
    int maps = addrmap_init(&u->callees, 256) | addrmap_init(&u->returns, 256);
    u->plans = calloc(u->plans_cap, sizeof *u->plans);
    u->buf = malloc(u->buf_cap);
    if (!u->frames || !u->tails || maps != 0 || !u->plans || !u->buf) {
        uw_free(u);
        return NULL;
    }
    return u;
}

void uw_free(uw_state *u)
{
    if (!u)
        return;
    free(u->frames); free(u->tails); addrmap_free(&u->callees); addrmap_free(&u->returns);
    free(u->plans); free(u->buf); free(u);
}

void uw_set_enabled(uw_state *u, uint32_t on) { u->enabled = (int)on; }
void uw_set_deep(uw_state *u, uint32_t mode) { u->deep = mode <= UW_DEEP_DEPTH ? mode : 0; }
uint64_t uw_not_recorded(const uw_state *u) { return u->not_recorded; }
int uw_enabled(const uw_state *u) { return u && u->enabled; }

static int add_plan(uw_state *u, addrmap *m, uint64_t key, uint64_t site, uint64_t func,
                    uint32_t payload, uint32_t n, const uint8_t *regs, const uint8_t *sizes,
                    const uint32_t *bits, const uint8_t *forms)
{
    if (n > UW_MAX_ITEMS)
        return -1;
    if (u->nplans == u->plans_cap) {
        uw_plan *p = realloc(u->plans, 2 * u->plans_cap * sizeof *p);
        if (!p)
            return -1;
        u->plans = p;
        u->plans_cap *= 2;
    }
    uw_plan *p = &u->plans[u->nplans];
    memset(p, 0, sizeof *p);
    p->func = func;
    p->site = site;
    p->n = n;
    p->payload = payload;
    p->max_bytes = 16;
    for (uint32_t i = 0; i < n; i++) {
        if (sizes[i] > 8 || bits[i] > 64 || regs[i] >= UW_MAX_ITEMS || forms[i] > UW_COPY)
            return -1;
        p->reg[i] = regs[i];
        p->size[i] = sizes[i];
        p->form[i] = forms[i];
        p->mask[i] = bits[i] >= 64 ? ~0ULL : (1ULL << bits[i]) - 1;
        if (payload && regs[i] + 1u > p->words)
            p->words = regs[i] + 1u;
        if (payload && forms[i] != UW_NUMBER)
            p->strings |= 1u << regs[i];
        p->max_bytes += forms[i] == UW_NUMBER ? 8 : UW_MAX_VALUE;
    }
    p->max_bytes += 8;
    if (addrmap_set(m, key, (int32_t)u->nplans) != 0)
        return -1;
    u->nplans++;
    return 0;
}

/* a callee's entry record: n argument words regs[i] (the hot path's snapshot index), each
 * masked to bits[i] and written in sizes[i] bytes (UW_NUMBER) or as a string (forms[i]) */
int uw_callee_plan(uw_state *u, uint64_t func, uint32_t payload, uint32_t n,
                   const uint8_t *regs, const uint8_t *sizes, const uint32_t *bits,
                   const uint8_t *forms)
{
    return add_plan(u, &u->callees, func, 0, func, payload, n, regs, sizes, bits, forms);
}

/* the key of a return plan: its site and the function whose frame it closes (a return that
 * closes a tail chain writes one exit per frame of the chain, each by its function's plan);
 * lookups check both, so two pairs with one key only make one of them Python's */
static uint64_t return_key(uint64_t site, uint64_t func)
{
    uint64_t key = addr_mix(site) ^ func;
    return key ? key : 1;
}

static int return_plan(const uw_state *u, uint64_t site, uint64_t func)
{
    int k = addrmap_get(&u->returns, return_key(site, func));
    return k >= 0 && u->plans[k].site == site && u->plans[k].func == func ? k : -1;
}

/* a return site's exit record when it closes func's frame (the top one, or one below it in
 * a tail chain the return closes): n (0 or 1) return values */
int uw_return_plan(uw_state *u, uint64_t site, uint64_t func, uint32_t payload, uint32_t n,
                   uint32_t size, uint32_t bits, uint32_t form)
{
    uint8_t reg = 0, sz = (uint8_t)size, fm = (uint8_t)form;
    return add_plan(u, &u->returns, return_key(site, func), site, func, payload, n, &reg, &sz,
                    &bits, &fm);
}

/* the stacks, for the exchange with Python: count, the lowest index changed since the last
 * uw_clean, the array (uw_frame / uw_tail words) */
size_t uw_frames_count(const uw_state *u) { return u->n; }
size_t uw_frames_low(const uw_state *u) { return u->low; }
const uw_frame *uw_frames(const uw_state *u) { return u->frames; }
size_t uw_tails_count(const uw_state *u) { return u->nt; }
size_t uw_tails_low(const uw_state *u) { return u->tlow; }
const uw_tail *uw_tails(const uw_state *u) { return u->tails; }

int uw_changed(const uw_state *u) { return u->changed; }

void uw_clean(uw_state *u)
{
    u->low = u->n;
    u->tlow = u->nt;
    u->changed = 0;
}

static int reserve(void **arr, size_t *cap, size_t need, size_t item)
{
    if (need <= *cap)
        return 0;
    size_t cap2 = *cap;
    while (cap2 < need)
        cap2 *= 2;
    void *p = realloc(*arr, cap2 * item);
    if (!p)
        return -1;
    *arr = p;
    *cap = cap2;
    return 0;
}

/* Python's stacks from index `from` on (count entries of words) replace C's */
int uw_frames_set(uw_state *u, size_t from, const uw_frame *src, size_t count)
{
    if (from > u->n || reserve((void **)&u->frames, &u->cap, from + count, sizeof *src))
        return -1;
    memcpy(u->frames + from, src, count * sizeof *src);
    u->n = from + count;
    u->low = u->n;
    return 0;
}

int uw_tails_set(uw_state *u, size_t from, const uw_tail *src, size_t count)
{
    if (from > u->nt || reserve((void **)&u->tails, &u->tcap, from + count, sizeof *src))
        return -1;
    memcpy(u->tails + from, src, count * sizeof *src);
    u->nt = from + count;
    u->tlow = u->nt;
    return 0;
}

/* the record bytes written since the last uw_bytes_clear, their count, the last time */
const uint8_t *uw_bytes(const uw_state *u) { return u->buf; }
size_t uw_bytes_len(const uw_state *u) { return u->len; }
uint64_t uw_records(const uw_state *u) { return u->records; }
uint64_t uw_last_time(const uw_state *u) { return u->last_time; }

void uw_bytes_clear(uw_state *u)
{
    u->len = 0;
    u->records = 0;
    u->not_recorded = 0;
}

/* ------------------------------------------------------------------ records */
static inline void put_le(uint8_t *p, uint64_t v, unsigned n)
{
    for (unsigned i = 0; i < n; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

/* does the event carry the copy of every string the plan writes? */
static int has_strings(const uw_plan *plan, const uw_event *e)
{
    return !plan->strings || (e->strings && (e->strings->mask & plan->strings) == plan->strings);
}

/* a string value at p (form UW_TEXT or UW_COPY, see ufwrite.h), its word `raw` (masked)
 * and copy (len bytes at bytes, or UW_STRING_NONE); the bytes written, padded to 4 */
static size_t put_string(uint8_t *p, unsigned form, uint64_t raw, uint16_t len,
                         const uint8_t *bytes)
{
    size_t n = 0;
    if (form == UW_COPY) {
        put_le(p, raw, 8);
        n = 8;
        put_le(p + n, len, 2);
        n += 2;
        if (len != UW_STRING_NONE) {
            memcpy(p + n, bytes, len);
            n += len;
        }
    } else {  /* uftrace_args.py _text: the text as UTF-8, NULL, or libmcount's <0x...> */
        uint8_t *text = p + 2;
        size_t t = 0;
        if (len != UW_STRING_NONE) {
            for (uint16_t i = 0; i < len; i++) {
                uint8_t c = bytes[i];
                if (c < 0x80) {
                    text[t++] = c;
                } else {
                    text[t++] = (uint8_t)(0xc0 | c >> 6);
                    text[t++] = (uint8_t)(0x80 | (c & 0x3f));
                }
            }
        } else if (raw == 0) {
            memcpy(text, "NULL", 4);
            t = 4;
        } else {
            static const char hex[] = "0123456789abcdef";
            int top = 60;
            while (top > 0 && !(raw >> top & 0xf))
                top -= 4;
            text[t++] = '<';
            text[t++] = '0';
            text[t++] = 'x';
            for (int sh = top; sh >= 0; sh -= 4)
                text[t++] = (uint8_t)hex[raw >> sh & 0xf];
            text[t++] = '>';
        }
        put_le(p, t, 2);
        n = 2 + t;
    }
    while (n % 4)
        p[n++] = 0;
    return n;
}

/* uftrace.h struct uftrace_record: u64 time; u64 type:2 more:1 magic:3 depth:10 addr:48;
 * (the spill file's record at depth >= UW_MAX_STACK: magic UW_MAGIC_DEEP, then the depth
 * in a u64); then, when `more`, the values: each little-endian in its size (or a string,
 * ufwrite.h's forms), padded to 4, the whole to 8 (uftrace_args.py pack_values).  A
 * uftrace directory's record that deep is not written, an entry counted
 * (uftrace_write.py UftraceDirSink.write: not_recorded) */
static void put_record(uw_state *u, unsigned type, uint64_t time, size_t depth, uint64_t func,
                       const uw_plan *plan, const uw_event *e)
{
    const uint64_t *regs = e->regs;
    uint8_t *p = u->buf + u->len;
    int more = plan->payload && plan->n;
    int deep = depth >= UW_MAX_STACK;
    if (deep && u->deep == UW_DEEP_COUNT) {
        u->not_recorded += type == 0;
        return;
    }
    uint64_t word = type | (uint64_t)more << 2 | (uint64_t)(deep ? UW_MAGIC_DEEP : UW_MAGIC) << 3
                    | (uint64_t)(depth & 0x3ff) << 6 | (func & ((1ULL << 48) - 1)) << 16;
    put_le(p, time, 8);
    put_le(p + 8, word, 8);
    size_t n = 16;
    if (deep) {
        put_le(p + n, depth, 8);
        n += 8;
    }
    if (more) {
        size_t start = n;
        for (uint32_t i = 0; i < plan->n; i++) {
            unsigned r = plan->reg[i];
            if (plan->form[i] != UW_NUMBER) {  /* (has_strings checked the copy is there) */
                n += put_string(p + n, plan->form[i], regs[r] & plan->mask[i],
                                e->strings->len[r], e->strings->bytes[r]);
                continue;
            }
            unsigned size = plan->size[i];
            put_le(p + n, regs[r] & plan->mask[i], size);
            n += size;
            while ((n - start) % 4)
                p[n++] = 0;
        }
        while ((n - start) % 8)
            p[n++] = 0;
    }
    u->len += n;
    u->records++;
    u->last_time = time;
}

/* the callee plan a call to target at sp would be written with, or -1: the call is Python's
 * (see the top of this file).  Draining the byte buffer first when it lacks room for one
 * record is the only thing it may change; the stacks have room for one more entry after it. */
static int room(uw_state *u, void (*drain)(void))
{
    if (!u->enabled)
        return 0;
    if (u->buf_cap - u->len < UW_MAX_RECORD) {
        drain();  /* Python takes the bytes (and may have disabled the writer) */
        if (!u->enabled || u->buf_cap - u->len < UW_MAX_RECORD)
            return 0;
    }
    return 1;
}

/* shadow.py `_unwind_by_sp`'s exception for a call (ret: its return address) at the top
 * frame's own sp: the function calling before it allocates its frame (ppc `mflr r0;
 * bl _savegpr0_N; stdu r1,...`) finishes nothing while that frame has made no call yet and
 * the call does not return where the frame's own call returns */
static int calls_before_frame(const uw_frame *top, uint64_t ret)
{
    return !(top->flags & F_CALLED) && !((top->flags & F_RET_KNOWN) && top->ret == ret);
}

/* a record at this depth a uftrace directory does not keep (UftraceDirSink.write): its
 * function needs no plan, only the stacks change */
static int unrecorded(const uw_state *u, size_t depth)
{
    return depth >= UW_MAX_STACK && u->deep == UW_DEEP_COUNT;
}

/* the plan the callee's entry record is written by (u->no_values: none is written), or
 * NULL: Python's */
static const uw_plan *call_plan(uw_state *u, uint64_t target, uint64_t sp, uint64_t ret,
                                int inclusive, void (*drain)(void))
{
    if (!room(u, drain))
        return NULL;
    const uw_frame *top = u->n ? &u->frames[u->n - 1] : NULL;
    int k = addrmap_get(&u->callees, target);
    /* an open frame at an sp deeper than (or, for a call, equal to) the call's is finished
     * (unwound): Python's; so is a record deeper than uftrace keeps unless the sink says
     * what becomes of it */
    if ((top && (top->sp < sp || (inclusive && top->sp == sp
                                  && !calls_before_frame(top, ret))
                 || top->sp - sp > UW_STACK_SWITCH))
        || (u->n >= UW_MAX_STACK && u->deep == UW_DEEP_PYTHON))
        return NULL;
    const uw_plan *plan = unrecorded(u, u->n) ? &u->no_values : k >= 0 ? &u->plans[k] : NULL;
    if (!plan || reserve((void **)&u->frames, &u->cap, u->n + 1, sizeof *u->frames)
        || reserve((void **)&u->tails, &u->tcap, u->nt + 1, sizeof *u->tails))
        return NULL;
    return plan;
}

int uw_call_words(uw_state *u, uint64_t target, uint64_t sp, uint64_t after,
                  void (*drain)(void))
{
    const uw_plan *plan = call_plan(u, target, sp, after, 1, drain);
    return plan ? (int)plan->words : -1;
}

int uw_take(uw_state *u, const uw_event *e, void (*drain)(void))
{
    if (e->call) {
        const uw_plan *plan = call_plan(u, e->target, e->sp, e->after, 1, drain);
        if (!plan || !has_strings(plan, e))
            return 0;
        uw_frame *top = u->n ? &u->frames[u->n - 1] : NULL;
        /* TailRule.called(target, return_addr) */
        if (u->tlow > u->nt)
            u->tlow = u->nt;
        u->tails[u->nt++] = (uw_tail){e->target & u->code_mask, e->after & u->code_mask, 1};
        /* ShadowStack._push */
        if (top && !(top->flags & F_CALLED)) {
            top->flags |= F_CALLED;
            if (u->low > u->n - 1)
                u->low = u->n - 1;
        }
        u->frames[u->n++] = (uw_frame){e->target, e->after, e->sp, e->time, F_RET_KNOWN};
        put_record(u, 0, e->time, u->n - 1, e->target, plan, e);
        u->changed = 1;
        return 1;
    }
    if (!room(u, drain))
        return 0;
    const uw_frame *top = u->n ? &u->frames[u->n - 1] : NULL;
    if (!top || top->sp < e->sp || !(top->flags & F_RET_KNOWN) || top->ret != e->target
        || (u->n - 1 >= UW_MAX_STACK && u->deep == UW_DEEP_PYTHON))
        return 0;  /* unwinding, an unmatched return, too deep: Python's */
    /* ShadowStack._return pops the top frame, then every frame below it while the one
     * popped was entered by a tail call: each exit by its function's plan at this site */
    size_t chain = 1;
    while (u->frames[u->n - chain].flags & F_TAIL && chain < u->n)
        chain++;
    size_t need = 0;
    for (size_t i = 0; i < chain; i++) {
        if (unrecorded(u, u->n - 1 - i))
            continue;
        int k = return_plan(u, e->site, u->frames[u->n - 1 - i].func);
        if (k < 0 || !has_strings(&u->plans[k], e))
            return 0;
        need += u->plans[k].max_bytes + 8;
    }
    if (need > u->buf_cap - u->len)
        return 0;  /* (room was made for one record) */
    /* TailRule.returned() */
    if (u->nt) {
        u->nt--;
        if (u->tlow > u->nt)
            u->tlow = u->nt;
    }
    for (size_t i = 0; i < chain; i++) {  /* ShadowStack._pop: an exit has its entry's depth */
        uint64_t func = u->frames[u->n - 1].func;
        u->n--;
        put_record(u, 1, e->time, u->n, func, unrecorded(u, u->n) ? &u->no_values
                   : &u->plans[return_plan(u, e->site, func)], e);
    }
    if (u->low > u->n)
        u->low = u->n;
    u->changed = 1;
    return 1;
}

/* a jump to a function entry at sp, as TailRule.is_tail and ShadowStack's TailCall take it:
 * the running function (TailRule's top) becomes target, and target's frame is pushed above
 * the top one, with its return address and sp (a tail chain) or, on an empty stack, its
 * own.  1 if taken; 0: Python's, nothing changed (also when TailRule's top already is
 * target: no tail call, Python's all the same). */
int uw_take_tail(uw_state *u, const uw_event *e, void (*drain)(void))
{
    /* (unwinds strictly deeper frames) */
    const uw_plan *plan = call_plan(u, e->target, e->sp, 0, 0, drain);
    if (!plan || !has_strings(plan, e))
        return 0;
    uint64_t code = e->target & u->code_mask;
    if (u->nt && u->tails[u->nt - 1].code == code)
        return 0;
    uw_frame *top = u->n ? &u->frames[u->n - 1] : NULL;
    if (u->nt) {  /* TailRule.is_tail: the running function is now target */
        u->tails[u->nt - 1].code = code;
        if (u->tlow > u->nt - 1)
            u->tlow = u->nt - 1;
    }
    uw_frame frame = {e->target, 0, e->sp, e->time, 0};
    if (top) {
        frame = (uw_frame){e->target, top->ret, top->sp, e->time,
                           (top->flags & F_RET_KNOWN) | F_TAIL};
        if (!(top->flags & F_CALLED)) {
            top->flags |= F_CALLED;
            if (u->low > u->n - 1)
                u->low = u->n - 1;
        }
    }
    u->frames[u->n++] = frame;
    put_record(u, 0, e->time, u->n - 1, e->target, plan, e);
    u->changed = 1;
    return 1;
}
