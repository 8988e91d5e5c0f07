"""Build of the native hot path (emutrace/native/core.c, the tracer core, and its two ports:
hotpath.c, the Unicorn hooks, and ploop.c, the native target's ptrace loop; step.c for `step`;
branch.c for `bts` and `btf`; disasm.c, discovery's decoding;
replaytext.c, `run`'s text trace; crashguard.c, a crash inside Unicorn stopping the run
rather than emutrace), a plain C library that emutrace loads with ctypes, and of
sweep.c, discovery's sweep loop, a CPython extension; everything else is in pyproject.toml.

It is compiled against the headers the unicorn and capstone wheels ship (unicorn/include,
capstone/include) and links neither library: the functions it calls are handed in from the
libraries the wheels ship (for Unicorn: the one its Python binding loaded).  The extension is
optional: without a C compiler the package still installs and `--engine native` says the
library is missing (`--engine python` works).
"""

from __future__ import annotations

import importlib.util
import os

from setuptools import Extension, setup


def wheel_include(package: str) -> list[str]:
    """The header directory a wheel ships (<package>/include/<package>), if it does."""
    spec = importlib.util.find_spec(package)
    if spec is None or spec.origin is None:
        return []
    inc = os.path.join(os.path.dirname(spec.origin), "include")
    return [inc] if os.path.isdir(os.path.join(inc, package)) else []


setup(ext_modules=[Extension(
    "emutrace.native._hotpath",
    sources=["emutrace/native/core.c", "emutrace/native/hotpath.c", "emutrace/native/ufwrite.c",
             "emutrace/native/step.c", "emutrace/native/ploop.c",
             "emutrace/native/branch.c", "emutrace/native/strict.c",
             "emutrace/native/entryprobe.c", "emutrace/native/disasm.c",
             "emutrace/native/replaytext.c", "emutrace/native/crashguard.c"],
    # (a header changed: every source is compiled again)
    depends=[f"emutrace/native/{h}.h" for h in ("abi", "addrmap", "addrset", "cond", "core",
                                                 "coretrap", "entryprobe", "step", "strict",
                                                 "ufwrite")],
    include_dirs=wheel_include("unicorn") + wheel_include("capstone"),
    # (link-time optimisation: the core's per-event helpers, core.c, inline into each
    # port's hooks, hotpath.c and ploop.c)
    extra_compile_args=["-O2", "-std=c11", "-Wall", "-Wextra", "-fvisibility=default", "-flto"],
    extra_link_args=["-flto", "-O2"],
    optional=True,
), Extension(
    # a CPython extension, not a ctypes library: it makes discovery's Insn tuples
    "emutrace.native._sweep",
    sources=["emutrace/native/sweep.c", "emutrace/native/sweeprule.c",
             "emutrace/native/x86len.c", "emutrace/native/s390len.c"],
    include_dirs=wheel_include("capstone"),
    extra_compile_args=["-O2", "-Wall", "-Wextra"],
    optional=True,
)])
