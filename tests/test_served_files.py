"""The guest's /dev and /proc (machine/linux/devfs.py, procfs.py): what each node holds and
how the sandbox's walk reaches it.

* The walk (emutrace/sandbox.py, mounts): links of the served trees and of the root that
  lead into them, `..` out of them, the write rule, chdir into them; the scratch
  directories of an `emutrace rootfs` root.
* The contents, read by Debian's static busybox under emutrace on three ISAs (64-bit
  little-endian, 64-bit big-endian, 32-bit), checked against the formats of proc(5),
  null(4), zero(4), full(4), random(4) and devices.txt, and against independent facts:
  the program's PT_LOAD segments (readelf), the shell's own pid ($$), the host's
  memory total and CPU affinity (which the files document as their source), uname.
"""

from __future__ import annotations

import fcntl
import os
import re
import subprocess
import sys
import termios
from pathlib import Path

import pytest

from emutrace.machine.linux.vfs import Device, FdLink, fixed_dir, fixed_link, text_file
from emutrace.rootfs import MARKER, system_dirs
from emutrace.sandbox import ROOTFS_MARKER, Sandbox, SandboxError, Virtual, scratch_dirs
from tests.conftest import BUSYBOX, ENV

# ---------------------------------------------------------------- the walk, in Python


def mounted(root: Path) -> Sandbox:
    """A sandbox over `root` with a /dev and a /proc of pid 42 (fd 1 open)."""
    sb = Sandbox(root, [root / "w"])
    proc42 = fixed_dir({b"mounts": text_file("rootfs / rootfs rw 0 0\n"),
                        b"fd": fixed_dir({b"1": FdLink(number=1, text=lambda: b"/w/out")}),
                        b"exe": fixed_link(b"/bin/prog")})
    sb.mount(b"proc", fixed_dir({b"self": fixed_link(b"42"), b"42": proc42}))
    sb.mount(b"dev", fixed_dir({b"null": Device(rdev=os.makedev(1, 3)),
                                b"stdout": fixed_link(b"/proc/self/fd/1")}))
    return sb


@pytest.fixture
def root(tmp_path: Path) -> Path:
    for d in ("etc", "bin", "w", "dev"):
        (tmp_path / d).mkdir()
    (tmp_path / "bin" / "prog").write_text("")
    (tmp_path / "etc" / "mtab").symlink_to("../proc/self/mounts")  # as Debian's
    (tmp_path / "dev" / "null").write_text("the root's own file, never seen")
    return tmp_path


def test_served_trees_take_the_place_of_the_roots(root: Path) -> None:
    sb = mounted(root)
    null = sb.lookup("/dev/null")
    assert isinstance(null, Virtual) and null.node.kind == "device"
    assert null.guest_path == b"/dev/null"
    mounts = sb.lookup("/etc/mtab")  # a link of the root into /proc
    assert isinstance(mounts, Virtual) and mounts.guest_path == b"/proc/42/mounts"
    out = sb.lookup("/dev/stdout")  # /dev -> /proc -> the descriptor itself
    assert isinstance(out, Virtual) and out.node.kind == "fd"
    assert sb.lookup("/proc/self/fd/1", follow_final=False).node.kind == "fd"  # type: ignore[union-attr]
    assert sb.lookup("/proc/self/exe") == root / "bin" / "prog"  # a link out, by its text
    assert sb.lookup("/proc/self/../../bin/prog") == root / "bin" / "prog"
    proc = sb.lookup("/proc/42/fd/..")
    assert isinstance(proc, Virtual) and proc.guest_path == b"/proc/42"


def test_served_trees_refusals(root: Path) -> None:
    sb = mounted(root)
    for path, kw, name in (("/proc/nothing", {}, "ENOENT"), ("/dev/null/x", {}, "ENOTDIR"),
                           ("/proc/self/mounts/", {}, "ENOTDIR"),
                           ("/proc/self/mounts", {"write": True}, "EACCES"),
                           ("/dev/null", {"write": True, "metadata": True}, "EACCES"),
                           ("/dev/null", {"write": True, "follow_final": False}, "EACCES"),
                           ("/dev/new", {"write": True, "create": True}, "ENOENT")):
        with pytest.raises(SandboxError) as e:
            sb.lookup(path, **kw)  # type: ignore[arg-type]
        assert e.value.errno_name == name, path
    assert isinstance(sb.lookup("/dev/null", write=True), Virtual)  # writing to it is fine
    with pytest.raises(SandboxError) as e:  # a caller that needs a host path
        sb.resolve("/dev/null")
    assert e.value.errno_name == "EACCES" and not e.value.denied


