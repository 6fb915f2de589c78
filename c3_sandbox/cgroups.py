"""Limits on a whole sandbox: one cgroup per sandbox holding the runner and everything it starts.

``memory`` caps all of the sandbox's memory together (its tmpfs included) and ``pids`` the number
of its processes and threads; ``cpu`` (where this process may use it) gives every sandbox the same
CPU weight, so a candidate that forks thirty spinning processes gets one sandbox's share of the
CPU, not thirty, and a concurrent candidate's tests keep theirs. At the end every process in it
is killed and the cgroup removed.

* cgroup v2: a child of ``$C3_SANDBOX_CGROUP`` when set (a folder the user may write whose
  ``cgroup.subtree_control`` enables memory and pids: how a cluster delegates one to a user),
  else, for root, of ``<cgroup2 mount>/c3-sandbox``;
* cgroup v1 (the memory and pids hierarchies): children of this process's own cgroups;
* neither usable (an unprivileged user without a delegated cgroup, controllers not enabled):
  no cgroup. The documented fallback is then per-process ``RLIMIT_AS`` and ``RLIMIT_NPROC``,
  the box's tmpfs size, and the PID namespace, whose init kills every process of the sandbox.
"""

from __future__ import annotations

import itertools
import os
import signal
import threading
import time

_COUNTER = itertools.count()
_FOUND: list = []
_LOCK = threading.Lock()
# every sandbox the same CPU weight (cgroup v1 cpu.shares; v2 cpu.weight), however many processes it runs
CPU_SHARES_V1 = 1024
CPU_WEIGHT_V2 = 100

def _read(path: str) -> str:
    with open(path) as fh:
        return fh.read()


