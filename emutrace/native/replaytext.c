/* emutrace's text trace in C: `emutrace run`'s call graph in uftrace `replay` layout, the
 * same bytes as the Python reference (trace/format.py `_replay` and its `_Writer`), from the
 * records the spill file keeps (trace/spill.py):
 *
 *   - C's record bytes (`rt_packed`): uftrace's 16-byte records as ufwrite.c writes them
 *     for the spill file (a deep record's depth in the word after it; values after a record
 *     whose `more` bit is set, laid out per function as the sink's `plan_values` accepted),
 *     read as spill.py `_unpack` reads them, each value shown as values.py `render` shows
 *     it (integer kinds and `char *` copies: the only ones C's writer writes);
 *   - Python's records (`rt_rows`), encoded by native/replaytext.py with their values
 *     already rendered to text (any kind: Python renders them, C only places the text).
 *
 * Python hands over, once per function and on demand (a record of an unknown function
 * stops the feed with RT_NAME, its address in rt_missing), the name as the output encodes
 * it, whether -F/-N/--start name it, and how many arguments -A shows.  The lines go into
 * a byte buffer Python writes out whenever a feed stops with RT_FULL, and at the end.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "addrmap.h"

enum {  /* what a feed or rt_finish returns */
    RT_DONE = 0,      /* every record of the block was formatted */
    RT_FULL = 1,      /* the output buffer is over its mark: write it out, then go on */
    RT_NAME = 2,      /* a record of a function without a name: rt_function, then go on */
    RT_NOMEM = -1,
    RT_UNOPENED = -2, /* an exit with no open frame (format.py: "exit without entry") */
    RT_NOLAYOUT = -3, /* values of a function without a layout (spill.py: KeyError) */
    RT_CUT = -4,      /* a record runs past the end of its block */
    RT_NOTIME = -5    /* a C exit at a depth no entry has reached (spill.py: IndexError) */
};

enum {  /* a value's kind (trace/values.py KINDS that C's writer writes) */
    K_AUTO, K_INT, K_UINT, K_HEX, K_OCT, K_CHAR, K_UCHAR, K_BOOL, K_PTR, K_STR, K_BUF,
    K_COUNT
};

/* a function's flags (rt_function) */
#define FN_FILTER 1u   /* -F names it */
#define FN_NOTRACE 2u  /* -N names it */
#define FN_START 4u    /* --start names it */

#define MAX_INDENT 256       /* format.py MAX_INDENT */
#define DURATION_WIDTH 18    /* format.py _DURATION_WIDTH */
#define MAGIC_DEEP 6         /* spill.py _MAGIC_DEEP (ufwrite.c UW_MAGIC_DEEP) */
#define NO_COPY 0xffff       /* spill.py _NO_COPY */
#define STRING_LIMIT 64      /* values.py STRING_LIMIT */
#define OUT_MARK (1u << 20)  /* output bytes held before a feed stops with RT_FULL */
#define MAX_VALUES 64        /* values per layout */

typedef struct {
    uint8_t kind, size, bits;
} rt_slot;

typedef struct {
    uint64_t addr;
    size_t name, name_len;   /* in the names arena */
    uint32_t flags;
    int64_t args;            /* arguments shown (-A), or -1: the default */
    int32_t layout[2];       /* first slot of its entries' / exits' layout, or -1 */
    uint32_t count[2];       /* values in each */
} rt_func;

typedef struct {
    uint8_t shown, in_filter, hidden;
    uint64_t child_depth, line_depth;
    int64_t budget;          /* levels its callees may still show (-D), or -1: no limit */
    size_t text, text_len;   /* "name(args)" in the text arena, when shown */
} rt_frame;

typedef struct {
    char *p;
    size_t len, cap;
} rt_buf;