def test_chdir_into_a_served_directory(root: Path) -> None:
    sb = mounted(root)
    sb.chdir("/proc/self")
    assert sb.guest_cwd == "/proc/42"
    found = sb.lookup("mounts")
    assert isinstance(found, Virtual) and found.guest_path == b"/proc/42/mounts"
    assert sb.lookup("../../etc") == root / "etc"
    # a directory that is gone (the pid of a parent, after a fork) is ENOENT, never the
    # root's file of that name
    (root / "proc" / "42" / "fd").mkdir(parents=True)
    (root / "proc" / "42" / "mounts").write_text("the root's own file")
    sb.chdir("/proc/42/fd")
    sb.mounts[b"proc"] = fixed_dir({b"self": fixed_link(b"43")})
    for path in ("..", "../fd", "mounts"):
        with pytest.raises(SandboxError) as e:
            sb.lookup(path)
        assert e.value.errno_name == "ENOENT", path


def test_rootfs_scratch_directories(tmp_path: Path) -> None:
    """A root made by `emutrace rootfs` gets /tmp (1777) and the home, writable without
    --allow-write; other roots, and links out of the root, give nothing."""
    assert MARKER == ROOTFS_MARKER
    assert system_dirs(tmp_path, home="/usr") == [tmp_path / "tmp"]  # no system dir
    made = system_dirs(tmp_path, home="/home/user")
    assert made == [tmp_path / "tmp", tmp_path / "home" / "user"]
    assert (tmp_path / "tmp").stat().st_mode & 0o7777 == 0o1777
    assert (tmp_path / "dev").is_dir() and (tmp_path / "proc").is_dir()
    assert scratch_dirs(tmp_path, "/home/user") == []  # no marker: not a rootfs root
    (tmp_path / MARKER).write_text("libc6:arm64\n")
    assert scratch_dirs(tmp_path, "/home/user") == made
    sb = Sandbox(tmp_path, guest_cwd="/")
    assert sb.resolve("/tmp/x", write=True, create=True) == tmp_path / "tmp" / "x"
    with pytest.raises(SandboxError):
        sb.resolve("/etc-x", write=True, create=True)
    (tmp_path / "usr").mkdir()
    for home in ("/usr", "/home/../usr", "/tmp/../usr", "/"):  # never a system directory
        assert scratch_dirs(tmp_path, home) == [tmp_path / "tmp"], home
    (tmp_path / "tmp").rmdir()
    (tmp_path / "tmp").symlink_to("/")  # out of the root: not given away
    assert scratch_dirs(tmp_path, None) == []


# ---------------------------------------------------------------- the contents, in a guest

SCRIPT = r"""
echo "== pid $$"
echo "== status"; while IFS= read -r l; do echo "$l"; done < /proc/self/status
echo "== stat"; read -r s < /proc/self/stat; echo "$s"
echo "== maps"; while IFS= read -r l; do echo "$l"; done < /proc/self/maps
echo "== exe"; readlink /proc/self/exe
echo "== cmdline"; cat /proc/self/cmdline
echo "== environ"; cat /proc/self/environ
echo "== fd0"; readlink /proc/self/fd/0
echo "== fds"; ls /proc/self/fd
echo "== dev"; ls -ln /dev
echo "== zero"; head -c 8 /dev/zero | od -An -tx1
echo "== urandom"; head -c 100000 /dev/urandom | wc -c
echo "== null"; cat /dev/null | wc -c; echo x > /dev/null; echo "rc $?"
echo "== full"; echo x 2>&1 > /dev/full; echo "rc $?"
echo "== cpuinfo"; grep -c '^processor' /proc/cpuinfo
echo "== meminfo"; grep MemTotal /proc/meminfo
echo "== version"; cat /proc/version
echo "== osrelease"; cat /proc/sys/kernel/osrelease
echo "== overcommit"; cat /proc/sys/vm/overcommit_memory
echo "== mounts"; cat /proc/mounts
echo "== uuid"; cat /proc/sys/kernel/random/uuid
r=/proc/sys/kernel/random
echo "== bootids"; read -r a < $r/boot_id; read -r b < $r/boot_id; [ "$a" = "$b" ] && echo same
echo "== uuids"; read -r a < $r/uuid; read -r b < $r/uuid; [ "$a" != "$b" ] && echo differ
echo "== comm"; read -r c < /proc/self/comm; echo "$c"
echo "== statm"; read -r m < /proc/self/statm; echo "$m"
echo "== mountinfo"; while IFS= read -r l; do echo "$l"; done < /proc/self/mountinfo
echo "== uptime"; read -r u < /proc/uptime; echo "$u"
echo "== loadavg"; read -r a < /proc/loadavg; echo "$a"
echo "== procstat"; while IFS= read -r l; do echo "$l"; done < /proc/stat
echo "== task"; echo /proc/$$/task/*
echo "== threadself"; cd /proc/thread-self && pwd -P; cd /
echo "== cwd"; cd /proc/self/fd && pwd -P && cd / && readlink /proc/self/cwd
echo "== auxv"; od -An -tx1 -v /proc/self/auxv
echo "== end"
"""
SHAPE_ISAS = ("x86_64", "s390x", "arm")
MAPS_LINE = re.compile(r"([0-9a-f]{8,})-([0-9a-f]{8,}) ([r-][w-][x-][ps]) ([0-9a-f]{8}) "
                       r"([0-9a-f]{2}:[0-9a-f]{2}) (\d+)(?: +(\S.*))?")


