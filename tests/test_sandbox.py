"""Tests for emutrace.sandbox (guest path resolution and write policy)."""

from __future__ import annotations

import errno
import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from emutrace.sandbox import MAXSYMLINKS, Sandbox, SandboxError

# --------------------------------------------------------------------------- fixtures


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A small guest root:

    root/etc/passwd                    read-only file
    root/etc/sub/                      read-only dir
    root/usr/lib/libc.so
    root/lib -> usr/lib                relative dir symlink
    root/home/user/                    writable dir
    root/home/user/notes.txt
    root/home/user/sub/
    root/home/user/link_ro -> /etc/passwd      absolute, inside root
    root/home/user/rel_ro -> ../../etc/passwd  relative, inside root
    root/home/user/dirlink -> /etc             to a read-only dir
    root/home/user/mine -> notes.txt           stays in the writable dir
    root/home/user/dangling -> /etc/newfile
    root/escape -> ../..               relative, leaves the root
    root/escape_abs -> /../outside     absolute with '..' above the root
    root/loop1 -> loop2, root/loop2 -> loop1, root/self -> self
    root/empty_target: not creatable portably -> skipped
    outside/secret                     a file next to the root
    """
    root = tmp_path / "root"
    (root / "etc" / "sub").mkdir(parents=True)
    (root / "etc" / "passwd").write_text("root:x:0:0\n")
    (root / "usr" / "lib").mkdir(parents=True)
    (root / "usr" / "lib" / "libc.so").write_text("ELF")
    (root / "lib").symlink_to("usr/lib")
    user = root / "home" / "user"
    (user / "sub").mkdir(parents=True)
    (user / "notes.txt").write_text("hello")
    (user / "link_ro").symlink_to("/etc/passwd")
    (user / "rel_ro").symlink_to("../../etc/passwd")
    (user / "dirlink").symlink_to("/etc")
    (user / "mine").symlink_to("notes.txt")
    (user / "dangling").symlink_to("/etc/newfile")
    (root / "escape").symlink_to("../..")
    (root / "escape_abs").symlink_to("/../outside")
    (root / "loop1").symlink_to("loop2")
    (root / "loop2").symlink_to("loop1")
    (root / "self").symlink_to("self")
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "secret").write_text("secret")
    return root


@pytest.fixture
def sb(tree: Path) -> Sandbox:
    return Sandbox(tree, writable=[tree / "home" / "user"], guest_cwd="/home/user")


def raises(errno_name: str, fn: object, *args: object, **kwargs: object) -> SandboxError:
    assert callable(fn)
    with pytest.raises(SandboxError) as info:
        fn(*args, **kwargs)
    assert info.value.errno_name == errno_name, str(info.value)
    assert "\n" not in str(info.value)
    assert str(info.value).startswith("emutrace: sandbox: ")
    return info.value


# --------------------------------------------------------------------------- construction


def test_root_and_writable_are_resolved(tree: Path, tmp_path: Path) -> None:
    (tmp_path / "rootlink").symlink_to(tree)
    (tmp_path / "wlink").symlink_to(tree / "home" / "user")
    sb = Sandbox(str(tmp_path / "rootlink"), writable=[os.fsencode(tmp_path / "wlink")])
    assert sb.root == tree.resolve()
    assert sb.writable == (tree / "home" / "user",)
    assert sb.resolve("/etc/passwd") == tree / "etc" / "passwd"


def test_relative_host_paths_are_made_absolute(tree: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tree)
    sb = Sandbox(".", writable=["home/user"])
    assert sb.root == tree
    assert sb.writable == (tree / "home" / "user",)


def test_single_writable_path_is_one_directory(tree: Path) -> None:
    sb = Sandbox(str(tree), writable=str(tree / "home" / "user"))
    assert sb.writable == (tree / "home" / "user",)


def test_writable_outside_root_is_rejected(tree: Path, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="not under the sandbox root"):
        Sandbox(tree, writable=[tmp_path / "outside"])


def test_writable_must_exist(tree: Path) -> None:
    with pytest.raises(ValueError, match="not an existing directory"):
        Sandbox(tree, writable=[tree / "nope"])
    with pytest.raises(ValueError, match="not an existing directory"):
        Sandbox(tree, writable=[tree / "etc" / "passwd"])


def test_root_must_be_a_directory(tree: Path) -> None:
    with pytest.raises(ValueError, match="root"):
        Sandbox(tree / "nope")
    with pytest.raises(ValueError, match="root"):
        Sandbox(tree / "etc" / "passwd")


def test_duplicate_writable_dirs_are_merged(tree: Path) -> None:
    user = tree / "home" / "user"
    sb = Sandbox(tree, writable=[user, str(user) + "/", user / "sub" / ".."])
    assert sb.writable == (user,)


def test_default_cwd_and_writable_from_host_cwd(
    tree: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tree / "home" / "user")
    sb = Sandbox(tree)
    assert sb.guest_cwd == "/home/user"
    assert sb.writable == (tree / "home" / "user",)
    assert sb.resolve("notes.txt", write=True) == tree / "home" / "user" / "notes.txt"
    raises("EACCES", sb.resolve, "/etc/passwd", write=True)


def test_default_cwd_outside_root_is_slash_and_nothing_writable(
    tree: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path / "outside")
    sb = Sandbox(tree)
    assert sb.guest_cwd == "/"
    assert sb.writable == ()
    assert sb.resolve("etc/passwd") == tree / "etc" / "passwd"
    raises("EACCES", sb.resolve, "/home/user/notes.txt", write=True)


def test_default_root_is_host_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    sb = Sandbox()
    assert sb.root == Path("/")
    assert sb.guest_cwd == str(tmp_path.resolve())
    assert sb.writable == (tmp_path.resolve(),)
    assert sb.resolve("x", write=True, create=True) == tmp_path.resolve() / "x"


def test_explicit_guest_cwd(tree: Path) -> None:
    assert Sandbox(tree, guest_cwd="/lib").guest_cwd == "/usr/lib"
    assert Sandbox(tree, guest_cwd=b"/etc/").guest_cwd == "/etc"
    with pytest.raises(ValueError, match="guest working directory"):
        Sandbox(tree, guest_cwd="/nope")
    with pytest.raises(ValueError, match="guest working directory"):
        Sandbox(tree, guest_cwd="/etc/passwd")


# --------------------------------------------------------------------------- lookups


def test_absolute_paths(sb: Sandbox, tree: Path) -> None:
    assert sb.resolve("/etc/passwd") == tree / "etc" / "passwd"
    assert sb.resolve(b"/etc/passwd") == tree / "etc" / "passwd"
    assert sb.resolve("/") == tree
    assert sb.resolve("//etc//sub/") == tree / "etc" / "sub"
    assert sb.resolve("/usr/./lib/../lib/libc.so") == tree / "usr" / "lib" / "libc.so"


def test_relative_paths_use_cwd(sb: Sandbox, tree: Path) -> None:
    assert sb.resolve("notes.txt") == tree / "home" / "user" / "notes.txt"
    assert sb.resolve("./sub/../notes.txt") == tree / "home" / "user" / "notes.txt"
    assert sb.resolve("..") == tree / "home"
    assert sb.resolve("../../etc/passwd") == tree / "etc" / "passwd"
    assert sb.resolve(".") == tree / "home" / "user"


def test_base_directory(sb: Sandbox, tree: Path) -> None:
    assert sb.resolve("passwd", base="/etc") == tree / "etc" / "passwd"
    assert sb.resolve(b"../etc/passwd", base=b"/usr") == tree / "etc" / "passwd"
    # a relative base is taken from the cwd (/home/user)
    assert sb.resolve("x", base="sub") == tree / "home" / "user" / "sub" / "x"
    # absolute paths ignore the base
    assert sb.resolve("/etc/passwd", base="/usr") == tree / "etc" / "passwd"
    # the base is walked physically: ".." after a symlinked base is the target's parent
    assert sb.resolve("../etc/passwd", base="/home/user/dirlink") == tree / "etc" / "passwd"
    assert sb.resolve("libc.so", base="/lib") == tree / "usr" / "lib" / "libc.so"
    raises("ENOTDIR", sb.resolve, "x", base="/etc/passwd")
    raises("ENOENT", sb.resolve, "x", base="/nope")


def test_missing_final_component_is_fine(sb: Sandbox, tree: Path) -> None:
    assert sb.resolve("/etc/newfile") == tree / "etc" / "newfile"
    assert sb.resolve("/etc/newdir/") == tree / "etc" / "newdir"
    assert not (tree / "etc" / "newfile").exists()


def test_missing_intermediate_is_enoent(sb: Sandbox) -> None:
    err = raises("ENOENT", sb.resolve, "/etc/nope/passwd")
    assert "/etc/nope does not exist" in str(err)
    assert not err.denied
    assert err.host_errno == errno.ENOENT
    raises("ENOENT", sb.resolve, "/etc/nope/.")
    raises("ENOENT", sb.resolve, "/etc/nope/..")
    raises("ENOENT", sb.resolve, "")


def test_non_directory_intermediate_is_enotdir(sb: Sandbox) -> None:
    err = raises("ENOTDIR", sb.resolve, "/etc/passwd/x")
    assert "/etc/passwd is not a directory" in str(err)
    raises("ENOTDIR", sb.resolve, "/etc/passwd/")
    raises("ENOTDIR", sb.resolve, "/etc/passwd/.")
    raises("ENOTDIR", sb.resolve, "/etc/passwd/..")
    raises("ENOTDIR", sb.resolve, "/home/user/link_ro/")
    raises("ENOTDIR", sb.resolve, "/home/user/link_ro/", follow_final=False)


def test_name_too_long(sb: Sandbox) -> None:
    raises("ENAMETOOLONG", sb.resolve, "/etc/" + "a" * 256)
    assert sb.resolve("/etc/" + "a" * 255).name == "a" * 255
    raises("ENAMETOOLONG", sb.resolve, "/" + "a/" * 2048)
    raises("EINVAL", sb.resolve, b"/etc/pa\0sswd")


# --------------------------------------------------------------------------- '..'


def test_dotdot_above_root_is_refused(sb: Sandbox) -> None:
    err = raises("EACCES", sb.resolve, "/../etc/passwd")
    assert err.denied
    assert "escapes the root" in str(err)
    assert "'..'" in str(err)
    raises("EACCES", sb.resolve, "../../../outside/secret")
    raises("EACCES", sb.resolve, "..", base="/")
    raises("EACCES", sb.resolve, "/..")


def test_dotdot_at_host_root_is_clamped(tree: Path) -> None:
    sb = Sandbox("/", writable=[tree / "home" / "user"])
    assert sb.resolve("/..") == Path("/")
    assert sb.resolve("/../../..") == Path("/")
    assert sb.resolve(f"/../..{tree}/etc/passwd") == tree / "etc" / "passwd"
    assert sb.resolve("../../../../../../../../../../../../../", base=str(tree)) == Path("/")


# --------------------------------------------------------------------------- symlinks


def test_absolute_symlink_is_interpreted_inside_root(sb: Sandbox, tree: Path) -> None:
    assert sb.resolve("/home/user/link_ro") == tree / "etc" / "passwd"
    assert sb.resolve("/home/user/dirlink/passwd") == tree / "etc" / "passwd"
    assert sb.resolve("dirlink/sub/") == tree / "etc" / "sub"


def test_relative_symlinks(sb: Sandbox, tree: Path) -> None:
    assert sb.resolve("/lib/libc.so") == tree / "usr" / "lib" / "libc.so"
    assert sb.resolve("/home/user/rel_ro") == tree / "etc" / "passwd"
    assert sb.resolve("mine") == tree / "home" / "user" / "notes.txt"
    # ".." after a symlinked dir goes to the parent of the target (physical)
    assert sb.resolve("/lib/../lib/libc.so") == tree / "usr" / "lib" / "libc.so"
    assert sb.resolve("/lib/..") == tree / "usr"


def test_follow_final_false_returns_the_link(sb: Sandbox, tree: Path) -> None:
    link = tree / "home" / "user" / "link_ro"
    assert sb.resolve("link_ro", follow_final=False) == link
    assert os.path.islink(sb.resolve("link_ro", follow_final=False))
    # intermediate links are still followed
    assert sb.resolve("/lib/libc.so", follow_final=False) == tree / "usr" / "lib" / "libc.so"
    # a trailing slash forces following, as in the kernel
    assert sb.resolve("/lib/", follow_final=False) == tree / "usr" / "lib"
    assert sb.resolve("/loop1", follow_final=False) == tree / "loop1"


def test_dangling_symlink_resolves_to_its_target(sb: Sandbox, tree: Path) -> None:
    assert sb.resolve("dangling") == tree / "etc" / "newfile"
    assert sb.resolve("dangling", follow_final=False) == tree / "home" / "user" / "dangling"


def test_symlink_escaping_root_is_refused(sb: Sandbox, tree: Path) -> None:
    err = raises("EACCES", sb.resolve, "/escape/outside/secret")
    assert err.denied
    assert "symlink /escape -> ../.. escapes the root" in str(err)
    assert str(tree) in str(err)
    raises("EACCES", sb.resolve, "/escape")
    raises("EACCES", sb.resolve, "/escape_abs")
    raises("EACCES", sb.resolve, "/escape/", follow_final=False)
    # not following the final link does not touch its target
    assert sb.resolve("/escape", follow_final=False) == tree / "escape"


def test_symlink_loops(sb: Sandbox, tree: Path) -> None:
    err = raises("ELOOP", sb.resolve, "/loop1")
    assert not err.denied
    raises("ELOOP", sb.resolve, "/self")
    raises("ELOOP", sb.resolve, "/loop2/x")
    assert sb.resolve("/self", follow_final=False) == tree / "self"


def test_symlink_limit_is_40(tree: Path) -> None:
    chain = tree / "chain"
    chain.mkdir()
    (chain / f"l{MAXSYMLINKS + 1}").write_text("end")
    for i in range(MAXSYMLINKS + 1):
        (chain / f"l{i}").symlink_to(f"l{i + 1}")
    sb = Sandbox(tree)
    assert sb.resolve("/chain/l1") == chain / f"l{MAXSYMLINKS + 1}"  # 40 links
    raises("ELOOP", sb.resolve, "/chain/l0")  # 41 links


# --------------------------------------------------------------------------- writes


def test_write_inside_writable_dir(sb: Sandbox, tree: Path) -> None:
    user = tree / "home" / "user"
    assert sb.resolve("notes.txt", write=True) == user / "notes.txt"
    assert sb.resolve("new.txt", write=True, create=True) == user / "new.txt"
    assert sb.resolve("sub/new.txt", write=True, create=True) == user / "sub" / "new.txt"
    assert sb.resolve("sub", write=True) == user / "sub"
    assert sb.resolve("mine", write=True) == user / "notes.txt"
    # the link itself (unlink/rename) is in the writable dir
    assert sb.resolve("link_ro", write=True, follow_final=False) == user / "link_ro"
    assert sb.resolve("dirlink", write=True, follow_final=False) == user / "dirlink"


def test_write_outside_writable_dir_is_denied(sb: Sandbox) -> None:
    err = raises("EACCES", sb.resolve, "/etc/passwd", write=True)
    assert err.denied
    assert err.guest_path == b"/etc/passwd"
    assert str(err) == (
        "emutrace: sandbox: write to /etc/passwd denied (not under an --allow-write directory)"
    )
    raises("EACCES", sb.resolve, "/etc/newfile", write=True, create=True)
    raises("EACCES", sb.resolve, "/etc/passwd", write=True, metadata=True)
    raises("EACCES", sb.resolve, "../other", write=True, create=True)


def test_writable_dir_itself_is_not_writable(sb: Sandbox) -> None:
    # rmdir/rename/chmod of the --allow-write directory itself
    raises("EACCES", sb.resolve, "/home/user", write=True)
    raises("EACCES", sb.resolve, ".", write=True)
    raises("EACCES", sb.resolve, "sub/..", write=True)
    raises("EACCES", sb.resolve, "/", write=True)


def test_symlink_in_writable_dir_to_read_only_place_is_denied(sb: Sandbox, tree: Path) -> None:
    err = raises("EACCES", sb.resolve, "link_ro", write=True)
    assert "resolves to /etc/passwd" in str(err)
    raises("EACCES", sb.resolve, "/home/user/rel_ro", write=True)
    raises("EACCES", sb.resolve, "dirlink/newfile", write=True, create=True)
    raises("EACCES", sb.resolve, "dangling", write=True, create=True)
    assert not (tree / "etc" / "newfile").exists()


def test_create_existing_directory_outside_is_eexist(sb: Sandbox) -> None:
    # mkdir -p walks existing ancestors: the kernel says EEXIST, not EACCES
    err = raises("EEXIST", sb.resolve, "/etc", write=True, create=True, follow_final=False)
    assert not err.denied
    raises("EEXIST", sb.resolve, "/home", write=True, create=True, follow_final=False)
    raises("EEXIST", sb.resolve, "/home/user", write=True, create=True, follow_final=False)
    raises("EEXIST", sb.resolve, "/lib", write=True, create=True, follow_final=False)
    raises("EEXIST", sb.resolve, "/lib", write=True, create=True)
    # an existing file outside is a real write (open O_CREAT without O_EXCL)
    raises("EACCES", sb.resolve, "/etc/passwd", write=True, create=True)


def test_write_through_dotdot_from_writable_dir(sb: Sandbox, tree: Path) -> None:
    assert sb.resolve("sub/../x", write=True, create=True) == tree / "home" / "user" / "x"
    raises("EACCES", sb.resolve, "sub/../../x", write=True, create=True)


def test_nested_and_multiple_writable_dirs(tree: Path) -> None:
    sb = Sandbox(tree, writable=[tree / "etc" / "sub", tree / "usr"])
    assert sb.resolve("/etc/sub/x", write=True) == tree / "etc" / "sub" / "x"
    assert sb.resolve("/usr/lib", write=True) == tree / "usr" / "lib"
    assert sb.resolve("/lib/libc.so", write=True) == tree / "usr" / "lib" / "libc.so"
    raises("EACCES", sb.resolve, "/etc/x", write=True)
    raises("EACCES", sb.resolve, "/home/user/notes.txt", write=True)
    # root writable: everything below it, but not the root itself
    sb = Sandbox(tree, writable=[tree])
    assert sb.resolve("/etc/passwd", write=True) == tree / "etc" / "passwd"
    raises("EACCES", sb.resolve, "/", write=True)


def test_is_writable(sb: Sandbox, tree: Path) -> None:
    assert sb.is_writable(tree / "home" / "user" / "x")
    assert sb.is_writable(str(tree / "home" / "user" / "sub" / "y"))
    assert not sb.is_writable(tree / "home" / "user")
    assert not sb.is_writable(tree / "home" / "username")
    assert not sb.is_writable(tree / "etc" / "passwd")


# --------------------------------------------------------------------------- devices, /proc


def test_dev_null_write_is_always_allowed_with_host_root(tree: Path) -> None:
    sb = Sandbox("/", writable=[tree / "home" / "user"])
    for dev in ("/dev/null", "/dev/zero", "/dev/urandom", "/dev/random"):
        assert sb.resolve(dev) == Path(dev)
    assert sb.resolve("/dev/null", write=True) == Path("/dev/null")
    assert sb.resolve("/dev/null", write=True, create=True) == Path("/dev/null")
    assert sb.resolve("/dev/../dev/./null", write=True) == Path("/dev/null")
    # chmod/chown and unlink/rename of /dev/null are not "writing to" it
    raises("EACCES", sb.resolve, "/dev/null", write=True, metadata=True)
    raises("EACCES", sb.resolve, "/dev/null", write=True, follow_final=False)
    raises("EACCES", sb.resolve, "/dev/zero", write=True)
    # a symlink to /dev/null in a writable dir can be written through
    (tree / "home" / "user" / "devnull").symlink_to("/dev/null")
    assert sb.resolve(f"{tree}/home/user/devnull", write=True) == Path("/dev/null")


def test_devices_resolve_inside_other_root(sb: Sandbox, tree: Path) -> None:
    raises("ENOENT", sb.resolve, "/dev/null")  # the root has no /dev
    (tree / "dev").mkdir()
    assert sb.resolve("/dev/null") == tree / "dev" / "null"  # missing final: fine
    raises("ENOENT", sb.resolve, "/dev/null/x")
    raises("EACCES", sb.resolve, "/dev/null", write=True)
    (tree / "dev" / "null").write_text("")  # a regular file, not the device
    raises("EACCES", sb.resolve, "/dev/null", write=True)
    assert sb.resolve("/dev/urandom") == tree / "dev" / "urandom"


def test_proc_resolves_normally(tree: Path) -> None:
    sb = Sandbox("/", writable=[tree / "home" / "user"])
    status = sb.resolve("/proc/self/status")
    assert status.exists()
    assert status.parent.parent == Path("/proc")
    assert status.parent.name.isdigit()
    assert sb.resolve("/proc/self", follow_final=False) == Path("/proc/self")
    raises("EACCES", sb.resolve, "/proc/self/comm", write=True)
    # inside another root, /proc is just a directory of that root
    sb2 = Sandbox(tree)
    raises("ENOENT", sb2.resolve, "/proc/self/exe")
    (tree / "proc" / "42").mkdir(parents=True)
    (tree / "proc" / "self").symlink_to("42")
    assert sb2.resolve("/proc/self/exe", follow_final=False) == tree / "proc" / "42" / "exe"
    assert sb2.resolve("/proc/self", follow_final=False) == tree / "proc" / "self"


# --------------------------------------------------------------------------- to_guest, chdir


def test_to_guest_round_trip(sb: Sandbox, tree: Path) -> None:
    for guest in ("/", "/etc", "/etc/passwd", "/usr/lib/libc.so", "/home/user/new"):
        assert sb.to_guest(sb.resolve(guest)) == guest
    assert sb.to_guest(tree) == "/"
    assert sb.to_guest(str(tree / "etc")) == "/etc"
    assert sb.to_guest(os.fsencode(tree / "etc")) == "/etc"
    assert sb.to_guest(sb.resolve("/lib/libc.so")) == "/usr/lib/libc.so"
    assert Sandbox("/").to_guest(Path("/usr/bin")) == "/usr/bin"
    assert Sandbox("/").to_guest("//usr") == "/usr"


def test_to_guest_outside_root(sb: Sandbox, tree: Path, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="outside the sandbox root"):
        sb.to_guest(tmp_path / "outside" / "secret")
    with pytest.raises(ValueError, match="outside the sandbox root"):
        sb.to_guest(Path(str(tree) + "2"))  # a sibling sharing the prefix
    with pytest.raises(ValueError, match="not canonical"):
        sb.to_guest(tree / ".." / "outside")
    with pytest.raises(ValueError, match="not absolute"):
        sb.to_guest("etc/passwd")


def test_chdir(sb: Sandbox, tree: Path) -> None:
    sb.chdir("sub")
    assert sb.guest_cwd == "/home/user/sub"
    assert sb.resolve("x") == tree / "home" / "user" / "sub" / "x"
    sb.chdir("..")
    assert sb.guest_cwd == "/home/user"
    sb.chdir("dirlink")  # canonical: the symlink is resolved
    assert sb.guest_cwd == "/etc"
    assert sb.resolve("passwd") == tree / "etc" / "passwd"
    sb.chdir(b"/lib/")
    assert sb.guest_cwd == "/usr/lib"
    sb.chdir("/")
    assert sb.guest_cwd == "/"
    sb.chdir("home", base="/")
    assert sb.guest_cwd == "/home"
    sb.guest_cwd = "/etc/sub"
    assert sb.guest_cwd == "/etc/sub"


def test_chdir_errors_leave_cwd_unchanged(sb: Sandbox) -> None:
    raises("ENOENT", sb.chdir, "nope")
    raises("ENOTDIR", sb.chdir, "notes.txt")
    raises("ENOTDIR", sb.chdir, "/etc/passwd/")
    raises("EACCES", sb.chdir, "/../..")
    raises("EACCES", sb.chdir, "/escape")
    raises("ELOOP", sb.chdir, "/loop1")
    raises("ENOENT", sb.chdir, "")
    assert sb.guest_cwd == "/home/user"


@pytest.mark.skipif(os.geteuid() == 0, reason="root bypasses directory permissions")
def test_chdir_unsearchable_directory(sb: Sandbox, tree: Path) -> None:
    locked = tree / "home" / "user" / "locked"
    locked.mkdir(mode=0o600)
    try:
        err = raises("EACCES", sb.chdir, "locked")
        assert not err.denied
    finally:
        locked.chmod(0o700)


def test_chdir_unsearchable_directory_any_uid(
    sb: Sandbox, tree: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_access = os.access
    locked = tree / "etc" / "sub"

    def access(path: object, mode: int) -> bool:
        assert isinstance(path, (str, bytes, os.PathLike))
        return False if Path(os.fsdecode(path)) == locked else real_access(path, mode)

    monkeypatch.setattr(os, "access", access)
    err = raises("EACCES", sb.chdir, "/etc/sub")
    assert not err.denied
    assert "not searchable" in str(err)
    assert sb.guest_cwd == "/home/user"


def test_host_errors_are_reported_with_their_errno(
    sb: Sandbox, tree: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_lstat = os.lstat
    blocked = os.fsencode(tree / "etc" / "sub")

    def lstat(path: bytes) -> os.stat_result:
        if path == blocked:
            raise PermissionError(errno.EACCES, "Permission denied")
        return real_lstat(path)

    monkeypatch.setattr(os, "lstat", lstat)
    err = raises("EACCES", sb.resolve, "/etc/sub/x")
    assert not err.denied  # the host refused, not the sandbox policy
    assert "permission denied" in str(err)
    assert sb.resolve("/etc/passwd") == tree / "etc" / "passwd"


# --------------------------------------------------------------------------- bytes names


def test_non_utf8_names(tree: Path) -> None:
    rootb = os.fsencode(tree)
    name = b"caf\xe9"
    os.mkdir(rootb + b"/home/user/" + name)
    with open(rootb + b"/home/user/" + name + b"/f\xff\xfe", "wb") as f:
        f.write(b"x")
    os.symlink(b"/home/user/" + name, rootb + b"/lnk\xe9")
    sb = Sandbox(tree, writable=[tree / "home" / "user"])

    host = sb.resolve(b"/home/user/" + name + b"/f\xff\xfe")
    assert os.fsencode(host) == rootb + b"/home/user/" + name + b"/f\xff\xfe"
    assert host.read_bytes() == b"x"
    assert sb.resolve(b"/lnk\xe9/f\xff\xfe") == host
    # str paths with surrogate escapes are the same paths
    assert sb.resolve(os.fsdecode(b"/lnk\xe9/f\xff\xfe")) == host
    assert os.fsencode(sb.to_guest(host)) == b"/home/user/" + name + b"/f\xff\xfe"
    sb.chdir(b"/lnk\xe9")
    assert os.fsencode(sb.guest_cwd) == b"/home/user/" + name
    assert sb.resolve(b"f\xff\xfe", write=True) == host
    assert sb.resolve(b"new\x80", write=True, create=True) == Path(
        os.fsdecode(rootb + b"/home/user/" + name + b"/new\x80")
    )
    err = raises("EACCES", sb.resolve, b"/etc/\xff\nevil", write=True)
    assert "\\xff\\nevil" in str(err)
    assert err.guest_path == b"/etc/\xff\nevil"


# --------------------------------------------------------------------------- properties

NAMES = ["a", "b", "c"]
COMPONENT = st.sampled_from([*NAMES, ".", "..", ""])
REL = st.lists(COMPONENT, min_size=1, max_size=7).map("/".join)
ABS_OR_REL = st.tuples(st.booleans(), REL).map(lambda t: ("/" if t[0] else "") + t[1] or ".")

Node = tuple[str, object]
NODE: st.SearchStrategy[Node] = st.deferred(
    lambda: st.one_of(
        st.just(("file", None)),
        st.tuples(st.just("link"), ABS_OR_REL),
        st.tuples(st.just("dir"), st.dictionaries(st.sampled_from(NAMES), NODE, max_size=3)),
    )
)
TREE = st.dictionaries(st.sampled_from(NAMES), NODE, max_size=3)


def build(base: Path, tree: dict[str, Node], rel: str, dirs: list[str]) -> None:
    """Create ``tree`` under ``base``; collects the guest paths of directories in ``dirs``."""
    for name, (kind, arg) in tree.items():
        path = base / name
        guest = f"{rel}/{name}"
        if kind == "file":
            path.write_text(guest)
        elif kind == "link":
            assert isinstance(arg, str)
            path.symlink_to(arg)
        else:
            assert isinstance(arg, dict)
            path.mkdir()
            dirs.append(guest)
            build(path, arg, guest, dirs)


def _inside(path: Path, top: Path) -> bool:
    return path == top or path.is_relative_to(top)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), tree=TREE)
def test_property_results_stay_inside_root(data: st.DataObject, tree: dict[str, Node]) -> None:
    with tempfile.TemporaryDirectory() as d:
        top = Path(d).resolve()
        root = top / "root"
        root.mkdir()
        # things to escape to: a sibling of the root and the root's parent
        (top / "a").mkdir()
        (top / "a" / "b").write_text("outside")
        dirs = ["/"]
        build(root, tree, "", dirs)
        writable_guest = data.draw(st.lists(st.sampled_from(dirs), max_size=2, unique=True))
        sb = Sandbox(root, writable=[root / g.lstrip("/") for g in writable_guest] or [root])
        writable = sb.writable
        base = data.draw(st.none() | st.sampled_from(dirs))
        path = data.draw(ABS_OR_REL)
        follow = data.draw(st.booleans())
        write = data.draw(st.booleans())
        create = data.draw(st.booleans())
        try:
            result = sb.resolve(path, base=base, follow_final=follow, write=write, create=create)
        except SandboxError as err:
            event(f"error {err.errno_name} denied={err.denied} write={write}")
            assert err.errno_name in {"EACCES", "ENOENT", "ENOTDIR", "ELOOP", "EEXIST"}
            assert "\n" not in str(err)
            if err.denied:
                assert err.errno_name == "EACCES"
            if err.errno_name == "EEXIST":
                assert write and create
            if err.denied and "write to" in str(err):
                # the denial is justified: the same lookup without write gives a
                # path that is not strictly inside a writable directory
                plain = sb.resolve(path, base=base, follow_final=follow)
                assert not any(plain != w and plain.is_relative_to(w) for w in writable)
            return
        event(f"resolved exists={os.path.lexists(result)} write={write}")
        assert result.is_absolute()
        assert ".." not in result.parts and "." not in result.parts
        assert _inside(result, root)
        # no symlink among the intermediate components: the host sees the same path
        assert os.path.realpath(result.parent) == str(result.parent) or result == root
        assert _inside(Path(os.path.realpath(result.parent)), root) or result == root
        if follow and os.path.lexists(result):
            assert not os.path.islink(result)
            assert _inside(Path(os.path.realpath(result)), root)
        if write:
            assert any(result != w and result.is_relative_to(w) for w in writable)
            assert any(Path(os.path.realpath(result.parent)).is_relative_to(w) for w in writable)
        assert sb.resolve(sb.to_guest(result), follow_final=False) == result


def _kernel_lookup(path: str, dir_fd: int, follow: bool) -> os.stat_result | str:
    flags = os.O_PATH | (0 if follow else os.O_NOFOLLOW)
    try:
        fd = os.open(path, flags, dir_fd=dir_fd)
    except OSError as e:
        return errno.errorcode.get(e.errno or 0, "EIO")
    try:
        return os.fstat(fd)
    finally:
        os.close(fd)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), tree=TREE)
def test_property_matches_kernel_with_host_root(data: st.DataObject, tree: dict[str, Node]) -> None:
    """With root "/" the sandbox must find exactly what the kernel finds."""
    with tempfile.TemporaryDirectory(prefix="emutrace-sb-") as d:
        top = Path(d).resolve()
        dirs = [""]
        build(top, tree, "", dirs)
        sb = Sandbox("/", writable=[top])
        base = str(top) + data.draw(st.sampled_from(dirs))
        path = data.draw(REL)  # absolute targets/paths would point into the host's "/"
        follow = data.draw(st.booleans())
        try:
            result: Path | str = sb.resolve(path, base=base, follow_final=follow)
        except SandboxError as err:
            result = err.errno_name
        dfd = os.open(base, os.O_PATH | os.O_DIRECTORY)
        try:
            kernel = _kernel_lookup(path, dfd, follow)
        finally:
            os.close(dfd)
        event(f"outcome {result if isinstance(result, str) else 'found'}")
        if isinstance(result, str):
            assert kernel == result, (path, base)
        elif not os.path.lexists(result):
            assert kernel == "ENOENT", (path, base, result)
        else:
            assert not isinstance(kernel, str), (path, base, result, kernel)
            mine = os.stat(result) if follow else os.lstat(result)
            assert (mine.st_dev, mine.st_ino) == (kernel.st_dev, kernel.st_ino), (path, base)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), tree=TREE)
def test_property_chroot_agrees_with_host_root(data: st.DataObject, tree: dict[str, Node]) -> None:
    """A sandbox with root R finds what a root-"/" sandbox finds for R + path, unless it
    refuses an escape (only relative symlinks: absolute ones differ by design)."""

    def no_abs_links(t: dict[str, Node]) -> bool:
        for kind, arg in t.values():
            if kind == "link" and isinstance(arg, str) and arg.startswith("/"):
                return False
            if kind == "dir" and isinstance(arg, dict) and not no_abs_links(arg):
                return False
        return True

    if not no_abs_links(tree):
        return
    with tempfile.TemporaryDirectory() as d:
        root = Path(d).resolve()
        dirs = [""]
        build(root, tree, "", dirs)
        inner = Sandbox(root)
        outer = Sandbox("/")
        path = "/" + data.draw(REL)
        follow = data.draw(st.booleans())
        try:
            got: Path | str = inner.resolve(path, follow_final=follow)
        except SandboxError as err:
            if err.errno_name == "EACCES" and err.denied:
                assert "escapes the root" in str(err)
                return
            got = err.errno_name
        try:
            expected: Path | str = outer.resolve(str(root) + path, follow_final=follow)
        except SandboxError as err:
            expected = err.errno_name
        assert got == expected, (path, tree)


def test_error_attributes() -> None:
    err = SandboxError("ENOENT", "emutrace: sandbox: x: gone", guest_path=b"x")
    assert str(err) == err.message == "emutrace: sandbox: x: gone"
    assert err.host_errno == errno.ENOENT
    assert not err.denied
    assert SandboxError("EBOGUS", "m").host_errno == errno.EIO