typedef struct rt_state {
    /* options (rt_options) */
    uint32_t show_args, show_retval, have_filters;
    int64_t max_depth, default_args;
    /* functions */
    addrmap index;           /* address -> rt_func index (address 0: zero_func) */
    int32_t zero_func;
    rt_func *funcs;
    size_t nfuncs, funcs_cap;
    rt_buf names;
    rt_slot *slots;
    size_t nslots, slots_cap;
    uint64_t missing;
    uint64_t last_addr;      /* the function looked up last, and its index */
    int32_t last_func;       /* (-1: none yet) */
    /* a section's state (rt_section) */
    int started;
    rt_frame *stack;
    size_t depth, stack_cap;
    rt_buf texts;            /* the open frames' call texts, a stack */
    int pending;             /* a shown entry held until it is known to be a leaf */
    uint64_t pending_depth;
    size_t pending_text, pending_len;
    int pending_mark;
    __int128 *times;         /* the entry time per record depth (C's exits need it) */
    size_t ntimes, times_cap;
    rt_buf out;
    rt_buf scratch;          /* a value's text */
} rt_state;

/* how the kernel entered a frame (format.py _ENTERED_MARKS) and how a frame ended without
 * its return (an exit's note), and the texts they make */
enum { MARK_NONE, MARK_SIGNAL, MARK_TRAP, MARK_RESUMED };
enum { NOTE_NONE, NOTE_UNWOUND, NOTE_AT_EXIT };
static const char *const ENTRY_TAIL[] = {  /* an entry's own line: "name(args)" + this */
    " {", " { /* signal handler */", " { /* exception */", " { /* resumed */"};
static const char *const LEAF_TAIL[4][3] = {  /* [mark][note]: after a leaf's ";" */
    {"", " /* unwound */", " /* at exit */"},
    {" /* signal handler */", " /* signal handler, unwound */",
     " /* signal handler, at exit */"},
    {" /* exception */", " /* exception, unwound */", " /* exception, at exit */"},
    {" /* resumed */", " /* resumed, unwound */", " /* resumed, at exit */"}};
static const char *const CLOSE_NOTE[] = {"", " (unwound) */", " (at exit) */"};

/* ------------------------------------------------------------------ buffers */

static int reserve(rt_buf *b, size_t more)
{
    if (b->len + more <= b->cap)
        return 0;
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + more)
        cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p)
        return -1;
    b->p = p;
    b->cap = cap;
    return 0;
}

/* (callers reserve first) */
static inline void put(rt_buf *b, const char *s, size_t n)
{
    memcpy(b->p + b->len, s, n);
    b->len += n;
}

static inline void put_str(rt_buf *b, const char *s)
{
    put(b, s, strlen(s));
}

static size_t udec(char *end, unsigned __int128 v)  /* digits ending at end; their count */
{
    char *p = end;
    while (v > UINT64_MAX) {  /* (128-bit division is slow: only what needs it) */
        *--p = (char)('0' + (int)(v % 10));
        v /= 10;
    }
    uint64_t w = (uint64_t)v;
    do {
        *--p = (char)('0' + (int)(w % 10));
        w /= 10;
    } while (w);
    return (size_t)(end - p);
}

/* a number's decimal text (Python's str) into b; b has 48 bytes reserved */
static void put_dec(rt_buf *b, __int128 v)
{
    char tmp[48];
    unsigned __int128 u = v < 0 ? (unsigned __int128)0 - (unsigned __int128)v
                                : (unsigned __int128)v;
    size_t n = udec(tmp + sizeof tmp, u);
    if (v < 0)
        b->p[b->len++] = '-';
    put(b, tmp + sizeof tmp - n, n);
}

static void put_hex(rt_buf *b, uint64_t v)  /* Python's f"{v:#x}" */
{
    static const char digits[] = "0123456789abcdef";
    char tmp[16];
    size_t n = 0;
    do {
        tmp[15 - n++] = digits[v & 15];
        v >>= 4;
    } while (v);
    put(b, "0x", 2);
    put(b, tmp + 16 - n, n);
}

static void put_oct(rt_buf *b, uint64_t v)  /* Python's f"0{v:o}" */
{
    char tmp[24];
    size_t n = 0;
    do {
        tmp[23 - n++] = (char)('0' + (int)(v & 7));
        v >>= 3;
    } while (v);
    b->p[b->len++] = '0';
    put(b, tmp + 24 - n, n);
}

/* ------------------------------------------------------------------ values */

static inline uint64_t mask_of(unsigned bits)
{
    return bits >= 64 ? ~(uint64_t)0 : ((uint64_t)1 << bits) - 1;
}

static inline int64_t signed_of(uint64_t u, unsigned bits)  /* u masked to bits */
{
    if (bits < 64 && (u >> (bits - 1)) & 1)
        return (int64_t)(u | ~mask_of(bits));
    return (int64_t)u;
}