def sections(isa: str) -> dict[str, bytes]:
    program = BUSYBOX / isa / "busybox"
    if not program.exists():
        pytest.fail(f"{program}: run scripts/setup.sh")
    got = subprocess.run([sys.executable, "-m", "emutrace", "run", "--backend", "none",
                          str(program), "sh", "-c", SCRIPT], input=b"",
                         env={**ENV, "SERVED_TEST": "yes"}, capture_output=True, timeout=300)
    assert got.returncode == 0, got.stderr
    out: dict[str, bytes] = {}
    for part in got.stdout.split(b"== ")[1:]:
        head, _, body = part.partition(b"\n")
        name, _, value = head.decode().partition(" ")
        out[name] = value.encode() if value else body
    return out


@pytest.fixture(scope="module", params=SHAPE_ISAS)
def guest(request: pytest.FixtureRequest) -> tuple[str, dict[str, bytes]]:
    return request.param, sections(request.param)


def load_segments(program: Path) -> list[tuple[int, int, str]]:
    """(vaddr, memsz, flags) of the PT_LOAD headers, from binutils' readelf."""
    out = subprocess.run(["readelf", "-lW", str(program)], capture_output=True, text=True,
                         check=True).stdout
    rows = []
    for line in out.splitlines():
        cols = line.split()
        if cols[:1] == ["LOAD"]:
            rows.append((int(cols[2], 16), int(cols[5], 16), "".join(cols[6:-1])))
    return rows


def test_proc_self_maps(guest: tuple[str, dict[str, bytes]]) -> None:
    """Every line parses as proc(5)'s format; the lines are sorted and disjoint; the
    program's executable PT_LOAD is an r-x mapping named after the program at the page of
    its address, with the file's device and inode; [stack] is there."""
    isa, s = guest
    program = str(BUSYBOX / isa / "busybox")
    rows = []
    for line in s["maps"].decode().splitlines():
        m = MAPS_LINE.fullmatch(line)
        assert m is not None, line
        rows.append((int(m[1], 16), int(m[2], 16), m[3], m[7]))
        if m[7] == program:  # the file's device and inode, as the host's stat gives them
            st = os.stat(program)
            assert (m[5], int(m[6])) == (
                f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}", st.st_ino)
    assert all(lo < hi for lo, hi, _, _ in rows)
    assert all(a[1] <= b[0] for a, b in zip(rows, rows[1:], strict=False))
    text = next(vaddr for vaddr, _, flags in load_segments(Path(program)) if "E" in flags)
    assert any(lo == text & ~0xFFF and perms == "r-xp" and name == program
               for lo, _, perms, name in rows), rows
    assert any(name == "[stack]" and "rw" in perms for _, _, perms, name in rows)


def test_proc_self_status_and_stat(guest: tuple[str, dict[str, bytes]]) -> None:
    _, s = guest
    pid = int(s["pid"])
    status = dict(line.split(":\t", 1) for line in s["status"].decode().splitlines())
    assert status["Name"] == "busybox"
    assert int(status["Pid"]) == int(status["Tgid"]) == pid
    assert int(status["Threads"]) == 1
    for key in ("SigBlk", "SigIgn", "SigCgt", "CapEff"):
        assert re.fullmatch(r"[0-9a-f]{16}", status[key]), key
    assert re.fullmatch(r"\d+ kB", status["VmSize"].strip())
    fields = s["stat"].decode().split()
    assert len(fields) == 52  # proc(5): pid ... exit_code
    assert (int(fields[0]), fields[1], fields[2]) == (pid, "(busybox)", "R")
    assert int(fields[3]) == int(status["PPid"])


