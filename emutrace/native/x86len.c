/* x86 instruction lengths for the common instructions (x86len.h).  Encodings: Intel SDM
 * vol. 2, chapter 2 (prefixes, REX, ModRM/SIB, displacement, immediate) and appendix A
 * (opcode maps). */
#include "x86len.h"

/* what follows a one-byte opcode */
enum {
    M = 1,     /* a ModRM byte (and its SIB and displacement) */
    I8 = 2,    /* an 8-bit immediate */
    IZ = 4,    /* a 16-bit immediate with the 0x66 prefix, else 32-bit (Iz) */
    IV = 8,    /* 16/32-bit as Iz, 64-bit with REX.W (Iv: MOV r, imm) */
    PLAIN = 16, /* known here: a length, and never a transfer (0: capstone's) */
    STR = 32,  /* a string instruction: REP/REPNE allowed before it */
    GROUP = 64 /* the ModRM reg field picks the instruction: `group_ok` */
};

#define P PLAIN
static const uint8_t ONE[256] = {
    /* 00 */ P|M, P|M, P|M, P|M, P|I8, P|IZ, 0, 0, P|M, P|M, P|M, P|M, P|I8, P|IZ, 0, 0,
    /* 10 */ P|M, P|M, P|M, P|M, P|I8, P|IZ, 0, 0, P|M, P|M, P|M, P|M, P|I8, P|IZ, 0, 0,
    /* 20 */ P|M, P|M, P|M, P|M, P|I8, P|IZ, 0, 0, P|M, P|M, P|M, P|M, P|I8, P|IZ, 0, 0,
    /* 30 */ P|M, P|M, P|M, P|M, P|I8, P|IZ, 0, 0, P|M, P|M, P|M, P|M, P|I8, P|IZ, 0, 0,
    /* 40: INC/DEC in 32-bit mode (REX prefixes in 64-bit mode, taken before) */
    P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P,
    /* 50: PUSH/POP r */
    P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P,
    /* 60: 63 MOVSXD (64-bit mode only: `opcode_ok`), 68 PUSH Iz, 69 IMUL Gv,Ev,Iz,
     * 6A PUSH Ib, 6B IMUL Gv,Ev,Ib, 6C-6F INS/OUTS */
    0, 0, 0, P|M, 0, 0, 0, 0, P|IZ, P|M|IZ, P|I8, P|M|I8, P|STR, P|STR, P|STR, P|STR,
    /* 70: Jcc rel8 */
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    /* 80: group 1 (all eight valid), TEST, XCHG, MOV; 8D LEA and 8F POP: `group_ok` */
    P|M|I8, P|M|IZ, 0, P|M|I8, P|M, P|M, P|M, P|M, P|M, P|M, P|M, P|M, 0, P|M|GROUP, 0,
    P|M|GROUP,
    /* 90: XCHG/NOP (F3 90: PAUSE), CBW, CWD, 9C-9F PUSHF/POPF/SAHF/LAHF */
    P|STR, P, P, P, P, P, P, P, P, P, 0, 0, P, P, P, P,
    /* A0: A0-A3 MOV moffs (`opcode_len`), TEST Ib/Iz, string instructions */
    0, 0, 0, 0, P|STR, P|STR, P|STR, P|STR, P|I8, P|IZ, P|STR, P|STR, P|STR, P|STR, P|STR,
    P|STR,
    /* B0: MOV r8, Ib; MOV r, Iv */
    P|I8, P|I8, P|I8, P|I8, P|I8, P|I8, P|I8, P|I8, P|IV, P|IV, P|IV, P|IV, P|IV, P|IV,
    P|IV, P|IV,
    /* C0: group 2 Ib, C6/C7 MOV Ib/Iz (reg 0 only), C8 ENTER (`opcode_len`), C9 LEAVE,
     * CD INT Ib */
    P|M|I8|GROUP, P|M|I8|GROUP, 0, 0, 0, 0, P|M|I8|GROUP, P|M|IZ|GROUP, 0, P, 0, 0, 0,
    P|I8, 0, 0,
    /* D0: group 2 by 1 or CL, D7 XLAT; D8-DF x87: capstone's */
    P|M|GROUP, P|M|GROUP, P|M|GROUP, P|M|GROUP, 0, 0, 0, P, 0, 0, 0, 0, 0, 0, 0, 0,
    /* E0: LOOPcc/JrCXZ/CALL/JMP: capstone's; IN/OUT */
    0, 0, 0, 0, P|I8, P|I8, P|I8, P|I8, 0, 0, 0, 0, P, P, P, P,
    /* F0: LOCK, INT1, HLT: capstone's; F5 CMC, F6/F7 group 3, F8-FD flags, FE/FF groups
     * 4 and 5 */
    0, 0, 0, 0, 0, P, P|M|GROUP, P|M|GROUP, P, P, P, P, P, P, P|M|GROUP, P|M|GROUP,
};

