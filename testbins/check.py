#!/usr/bin/env python3
"""Run every committed test binary under qemu-<isa>-static and check it.

usage: ./check.py [ISA ...]     (default: all ten)

Checks, for the ISAs given:
  * calls, calls.pie, calls.stripped, calls.instr: every scenario gives the
    same stdout and exit status on every ISA and in every variant;
  * calls.instr: the record written to $CALLTRACE_OUT maps (through the
    binary's own symbols) to a properly nested call sequence, and that
    sequence of function names is the same on every ISA;
  * fib, hello_fs, edge_*: expected stdout / exit status.
Needs qemu-user-static and the cross binutils (<triple>-nm).
Exit status 0 when everything matches.
"""
import hashlib
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))

TRIPLES = {
    "x86_64": "x86_64-linux-gnu", "i386": "i686-linux-gnu",
    "aarch64": "aarch64-linux-gnu", "arm": "arm-linux-gnueabihf",
    "mips": "mips-linux-gnu", "mipsel": "mipsel-linux-gnu",
    "riscv64": "riscv64-linux-gnu", "ppc": "powerpc-linux-gnu",
    "ppc64le": "powerpc64le-linux-gnu", "s390x": "s390x-linux-gnu",
}
EDGES = {
    "x86_64": "edge_callmem", "i386": "edge_pcthunk", "arm": "edge_interwork",
    "mips": "edge_delay", "mipsel": "edge_delay",
    "riscv64": "edge_compressed", "ppc64le": "edge_localentry",
    "s390x": "edge_exrl",
}
SCENARIOS = ["recursion", "fnptr", "qsort", "varargs", "struct", "args9",
             "longjmp", "fileio", "heap", "float", "tail", "deep", "exit42",
             "crash", "all"]
EXPECTED_RC = {"exit42": 42, "crash": -11}
# Frames the instrumented record legitimately leaves open per scenario.
OPEN_FRAMES = {
    "longjmp": ["jump_level1", "jump_level2", "jump_level3", "jump_level4",
                "jump_level5"],
    "all": ["jump_level1", "jump_level2", "jump_level3", "jump_level4",
            "jump_level5"],
    "exit42": ["main", "run_scenario", "scenario_exit42", "exit_outer",
               "exit_inner"],
    "crash": ["main", "run_scenario", "scenario_crash", "crash_deref"],
}

failures = []


def fail(msg):
    failures.append(msg)
    print("FAIL:", msg)


def run(isa, prog, args, env=None):
    with tempfile.TemporaryDirectory() as cwd:
        p = subprocess.run(["qemu-%s-static" % isa, os.path.join(HERE, isa, prog)] + args,
                           cwd=cwd, capture_output=True, env=env, timeout=300)
        left = sorted(os.listdir(cwd))
    if left:
        fail("%s/%s %s left files %s" % (isa, prog, args, left))
    return p.stdout.decode(), p.returncode


def symbols(isa, prog):
    out = subprocess.run(["%s-nm" % TRIPLES[isa], "--defined-only",
                          os.path.join(HERE, isa, prog)],
                         capture_output=True, text=True, check=True).stdout
    table = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[1] in "Tt":
            table.setdefault(int(parts[0], 16), parts[2])
    return table


def instr_names(isa, scenario):
    """Run calls.instr, return (names, open_frames, problems, stdout, rc)."""
    fd, path = tempfile.mkstemp(prefix="calltrace-")
    os.close(fd)
    try:
        env = dict(os.environ, CALLTRACE_OUT=path)
        out, rc = run(isa, "calls.instr", [scenario], env=env)
        with open(path) as f:
            lines = f.read().splitlines()
    finally:
        os.unlink(path)
    syms = symbols(isa, "calls.instr")
    names, stack, problems = [], [], []
    for line in lines:
        kind, addr = line.split()
        a = int(addr, 16)
        if isa == "arm":
            a &= ~1  # Thumb bit
        name = syms.get(a, addr)
        names.append(kind + name)
        if kind == ">":
            stack.append(name)
        elif name in stack:
            while stack[-1] != name:  # frames skipped by longjmp
                problems.append("abandoned " + stack.pop())
            stack.pop()
        else:
            problems.append("unmatched exit " + name)
    return names, stack, problems, out, rc