def test_proc_self_cmdline_environ_exe_fd(guest: tuple[str, dict[str, bytes]]) -> None:
    """cmdline and environ are NUL-separated, of the process that reads them (`cat`, run
    by busybox sh as an applet under argv[0] "cat"); fd 0 is the pipe emutrace's stdin
    is; exe is the program's guest path (the root is /)."""
    isa, s = guest
    assert s["cmdline"] == b"cat\0/proc/self/cmdline\0"
    assert b"\0SERVED_TEST=yes\0" in b"\0" + s["environ"]
    assert s["exe"].decode().strip() == str(BUSYBOX / isa / "busybox")
    assert re.fullmatch(rb"pipe:\[\d+\]\n", s["fd0"])
    assert {b"0", b"1", b"2", b"3"} <= set(s["fds"].split())  # 3: the listed directory


def test_dev_nodes(guest: tuple[str, dict[str, bytes]]) -> None:
    """The devices with devices.txt's numbers, the fd links, and each device's semantics:
    zero reads zeros, urandom gives every byte asked for, null reads empty and takes
    writes, full refuses them with ENOSPC (full(4))."""
    _, s = guest
    listing = {line.split()[-1]: line for line in s["dev"].decode().splitlines()[1:]}
    for name, (major, minor) in {"null": (1, 3), "zero": (1, 5), "full": (1, 7),
                                 "random": (1, 8), "urandom": (1, 9), "tty": (5, 0)}.items():
        line = listing[name]
        assert line.startswith("crw-rw-rw-"), line
        assert re.search(rf" {major}, +{minor} ", line), line
    for name, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"),
                         ("stdout", "/proc/self/fd/1"), ("stderr", "/proc/self/fd/2")):
        assert listing[target].split()[-3:] == [name, "->", target]
    assert s["zero"].split() == [b"00"] * 8
    assert int(s["urandom"]) == 100000
    assert s["null"].split() == [b"0", b"rc", b"0"]
    assert b"No space left on device" in s["full"] and s["full"].endswith(b"rc 1\n")


def test_machine_files(guest: tuple[str, dict[str, bytes]]) -> None:
    _, s = guest
    assert int(s["cpuinfo"]) == len(os.sched_getaffinity(0))
    host_total = next(line for line in Path("/proc/meminfo").read_text().splitlines()
                      if line.startswith("MemTotal:")).split()[1]
    assert s["meminfo"].split()[:2] == [b"MemTotal:", host_total.encode()]
    release = os.uname().release
    assert s["version"].decode().startswith(f"Linux version {release} ")
    assert s["osrelease"].decode() == release + "\n"
    assert s["overcommit"] == b"0\n"
    mounts = [line.split() for line in s["mounts"].decode().splitlines()]
    assert all(len(fields) == 6 for fields in mounts)
    assert {fields[1] for fields in mounts} >= {"/", "/proc", "/dev"}
    assert re.fullmatch(rb"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-"
                        rb"[0-9a-f]{12}\n", s["uuid"])
    assert (s["bootids"], s["uuids"]) == (b"same\n", b"differ\n")  # random(4)


def test_dev_tty_is_the_users_terminal() -> None:
    """/dev/tty is emutrace's controlling terminal when it has one (a pty here, made the
    session's terminal): what the guest writes there reaches the terminal, and tty(1)
    (ttyname(3): readlink of /proc/self/fd/0, then stat) names it as the host does, in
    /dev/pts; without one the open is ENXIO (tests/test_realcalls.py)."""
    master, slave = os.openpty()

    def controlling_terminal() -> None:
        os.setsid()
        fcntl.ioctl(slave, termios.TIOCSCTTY, 0)

    try:
        got = subprocess.run([sys.executable, "-m", "emutrace", "run", "--backend", "none",
                              str(BUSYBOX / "x86_64" / "busybox"), "sh", "-c",
                              "echo to-the-terminal > /dev/tty; echo rc $?; tty; "
                              "ls /dev/pts"],
                             stdin=slave, capture_output=True, env=ENV, timeout=120,
                             preexec_fn=controlling_terminal)
        seen = os.read(master, 4096)
        name = os.ttyname(slave)  # the oracle of tty(1)
    finally:
        os.close(slave)
        os.close(master)
    assert got.returncode == 0, got.stderr
    assert got.stdout.decode() == f"rc 0\n{name}\n{os.path.basename(name)}\n"
    assert b"to-the-terminal" in seen