/* values.py quote_c: a C literal of Latin-1 text, at most STRING_LIMIT characters and
 * `...` after the quote when there were more; b has 4 * STRING_LIMIT + 8 bytes reserved */
static void put_quoted(rt_buf *b, const uint8_t *s, size_t n, char quote)
{
    static const char digits[] = "0123456789abcdef";
    b->p[b->len++] = quote;
    for (size_t i = 0; i < n && i < STRING_LIMIT; i++) {
        uint8_t c = s[i];
        if (c == (uint8_t)quote || c == '\\') {
            b->p[b->len++] = '\\';
            b->p[b->len++] = (char)c;
        } else if (c == '\n') {
            put(b, "\\n", 2);
        } else if (c == '\t') {
            put(b, "\\t", 2);
        } else if (c >= 0x20 && c < 0x7f) {
            b->p[b->len++] = (char)c;
        } else {
            put(b, "\\x", 2);
            b->p[b->len++] = digits[c >> 4];
            b->p[b->len++] = digits[c & 15];
        }
    }
    b->p[b->len++] = quote;
    if (n > STRING_LIMIT)
        put(b, "...", 3);
}

/* values.py render(Value(kind, bits, raw, text)): raw as the record holds it (its bytes,
 * unsigned), text the copy of a `char *` (NULL: none); b has 300 bytes reserved */
static void put_value(rt_buf *b, unsigned kind, unsigned bits, uint64_t raw,
                      const uint8_t *text, size_t text_len)
{
    uint64_t u = raw & mask_of(bits);
    switch (kind) {
    case K_AUTO: {  /* values.py format_auto */
        int64_t s = signed_of(u, bits);
        if (s >= -100000 && s <= 100000)
            put_dec(b, s);
        else if (bits == 64 && u > 0xffff0000u && u <= 0xffffffffu)
            put_dec(b, (__int128)u - ((__int128)1 << 32));
        else
            put_hex(b, u);
        return;
    }
    case K_INT:
        put_dec(b, signed_of(u, bits));
        return;
    case K_UINT:
        put_dec(b, u);
        return;
    case K_CHAR:
    case K_UCHAR: {
        unsigned code = (unsigned)(raw & 0xff);
        if (code >= 0x20 && code < 0x7f) {
            uint8_t c = (uint8_t)code;
            put_quoted(b, &c, 1, '\'');
        } else {
            put_dec(b, kind == K_CHAR && code >= 0x80 ? (int)code - 0x100 : (int)code);
        }
        return;
    }
    case K_BOOL:
        put_str(b, raw ? "true" : "false");
        return;
    case K_PTR:
        if (raw == 0)
            b->p[b->len++] = '0';
        else
            put_hex(b, raw);
        return;
    case K_STR:
    case K_BUF:
        if (text)
            put_quoted(b, text, text_len, '"');
        else if (raw == 0)
            b->p[b->len++] = '0';
        else
            put_hex(b, raw);
        return;
    case K_OCT:
        put_oct(b, u);
        return;
    default:  /* K_HEX */
        put_hex(b, u);
        return;
    }
}

#define VALUE_ROOM (4 * STRING_LIMIT + 64)

/* ------------------------------------------------------------------ functions */

static rt_func *func_of(rt_state *s, uint64_t addr)
{
    if (s->last_func >= 0 && addr == s->last_addr)
        return &s->funcs[s->last_func];
    int32_t i = addr ? addrmap_get(&s->index, addr) : s->zero_func;
    if (i < 0)
        return NULL;
    s->last_addr = addr;
    s->last_func = i;
    return &s->funcs[i];
}

/* ------------------------------------------------------------------ lines */

/* format.py _Writer._line: the duration column, the indentation (or past MAX_INDENT the
 * depth in words), then the text: the parts a, b, c, d, e one after another */
