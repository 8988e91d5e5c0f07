"""`emutrace rootfs` without apt: which packages of `apt-cache depends` output
are unpacked, where the downloads go (a cache outside the root), and the root's absolute
symbolic links made relative (qemu-user's `-L` would follow them out of the root)."""

from __future__ import annotations

import os
from pathlib import Path

from emutrace import errors
from emutrace.rootfs import build_root, dependency_closure, relative_links
from tests.conftest import run_emutrace

# apt-cache depends --recurse prints the host's (amd64) packages and `all` ones unsuffixed,
# a Multi-Arch: foreign dependency (dpkg) once per architecture, virtual ones as <name>
DEPENDS = """coreutils:s390x
  PreDepends: libc6:s390x
libc6:s390x
  Depends: libgcc-s1:s390x
dpkg
dpkg:s390x
dpkg:arm64
readline-common
<awk>
libc6
coreutils
"""


def test_closure_of_a_foreign_architecture() -> None:
    assert dependency_closure(DEPENDS, "s390x", "amd64") == [
        "coreutils:s390x", "dpkg:s390x", "libc6:s390x", "readline-common"]


def test_closure_of_the_native_architecture() -> None:
    got = dependency_closure(DEPENDS, "amd64", "amd64")
    assert got == ["coreutils:amd64", "dpkg:amd64", "libc6:amd64", "readline-common:amd64"]


def test_downloads_stay_outside_the_root(tmp_path: Path) -> None:
    """A fake apt: the .debs land in the cache, the root holds only what was unpacked and
    the marker; a second run unpacks nothing."""
    root, cache = tmp_path / "root", tmp_path / "cache"
    calls: list[list[str]] = []

    def run(argv: list[str], cwd: Path | None) -> str:
        calls.append(argv)
        if argv[:2] == ["dpkg", "--print-architecture"]:
            return "amd64\n"
        if argv[:2] == ["dpkg", "--print-foreign-architectures"]:
            return "s390x\n"
        if argv[:2] == ["apt-cache", "depends"]:
            return DEPENDS
        if argv[:2] == ["apt-get", "download"]:
            assert cwd == cache
            for name in argv[3:]:
                package, _, arch = name.partition(":")
                (cache / f"{package}_1.0_{arch or 'all'}.deb").write_bytes(b"")
            return ""
        if argv[:2] == ["dpkg-deb", "-x"]:
            assert argv[3] == str(root)
            (root / Path(argv[2]).stem).write_text("")
            return ""
        raise AssertionError(argv)

    added = build_root(root, "s390x", ["coreutils"], run=run, cache=cache)
    assert added == ["coreutils:s390x", "dpkg:s390x", "libc6:s390x", "readline-common"]
    assert sorted(p.name for p in cache.iterdir()) == [
        "coreutils_1.0_s390x.deb", "dpkg_1.0_s390x.deb", "libc6_1.0_s390x.deb",
        "readline-common_1.0_all.deb"]
    assert not (root / ".debs").exists()
    assert build_root(root, "s390x", ["coreutils"], run=run, cache=cache) == []


def test_absolute_links_made_relative(tmp_path: Path) -> None:
    """Debian's ppc64el libc6: /lib64/ld64.so.2 -> /lib/powerpc64le-linux-gnu/ld64.so.2."""
    (tmp_path / "lib" / "powerpc64le-linux-gnu").mkdir(parents=True)
    target = tmp_path / "lib" / "powerpc64le-linux-gnu" / "ld64.so.2"
    target.write_text("ld.so")
    (tmp_path / "lib64").mkdir()
    link = tmp_path / "lib64" / "ld64.so.2"
    link.symlink_to("/lib/powerpc64le-linux-gnu/ld64.so.2")
    (tmp_path / "rel").symlink_to("lib")  # already relative: left alone
    assert relative_links(tmp_path) == 1
    assert os.readlink(link) == "../lib/powerpc64le-linux-gnu/ld64.so.2"
    assert link.read_text() == "ld.so" and os.readlink(tmp_path / "rel") == "lib"


def test_cache_not_a_directory_is_a_usage_error(tmp_path: Path) -> None:
    """`--cache FILE`: one line, exit 64, before apt runs."""
    file = tmp_path / "file"
    file.write_text("")
    got = run_emutrace("rootfs", "--arch", "s390x", "-o", str(tmp_path / "root"),
                       "--cache", str(file))
    assert got.returncode == errors.EXIT_USAGE and got.stderr.count(b"\n") == 1
    assert b"--cache" in got.stderr and not (tmp_path / "root").exists()
