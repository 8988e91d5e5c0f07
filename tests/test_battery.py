"""The battery of Debian programs, traced: sqlite3, file and openssl from the roots `emutrace
rootfs` makes (scripts/setup.sh: .cache/battery-roots/<isa> with sqlite3, file, openssl),
each traced under int3 (`run --backend int3 -o TRACE`) on six ISAs, with stdout and
exit status equal to `qemu-<isa>-static -L ROOT` running the same command; the trace names
functions the program imports that the command must call (the oracle: the program's
undefined dynamic symbols, from readelf).  openssl's digest is also checked against the
host's hashlib.  (perl, python3, dash, bash: tests/test_system_root.py; coreutils, grep, sed,
findutils, diffutils, gawk: tests/test_debian_programs.py.)

Every command runs from inside the root with relative paths, as in those tests.  A root that
is not built is a skip that says how to build it; a program an ISA cannot run is a strict
xfail read from the ISA's capability table."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import pytest

from emutrace.isa import by_name
from emutrace.isa.base import Cap
from tests.conftest import ENV, REPO, qemu_binary
from tests.roots import built_root
from tests.test_debian_programs import imported_functions

ROOTS = REPO / ".cache" / "battery-roots"
PACKAGES = ("sqlite3", "file", "openssl")
# the C locale and UTC: the roots ship neither locales nor zoneinfo
RUN_ENV = {**ENV, "LC_ALL": "C", "LANG": "C", "TZ": "UTC0"}
TEXT = "usr/share/doc/file/copyright"  # a file the packages ship
SQL = ("with recursive c(x) as (select 1 union all select x + 1 from c where x < 300) "
       "select count(*), sum(x), max(printf('%05d', x)), group_concat(x % 7, '') from c "
       "where x % 3 = 0;")
# name -> (argv inside the root, functions the program imports that the command calls)
PROGRAMS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "sqlite3": (("./usr/bin/sqlite3", ":memory:", SQL),
                ("sqlite3_open_v2", "sqlite3_prepare_v2", "sqlite3_step")),
    # libmagic's database (usr/lib/file/magic.mgc) read and mapped; an ELF, a text, a link
    "file": (("./usr/bin/file", "usr/bin/sqlite3", TEXT, "usr/lib/file/magic.mgc", "bin"),
             ("magic_open", "magic_load", "magic_file")),
    "openssl-dgst": (("./usr/bin/openssl", "dgst", "-sha256", TEXT),
                     ("EVP_get_digestbyname", "EVP_DigestInit_ex", "EVP_DigestFinal_ex")),
    "openssl-enc": (("./usr/bin/openssl", "enc", "-aes-128-cbc", "-a", "-in", TEXT, "-K",
                     "000102030405060708090a0b0c0d0e0f", "-iv",
                     "0f0e0d0c0b0a09080706050403020100"),
                    ("EVP_CipherInit_ex", "BIO_f_cipher", "BIO_f_base64")),
}
# each program on six of the seven Debian ISAs (each ISA left out once at most)
ISAS: dict[str, tuple[str, ...]] = {
    "sqlite3": ("x86_64", "aarch64", "arm", "s390x", "i386", "ppc64le"),
    "file": ("i386", "aarch64", "ppc64le", "mipsel", "x86_64", "arm"),
    "openssl-dgst": ("x86_64", "arm", "ppc64le", "mipsel", "i386", "s390x"),
    "openssl-enc": ("i386", "aarch64", "s390x", "ppc64le", "mipsel", "x86_64"),
}
# program -> the capability it needs, where an ISA may lack it
GAPS = {"openssl-dgst": Cap.COREUTILS_DIGESTS}


def root_of(isa: str) -> Path:
    return built_root(ROOTS, isa, PACKAGES)


def gap(isa: str, program: str) -> list[pytest.MarkDecorator]:
    cap = by_name(isa).capabilities.get(GAPS[program]) if program in GAPS else None
    if cap is None or cap.works:
        return []
    return [pytest.mark.xfail(reason=cap.reason, strict=True)]


def cells() -> list:  # type: ignore[type-arg]
    return [pytest.param(isa, name, id=f"{name}-{isa}", marks=gap(isa, name))
            for name, isas in ISAS.items() for isa in isas]


@pytest.mark.oracle
@pytest.mark.parametrize(("isa", "name"), cells())
def test_battery_program_traced_like_qemu(isa: str, name: str, tmp_path: Path) -> None:
    argv, calls = PROGRAMS[name]
    root = root_of(isa)
    want = subprocess.run([qemu_binary(isa), "-L", ".", *argv], cwd=root, capture_output=True,
                          timeout=300, env=RUN_ENV)
    assert want.returncode == 0 and want.stdout, want.stderr
    trace = tmp_path / "trace.txt"
    got = subprocess.run([sys.executable, "-m", "emutrace", "run", "--root", ".", "--backend",
                          "int3", "-o", str(trace), *argv], cwd=root, capture_output=True,
                         timeout=900, env=RUN_ENV)
    assert (got.stdout, got.returncode) == (want.stdout, want.returncode), got.stderr
    assert set(calls) <= imported_functions(root / argv[0])
    called = {line.split("|", 1)[1].strip().split("(")[0] for line in
              trace.read_text().splitlines()[1:] if "|" in line}
    assert set(calls) <= called, sorted(set(calls) - called)
    if name == "openssl-dgst":  # the host's SHA-256 of the same file
        digest = hashlib.sha256((root / TEXT).read_bytes()).hexdigest()
        assert got.stdout.decode().strip().endswith(f"= {digest}"), got.stdout
