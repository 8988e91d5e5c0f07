"""Importing this module registers every system-call handler (the ``sys_*`` modules fill
:data:`.table.HANDLERS` as they are imported)."""

from emutrace.machine.linux import (  # noqa: F401
    sys_cache,
    sys_fd,
    sys_fs,
    sys_fsmeta,
    sys_mem,
    sys_mincore,
    sys_poll,
    sys_proc,
    sys_process,
    sys_session,
    sys_sigdeliver,
    sys_socket,
    sys_statfs,
    sys_thread,
    sys_ucontext,
    sys_usage,
    sys_xattr,
)
