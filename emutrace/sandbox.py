"""Guest path resolution and file-access policy, for the emulated Linux layer
(machine/linux/) and the native target's confinement (target/ptrace_confine.py) alike.

Guest programs are untrusted.  Every path a guest syscall names goes through
:meth:`Sandbox.resolve`, which decides which *host* path it means and whether
the access is allowed.  The policy (``--root`` / ``--allow-write``):

* ``--root DIR`` maps the guest's ``/`` (default: the host ``/``).  The guest
  may read anything under the root.
* It may create, modify, truncate, delete or rename objects only *strictly
  inside* one of the ``--allow-write DIR`` directories (repeatable; default:
  the current working directory of the emutrace process, if that lies under
  the root and is safe to give away - otherwise nothing is writable; see
  :func:`default_writable`; and in a root made by ``emutrace rootfs``, its
  ``/tmp`` and the home directory it made: :func:`scratch_dirs`).  A writable
  directory itself can not be removed, renamed or chmod-ed; everything below it can.
* Anything else fails with ``EACCES`` and a one-line warning
  (:class:`SandboxError` with ``denied=True``).
* Paths that escape the root with ``..`` or through symlinks are refused
  (``EACCES``, ``denied=True``).

How paths are resolved
----------------------
The walk is done here, component by component, from the guest root, with
the kernel's semantics (``path_resolution(7)``), except that the sandbox
reads symlinks itself (``os.readlink``) instead of letting the host kernel
follow them:

* an absolute symlink target is interpreted inside the root (as after
  ``chroot``); a relative one from the link's directory;
* at most :data:`MAXSYMLINKS` (40) symlinks per lookup, then ``ELOOP``;
* ``..`` is physical: it goes to the parent of the directory actually reached
  (so ``dirlink/..`` is the parent of the link's *target*);
* ``..`` at the guest root: refused when the root is not the host ``/``.  When
  the root *is* the host ``/`` there is nothing to escape to, and ``/..`` is
  ``/`` exactly as in the kernel;
* a missing intermediate component gives ``ENOENT``, a non-directory one
  ``ENOTDIR`` (also ``file/``, ``file/.`` and ``file/..``); a missing final
  component is not an error (the caller's host call reports ``ENOENT`` or
  creates it);
* a trailing slash requires the final object, if it exists, to be a directory,
  and makes a final symlink be followed even with ``follow_final=False`` (as
  in the kernel).  The returned :class:`~pathlib.Path` cannot carry the slash.

The returned host path never contains ``.``, ``..`` or a symlink among its
intermediate components; its final component is a symlink only when
``follow_final=False`` was asked for.  Callers that open it with
``follow_final=True`` may add ``O_NOFOLLOW`` as cheap hardening.

Special files
-------------
* Trees the syscall layer serves itself (:meth:`Sandbox.mount`: the emulated Linux
  layer mounts its ``/dev`` and ``/proc`` there, machine/linux/devfs.py and procfs.py)
  take the place of whatever the root holds under that top-level name.  The walk goes
  into them like into a directory: their links are followed by their text (``/proc/self``
  -> ``<pid>``, ``/dev/stdin`` -> ``/proc/self/fd/0``), ``..`` leaves them, and a symlink
  of the root that points into them (Debian's ``/etc/mtab`` -> ``../proc/self/mounts``)
  reaches them.  :meth:`Sandbox.lookup` returns such an object as a :class:`Virtual`
  (the node and its canonical guest path); :meth:`Sandbox.resolve`, for callers that
  need a host path, refuses it (``EACCES``).  A descriptor link (``/proc/self/fd/N``,
  kind ``"fd"``) is returned itself when it is the followed final component (the caller
  reopens the descriptor, as Linux's magic links do) and followed by its text when it is
  an intermediate one.  Nothing in a served tree is writable except the nodes that say
  so (the devices: ``writable``), and only for data writes (not ``metadata``, not
  ``follow_final=False``).  Without mounts (the native target's confinement) ``/dev`` and
  ``/proc`` resolve inside the root like any other path.
* Writing to the null device is always allowed: a ``write=True`` lookup whose
  followed final object is the character device with the host ``/dev/null``'s
  device number passes the write check wherever it is, unless
  ``metadata=True`` (chmod/chown/utimes) or ``follow_final=False``
  (unlink/rename).
* Magic links met during a walk of the root (``/proc`` of the host root without
  mounts) are resolved by their text, which is always safe.

Guidance for the syscall layer
------------------------------
* ``open``: ``write=True`` for ``O_WRONLY``/``O_RDWR``/``O_TRUNC``/``O_CREAT``;
  ``create=True`` with ``O_CREAT``; ``follow_final=False`` for
  ``O_NOFOLLOW`` and for ``O_CREAT|O_EXCL``.
* ``mkdir``, ``mknod``, ``symlink`` (link path), ``bind`` of a unix socket:
  ``write=True, create=True, follow_final=False``.
* ``unlink``, ``rmdir``: ``write=True, follow_final=False``.
* ``rename``: both paths ``write=True, follow_final=False`` (the new path
  *without* ``create``: it may replace an existing object).
* ``link``: the new path ``write=True, create=True, follow_final=False`` *and*
  the old path ``write=True`` - otherwise a hard link inside a writable
  directory would make a read-only file writable.
* ``chmod``, ``chown``, ``utimes``, ``truncate``, ``setxattr``: ``write=True``
  (``metadata=True`` except for ``truncate``).  For the fd variants
  (``fchmod``...) use :meth:`Sandbox.is_writable` on the fd's host path.
* ``openat`` and friends with a directory fd: pass the fd's *guest* path as
  ``base``.  ``AT_EMPTY_PATH`` must be handled by the caller (an empty path is
  ``ENOENT`` here).
* ``getcwd``: ``os.fsencode(sandbox.guest_cwd)``; ``chdir``:
  :meth:`Sandbox.chdir`; ``fchdir``: ``chdir`` with the fd's guest path.  The current
  directory is held as a host directory descriptor and a directory descriptor's base is
  its path *now* (:meth:`Sandbox.guest_path_of`): both follow their directory through a
  rename, as Linux's do.
* Print ``str(err)`` when ``err.denied`` is true; other errors (``ENOENT``,
  ``ENOTDIR``, ``ELOOP``...) are ordinary results and should just be returned
  to the guest as ``-errno`` (the message is still informative for tracing).

Guest paths are bytes at heart (Linux file names are not text).  ``str``
guest paths are converted with :func:`os.fsencode` (UTF-8 with
``surrogateescape``), and the ``str`` results (:attr:`Sandbox.guest_cwd`,
:meth:`Sandbox.to_guest`) convert back losslessly with :func:`os.fsencode`.

Limits: the check and the later host call are not atomic, so a concurrent
*host* process renaming things under the root can race with the guest (the
guest itself cannot: its syscalls are serialised by the emulator).  Hard links
that already exist inside a writable directory and point outside it, and
bind mounts under the root, are honoured as the host sees them.
"""