static int line(rt_state *s, const char *dur, size_t dur_len, uint64_t depth,
                const char *a, size_t na, const char *b, size_t nb, const char *c, size_t nc,
                const char *d, size_t nd, const char *e, size_t ne)
{
    rt_buf *o = &s->out;
    if (reserve(o, DURATION_WIDTH + dur_len + 3 + 2 * MAX_INDENT + 48 + na + nb + nc + nd + ne))
        return -1;
    if (dur_len < DURATION_WIDTH) {
        memset(o->p + o->len, ' ', DURATION_WIDTH - dur_len);
        o->len += DURATION_WIDTH - dur_len;
    }
    put(o, dur, dur_len);
    put(o, " | ", 3);
    uint64_t indent = depth;
    if (depth > MAX_INDENT) {
        indent = MAX_INDENT;
    }
    memset(o->p + o->len, ' ', 2 * indent);
    o->len += 2 * indent;
    if (depth > MAX_INDENT) {
        put(o, "[depth ", 7);
        put_dec(o, depth);
        put(o, "] ", 2);
    }
    put(o, a, na);
    put(o, b, nb);
    put(o, c, nc);
    put(o, d, nd);
    put(o, e, ne);
    o->p[o->len++] = '\n';
    return 0;
}

/* format.py _Writer.flush: the held entry as a line of its own, "name(args) {" */
static int flush_pending(rt_state *s)
{
    if (!s->pending)
        return 0;
    s->pending = 0;
    const char *tail = ENTRY_TAIL[s->pending_mark];
    return line(s, "", 0, s->pending_depth, s->texts.p + s->pending_text, s->pending_len,
                tail, s->pending_mark ? strlen(tail) : 2, "", 0, "", 0, "", 0);
}

/* one entry: format.py _replay's entry branch (values: the n values' texts, rendered on
 * demand by `text(i)` into s->scratch) */
typedef int (*value_text)(rt_state *s, void *ctx, uint32_t i);

static int entry(rt_state *s, rt_func *f, __int128 time, uint64_t rec_depth, int mark,
                 uint32_t n, value_text text, void *ctx)
{
    if (rec_depth >= s->ntimes) {  /* spill.py _keep_time */
        if (rec_depth >= s->times_cap) {
            size_t cap = s->times_cap ? s->times_cap : 64;
            while (cap <= rec_depth)
                cap *= 2;
            __int128 *t = realloc(s->times, cap * sizeof *t);
            if (!t)
                return RT_NOMEM;
            s->times = t;
            s->times_cap = cap;
        }
        memset(s->times + s->ntimes, 0, (rec_depth + 1 - s->ntimes) * sizeof *s->times);
        s->ntimes = rec_depth + 1;
    }
    s->times[rec_depth] = time;
    if (!s->started && (f->flags & FN_START))
        s->started = 1;
    int parent_in_filter = 0, parent_hidden = 0;
    uint64_t depth = 0;
    int64_t budget = s->max_depth;
    if (s->depth) {
        rt_frame *p = &s->stack[s->depth - 1];
        parent_in_filter = p->in_filter;
        parent_hidden = p->hidden;
        depth = p->child_depth;
        budget = p->budget;
    }
    int in_filter = parent_in_filter || (f->flags & FN_FILTER);
    int hidden = parent_hidden || (f->flags & FN_NOTRACE);
    if (f->flags & FN_FILTER)  /* each -F match restarts the -D budget (trace/filters.py) */
        budget = s->max_depth;
    int shown = s->started && (in_filter || !s->have_filters) && !hidden && budget != 0;
    if (s->depth == s->stack_cap) {
        size_t cap = s->stack_cap ? 2 * s->stack_cap : 256;
        rt_frame *st = realloc(s->stack, cap * sizeof *st);
        if (!st)
            return RT_NOMEM;
        s->stack = st;
        s->stack_cap = cap;
    }
    rt_frame *fr = &s->stack[s->depth];
    fr->shown = (uint8_t)shown;
    fr->in_filter = (uint8_t)in_filter;
    fr->hidden = (uint8_t)hidden;
    fr->child_depth = shown ? depth + 1 : depth;
    fr->line_depth = depth;
    fr->budget = shown && budget > 0 ? budget - 1 : budget;
    fr->text = s->texts.len;
    fr->text_len = 0;
    if (shown) {
        rt_buf *t = &s->texts;
        if (reserve(t, f->name_len + 1))
            return RT_NOMEM;
        put(t, s->names.p + f->name, f->name_len);
        uint32_t shown_n = 0;
        if (s->show_args) {
            int64_t count = f->args >= 0 ? f->args : s->default_args;
            shown_n = count >= 0 && (uint64_t)count < n ? (uint32_t)count : n;
        }
        /* uftrace's rule: a name ending in its parameter list (--demangle=full) takes no
           "()" when no value is shown */
        int parens = shown_n > 0 || f->name_len == 0
                     || s->names.p[f->name + f->name_len - 1] != ')';
        if (parens)
            t->p[t->len++] = '(';
        for (uint32_t i = 0; i < shown_n; i++) {
            int r = text(s, ctx, i);
            if (r)
                return r;
            if (reserve(t, s->scratch.len + 2))
                return RT_NOMEM;
            if (i)
                put(t, ", ", 2);
            put(t, s->scratch.p, s->scratch.len);
        }
        if (reserve(t, 1))
            return RT_NOMEM;
        if (parens)
            t->p[t->len++] = ')';
        fr->text_len = t->len - fr->text;
        if (flush_pending(s))
            return RT_NOMEM;
        s->pending = 1;
        s->pending_depth = depth;
        s->pending_text = fr->text;
        s->pending_len = fr->text_len;
        s->pending_mark = mark;
    }
    s->depth++;
    return RT_DONE;
}