/* the 0F map: only what is listed is known here; `pre` is the mandatory prefix (0: none,
 * 0x66, 0xF2, 0xF3) the entry is for */
struct two { uint8_t op, pre, flags; };
static const struct two TWO[] = {
    {0x05, 0, P}, {0x31, 0, P}, {0xA2, 0, P},             /* SYSCALL, RDTSC, CPUID */
    {0x1F, 0, P|M}, {0x1F, 0x66, P|M},                    /* NOP Ev */
    {0x10, 0, P|M}, {0x11, 0, P|M}, {0x10, 0x66, P|M}, {0x11, 0x66, P|M},  /* MOVUPS/D */
    {0x10, 0xF3, P|M}, {0x11, 0xF3, P|M}, {0x10, 0xF2, P|M}, {0x11, 0xF2, P|M}, /* MOVSS/D */
    {0x28, 0, P|M}, {0x29, 0, P|M}, {0x28, 0x66, P|M}, {0x29, 0x66, P|M},  /* MOVAPS/D */
    {0x57, 0, P|M}, {0x57, 0x66, P|M},                    /* XORPS/D */
    {0x6E, 0x66, P|M}, {0x7E, 0x66, P|M}, {0x7E, 0xF3, P|M},  /* MOVD/MOVQ xmm */
    {0x6F, 0x66, P|M}, {0x7F, 0x66, P|M}, {0x6F, 0xF3, P|M}, {0x7F, 0xF3, P|M}, /* MOVDQA/U */
    {0x74, 0x66, P|M}, {0x75, 0x66, P|M}, {0x76, 0x66, P|M},  /* PCMPEQB/W/D */
    {0x60, 0x66, P|M}, {0x61, 0x66, P|M}, {0x62, 0x66, P|M},  /* PUNPCKL* */
    {0x6C, 0x66, P|M}, {0x6D, 0x66, P|M},                 /* PUNPCKL/HQDQ */
    {0x70, 0x66, P|M|I8},                                 /* PSHUFD */
    {0xD4, 0x66, P|M}, {0xDA, 0x66, P|M}, {0xDB, 0x66, P|M}, {0xDE, 0x66, P|M},
    {0xDF, 0x66, P|M}, {0xEB, 0x66, P|M}, {0xEF, 0x66, P|M}, {0xF8, 0x66, P|M},
    {0xFB, 0x66, P|M}, {0xFC, 0x66, P|M},                 /* PADDQ PMINUB PAND ... PADDB */
    {0xA3, 0, P|M}, {0xAB, 0, P|M}, {0xB3, 0, P|M}, {0xBB, 0, P|M},  /* BT/BTS/BTR/BTC */
    {0xA4, 0, P|M|I8}, {0xAC, 0, P|M|I8}, {0xA5, 0, P|M}, {0xAD, 0, P|M},  /* SHLD/SHRD */
    {0xAF, 0, P|M}, {0xAF, 0x66, P|M},                    /* IMUL Gv, Ev */
    {0xB0, 0, P|M}, {0xB1, 0, P|M}, {0xC0, 0, P|M}, {0xC1, 0, P|M},  /* CMPXCHG, XADD */
    {0xB6, 0, P|M}, {0xB7, 0, P|M}, {0xBE, 0, P|M}, {0xBF, 0, P|M},  /* MOVZX/MOVSX */
    {0xB6, 0x66, P|M}, {0xBE, 0x66, P|M},
    {0xBC, 0, P|M}, {0xBD, 0, P|M},                       /* BSF/BSR */
    {0xB8, 0xF3, P|M}, {0xBC, 0xF3, P|M}, {0xBD, 0xF3, P|M},  /* POPCNT/TZCNT/LZCNT */
};

/* ModRM, SIB and displacement in 32/64-bit addressing: their length, 0 if past n */
static unsigned modrm_len(const uint8_t *p, size_t n)
{
    if (n < 1)
        return 0;
    unsigned mod = p[0] >> 6, rm = p[0] & 7, len = 1;
    if (mod == 3)
        return 1;
    if (rm == 4) { /* a SIB byte; base 101 with mod 00: disp32, no base */
        if (n < 2)
            return 0;
        len = 2;
        if (mod == 0 && (p[1] & 7) == 5)
            len += 4;
    } else if (mod == 0 && rm == 5) { /* disp32 (RIP-relative in 64-bit mode) */
        len += 4;
    }
    if (mod == 1)
        len += 1;
    else if (mod == 2)
        len += 4;
    return len <= n ? len : 0;
}