def _write(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def _mounts() -> tuple[str | None, dict[str, str]]:
    """(the cgroup2 mount point, {v1 controller: its mount point})."""
    v2, v1 = None, {}
    for line in _read("/proc/self/mountinfo").splitlines():
        left, _, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if len(fields) < 5 or len(tail) < 3:
            continue
        if tail[0] == "cgroup2" and v2 is None:
            v2 = fields[4]
        elif tail[0] == "cgroup":
            for option in tail[2].split(","):
                if option in ("memory", "pids", "cpu"):
                    v1.setdefault(option, fields[4])
    return v2, v1


def _own_paths() -> dict[str, str]:
    """This process's cgroup per v1 controller (and "" for v2)."""
    out = {}
    for line in _read("/proc/self/cgroup").splitlines():
        _, controllers, path = line.split(":", 2)
        for c in controllers.split(",") if controllers else [""]:
            out[c] = path
    return out


def _v2_parent(mount: str) -> str | None:
    """A cgroup2 folder whose children get memory and pids limits, or None."""
    given = os.environ.get("C3_SANDBOX_CGROUP")
    if given:
        parent = given if os.path.isabs(given) and given.startswith(mount) else os.path.join(mount, given.lstrip("/"))
    elif os.geteuid() == 0:
        parent = os.path.join(mount, "c3-sandbox")
        try:
            os.makedirs(parent, exist_ok=True)
            enabled = _read(os.path.join(mount, "cgroup.subtree_control")).split()
            if not {"memory", "pids"} <= set(enabled):
                _write(os.path.join(mount, "cgroup.subtree_control"), "+memory +pids")
            _enable_cpu(mount)
        except OSError:
            return None
    else:
        return None
    try:
        if not {"memory", "pids"} <= set(_read(os.path.join(parent, "cgroup.subtree_control")).split()):
            _write(os.path.join(parent, "cgroup.subtree_control"), "+memory +pids")
        _enable_cpu(parent)
        return parent
    except OSError:
        return None


def _enable_cpu(folder: str) -> None:
    """Turn the cgroup2 CPU controller on for ``folder``'s children where it is offered (best effort)."""
    try:
        if "cpu" in _read(os.path.join(folder, "cgroup.controllers")).split() and \
                "cpu" not in _read(os.path.join(folder, "cgroup.subtree_control")).split():
            _write(os.path.join(folder, "cgroup.subtree_control"), "+cpu")
    except OSError:
        pass


def _discover() -> tuple[str, list[str]] | None:
    """("v2", [parent]) or ("v1", [memory parent, pids parent(, cpu parent)]) or None. The CPU controller is used
    where this process may write to it: each sandbox then gets an equal CPU weight, whatever its process count."""
    try:
        v2, v1 = _mounts()
        own = _own_paths()
    except (OSError, ValueError):
        return None
    if v2 is not None and {"memory", "pids"} <= set(_read(os.path.join(v2, "cgroup.controllers")).split()):
        parent = _v2_parent(v2)
        if parent is not None:
            return "v2", [parent]
    if "memory" in v1 and "pids" in v1 and "memory" in own and "pids" in own:
        parents = [os.path.join(v1[c], own[c].lstrip("/")) for c in ("memory", "pids")]
        if all(os.access(p, os.W_OK) for p in parents):
            cpu = os.path.join(v1["cpu"], own["cpu"].lstrip("/")) if "cpu" in v1 and "cpu" in own else None
            return "v1", parents + ([cpu] if cpu and os.access(cpu, os.W_OK) else [])
    return None


def available() -> str | None:
    """"cgroup v2", "cgroup v1" or None (the fallback), found once per process."""
    with _LOCK:
        if not _FOUND:
            _FOUND.append(_discover())
    found = _FOUND[0]
    return None if found is None else f"cgroup {found[0]}"


def cpu_weighted() -> bool:
    """Whether sandboxes get an equal CPU weight here (the cgroup CPU controller is usable)."""
    if available() is None:
        return False
    kind, parents = _FOUND[0]
    if kind == "v1":
        return len(parents) > 2
    try:
        return "cpu" in _read(os.path.join(parents[0], "cgroup.subtree_control")).split()
    except OSError:
        return False


class BoxCgroup:
    """The cgroup(s) of one sandbox."""

    def __init__(self, kind: str, dirs: list[str]):
        self.kind, self.dirs = kind, dirs

    @classmethod
    def create(cls, memory_bytes: int, processes: int) -> "BoxCgroup | None":
        """A new cgroup with these limits, or None when cgroups are not usable here."""
        if available() is None:
            return None
        kind, parents = _FOUND[0]
        name = f"c3-{os.getpid()}-{next(_COUNTER)}"
        box = cls(kind, [])
        try:
            for parent in parents:
                path = os.path.join(parent, name)
                os.mkdir(path, 0o755)
                box.dirs.append(path)
            if kind == "v2":
                _write(os.path.join(box.dirs[0], "memory.max"), str(memory_bytes))
                if os.path.exists(os.path.join(box.dirs[0], "memory.swap.max")):
                    _write(os.path.join(box.dirs[0], "memory.swap.max"), "0")
                _write(os.path.join(box.dirs[0], "pids.max"), str(processes))
                if os.path.exists(os.path.join(box.dirs[0], "cpu.weight")):
                    _write(os.path.join(box.dirs[0], "cpu.weight"), str(CPU_WEIGHT_V2))
            else:
                _write(os.path.join(box.dirs[0], "memory.limit_in_bytes"), str(memory_bytes))
                try:
                    _write(os.path.join(box.dirs[0], "memory.memsw.limit_in_bytes"), str(memory_bytes))
                except OSError:
                    pass  # no swap accounting
                _write(os.path.join(box.dirs[1], "pids.max"), str(processes))
                if len(box.dirs) > 2:
                    _write(os.path.join(box.dirs[2], "cpu.shares"), str(CPU_SHARES_V1))
        except OSError:
            box.remove()
            raise
        return box

    def add(self, pid: int) -> None:
        for d in self.dirs:
            _write(os.path.join(d, "cgroup.procs"), str(pid))

    def _pids(self) -> set[int]:
        found = set()
        for d in self.dirs:
            try:
                found.update(int(p) for p in _read(os.path.join(d, "cgroup.procs")).split())
            except (OSError, ValueError):
                pass
        return found

    def remove(self) -> None:
        """Kill every process in the cgroup, then remove it (never raises)."""
        if self.kind == "v2" and self.dirs and os.path.exists(os.path.join(self.dirs[0], "cgroup.kill")):
            try:
                _write(os.path.join(self.dirs[0], "cgroup.kill"), "1")
            except OSError:
                pass
        deadline = time.monotonic() + 5.0
        while time.monotonic() < deadline:
            pids = self._pids()
            if not pids:
                break
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            time.sleep(0.005)
        for d in reversed(self.dirs):
            for _ in range(200):  # rmdir fails while the last killed processes are being torn down
                try:
                    os.rmdir(d)
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.005)
        self.dirs = []