/* one exit: format.py _replay's exit branch and _Writer.exit; ret: the return value's text
 * (NULL: none, or not shown); note: NOTE_* */
static int exit_(rt_state *s, rt_func *f, __int128 duration, const char *ret, size_t ret_len,
                 int note)
{
    if (!s->depth)
        return RT_UNOPENED;
    rt_frame *fr = &s->stack[--s->depth];
    if (!fr->shown)
        return RT_DONE;
    if (!s->show_retval)
        ret = NULL;
    char dur[48];
    size_t dur_len = udec(dur + sizeof dur,
                          duration < 0 ? (unsigned __int128)0 - (unsigned __int128)duration
                                       : (unsigned __int128)duration);
    if (duration < 0)
        dur[sizeof dur - ++dur_len] = '-';
    const char *d = dur + sizeof dur - dur_len;
    const char *text = s->texts.p + fr->text;
    int r;
    if (s->pending && s->pending_depth == fr->line_depth) {  /* a leaf: one line */
        s->pending = 0;
        const char *tail = LEAF_TAIL[s->pending_mark][note];
        size_t tail_len = s->pending_mark || note ? strlen(tail) : 0;
        if (ret)
            r = line(s, d, dur_len, fr->line_depth, text, fr->text_len, " = ", 3, ret, ret_len,
                     ";", 1, tail, tail_len);
        else
            r = line(s, d, dur_len, fr->line_depth, text, fr->text_len, ";", 1, tail,
                     tail_len, "", 0, "", 0);
    } else {
        if (flush_pending(s))
            return RT_NOMEM;
        const char *name = s->names.p + f->name;
        if (note) {
            r = line(s, d, dur_len, fr->line_depth, "} /* ", 5, name, f->name_len,
                     CLOSE_NOTE[note], strlen(CLOSE_NOTE[note]), "", 0, "", 0);
        } else if (ret) {
            r = line(s, d, dur_len, fr->line_depth, "} = ", 4, ret, ret_len, "; /* ", 5, name,
                     f->name_len, " */", 3);
        } else {
            r = line(s, d, dur_len, fr->line_depth, "} /* ", 5, name, f->name_len, " */", 3,
                     "", 0, "", 0);
        }
    }
    s->texts.len = fr->text;  /* the frame's text goes with it */
    return r ? RT_NOMEM : RT_DONE;
}

/* ------------------------------------------------------------------ C's records */

typedef struct {
    const uint8_t *data;
    const rt_slot *slots;
    size_t offs[MAX_VALUES];   /* where each value starts */
} packed_values;

static inline uint64_t le(const uint8_t *p, unsigned size)  /* size bytes, little-endian */
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    switch (size) {
    case 8: {
        uint64_t v;
        memcpy(&v, p, 8);
        return v;
    }
    case 4: {
        uint32_t v;
        memcpy(&v, p, 4);
        return v;
    }
    case 2: {
        uint16_t v;
        memcpy(&v, p, 2);
        return v;
    }
    case 1:
        return p[0];
    }
#endif
    uint64_t v = 0;
    for (unsigned i = size; i--;)
        v = v << 8 | p[i];
    return v;
}