from __future__ import annotations

import errno as _errno
import os
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

__all__ = [
    "MAXSYMLINKS",
    "NAME_MAX",
    "PATH_MAX",
    "GuestPath",
    "HostPath",
    "Sandbox",
    "SandboxError",
    "Virtual",
    "VirtualNode",
]

MAXSYMLINKS = 40
"""Maximum number of symlinks followed in one lookup (Linux ``MAXSYMLINKS``)."""
PATH_MAX = 4096
"""Maximum length of a guest path including its terminating NUL (``ENAMETOOLONG``)."""
NAME_MAX = 255
"""Maximum length of one path component (``ENAMETOOLONG``)."""

GuestPath = bytes | str
"""A path in the guest's view, as the guest gave it."""
HostPath = str | bytes | os.PathLike[str] | os.PathLike[bytes]
"""A path on the host."""

_PREFIX = "emutrace: sandbox: "
_NULL_DEVICE = os.makedev(1, 3)  # Linux's /dev/null, used if the host has none
# Linux's /dev/tty (Documentation/admin-guide/devices.txt: char 5,0): the controlling
# terminal; opening it for writing is the user's terminal, as stdout is (ENXIO without one)
_TTY_DEVICE = os.makedev(5, 0)


def default_writable(cwd: str | None, root: Path) -> Path | None:
    """The directory the guest may write in when no --allow-write is given: the current
    directory — unless giving it away would give too much: a directory
    that holds the root (`/` with the default root, or the root itself: the guest's whole
    file system) or the user's $HOME (their dot-files, ssh keys).  Then nothing; the guest's
    first refused write says how to allow it.  Outside the root: nothing, as before."""
    if cwd is None:
        return None
    here = Path(os.path.realpath(cwd))
    home = os.environ.get("HOME")
    if not here.is_relative_to(root) or root.is_relative_to(here):
        return None
    if home and here == Path(os.path.realpath(home)):
        return None
    return here


