/* Instruction decoding for function discovery (a program's first traced run).
 *
 * Capstone's C library decodes a stretch of code in one call, and the instructions come back
 * as flat arrays (address, size) and one text buffer (mnemonic NUL op_str NUL, instruction
 * after instruction) that Python splits in bulk.  Capstone's Python binding hands them over
 * one ctypes read at a time and must first import itself (~30 ms of a ~160 ms run); here
 * neither happens.  As with Unicorn in hotpath.c, capstone is never linked: its functions
 * are handed in (dis_bind), taken from the libcapstone.so the capstone wheel ships, and the
 * header of that wheel gives the values of the architecture and mode names (dis_value).
 * Built without that header, dis_value knows no name and Python keeps the binding's path,
 * which stays the reference (emutrace/discover/decode.py; tests/test_disasm.py decodes each
 * ISA's fib both ways).
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#if defined(__has_include)
#if __has_include(<capstone/capstone.h>)
#include <capstone/capstone.h>
#define DIS_CAPSTONE 1
#endif
#endif

#ifdef DIS_CAPSTONE

typedef cs_err (*cs_open_fn)(cs_arch, cs_mode, csh *);
typedef size_t (*cs_disasm_fn)(csh, const uint8_t *, size_t, uint64_t, size_t, cs_insn **);
typedef void (*cs_free_fn)(cs_insn *, size_t);
typedef cs_err (*cs_close_fn)(csh *);

static cs_open_fn dis_cs_open;
static cs_disasm_fn dis_cs_disasm;
static cs_free_fn dis_cs_free;
static cs_close_fn dis_cs_close;

/* the names the ISA modules give (Engines.cs_arch, cs_mode; Classifiers.alt_mode) */
static const struct { const char *name; int64_t value; } dis_names[] = {
    {"CS_ARCH_X86", CS_ARCH_X86}, {"CS_ARCH_ARM", CS_ARCH_ARM},
    {"CS_ARCH_ARM64", CS_ARCH_ARM64}, {"CS_ARCH_MIPS", CS_ARCH_MIPS},
    {"CS_ARCH_PPC", CS_ARCH_PPC}, {"CS_ARCH_RISCV", CS_ARCH_RISCV},
    {"CS_ARCH_SYSZ", CS_ARCH_SYSZ},
    {"CS_MODE_LITTLE_ENDIAN", CS_MODE_LITTLE_ENDIAN},
    {"CS_MODE_BIG_ENDIAN", CS_MODE_BIG_ENDIAN}, {"CS_MODE_ARM", CS_MODE_ARM},
    {"CS_MODE_THUMB", CS_MODE_THUMB}, {"CS_MODE_16", CS_MODE_16}, {"CS_MODE_32", CS_MODE_32},
    {"CS_MODE_64", CS_MODE_64}, {"CS_MODE_MIPS32", CS_MODE_MIPS32},
    {"CS_MODE_MIPS64", CS_MODE_MIPS64}, {"CS_MODE_RISCV32", CS_MODE_RISCV32},
    {"CS_MODE_RISCV64", CS_MODE_RISCV64}, {"CS_MODE_RISCVC", CS_MODE_RISCVC},
};

int dis_value(const char *name, int64_t *value) {
    for (size_t i = 0; i < sizeof dis_names / sizeof dis_names[0]; i++) {
        if (strcmp(dis_names[i].name, name) == 0) {
            *value = dis_names[i].value;
            return 0;
        }
    }
    return -1;
}

void dis_bind(void *open, void *disasm, void *free_insns, void *close) {
    dis_cs_open = (cs_open_fn)open;
    dis_cs_disasm = (cs_disasm_fn)disasm;
    dis_cs_free = (cs_free_fn)free_insns;
    dis_cs_close = (cs_close_fn)close;
}

/* capstone's handle for (arch, mode) in *handle; capstone's error code (0: CS_ERR_OK) */
int dis_open(int64_t arch, int64_t mode, uint64_t *handle) {
    csh h = 0;
    cs_err err = dis_cs_open((cs_arch)arch, (cs_mode)mode, &h);
    *handle = (uint64_t)h;
    return (int)err;
}

void dis_close(uint64_t handle) {
    csh h = (csh)handle;
    dis_cs_close(&h);
}

/* Decode code[0, len) at address addr: at most `count` instructions (0: as many as decode) and
 * at most max, stopping before an instruction whose text would not fit in text[0, cap).  For
 * instruction i: addrs[i], sizes[i], and in text its mnemonic and op_str, each ended by NUL.
 * The number of instructions (0 where the first does not decode); *used: text bytes written.
 * Capstone carries no state from one call to the next, as in the binding's disasm_lite. */
int64_t dis_run(uint64_t handle, const uint8_t *code, size_t len, uint64_t addr, size_t count,
                uint64_t *addrs, uint8_t *sizes, size_t max, char *text, size_t cap,
                size_t *used) {
    cs_insn *insns = NULL;
    size_t want = count == 0 || count > max ? max : count;
    size_t got = dis_cs_disasm((csh)handle, code, len, addr, want, &insns);
    size_t n = 0, at = 0;
    for (; n < got; n++) {
        size_t m = strlen(insns[n].mnemonic), o = strlen(insns[n].op_str);
        if (at + m + o + 2 > cap)
            break;
        memcpy(text + at, insns[n].mnemonic, m + 1);
        at += m + 1;
        memcpy(text + at, insns[n].op_str, o + 1);
        at += o + 1;
        addrs[n] = insns[n].address;
        sizes[n] = (uint8_t)insns[n].size;
    }
    if (insns != NULL)
        dis_cs_free(insns, got);
    *used = at;
    return (int64_t)n;
}

#else /* built without capstone's header: Python decodes with the binding */

int dis_value(const char *name, int64_t *value) {
    (void)name;
    (void)value;
    return -1;
}

#endif