static int packed_text(rt_state *s, void *ctx, uint32_t i)
{
    packed_values *pv = ctx;
    const rt_slot *slot = &pv->slots[i];
    const uint8_t *p = pv->data + pv->offs[i];
    rt_buf *b = &s->scratch;
    b->len = 0;
    if (reserve(b, VALUE_ROOM))
        return RT_NOMEM;
    if (slot->size == 0) {  /* spill.py pack_copy: the word, a u16 length, the bytes */
        uint64_t raw = le(p, 8);
        unsigned n = (unsigned)le(p + 8, 2);
        if (n == NO_COPY)
            put_value(b, slot->kind, slot->bits, raw, NULL, 0);
        else
            put_value(b, slot->kind, slot->bits, raw, p + 10, n);
    } else {
        put_value(b, slot->kind, slot->bits, le(p, slot->size), NULL, 0);
    }
    return RT_DONE;
}

/* the values after a record (spill.py _unpack / _unpack_copies): where each starts, and
 * the position after them all; 0 when they run past end */
static size_t walk_values(const uint8_t *data, size_t pos, size_t end, const rt_slot *slots,
                          uint32_t n, size_t *offs)
{
    size_t start = pos;
    for (uint32_t i = 0; i < n; i++) {
        offs[i] = pos;
        if (slots[i].size == 0) {
            if (end - pos < 10)
                return 0;
            unsigned len = (unsigned)le(data + pos + 8, 2);
            pos += 10;
            if (len != NO_COPY) {
                if (end - pos < len)
                    return 0;
                pos += len;
            }
            pos += (4 - (pos - start) % 4) % 4;
        } else {
            pos += slots[i].size + (4 - slots[i].size % 4) % 4;
        }
        if (pos > end)
            return 0;
    }
    pos += (8 - (pos - start) % 8) % 8;
    return pos > end ? 0 : pos;
}

int rt_packed(rt_state *s, const uint8_t *data, size_t len, size_t *at)
{
    size_t pos = *at;
    packed_values pv;
    pv.data = data;
    while (pos < len) {
        if (s->out.len >= OUT_MARK) {
            *at = pos;
            return RT_FULL;
        }
        if (len - pos < 16)
            return RT_CUT;
        uint64_t time = le(data + pos, 8), word = le(data + pos + 8, 8);
        uint64_t depth = (word >> 6) & 0x3ff, addr = word >> 16;
        size_t next = pos + 16;
        if (((word >> 3) & 7) == MAGIC_DEEP) {
            if (len - next < 8)
                return RT_CUT;
            depth = le(data + next, 8);
            next += 8;
        }
        rt_func *f = func_of(s, addr);
        if (!f) {
            s->missing = addr;
            *at = pos;
            return RT_NAME;
        }
        int is_exit = (int)(word & 1);
        uint32_t n = 0;
        if (word & 4) {
            if (f->layout[is_exit] < 0)
                return RT_NOLAYOUT;
            n = f->count[is_exit];
            pv.slots = &s->slots[f->layout[is_exit]];
            next = walk_values(data, next, len, pv.slots, n, pv.offs);
            if (!next)
                return RT_CUT;
        }
        int r;
        if (is_exit) {
            if (depth >= s->ntimes)
                return RT_NOTIME;
            const char *ret = NULL;
            size_t ret_len = 0;
            if (n && s->depth && s->stack[s->depth - 1].shown && s->show_retval) {
                r = packed_text(s, &pv, 0);
                if (r)
                    return r;
                ret = s->scratch.p;
                ret_len = s->scratch.len;
            }
            r = exit_(s, f, (__int128)time - s->times[depth], ret, ret_len, NOTE_NONE);
        } else {
            r = entry(s, f, time, depth, MARK_NONE, n, packed_text, &pv);
        }
        if (r)
            return r;
        pos = next;
    }
    *at = pos;
    return RT_DONE;
}

/* ------------------------------------------------------------------ Python's records */

/* native/replaytext.py encodes each record as
 *   entry: u8 0, u8 mark, u16 values, u32 depth, u64 func, i64 time, then per value a u32
 *          length and its text;
 *   exit:  u8 1, u8 flags (1 unwound, 2 at exit, 4 a return value), u16 0, u32 depth,
 *          u64 func, i64 duration, then the return value as a value of an entry. */