ROOTFS_MARKER = ".emutrace-rootfs"  # rootfs.MARKER (a leaf module imports no other leaf)


def scratch_dirs(root: Path, home: str | None) -> list[Path]:
    """The scratch directories of a root made by `emutrace rootfs` (it holds
    ROOTFS_MARKER): its /tmp and the guest's home, ROOT/$HOME when $HOME is /root or
    /home/NAME, when they are directories reached without a symbolic link (a link, out of
    the root or into it, gives nothing).  The guest may write there without --allow-write, as
    programs expect of /tmp (sort's temporary files) and $HOME; nothing outside the root
    is given away, and no system directory of the root (a $HOME of /usr gives no home)."""
    if root == Path("/") or not (root / ROOTFS_MARKER).is_file():
        return []
    parts = Path(home or "/").parts[1:]
    homes = [os.path.join(*parts)] if parts in (("root",),) or (
        len(parts) == 2 and parts[0] == "home" and parts[1] not in (".", "..")) else []
    out = []
    for rel in ("tmp", *homes):
        where = Path(os.path.realpath(root / rel))
        if where == root / rel and where.is_dir():  # no link on the way
            out.append(where)
    return out


class VirtualNode(Protocol):
    """An object of a tree the syscall layer serves itself (a mount: /dev, /proc).

    ``kind`` is ``"dir"``, ``"file"``, ``"link"``, ``"device"`` or ``"fd"`` (a link to an
    open descriptor).  A directory answers :meth:`child`; a link (and an fd link) its
    text with :meth:`target`.  ``writable``: data may be written to it (a device)."""

    @property
    def kind(self) -> str: ...

    @property
    def writable(self) -> bool: ...

    def child(self, name: bytes) -> VirtualNode | None: ...

    def target(self) -> bytes: ...


@dataclass(frozen=True)
class Virtual:
    """The result of :meth:`Sandbox.lookup` for an object of a mounted tree: the node and
    its canonical guest path (``b"/proc/1234/maps"``)."""

    node: VirtualNode
    guest_path: bytes


class SandboxError(Exception):
    """A guest path lookup failed or was refused.

    ``errno_name`` is the symbolic errno (``"EACCES"``, ``"ENOENT"``,
    ``"ELOOP"``, ``"ENAMETOOLONG"``, ``"ENOTDIR"``, ``"EEXIST"``, ``"EINVAL"``
    or, for unexpected host errors, whatever the host reported); the syscall
    layer maps it to the guest architecture's number.  ``str(err)`` (also
    ``err.message``) is a single line naming the guest path and the reason,
    ready to print.  ``denied`` is true when the *sandbox policy* refused the
    access (the cases that deserve a warning), false for ordinary lookup
    failures that the guest would also get from a real kernel.
    """

    def __init__(
        self,
        errno_name: str,
        message: str,
        *,
        guest_path: bytes = b"",
        denied: bool = False,
    ) -> None:
        super().__init__(message)
        self.errno_name = errno_name
        self.message = message
        self.guest_path = guest_path
        self.denied = denied

    @property
    def host_errno(self) -> int:
        """The host's number for :attr:`errno_name` (``EIO`` if unknown)."""
        value = getattr(_errno, self.errno_name, _errno.EIO)
        return value if isinstance(value, int) else _errno.EIO


def _show(path: bytes) -> str:
    """A guest path for a one-line message: undecodable bytes and control
    characters are shown as escapes, so the message never spans lines."""
    text = path.decode("utf-8", "backslashreplace")
    if text.isprintable():
        return text
    return "".join(
        c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text
    )


def _join(parts: Sequence[bytes]) -> bytes:
    """Guest path of a list of components below the root."""
    return b"/" + b"/".join(parts)


