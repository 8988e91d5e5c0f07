"""A root that works like a system: Debian's perl, python3, dash and bash, from the roots
`emutrace rootfs` makes (scripts/setup.sh: .cache/system-roots/<isa> with perl-base,
python3-minimal, dash, bash, coreutils), use /dev (null, zero, full, urandom, /dev/fd) and
/proc, and run background jobs (`&` + `wait`), with stdout, stderr and exit status equal
to `qemu-<isa>-static -L ROOT` running the same program (qemu-user hands the guest the
host's /dev and /proc; emutrace serves its own, machine/linux/devfs.py and procfs.py).

The programs print only what does not depend on the host (no pids, no listings of
/proc/self/fd, which under qemu hold qemu's own descriptors) and exec nothing (qemu-user
without binfmt_misc cannot run a foreign program a guest execs): the shells' jobs are
subshells and builtins.  A root that is not built is a skip that says how to build it; a
program an ISA cannot run is a strict xfail read from the ISA's capability table."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from emutrace.isa import by_name
from emutrace.isa.base import Cap
from tests.conftest import ENV, REPO, qemu_binary
from tests.roots import built_root

DEBIAN_ISAS = ("x86_64", "i386", "aarch64", "arm", "mipsel", "ppc64le", "s390x")
ROOTS = REPO / ".cache" / "system-roots"
PACKAGES = ("perl-base", "python3-minimal", "dash", "bash", "coreutils")
APT_CONFIG = REPO / ".cache" / "apt" / "apt.conf"  # (scripts/setup.sh)
# the C locale: the roots ship no locales, and the host's LANG would make perl warn
RUN_ENV = {**ENV, "LC_ALL": "C", "LANG": "C", "TZ": "UTC0"}

JOBS = ("echo a & wait; (exit 3) & wait $!; echo \"status $?\"; true & wait; "
        "{ echo b; echo c; } & wait; read x < /dev/null; echo \"read $?\"; "
        "echo z > /dev/null; echo \"null $?\"; echo done")
PERL = (
    'print 1; print "\\n";'
    'open(my $n, "<", "/dev/null") or die "null: $!"; print eof($n) ? "eof\\n" : "data\\n";'
    'open(my $z, "<", "/dev/zero") or die; read($z, my $b, 4); print unpack("H*", $b), "\\n";'
    'open(my $r, "<", "/dev/urandom") or die; print read($r, $b, 16), "\\n";'
    'print -c "/dev/null" ? "chr\\n" : "not\\n";'
    'open(my $f, ">", "/dev/full") or die; print $f "x"; close($f) or print "full: $!\\n";'
    'open(my $m, "<", "/proc/self/maps") or die "maps: $!"; my @m = <$m>;'
    'print scalar(grep { m{/usr/bin/perl} } @m) > 0 ? "maps name perl\\n" : "no\\n";'
    'my $pid = fork; if (!$pid) { print "child\\n"; exit 7 } waitpid($pid, 0);'
    'print "child status ", $? >> 8, "\\n";'
)
PYTHON = (
    "import errno, os\n"
    "print(os.path.exists('/dev/null'), os.path.isdir('/proc/self/fd'))\n"
    "print(len(os.urandom(8)), open('/dev/zero', 'rb').read(3))\n"
    "print(open('/dev/null', 'rb').read())\n"
    "try:\n    with open('/dev/full', 'w') as f: f.write('x')\n"
    "except OSError as e:\n    print('full', errno.errorcode[e.errno])\n"
    "print(open('/proc/self/cmdline', 'rb').read().split(b'\\0')[1:2])\n"
    "pid = os.fork()\n"
    "if pid == 0:\n    os._exit(5)\n"
    "print('child', os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))\n"
)
PROGRAMS = {  # name -> argv inside the root
    "perl": ("./usr/bin/perl", "-e", PERL),
    "python3": ("./usr/bin/python3", "-S", "-c", PYTHON),
    "dash": ("./bin/dash", "-c", JOBS),
    "bash": ("./bin/bash", "-c", JOBS + "; read l < <(echo procsub); echo \"$l\"; "
             "x=$(echo cs); echo \"$x\"; read y < /dev/stdin; echo \"stdin $?\""),
}
# python3 is the slow one (its start-up runs ~10^8 guest instructions): on three ISAs
PYTHON_ISAS = ("x86_64", "aarch64", "arm")
GAPS: dict[str, Cap] = {}  # program -> the capability it needs, where an ISA lacks it


def root_of(isa: str) -> Path:
    return built_root(ROOTS, isa, PACKAGES)


def qemu(isa: str, argv: tuple[str, ...]) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([qemu_binary(isa), "-L", ".", *argv], cwd=root_of(isa),
                          capture_output=True, timeout=300, env=RUN_ENV, stdin=subprocess.DEVNULL)


def emutrace(isa: str, *args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-m", "emutrace", "run", "--backend", "none",
                           "--root", ".", *args], cwd=root_of(isa), capture_output=True,
                          timeout=600, env=RUN_ENV, stdin=subprocess.DEVNULL)


def gap(isa: str, program: str) -> list[pytest.MarkDecorator]:
    need = GAPS.get(program)
    cap = by_name(isa).capabilities.get(need) if need is not None else None
    if cap is None or cap.works:
        return []
    return [pytest.mark.xfail(reason=cap.reason, strict=True)]


def cells() -> list:  # type: ignore[type-arg]
    return [pytest.param(isa, name, id=f"{isa}-{name}", marks=gap(isa, name))
            for isa in DEBIAN_ISAS for name in PROGRAMS
            if name != "python3" or isa in PYTHON_ISAS]


@pytest.mark.parametrize(("isa", "program"), cells())
def test_system_program_like_qemu(isa: str, program: str) -> None:
    argv = PROGRAMS[program]
    want = qemu(isa, argv)
    assert want.returncode == 0 and want.stdout, want.stderr
    got = emutrace(isa, *argv)
    assert (got.stdout.decode(), got.stderr.decode(), got.returncode) == (
        want.stdout.decode(), want.stderr.decode(), want.returncode)


@pytest.mark.parametrize("isa", ("x86_64", "s390x"))
def test_root_tmp_is_writable_and_files_copy(isa: str) -> None:
    """A root made by `emutrace rootfs` has a /tmp the guest may write without
    --allow-write; coreutils' cp copies into it with copy_file_range (the copy equals the
    original), and cat of a /proc file falls back to read/write without a warning."""
    root = root_of(isa)
    copy = root / "tmp" / f"copied-{isa}"
    copy.unlink(missing_ok=True)
    got = emutrace(isa, "./bin/cp", "etc/debian_version", f"tmp/{copy.name}")
    assert (got.returncode, got.stderr) == (0, b"")
    assert copy.read_bytes() == (root / "etc" / "debian_version").read_bytes()
    copy.unlink()
    shown = emutrace(isa, "./bin/cat", "/proc/sys/kernel/ostype")
    assert (shown.returncode, shown.stdout, shown.stderr) == (0, b"Linux\n", b"")


def test_rootfs_says_how_to_allow_writes() -> None:
    """`emutrace rootfs` over a built root (nothing to unpack) makes its /tmp (1777), home,
    /dev and /proc and ends with how to give the guest write access."""
    root = root_of("aarch64")
    env = {**ENV, "HOME": "/root"}
    if APT_CONFIG.exists():  # set-up's binary cache of apt's lists: `apt-cache depends` reads
        env["APT_CONFIG"] = str(APT_CONFIG)  # it instead of parsing them again (~6 s of CPU)
    got = subprocess.run([sys.executable, "-m", "emutrace", "rootfs", "--arch", "aarch64",
                          "-o", str(root), "--cache", str(REPO / ".cache" / "rootfs-debs" /
                                                          "aarch64"), *PACKAGES],
                         capture_output=True, timeout=300, env=env)
    assert got.returncode == 0, got.stderr
    first, last = got.stderr.decode().splitlines()
    assert first.endswith("0 packages unpacked, all present")
    assert "may write in /tmp and /root" in last and "--allow-write DIR" in last
    assert (root / "tmp").stat().st_mode & 0o7777 == 0o1777
    assert all((root / d).is_dir() for d in ("root", "dev", "proc"))


DOLLAR_ZERO = ('my @before = split /\\0/, do { local $/; open my $f, "<", "/proc/self/cmdline"; '
               '<$f> }; print scalar(@before), "\\n"; $0 = "renamed"; '
               'for my $file ("cmdline", "comm") { open my $f, "<", "/proc/self/$file" or die; '
               'local $/; my $x = <$f>; $x =~ s/\\0/|/g; print "$file: $x\\n" }')


@pytest.mark.parametrize("isa", ("x86_64", "aarch64", "s390x"))
def test_perl_renaming_itself_like_linux(isa: str) -> None:
    """Perl's `$0 = ...` rewrites its argv in memory and sets the command name with
    prctl(PR_SET_NAME): /proc/self/cmdline and comm show it as Linux shows it.  The
    oracle: the host's own Debian perl on the host's kernel (qemu-user's cmdline is made
    from its own arguments, not the guest's memory)."""
    host_perl = shutil.which("perl")
    if host_perl is None:
        pytest.skip("no perl on this host to be the oracle")
    want = subprocess.run([host_perl, "-e", DOLLAR_ZERO], capture_output=True, timeout=60,
                          env=RUN_ENV)
    assert want.returncode == 0 and b"renamed" in want.stdout, want.stderr
    got = emutrace(isa, "./usr/bin/perl", "-e", DOLLAR_ZERO)
    assert (got.stdout, got.stderr, got.returncode) == (want.stdout, want.stderr, 0)
