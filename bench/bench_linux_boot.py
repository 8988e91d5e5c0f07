"""How fast does Debian's arm64 Linux boot on virt-arm64, against qemu-system-aarch64 (TCG),
and what does a traced boot cost in time and memory?

    python bench/bench_linux_boot.py [--rounds 1] [--out bench/results/linux-boot.md]

One initramfs of Debian's busybox-static whose /init runs `cat /proc/version` and powers
off (machine/board/initramfs.py), the kernel and System.map that scripts/setup.sh fetches,
`console=ttyAMA0 nokaslr`.  Rows, each a process of its own (wall time, CPU = user + system
of the process, its peak RSS from wait4):

* qemu-system-aarch64 -M virt -cpu cortex-a57 (TCG), to its exit at the PSCI power-off;
* emutrace run --machine virt-arm64 --backend none, to the power-off;
* emutrace record --machine ... --backend int3 --trace-after TEXT: the boot untraced up to
  TEXT, then traced and streamed into a uftrace data directory until the power-off, for
  TEXT = `== command ==` (cat and the power-off) and `Run /init` (all of user space);
* the same with --backend step.

The recording is streamed to the data directory as it is made: the peak RSS is the same
whether 6 or 10 MB are recorded (the records are not kept in memory).

Also per row: the kernel's own clock (printk time stamps) at `Run /init` and at `reboot:
Power down`.  The boot is mostly the guest waiting for its timer (both run it in host time),
so wall time is not CPU time; on a shared machine both are noisy (say how loaded it was).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from emutrace.machine.board.initramfs import BEGIN, busybox_initramfs  # noqa: E402
from emutrace.machine.board.presets import BOARDS  # noqa: E402

KERNEL = ROOT / ".cache" / "firmware" / "linux-arm64" / "vmlinuz"
SYSTEM_MAP = KERNEL.parent / "System.map"
BUSYBOX = ROOT / ".cache" / "busybox" / "aarch64" / "busybox"
CMDLINE = "console=ttyAMA0 nokaslr"
COMMAND = "cat /proc/version"
STAMP = re.compile(rb"\[\s*(\d+\.\d+)\] (Run /init as init process|reboot: Power down)")


@dataclass
class Row:
    name: str
    wall: float
    cpu: float
    rss_mb: float
    at_init: float | None  # the kernel's clock at `Run /init`
    at_off: float | None  # ... at `reboot: Power down`
    records: str = ""

    def line(self, base: Row | None) -> str:
        ratio = f"{self.wall / base.wall:.1f}x" if base else ""
        cpu_ratio = f"{self.cpu / base.cpu:.1f}x" if base else ""
        def stamp(v: float | None) -> str:
            return "" if v is None else f"{v:.2f} s"
        return (f"| {self.name} | {self.wall:.1f} s | {ratio} | {self.cpu:.1f} s | {cpu_ratio} "
                f"| {self.rss_mb:.0f} MB | {stamp(self.at_init)} | {stamp(self.at_off)} "
                f"| {self.records} |")


def measure(name: str, argv: list[str], records: Path | None = None) -> Row:
    """Run argv once: its wall time, CPU and peak RSS (wait4), the console's stamps."""
    with tempfile.TemporaryFile() as out:
        start = time.monotonic()
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, cwd=ROOT)
        _pid, status, usage = os.wait4(proc.pid, 0)
        wall = time.monotonic() - start
        out.seek(0)
        console = out.read()
    if not os.WIFEXITED(status) or os.WEXITSTATUS(status) != 0:
        raise SystemExit(f"{name}: {argv} failed ({status}):\n{console[-2000:].decode()}")
    stamps = {m.group(2): float(m.group(1)) for m in STAMP.finditer(console)}
    count = ""
    if records is not None:
        size = sum(f.stat().st_size for f in records.iterdir())
        count = f"{size / 1e6:.1f} MB recorded"
    return Row(name, wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024,
               stamps.get(b"Run /init as init process"), stamps.get(b"reboot: Power down"),
               count)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=1, help="rounds of every row (the best "
                   "wall time is kept)")
    p.add_argument("--out", type=Path, help="write the table (markdown) here too")
    args = p.parse_args()
    for need in (KERNEL, SYSTEM_MAP, BUSYBOX):
        if not need.exists():
            raise SystemExit(f"{need} missing: run scripts/setup.sh")
    work = Path(tempfile.mkdtemp(prefix="bench-linux-"))
    initrd = work / "initramfs.cpio"
    initrd.write_bytes(busybox_initramfs(BUSYBOX.read_bytes(), COMMAND))
    machine = ["--machine", "virt-arm64", "--initrd", str(initrd), "--append", CMDLINE]
    emutrace = [sys.executable, "-m", "emutrace"]
    cases: list[tuple[str, list[str], Path | None]] = [
        ("qemu-system-aarch64 (TCG)",
         [*BOARDS["virt-arm64"].qemu, "-nographic", "-monitor", "none", "-serial", "stdio",
          "-net", "none", "-kernel", str(KERNEL), "-initrd", str(initrd), "-append",
          CMDLINE], None),
        ("emutrace `--backend none`",
         [*emutrace, "run", *machine, "--backend", "none", str(KERNEL)], None)]
    for backend in ("int3", "step"):
        for trigger, what in ((BEGIN, "cat"), ("Run /init", "user space")):
            data = work / f"{backend}-{what.replace(' ', '-')}.data"
            cases.append((f"`record --backend {backend}`, traced from {what}",
                          [*emutrace, "record", *machine, "--backend", backend,
                           "--symbols", str(SYSTEM_MAP), "--trace-after", trigger,
                           "-d", str(data), str(KERNEL)], data))
    rows = []
    for name, argv, data in cases:
        best = min((measure(name, argv, data) for _ in range(args.rounds)),
                   key=lambda r: r.wall)
        rows.append(best)
        print(best.line(rows[1] if len(rows) > 1 and best is not rows[1] else None),
              flush=True)
    load = os.getloadavg()
    lines = [
        f"Debian's arm64 Linux ({KERNEL.name}, `{CMDLINE}`) with a busybox initramfs running "
        f"`{COMMAND}`, to the PSCI power-off; {args.rounds} round(s), best wall time; "
        f"load average at the end {load[0]:.1f} on {os.cpu_count()} CPUs.  Ratios against "
        f"emutrace's `--backend none`.",
        "",
        "| run | wall | wall ratio | CPU | CPU ratio | peak RSS | kernel clock at "
        "`Run /init` | at `Power down` | recording |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
        *(r.line(rows[1] if r is not rows[1] else None) for r in rows)]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