class Sandbox:
    """Maps guest paths to host paths and enforces the write policy.

    ``root`` and ``writable`` are *host* paths; they are made absolute and
    resolved (``realpath``) here.  Every writable directory must be an
    existing directory under the root (else :class:`ValueError`).  An empty
    ``writable`` means the policy default: the host current directory if it
    lies under the root and is safe to give away (:func:`default_writable`), and
    the scratch directories of a root made by ``emutrace rootfs``
    (:func:`scratch_dirs`); else no writable directory at all.
    ``guest_cwd`` is a *guest* path (default: the host current directory
    translated into guest terms if it lies under the root, else ``/``); it
    must name an existing directory (else :class:`ValueError`).
    """

    root: Path
    writable: tuple[Path, ...]

    def __init__(
        self,
        root: HostPath = "/",
        writable: Sequence[HostPath] = (),
        guest_cwd: GuestPath | None = None,
    ) -> None:
        root_s = os.path.realpath(os.fsdecode(root))
        if not os.path.isdir(root_s):
            raise ValueError(f"sandbox root {root_s!r} is not an existing directory")
        self.root = Path(root_s)
        self._rootb = os.fsencode(root_s)
        # With the host root as guest root, ".." at "/" stays at "/" like in the kernel.
        self._clamp_dotdot = self._rootb == b"/"

        host_cwd: str | None
        try:
            host_cwd = os.getcwd()
        except OSError:  # the current directory was removed
            host_cwd = None

        if isinstance(writable, (str, bytes, os.PathLike)):
            writable = [writable]  # a single directory, not a sequence of characters
        dirs: list[Path] = []
        if writable:
            for w in writable:
                given = os.fsdecode(w)
                w_s = os.path.realpath(given)
                if not os.path.isdir(w_s):
                    raise ValueError(f"--allow-write {given!r}: not an existing directory")
                w_p = Path(w_s)
                if not w_p.is_relative_to(self.root):
                    raise ValueError(
                        f"--allow-write {given!r} (= {w_s!r}) is not under the sandbox root "
                        f"{root_s!r}"
                    )
                if w_p not in dirs:
                    dirs.append(w_p)
        else:
            default = default_writable(host_cwd, self.root)
            if default is not None:
                dirs.append(default)
            dirs += [d for d in scratch_dirs(self.root, os.environ.get("HOME")) if d not in dirs]
        self.explicit_writable = bool(writable)
        self.writable = tuple(dirs)
        self.mounts: dict[bytes, VirtualNode] = {}  # top-level name -> served tree

        try:
            null_st = os.stat("/dev/null")
            self._null_rdev = null_st.st_rdev if stat.S_ISCHR(null_st.st_mode) else _NULL_DEVICE
        except OSError:
            self._null_rdev = _NULL_DEVICE

        self._cwd: bytes = b"/"
        # the current directory as a host directory descriptor (None: a served one), so
        # it follows its directory through renames as Linux's does (a struct path)
        self._cwd_fd: int | None = None
        if guest_cwd is None:
            if host_cwd is not None:
                try:
                    self._cwd = os.fsencode(self.to_guest(Path(host_cwd)))
                    self._hold_cwd(".")
                except (ValueError, OSError):
                    pass
        else:
            try:
                self.chdir(guest_cwd)
            except SandboxError as e:
                raise ValueError(f"guest working directory: {e.message}") from None

    def __del__(self) -> None:
        fd = getattr(self, "_cwd_fd", None)
        if fd is not None:
            os.close(fd)

    def __repr__(self) -> str:
        return (
            f"Sandbox(root={str(self.root)!r}, writable={[str(w) for w in self.writable]!r}, "
            f"guest_cwd={self.guest_cwd!r})"
        )

    # -- current directory ---------------------------------------------------

    @property
    def guest_cwd(self) -> str:
        """The guest's current directory (a canonical guest path), where it is now."""
        return os.fsdecode(self._current_cwd())

    @guest_cwd.setter
    def guest_cwd(self, path: GuestPath) -> None:
        self.chdir(path)

    def _current_cwd(self) -> bytes:
        self._cwd = self.guest_path_of(self._cwd_fd, self._cwd)
        return self._cwd

    def _hold_cwd(self, host: HostPath | None) -> None:
        """Hold the new current directory open (O_PATH), the previous one closed."""
        fd = None if host is None else \
            os.open(host, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        if self._cwd_fd is not None:
            os.close(self._cwd_fd)
        self._cwd_fd = fd

    def guest_path_of(self, host_fd: int | None, known: bytes) -> bytes:
        """The guest path of the object a host descriptor holds, as it is named now: a
        directory renamed since it was opened is found under its new name, as Linux's
        descriptors and current directory name the object, not the path
        (/proc/self/fd/N's link, proc(5)).  `known` when the object has no name under the
        root any more (removed, moved out) or is no file (a pipe)."""
        if host_fd is None:
            return known
        try:
            host = os.readlink(b"/proc/self/fd/%d" % host_fd)
        except OSError:
            return known
        if not host.startswith(b"/") or host.endswith(b" (deleted)"):
            return known
        try:
            return os.fsencode(self.to_guest(host))
        except ValueError:
            return known

    def chdir(self, path: GuestPath, *, base: GuestPath | None = None) -> None:
        """Change the guest current directory.

        ``path`` is resolved like :meth:`resolve` (relative to ``base`` or the
        current directory) and must be an existing, searchable directory; the
        stored directory is canonical (symlinks resolved).  Raises
        :class:`SandboxError` (``ENOENT``, ``ENOTDIR``, ``EACCES``...).
        """
        pathb = path if isinstance(path, bytes) else os.fsencode(path)
        host = self.lookup(pathb, base=base)
        if isinstance(host, Virtual):
            if host.node.kind != "dir":
                raise SandboxError(
                    "ENOTDIR", f"{_PREFIX}{_show(pathb)}: not a directory", guest_path=pathb
                )
            self._hold_cwd(None)
            self._cwd = host.guest_path
            return
        try:
            st = os.stat(host)
        except FileNotFoundError:
            raise SandboxError(
                "ENOENT",
                f"{_PREFIX}{_show(pathb)}: no such directory",
                guest_path=pathb,
            ) from None
        except OSError as e:
            raise self._host_error(e, pathb, host) from None
        if not stat.S_ISDIR(st.st_mode):
            raise SandboxError(
                "ENOTDIR", f"{_PREFIX}{_show(pathb)}: not a directory", guest_path=pathb
            )
        if not os.access(host, os.X_OK):
            raise SandboxError(
                "EACCES",
                f"{_PREFIX}{_show(pathb)}: directory not searchable on the host",
                guest_path=pathb,
            )
        try:
            self._hold_cwd(host)
        except OSError as e:
            raise self._host_error(e, pathb, host) from None
        self._cwd = os.fsencode(self.to_guest(host))

    def mount(self, name: bytes, tree: VirtualNode) -> None:
        """Serve the top-level directory ``/name`` of the guest from ``tree`` (a
        ``"dir"`` node) instead of the root's; a later mount of the name replaces it."""
        if not name or b"/" in name or name in (b".", b".."):
            raise ValueError(f"mount point {name!r} is not one top-level name")
        self.mounts[name] = tree

    def _virtual_at(self, stack: Sequence[bytes], pathb: bytes) -> VirtualNode | None:
        """The served directory at a canonical guest path, or None (a host one).  A path
        under a mount whose directory is gone (a /proc/<pid> after a fork) is ENOENT: it
        never falls through to the root's files of that name."""
        if not stack or stack[0] not in self.mounts:
            return None
        node: VirtualNode | None = self.mounts[stack[0]]
        for name in stack[1:]:
            node = node.child(name) if node is not None else None
        if node is None or node.kind != "dir":
            raise SandboxError(
                "ENOENT",
                f"{_PREFIX}{_show(pathb)}: no such file or directory "
                f"({_show(_join(stack))} is gone)",
                guest_path=pathb,
            )
        return node

    # -- mapping ---------------------------------------------------------------

    def to_guest(self, host_path: HostPath) -> str:
        """The guest path of an absolute host path under the root (inverse of
        :meth:`resolve`, for ``getcwd`` and ``/proc/self/exe``).

        The mapping is lexical: the host path should be canonical (as returned
        by :meth:`resolve` or ``os.getcwd``).  :class:`ValueError` if it is
        relative, contains ``..`` or lies outside the root.
        """
        text = os.fsdecode(host_path)
        if not text.startswith("/"):
            raise ValueError(f"host path {text!r} is not absolute")
        path = Path("/" + text.lstrip("/"))  # pathlib keeps a leading "//"
        if ".." in path.parts:
            raise ValueError(f"host path {text!r} is not canonical (contains '..')")
        try:
            rel = path.relative_to(self.root)
        except ValueError:
            raise ValueError(
                f"host path {text!r} is outside the sandbox root {str(self.root)!r}"
            ) from None
        return "/" + rel.as_posix() if rel.parts else "/"

    def is_writable(self, host_path: HostPath) -> bool:
        """Whether the policy lets the guest create, change or delete the
        object at this canonical host path: it must lie strictly inside a
        writable directory.  (Use :meth:`resolve` with ``write=True`` for guest
        paths; this is for objects already open, e.g. ``fchmod``.)"""
        path = Path(os.fsdecode(host_path))
        return any(path != w and path.is_relative_to(w) for w in self.writable)

    def _host(self, parts: Sequence[bytes]) -> bytes:
        if not parts:
            return self._rootb
        prefix = b"" if self._rootb == b"/" else self._rootb
        return prefix + b"/" + b"/".join(parts)

    def _host_error(self, err: OSError, guest: bytes, host: bytes | Path) -> SandboxError:
        name = _errno.errorcode.get(err.errno or 0, "EIO")
        reason = err.strerror or name
        return SandboxError(
            name,
            f"{_PREFIX}{_show(guest)}: {reason.lower()} (host path {os.fsdecode(host)!r})",
            guest_path=guest,
        )

    # -- the lookup ------------------------------------------------------------

    def resolve(
        self,
        path: GuestPath,
        *,
        base: GuestPath | None = None,
        follow_final: bool = True,
        write: bool = False,
        create: bool = False,
        metadata: bool = False,
    ) -> Path:
        """:meth:`lookup` for a caller that needs a host path: an object of a mounted tree
        is ``EACCES`` (it cannot be created, removed, executed or renamed)."""
        found = self.lookup(path, base=base, follow_final=follow_final, write=write,
                            create=create, metadata=metadata)
        if isinstance(found, Virtual):
            pathb = path if isinstance(path, bytes) else os.fsencode(path)
            raise SandboxError(
                "EACCES",
                f"{_PREFIX}{_show(pathb)}: served by emutrace, not a file of the root",
                guest_path=pathb,
            )
        return found

    def lookup(
        self,
        path: GuestPath,
        *,
        base: GuestPath | None = None,
        follow_final: bool = True,
        write: bool = False,
        create: bool = False,
        metadata: bool = False,
    ) -> Path | Virtual:
        """Map a guest path to the host path it means, enforcing the policy.

        ``path`` is the guest path as given; a relative one is taken from
        ``base`` (a guest directory path, e.g. the path of an ``openat``
        directory fd; itself relative to the current directory if relative) or
        from :attr:`guest_cwd`.  ``follow_final=False`` leaves a final symlink
        unfollowed (``lstat``, ``readlink``, ``unlink``, ``O_NOFOLLOW``...).

        ``write=True``: the call will create, modify, truncate, delete or
        rename the final object.  Its host path must then lie strictly inside
        a writable directory (for a final component that does not exist yet,
        that means its parent directory is a writable directory or inside
        one), else ``EACCES`` (``denied=True``).  ``create=True``: the call
        creates the final object if missing; when it exists as a directory or
        a symlink outside the writable directories, ``EEXIST`` is raised
        instead (what ``mkdir -p`` expects).  ``metadata=True``: the write only
        changes metadata (chmod, chown, utimes); the null-device exemption
        then does not apply.

        Returns the host path, or a :class:`Virtual` for an object of a mounted tree;
        raises :class:`SandboxError`.
        """
        pathb = path if isinstance(path, bytes) else os.fsencode(path)
        if not pathb:
            raise SandboxError("ENOENT", f"{_PREFIX}empty path", guest_path=pathb)
        if b"\0" in pathb:
            raise SandboxError(
                "EINVAL", f"{_PREFIX}{_show(pathb)}: path contains a NUL byte", guest_path=pathb
            )
        if len(pathb) >= PATH_MAX:
            raise SandboxError(
                "ENAMETOOLONG",
                f"{_PREFIX}{_show(pathb[:64])}...: path longer than {PATH_MAX - 1} bytes",
                guest_path=pathb,
            )

        stripped = pathb.rstrip(b"/")
        must_dir = bool(stripped) and stripped != pathb

        # Components still to walk, last one first.  The int is the index in
        # ``links`` of the symlink whose target the component comes from (-1:
        # from the path itself or the base), for messages.
        pending: list[tuple[bytes, int]] = []
        pending.extend((c, -1) for c in reversed(stripped.split(b"/")) if c)
        if not pathb.startswith(b"/"):
            if base is None:
                start = self._current_cwd()
            else:
                start = base if isinstance(base, bytes) else os.fsencode(base)
                if not start.startswith(b"/"):
                    start = self._current_cwd() + b"/" + start
            pending.extend((c, -1) for c in reversed(start.split(b"/")) if c)

        stack: list[bytes] = []
        links: list[tuple[bytes, bytes]] = []  # (guest path of link, its target)
        missing = False
        final_st: os.stat_result | None = None
        vdir: VirtualNode | None = None  # the directory reached, when it is a served one
        final_v: VirtualNode | None = None

        while pending:
            name, origin = pending.pop()
            if name == b".":
                continue
            if name == b"..":
                if stack:
                    stack.pop()
                    vdir = self._virtual_at(stack, pathb)
                elif not self._clamp_dotdot:
                    raise self._escape(pathb, links, origin)
                continue
            if len(name) > NAME_MAX:
                raise SandboxError(
                    "ENAMETOOLONG",
                    f"{_PREFIX}{_show(pathb)}: a component is longer than {NAME_MAX} bytes",
                    guest_path=pathb,
                )
            is_last = not pending
            if vdir is not None or (not stack and name in self.mounts):
                node = self.mounts[name] if vdir is None else vdir.child(name)
                if node is None:
                    raise SandboxError(
                        "ENOENT",
                        f"{_PREFIX}{_show(pathb)}: no such file or directory "
                        f"({_show(_join([*stack, name]))} does not exist)",
                        guest_path=pathb,
                    )
                followed = not is_last or follow_final or must_dir
                if node.kind == "fd" and is_last and followed and not must_dir:
                    stack.append(name)
                    final_v = node  # the descriptor itself (a magic link)
                    break
                if node.kind in ("link", "fd") and followed:
                    target = node.target()
                    if len(links) >= MAXSYMLINKS or not target:
                        raise SandboxError(
                            "ELOOP" if target else "ENOENT",
                            f"{_PREFIX}{_show(pathb)}: link {_show(_join([*stack, name]))} "
                            "cannot be followed",
                            guest_path=pathb,
                        )
                    links.append((_join([*stack, name]), target))
                    if target.startswith(b"/"):
                        stack, vdir = [], None
                    index = len(links) - 1
                    pending.extend((c, index) for c in reversed(target.split(b"/")) if c)
                    continue
                if not is_last and node.kind != "dir":
                    raise SandboxError(
                        "ENOTDIR",
                        f"{_PREFIX}{_show(pathb)}: not a directory "
                        f"({_show(_join([*stack, name]))} is not a directory)",
                        guest_path=pathb,
                    )
                stack.append(name)
                if node.kind == "dir":
                    vdir = node
                if is_last:
                    final_v = node
                continue
            host = self._host([*stack, name])
            try:
                st = os.lstat(host)
            except FileNotFoundError:
                if is_last:
                    stack.append(name)
                    missing = True
                    break
                raise SandboxError(
                    "ENOENT",
                    f"{_PREFIX}{_show(pathb)}: no such file or directory "
                    f"({_show(_join([*stack, name]))} does not exist)",
                    guest_path=pathb,
                ) from None
            except OSError as e:
                raise self._host_error(e, pathb, host) from None

            if stat.S_ISLNK(st.st_mode) and (not is_last or follow_final or must_dir):
                if len(links) >= MAXSYMLINKS:
                    raise SandboxError(
                        "ELOOP",
                        f"{_PREFIX}{_show(pathb)}: too many levels of symbolic links "
                        f"(more than {MAXSYMLINKS})",
                        guest_path=pathb,
                    )
                try:
                    target = os.readlink(host)
                except OSError as e:
                    raise self._host_error(e, pathb, host) from None
                links.append((_join([*stack, name]), target))
                if not target:
                    raise SandboxError(
                        "ENOENT",
                        f"{_PREFIX}{_show(pathb)}: symlink {_show(links[-1][0])} is empty",
                        guest_path=pathb,
                    )
                if is_last and target.endswith(b"/"):
                    must_dir = True
                if target.startswith(b"/"):
                    stack, vdir = [], None  # absolute targets are interpreted inside the root
                index = len(links) - 1
                pending.extend((c, index) for c in reversed(target.split(b"/")) if c)
                continue

            if not is_last and not stat.S_ISDIR(st.st_mode):
                raise SandboxError(
                    "ENOTDIR",
                    f"{_PREFIX}{_show(pathb)}: not a directory "
                    f"({_show(_join([*stack, name]))} is not a directory)",
                    guest_path=pathb,
                )
            stack.append(name)
            if is_last:
                final_st = st

        if final_v is None and vdir is not None:
            final_v = vdir  # the walk ended on a served directory (".." or ".")
        if final_v is not None:
            return self._virtual_final(pathb, stack, final_v, must_dir, write, follow_final,
                                       metadata)
        hostb = self._host(stack)
        if not missing and final_st is None:
            # The walk ended on the root, "." or "..": a directory already walked through.
            try:
                final_st = os.lstat(hostb)
            except OSError as e:
                raise self._host_error(e, pathb, hostb) from None
        if must_dir and final_st is not None and not stat.S_ISDIR(final_st.st_mode):
            raise SandboxError(
                "ENOTDIR",
                f"{_PREFIX}{_show(pathb)}: not a directory (trailing slash)",
                guest_path=pathb,
            )
        result = Path(os.fsdecode(hostb))
        if write and not self._write_allowed(result, final_st, follow_final, metadata):
            if (
                create
                and final_st is not None
                and (stat.S_ISDIR(final_st.st_mode) or stat.S_ISLNK(final_st.st_mode))
            ):
                raise SandboxError(
                    "EEXIST", f"{_PREFIX}{_show(pathb)}: file exists", guest_path=pathb
                )
            resolved = _join(stack)
            where = "" if resolved == pathb else f"resolves to {_show(resolved)}, "
            hint = "" if self.writable or self.explicit_writable else (
                "; nothing is writable by default from /, $HOME or a directory holding "
                "the root: pass --allow-write")
            raise SandboxError(
                "EACCES",
                f"{_PREFIX}write to {_show(pathb)} denied "
                f"({where}not under an --allow-write directory{hint})",
                guest_path=pathb,
                denied=True,
            )
        return result

    def _virtual_final(self, pathb: bytes, stack: Sequence[bytes], node: VirtualNode,
                       must_dir: bool, write: bool, follow_final: bool,
                       metadata: bool) -> Virtual:
        if must_dir and node.kind != "dir":
            raise SandboxError(
                "ENOTDIR",
                f"{_PREFIX}{_show(pathb)}: not a directory (trailing slash)",
                guest_path=pathb,
            )
        if write and not (node.writable and follow_final and not metadata):
            # like a read-only file of Linux's /proc or a non-root user's /dev: EACCES
            raise SandboxError(
                "EACCES",
                f"{_PREFIX}{_show(pathb)}: served by emutrace, not writable",
                guest_path=pathb,
            )
        return Virtual(node, _join(stack))

    def _write_allowed(
        self, host: Path, st: os.stat_result | None, follow_final: bool, metadata: bool
    ) -> bool:
        if self.is_writable(host):
            return True
        return (
            st is not None
            and follow_final
            and not metadata
            and stat.S_ISCHR(st.st_mode)
            and st.st_rdev in (self._null_rdev, _TTY_DEVICE)
        )

    def _escape(self, pathb: bytes, links: list[tuple[bytes, bytes]], origin: int) -> SandboxError:
        if origin >= 0:
            link, target = links[origin]
            reason = f"symlink {_show(link)} -> {_show(target)} escapes the root"
        else:
            reason = "'..' escapes the root"
        return SandboxError(
            "EACCES",
            f"{_PREFIX}access to {_show(pathb)} denied ({reason} {_show(self._rootb)})",
            guest_path=pathb,
            denied=True,
        )