#define ROW_HEAD 24
#define ROW_UNWOUND 1
#define ROW_AT_EXIT 2
#define ROW_RETVAL 4

typedef struct {
    const uint8_t *data;
    size_t first;    /* where the record's first value starts */
    size_t at;       /* where value `index` starts */
    uint32_t index;
} row_values;

static int row_text(rt_state *s, void *ctx, uint32_t i)
{
    row_values *rv = ctx;
    if (i < rv->index) {
        rv->index = 0;
        rv->at = rv->first;
    }
    for (; rv->index < i; rv->index++)
        rv->at += 4 + (size_t)le(rv->data + rv->at, 4);
    const uint8_t *p = rv->data + rv->at;
    size_t n = (size_t)le(p, 4);
    rt_buf *b = &s->scratch;
    b->len = 0;
    if (reserve(b, n))
        return RT_NOMEM;
    put(b, (const char *)p + 4, n);
    return RT_DONE;
}

int rt_rows(rt_state *s, const uint8_t *data, size_t len, size_t *at)
{
    size_t pos = *at;
    row_values rv;
    rv.data = data;
    while (pos < len) {
        if (s->out.len >= OUT_MARK) {
            *at = pos;
            return RT_FULL;
        }
        if (len - pos < ROW_HEAD)
            return RT_CUT;
        const uint8_t *h = data + pos;
        unsigned tag = h[0], flags = h[1], n = (unsigned)le(h + 2, 2);
        uint64_t depth = le(h + 4, 4), addr = le(h + 8, 8);
        __int128 number = (int64_t)le(h + 16, 8);
        if (tag)
            n = flags & ROW_RETVAL ? 1 : 0;
        size_t next = pos + ROW_HEAD;
        rv.first = rv.at = next;
        rv.index = 0;
        for (unsigned i = 0; i < n; i++) {
            if (len - next < 4 || len - next - 4 < le(data + next, 4))
                return RT_CUT;
            next += 4 + (size_t)le(data + next, 4);
        }
        rt_func *f = func_of(s, addr);
        if (!f) {
            s->missing = addr;
            *at = pos;
            return RT_NAME;
        }
        int r;
        if (tag) {
            const char *ret = NULL;
            size_t ret_len = 0;
            if (n) {
                ret = (const char *)data + rv.first + 4;
                ret_len = (size_t)le(data + rv.first, 4);
            }
            int note = NOTE_NONE;
            if (flags & ROW_UNWOUND)
                note = flags & ROW_AT_EXIT ? NOTE_AT_EXIT : NOTE_UNWOUND;
            r = exit_(s, f, number, ret, ret_len, note);
        } else {
            r = entry(s, f, number, depth, flags <= MARK_RESUMED ? (int)flags : MARK_NONE, n,
                      row_text, &rv);
        }
        if (r)
            return r;
        pos = next;
    }
    *at = pos;
    return RT_DONE;
}

/* ------------------------------------------------------------------ set-up */

rt_state *rt_new(void)
{
    rt_state *s = calloc(1, sizeof *s);
    if (s) {
        s->zero_func = -1;
        s->last_func = -1;
        s->max_depth = -1;
        s->default_args = -1;
        s->show_args = s->show_retval = 1;
    }
    return s;
}

void rt_free(rt_state *s)
{
    if (!s)
        return;
    addrmap_free(&s->index);
    free(s->funcs);
    free(s->names.p);
    free(s->slots);
    free(s->stack);
    free(s->texts.p);
    free(s->times);
    free(s->out.p);
    free(s->scratch.p);
    free(s);
}

/* format.py ReplayOptions: max_depth and default_args -1 for None */
void rt_options(rt_state *s, uint32_t show_args, uint32_t show_retval, int64_t max_depth,
                int64_t default_args, uint32_t have_filters)
{
    s->show_args = show_args;
    s->show_retval = show_retval;
    s->max_depth = max_depth;
    s->default_args = default_args;
    s->have_filters = have_filters;
}

/* a section of the text (the whole trace, or one thread's): nothing open, nothing held;
 * started: 1 when there is no --start to wait for; the header line first when asked */