/* is the ModRM form of a group opcode one the CPU defines (the others are capstone's)? */
static int group_ok(uint8_t op, uint8_t modrm)
{
    unsigned reg = (modrm >> 3) & 7, mod = modrm >> 6;
    switch (op) {
    case 0x8D: return mod != 3;             /* LEA: a memory operand */
    case 0x8F: return reg == 0;             /* POP Ev (others: XOP) */
    case 0xC0: case 0xC1: case 0xD0: case 0xD1: case 0xD2: case 0xD3:
        return reg != 6;                    /* group 2: /6 is undefined (SAL alias) */
    case 0xC6: case 0xC7: return reg == 0;  /* MOV Eb/Ev, I (C6/C7 /7: XABORT/XBEGIN) */
    case 0xF6: case 0xF7: return reg != 1;  /* group 3: /1 is undefined (TEST alias) */
    case 0xFE: return reg <= 1;             /* INC/DEC Eb */
    case 0xFF: return reg <= 1 || reg == 6; /* INC/DEC/PUSH Ev (2-5: CALL/JMP) */
    default: return 0;
    }
}

unsigned x86_length(const uint8_t *code, size_t n, int mode64)
{
    size_t i = 0;
    int opsize = 0, rep = 0, rex_w = 0;
    uint8_t mandatory = 0; /* the last of 66/F2/F3: the 0F map's mandatory prefix */
    for (;; i++) { /* legacy prefixes (Intel SDM vol. 2, 2.1.1) */
        if (i >= n || i >= 4)
            return 0;
        uint8_t b = code[i];
        if (b == 0x66) {
            opsize = 1;
            if (!mandatory)
                mandatory = 0x66;
        } else if (b == 0xF2 || b == 0xF3) {
            if (rep)
                return 0;
            rep = 1;
            mandatory = b;
        } else if (b == 0x2E || b == 0x3E || b == 0x26 || b == 0x36 || b == 0x64
                   || b == 0x65) {
            continue;
        } else if (b == 0x67 && mode64) {
            continue; /* (32-bit addressing: the same ModRM forms) */
        } else {
            break; /* (LOCK, 0x67 in 32-bit mode: 16-bit addressing: capstone's) */
        }
    }
    if (mode64 && (code[i] & 0xF0) == 0x40) { /* REX (2.2.1): right before the opcode */
        rex_w = (code[i] >> 3) & 1;
        i++;
        if (i >= n)
            return 0;
    }
    uint8_t op = code[i++];
    unsigned flags;
    if (op == 0x0F) {
        if (i >= n)
            return 0;
        uint8_t op2 = code[i++];
        if (op2 == 0x1E && mandatory == 0xF3 && i < n
            && (code[i] == 0xFA || code[i] == 0xFB) && opsize == 0) {
            return (unsigned)i + 1; /* ENDBR64/ENDBR32 */
        }
        flags = 0;
        for (size_t k = 0; k < sizeof TWO / sizeof TWO[0]; k++)
            if (TWO[k].op == op2 && TWO[k].pre == mandatory) {
                flags = TWO[k].flags;
                break;
            }
        /* (a mandatory prefix with another of 66/F2/F3 besides: capstone's) */
        if (!(flags & P) || (mandatory == 0x66 && rep) || (mandatory != 0x66 && opsize
                                                               && mandatory))
            return 0;
    } else {
        flags = ONE[op];
        if (!(flags & P))
            return 0;
        if (rep && !(flags & STR))
            return 0; /* (REP/REPNE, BND, XACQUIRE before others: capstone's) */
        if (op == 0x90 && rep && (opsize || mandatory != 0xF3))
            return 0; /* (PAUSE is F3 90 alone: capstone rejects 66 F3 90) */
        if (op == 0x63 && !mode64)
            return 0; /* ARPL */
        if (op >= 0x40 && op <= 0x4F && mode64)
            return 0; /* (a REX after a legacy prefix's REX: capstone's) */
    }
    unsigned len = (unsigned)i;
    if (flags & M) {
        unsigned m = modrm_len(code + i, n - i);
        if (m == 0 || ((flags & GROUP) && !group_ok(op, code[i])))
            return 0;
        len += m;
        if (op == 0xF6 && ((code[i] >> 3) & 7) == 0)
            len += 1; /* TEST Eb, Ib */
        if (op == 0xF7 && ((code[i] >> 3) & 7) == 0)
            len += rex_w || !opsize ? 4 : 2; /* TEST Ev, Iz */
    }
    if (flags & I8)
        len += 1;
    if (flags & IZ)
        len += rex_w || !opsize ? 4 : 2;
    if (flags & IV)
        len += rex_w ? 8 : opsize ? 2 : 4;
    if (len > n || len > 15)
        return 0;
    return len;
}
