"""Unprivileged uids for sandboxes on a root host.

Each sandbox leases one uid of ``[UID_BASE, UID_BASE + UID_COUNT)`` for its whole life by holding
an exclusive ``flock`` on ``uid-<n>.lock`` in a root-only folder, so sandboxes of different pools,
processes or users on one machine never share a uid (a lock dies with its process, so a crashed
host frees its uids). The range is one systemd leaves unused (0x70000000-0x7FFEFFFF); make sure
no account on the machine uses it. Inside the sandbox the leased uid appears as uid 1000.
"""

from __future__ import annotations

import fcntl
import os
import stat
import threading

UID_BASE = 0x70C30000  # 1891827712
UID_COUNT = 1 << 16
LOCK_DIRS = ("/run/c3-sandbox", "/var/lock/c3-sandbox", "/tmp/c3-sandbox-root")


class LeaseError(RuntimeError):
    """No uid could be leased (no usable lock folder, or every uid of the range is taken)."""


class UidLease:
    """One leased uid; ``release()`` (or the end of the process) frees it."""

    def __init__(self, uid: int, fd: int):
        self.uid, self._fd = uid, fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the only descriptor drops the flock
            self._fd = None


_DIR_FD: list[int] = []
_LOCK = threading.Lock()


def _lock_dir() -> int:
    """A descriptor of the lock folder: created 0700 by root, refused when anyone else could write it."""
    with _LOCK:
        if _DIR_FD:
            return _DIR_FD[0]
        problems = []
        for path in LOCK_DIRS:
            try:
                os.mkdir(path, 0o700)
            except FileExistsError:
                pass
            except OSError as exc:
                problems.append(f"{path}: {exc.strerror}")
                continue
            try:
                fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
            except OSError as exc:
                problems.append(f"{path}: {exc.strerror}")
                continue
            st = os.fstat(fd)
            if st.st_uid != 0 or stat.S_IMODE(st.st_mode) & 0o022:
                os.close(fd)
                problems.append(f"{path}: not owned by root or writable by others")
                continue
            _DIR_FD.append(fd)
            return fd
        raise LeaseError("no folder for sandbox uid locks: " + "; ".join(problems))


def lease_uid() -> UidLease:
    """The lowest free uid of the range, locked for the caller."""
    dir_fd = _lock_dir()
    for uid in range(UID_BASE, UID_BASE + UID_COUNT):
        fd = os.open(f"uid-{uid}.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dir_fd)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        return UidLease(uid, fd)
    raise LeaseError(f"all {UID_COUNT} sandbox uids from {UID_BASE} are in use")