def main():
    isas = sys.argv[1:] or list(TRIPLES)
    results = {}  # (scenario) -> {(isa, variant): (stdout, rc)}
    instr_seq = {}
    for isa in isas:
        variants = ["calls", "calls.stripped", "calls.instr"]
        if os.path.exists(os.path.join(HERE, isa, "calls.pie")):
            variants.append("calls.pie")
        for sc in SCENARIOS:
            for v in variants:
                if v == "calls.instr":
                    names, open_, problems, out, rc = instr_names(isa, sc)
                    instr_seq.setdefault(sc, {})[isa] = names
                    want_open = OPEN_FRAMES.get(sc, [])
                    abandoned = [p for p in problems if p.startswith("abandoned ")]
                    other = [p for p in problems if not p.startswith("abandoned ")]
                    left = open_ + [p.split()[1] for p in abandoned]
                    if other or sorted(left) != sorted(want_open):
                        fail("%s calls.instr %s: open %s, problems %s"
                             % (isa, sc, left, other))
                else:
                    out, rc = run(isa, v, [sc])
                results.setdefault(sc, {})[(isa, v)] = (out, rc)

    for sc, per in results.items():
        outs = {}
        for key, (out, rc) in per.items():
            outs.setdefault((out, rc), []).append(key)
        want_rc = EXPECTED_RC.get(sc, 0)
        for (out, rc), keys in outs.items():
            if rc != want_rc:
                fail("calls %s: exit %d (want %d) on %s" % (sc, rc, want_rc, keys))
        if len(outs) > 1:
            fail("calls %s: %d different outputs: %s" % (
                sc, len(outs), [sorted(k) for k in outs.values()]))
        out, rc = next(iter(outs))
        digest = hashlib.sha256(out.encode()).hexdigest()[:12]
        print("calls %-9s rc=%-3d %3d lines sha256:%s  (%d runs agree)"
              % (sc, rc, len(out.splitlines()), digest, len(per)))
    for sc, per in instr_seq.items():
        distinct = {tuple(v) for v in per.values()}
        n = len(next(iter(per.values())))
        if len(distinct) != 1:
            fail("calls.instr %s: call sequences differ across ISAs" % sc)
        print("calls.instr %-9s %6d events, %s across %d ISAs"
              % (sc, n, "identical" if len(distinct) == 1 else "DIFFERENT", len(per)))

    fib_out = {}
    for isa in isas:
        out, rc = run(isa, "fib", [])
        fib_out.setdefault((out, rc), []).append(isa)
        out20, rc20 = run(isa, "fib", ["20"])
        if (out20, rc20) != ("fib(20) = 6765\n", 0):
            fail("%s fib 20: %r rc=%d" % (isa, out20, rc20))
        out, rc = run(isa, "hello_fs", [])
        if rc != 7 or not out.startswith("hello_fs:"):
            fail("%s hello_fs rc=%d" % (isa, rc))
        fib_out.setdefault(("hello_fs", out, rc), []).append(isa)
        if isa in EDGES:
            out, rc = run(isa, EDGES[isa], [])
            print("%s/%s rc=%d\n  %s" % (isa, EDGES[isa], rc,
                                         out.rstrip().replace("\n", "\n  ")))
            if rc != 0 or not out.rstrip().endswith("done"):
                fail("%s %s rc=%d" % (isa, EDGES[isa], rc))
    for key, who in fib_out.items():
        print("%r on %s" % (key, who))
        if len(who) != len(isas):
            fail("fib/hello_fs output differs: %r on %s" % (key, who))

    print("%d failure(s)" % len(failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