int rt_section(rt_state *s, uint32_t started, uint32_t header)
{
    s->started = (int)started;
    s->depth = 0;
    s->texts.len = 0;
    s->pending = 0;
    s->ntimes = 0;
    if (header) {
        static const char head[] = "# DURATION [insns]   FUNCTION\n";
        if (reserve(&s->out, sizeof head))
            return RT_NOMEM;
        put(&s->out, head, sizeof head - 1);
    }
    return RT_DONE;
}

/* text of Python's own (a section's `# thread N` line), appended as it is */
int rt_text(rt_state *s, const char *text, size_t n)
{
    if (reserve(&s->out, n))
        return RT_NOMEM;
    put(&s->out, text, n);
    return RT_DONE;
}

/* a function: its name as the output encodes it, FN_* flags, the arguments -A shows (-1:
 * the default); 0, or RT_NOMEM */
int rt_function(rt_state *s, uint64_t addr, const char *name, size_t name_len,
                uint32_t flags, int64_t args)
{
    rt_func *f = func_of(s, addr);
    if (!f) {
        if (s->nfuncs == s->funcs_cap) {
            size_t cap = s->funcs_cap ? 2 * s->funcs_cap : 64;
            rt_func *fs = realloc(s->funcs, cap * sizeof *fs);
            if (!fs)
                return RT_NOMEM;
            s->funcs = fs;
            s->funcs_cap = cap;
        }
        int32_t i = (int32_t)s->nfuncs;
        if (addr ? addrmap_set(&s->index, addr, i) : (s->zero_func = i, 0))
            return RT_NOMEM;
        f = &s->funcs[s->nfuncs++];
        f->addr = addr;
        f->layout[0] = f->layout[1] = -1;
        f->count[0] = f->count[1] = 0;
    }
    if (reserve(&s->names, name_len))
        return RT_NOMEM;
    f->name = s->names.len;
    f->name_len = name_len;
    put(&s->names, name, name_len);
    f->flags = flags;
    f->args = args;
    return RT_DONE;
}

/* the layout of a function's values in C's records (spill.py Layout; exit: its exits'):
 * per value a kind (K_*), width in bits (1-64), bytes (1, 2, 4, 8; 0: a `char *` copy).
 * The function must have its name already.  0, RT_NOMEM, or RT_CUT for a layout C cannot
 * read (Python formats the trace then). */
int rt_layout(rt_state *s, uint64_t addr, uint32_t is_exit, uint32_t n, const uint8_t *kinds,
              const uint8_t *bits, const uint8_t *sizes)
{
    rt_func *f = func_of(s, addr);
    if (!f || n > MAX_VALUES || is_exit > 1)
        return RT_CUT;
    for (uint32_t i = 0; i < n; i++) {
        int string = kinds[i] == K_STR || kinds[i] == K_BUF;
        if (kinds[i] >= K_COUNT || bits[i] < 1 || bits[i] > 64
            || (string ? sizes[i] != 0
                       : sizes[i] != 1 && sizes[i] != 2 && sizes[i] != 4 && sizes[i] != 8))
            return RT_CUT;
    }
    if (s->nslots + n > s->slots_cap) {
        size_t cap = s->slots_cap ? 2 * s->slots_cap : 256;
        while (cap < s->nslots + n)
            cap *= 2;
        rt_slot *sl = realloc(s->slots, cap * sizeof *sl);
        if (!sl)
            return RT_NOMEM;
        s->slots = sl;
        s->slots_cap = cap;
    }
    f->layout[is_exit] = (int32_t)s->nslots;
    f->count[is_exit] = n;
    for (uint32_t i = 0; i < n; i++) {
        rt_slot *sl = &s->slots[s->nslots++];
        sl->kind = kinds[i];
        sl->bits = bits[i];
        sl->size = sizes[i];
    }
    return RT_DONE;
}

uint64_t rt_missing(const rt_state *s)
{
    return s->missing;
}

/* the end of a section: a held entry's line */
int rt_finish(rt_state *s)
{
    return flush_pending(s) ? RT_NOMEM : RT_DONE;
}

const char *rt_output(const rt_state *s)
{
    return s->out.p;
}

size_t rt_output_len(const rt_state *s)
{
    return s->out.len;
}

void rt_output_clear(rt_state *s)
{
    s->out.len = 0;
}