def test_descriptor_links_reopen_as_linux(tmp_path: Path) -> None:
    """Opening /proc/self/fd/N or /dev/fd/N opens the descriptor's file anew: `>`
    truncates it, `>>` appends, `<` reads from its start.  The oracle: the same x86_64
    busybox run natively on this host's kernel, in a directory of its own."""
    script = ("echo first > log; exec 3>>log; echo second >&3; echo third > /proc/self/fd/3; "
              "cat log; echo app >> /dev/fd/3; cat < /dev/fd/3 2>&1; exec 4<log; "
              "read a < /proc/self/fd/4; read b <&4; echo \"$a $b\"; cat /dev/stdin")
    busybox = str(BUSYBOX / "x86_64" / "busybox")
    runs: list[subprocess.CompletedProcess[bytes]] = []
    for prefix in ([], [sys.executable, "-m", "emutrace", "run", "--backend", "none"]):
        here = tmp_path / str(len(runs))
        here.mkdir()
        runs.append(subprocess.run([*prefix, busybox, "sh", "-c", script], cwd=here,
                                   input=b"piped\n", env=ENV, capture_output=True,
                                   timeout=120))
    native, emulated = runs
    assert native.returncode == 0 and b"app" in native.stdout, native.stderr
    assert (emulated.stdout, emulated.stderr, emulated.returncode) == (
        native.stdout, native.stderr, native.returncode)


def test_more_process_and_machine_files(guest: tuple[str, dict[str, bytes]]) -> None:
    """comm, statm, mountinfo, task/, thread-self and cwd of the shell itself; uptime,
    loadavg and stat of the machine (proc(5)'s shapes; the CPU lines per CPU allowed)."""
    _, s = guest
    pid = s["pid"].decode()
    assert s["comm"] == b"busybox\n"
    assert re.fullmatch(rb"(\d+ ){6}\d+\n", s["statm"])
    for line in s["mountinfo"].decode().splitlines():
        fields = line.split()
        assert re.fullmatch(r"\d+:\d+", fields[2]) and fields.index("-") == 6, line
    assert re.fullmatch(rb"\d+\.\d\d \d+\.\d\d\n", s["uptime"])
    assert re.fullmatch(rb"(\d+\.\d\d ){3}\d+/\d+ \d+\n", s["loadavg"])
    cpus = [line for line in s["procstat"].decode().splitlines() if line.startswith("cpu")]
    assert len(cpus) == 1 + len(os.sched_getaffinity(0))
    assert all(len(line.split()) == 11 for line in cpus)
    assert s["task"].decode() == f"/proc/{pid}/task/{pid}\n"  # the shell's own glob
    assert s["threadself"].decode() == f"/proc/{pid}/task/{pid}\n"
    assert s["cwd"].decode().splitlines() == [f"/proc/{pid}/fd", "/"]


def test_standard_descriptors_name_their_files(tmp_path: Path) -> None:
    """The descriptors emutrace hands on are named by their files: realpath of
    /dev/stdout is the file the output goes to, /dev/stdin the null device."""
    out = tmp_path / "out.txt"
    with open(out, "wb") as sink:
        got = subprocess.run([sys.executable, "-m", "emutrace", "run", "--backend", "none",
                              str(BUSYBOX / "x86_64" / "busybox"), "sh", "-c",
                              "realpath /dev/stdout; realpath /dev/stdin"],
                             stdin=subprocess.DEVNULL, stdout=sink, stderr=subprocess.PIPE,
                             env=ENV, timeout=120)
    assert got.returncode == 0, got.stderr
    assert out.read_text().splitlines() == [str(out.resolve()), "/dev/null"]


def test_proc_self_auxv(guest: tuple[str, dict[str, bytes]]) -> None:
    """auxv: (type, value) word pairs in the guest's byte order ending with AT_NULL;
    AT_PAGESZ is 4096 and AT_ENTRY the program's entry point (readelf -h)."""
    isa, s = guest
    info = subprocess.run(["readelf", "-h", str(BUSYBOX / isa / "busybox")],
                          capture_output=True, text=True, check=True).stdout
    entry = int(next(line for line in info.splitlines() if "Entry point" in line).split()[-1],
                16)
    word = 8 if "ELF64" in info else 4
    big = "big endian" in info
    raw = bytes(int(x, 16) for x in s["auxv"].split())
    values = [int.from_bytes(raw[i:i + word], "big" if big else "little")
              for i in range(0, len(raw), word)]
    pairs = dict(zip(values[0::2], values[1::2], strict=True))
    assert values[-2:] == [0, 0] and len(values) % 2 == 0
    assert pairs[6] == 4096 and pairs[9] == entry  # AT_PAGESZ, AT_ENTRY (elf.h)
