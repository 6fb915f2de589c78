"""The in-sandbox test runner (stdlib only).

The host starts it as ``python -P -s -S -B -c <this file's source>`` with an environment it
writes from scratch (no folder the candidate can write is ever on ``sys.path``; ``-I`` is not
used because it would also ignore ``PYTHONHASHSEED``, which keeps set and dict orders equal
between reference and candidate), writes one JSON job to its stdin (a line with its length in bytes,
then the job) and reads its stdout: ``READY`` once the sandbox is built, before any candidate code
runs, ``S <i>`` before test ``i`` starts, ``C <i> <seconds>`` with its CPU time so far while it runs (see
:func:`wait_result`) and ``E <i>`` when it has ended, then one JSON line with
one result per test payload, in order: ``{"status": "value", "value": <encoded>}`` or
``{"status": "error" | "timeout", "reason": ...}``, each with ``output``.
A job with ``"probe": true`` builds the sandbox and reports what it could build instead.

The job holds the candidate's inputs and limits that are the same for every test, nothing computed
from an expected value or a reference solution: the host keeps each test's time limit and value cap
(issue 39). It times each test from the ``S``/``E`` lines and, at a test's limit (CPU time from the ``C``
lines, or its wall-clock ceiling: issue 41), writes ``K <i>`` on
the runner's stdin (kill test ``i``: a timeout), or ``B`` when the candidate's whole budget is spent
(kill it, skip the rest); a value over its test's cap is refused by the host, before decoding. What
the runner never holds, no test child (a fork of it) can find in its memory.

Building the sandbox (``isolation: namespaces``), before any candidate code runs:

* new user, mount, PID, network, IPC, UTS and cgroup namespaces. The only uid inside is 1000,
  mapped to the host user, or to a uid leased for this sandbox alone when the host is root
  (the runner then starts as root only to have that mapping written); nothing inside is root
  or has a capability over any host file;
* a new root: a read-only overlay of this box alone over a small tmpfs (the mount points) and the
  pool's image (``image.py``: a tmpfs copy of the Python installation and what it loads; no host
  folder is bound in); the null/zero/full/random/urandom devices (a root host: nodes of the box's
  own) on read-only, nosuid, noexec bind mounts (nothing inside can change their owner, mode or
  kind); the runner's own ``/proc``, which candidates do not get; a fresh size-capped tmpfs per test
  at ``/sandbox`` (also ``/tmp``), a new IPC namespace and the pid counter set back per test.
  ``pivot_root`` then detaches the host's tree, so there is no
  outside to escape to, and the new root is remounted read-only;
* this process becomes the PID namespace's init: it cannot be signalled, traced or read
  (``/proc/1``) from inside; after every test it kills every other process of the namespace,
  and when it exits the kernel kills whatever is left.

Each test runs in a forked child that gets a fresh ``/sandbox``, keeps only stdin (``/dev/null``),
its output (stdout and stderr: an anonymous memory file, size-capped by ``RLIMIT_FSIZE``) and
its result pipe (fd 3), is not dumpable (no core, whatever the host's ``core_pattern``), sets
``no_new_privs``, drops every capability (bounding, ambient, inheritable, permitted, effective),
applies its resource limits (``RLIMIT_CORE`` 1), loads the system-call filter (:func:`syscall_filter`: an allow-list
built with libseccomp, compiled by the host and sent in the job) and only then executes the candidate code. It sends
back the *value*, encoded as plain builtin data: only builtin types encode (exact type checks, so a subclass or an
object with a rigged ``__eq__`` is rejected); the expected values never enter the sandbox and the comparison happens in
the host. A child that exits early, raises anything, is killed by any signal or sends a malformed message gets an
error result and passes nothing; the runner goes on to the next test, unless the host killed this one at its limit
(then no later test runs: :data:`NOT_RUN`).

The runner never opens, reads, changes or removes anything by a name the candidate controls:
the output file has no name, results come through a pipe, and the box is a tmpfs that goes
away with the mount namespace. ``isolation: none`` (explicitly configured; unsafe) skips the
namespaces: the host makes a private folder for the box, and when the host is root the
runner first becomes the leased uid.
"""

import base64
import collections
import ctypes
import errno
import json
import os
import resource
import select
import signal
import stat
import struct
import sys
import time

MAX_DEPTH = 64
MAX_ITEMS = 100000
MAX_CHARS = 1 << 24  # characters of leaf text (str, bytes, digits) in one value
INSIDE_UID = 1000  # the only uid (and gid) inside the sandbox's user namespace
MAX_REASON = 500  # characters of an error reason kept


class Unsupported(Exception):
    pass


class SetupError(Exception):
    """The sandbox could not be built (reported to the host, which raises SandboxError)."""


# Standard-library containers accepted as plain data, captured before any candidate code runs.
TRUSTED = {collections.Counter: "dict", collections.OrderedDict: "dict", collections.defaultdict: "dict",
           collections.deque: "list"}


def encode(value, depth=0, budget=None):
    """Builtin data -> JSON-able tagged tree; anything else raises Unsupported."""
    if budget is None:
        budget = [MAX_ITEMS]
    budget[0] -= 1
    if depth > MAX_DEPTH or budget[0] < 0:
        raise Unsupported("result too deep or too large")
    t = type(value)
    if value is None:
        return ["none"]
    if t is bool:
        return ["bool", value]
    if t is int:
        return ["int", str(value)]
    if t is float:
        return ["float", repr(value)]
    if t is complex:
        return ["complex", repr(value.real), repr(value.imag)]
    if t is str:
        return ["str", value]
    if t is bytes:
        return ["bytes", base64.b64encode(value).decode()]
    kind = TRUSTED.get(t)
    if kind == "dict":
        return ["dict", [[encode(k, depth + 1, budget), encode(v, depth + 1, budget)] for k, v in dict.items(value)]]
    if kind == "list":
        return ["list", [encode(v, depth + 1, budget) for v in list(value)]]
    if t in (list, tuple, set, frozenset):
        items = [encode(v, depth + 1, budget) for v in value]
        if t in (set, frozenset):
            items.sort(key=lambda x: json.dumps(x))
        return [t.__name__, items]
    if t is dict:
        return ["dict", [[encode(k, depth + 1, budget), encode(v, depth + 1, budget)] for k, v in value.items()]]
    raise Unsupported("result of type %s.%s is not plain builtin data" % (t.__module__, t.__qualname__))


def decode(node):
    """Inverse of ``encode`` for the call arguments the host sends (trusted data: tuples, sets and
    complex numbers arrive as themselves)."""
    tag = node[0]
    if tag == "none":
        return None
    if tag in ("bool", "int", "float", "str"):
        return {"bool": bool, "int": int, "float": float, "str": str}[tag](node[1])
    if tag == "complex":
        return complex(float(node[1]), float(node[2]))
    if tag == "bytes":
        return base64.b64decode(node[1])
    if tag == "dict":
        return dict((decode(k), decode(v)) for k, v in node[1])
    return {"list": list, "tuple": tuple, "set": set, "frozenset": frozenset}[tag](decode(x) for x in node[1])


PLAIN = (list, tuple, set, frozenset, dict, str, bytes) + tuple(TRUSTED)


def probes_of(test):
    """A payload's probes as (expression source or (function name, arguments), mode), and whether it
    wants the tuple of their values (``probes``) or one value (``expr``; ``entry_point`` and JSON ``args``)."""
    if "probes" not in test:
        if "expr" in test:
            return [(test["expr"], "value")], False
        return [((test["entry_point"], list(test["args"])), "value")], False
    return [(p["expr"] if "expr" in p else (p["call"], decode(p["args"])), p.get("mode", "value"))
            for p in test["probes"]], True


def probe_values(probes, env, trusted):
    """Evaluate each probe in the candidate's namespace ``env`` and report it in its mode
    (``assertions.py``). ``trusted``: bool, list, callable and type as they were
    before any candidate code ran."""
    bool_, list_, callable_, type_ = trusted
    values = []
    for what, mode in probes:
        if isinstance(what, str):
            value = eval(compile(what, "<test>", "eval"), env)
        else:
            fn = env.get(what[0])
            if not callable_(fn):
                raise NameError("function %r is not defined" % what[0])
            value = fn(*what[1])
        if mode == "truth":
            value = bool_(value)
        elif mode == "callable":
            value = callable_(value)
        elif mode == "present":  # EvalPlus's oracle for tasks that return a match object or None
            value = value if type_(value) is bool_ else value is not None
        elif mode == "iter" and type_(value) not in PLAIN:
            try:
                value = list_(value)  # a generator, map or dict view: its items
            except TypeError:
                pass  # not iterable: reported as it is (rejected unless plain)
        values.append(value)
    return values


def evaluate(job, test):
    """Run the candidate code (then the setup) and evaluate one test payload: the message to send.
    The payload holds the candidate's inputs only (expected values, their sizes and the test's time limit
    never enter the sandbox); the other tests' payloads are dropped from this child before any candidate
    code runs."""
    tests = job.get("tests")
    if isinstance(tests, list):
        tests.clear()
    env = {"__name__": "__candidate__", "__builtins__": __builtins__}
    trusted = (bool, list, callable, type)  # taken before the candidate can replace builtins
    try:
        probes, several = probes_of(test)  # call arguments decoded before any candidate code runs
        exec(compile(job["code"], "<candidate>", "exec"), env)
        if job.get("setup"):  # MBPP's test setup runs after the code it tests (it may use its classes)
            exec(compile(job["setup"], "<setup>", "exec"), env)
        values = probe_values(probes, env, trusted)
        return {"status": "value", "value": encode(tuple(values) if several else values[0])}
    except Unsupported as exc:
        return {"status": "error", "reason": "unsupported result: %s" % exc}
    except BaseException as exc:  # SystemExit and KeyboardInterrupt included: no value, no pass
        return {"status": "error", "reason": "%s: %s" % (type(exc).__name__, str(exc)[:300])}


# ---------------------------------------------------------------------------------------------
# The kernel interfaces (Linux), through libc

CLONE_NEWNS, CLONE_NEWCGROUP, CLONE_NEWUTS, CLONE_NEWIPC = 0x00020000, 0x02000000, 0x04000000, 0x08000000
CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x10000000, 0x20000000, 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT = 1, 2, 4, 8, 32
MS_NOATIME, MS_NODIRATIME, MS_BIND, MS_REC, MS_PRIVATE, MS_RELATIME = 1024, 2048, 4096, 16384, 1 << 18, 1 << 21
MNT_DETACH = 2
PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_SET_KEEPCAPS, PR_CAPBSET_DROP = 1, 4, 8, 24
PR_SET_CHILD_SUBREAPER, PR_SET_NO_NEW_PRIVS, PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 36, 38, 47, 4
CAP_V3 = 0x20080522
SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41, "ppc64le": 203, "s390x": 217, "riscv64": 41}
SYS_KEYCTL = {"x86_64": 250, "aarch64": 219, "ppc64le": 271, "s390x": 280, "riscv64": 219}
KEYCTL_JOIN_SESSION_KEYRING = 1
SYSTEM_DIRS = ("/usr", "/lib", "/lib64", "/lib32", "/libx32", "/bin", "/sbin", "/etc")
DEVICES = ("null", "zero", "full", "random", "urandom")
# The box's own limits on what the kernel charges to the user who owns its user namespace (the leased uid on
# a root host, the host user otherwise): set before the namespace is made, these rlimits also cap the whole
# namespace's total; the sysctls are the namespace's own counters (written from its init). No honest test
# needs a message queue, locked memory, fanotify or more than a few inotify instances.
BOX_RLIMITS = (("RLIMIT_MSGQUEUE", 0), ("RLIMIT_MEMLOCK", 0), ("RLIMIT_SIGPENDING", 256))
# No inotify either: a watch is kernel state a candidate could read another's activity through.
BOX_SYSCTLS = (("user/max_inotify_instances", 0), ("user/max_inotify_watches", 0),
               ("user/max_fanotify_groups", 0), ("user/max_fanotify_marks", 0))
# The namespaces the runner itself makes after set-up (an IPC namespace per test, so System V ids restart), with
# room for the ones still being freed; none of any other kind, and the candidate makes none
# (the system-call filter kills unshare, setns and clone with a namespace flag).
RUNNER_NAMESPACES = {"ipc": 256}
NAMESPACE_KINDS = ("user", "mnt", "pid", "net", "ipc", "uts", "cgroup", "time")
_LIBC = []
_PROC = []  # the runner's own /proc (a directory descriptor; candidates have no /proc at all)
_OWN_PROC = [False]  # whether _PROC is the sandbox's own (its PID namespace's processes only), not the host's


def libc():
    if not _LIBC:
        _LIBC.append(ctypes.CDLL(None, use_errno=True))
    return _LIBC[0]


def _call(what, ret):
    if ret == -1:
        err = ctypes.get_errno()
        raise OSError(err, "%s: %s" % (what, os.strerror(err)))
    return ret


def _b(text):
    return None if text is None else os.fsencode(text)


def mount(source, target, fstype, flags, data=None):
    _call("mount %s" % target, libc().mount(_b(source), _b(target), _b(fstype), ctypes.c_ulong(flags), _b(data)))


def umount(target):
    _call("umount %s" % target, libc().umount2(_b(target), MNT_DETACH))


# ----- the system-call filter (libseccomp through ctypes: the runner imports the stdlib only) -----------------
SCMP_ACT_ALLOW = 0x7FFF0000
SCMP_ACT_KILL_PROCESS = 0x80000000
SCMP_ACT_ERRNO_ENOSYS = 0x00050000 | 38
SCMP_ACT_ERRNO_EPERM = 0x00050000 | 1
SCMP_CMP_NE, SCMP_CMP_EQ, SCMP_CMP_MASKED_EQ = 1, 4, 7
SCMP_FLTATR_CTL_OPTIMIZE = 8  # libseccomp >= 2.5: 2 = a binary tree of the calls, not a linear scan
RLIMIT_CORE_NUMBER = 4  # RLIMIT_CORE on every Linux architecture the runner knows
SIGCHLD_NUMBER = 17  # SIGCHLD on x86_64, aarch64, ppc64le, s390x and riscv64
PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 22, 2
# What a test may call: an allow-list (issue 39: accepted by construction, not refused by name). Anything else fails
# with ENOSYS, as a call this kernel does not have; the calls below it are allowed only with the arguments their
# rules accept. These are the calls of pure Python running in one box: files and memory of its own, threads, its
# own processes (forks, never an exec), signals among them, timers, System V IPC of its own namespace (no socket,
# no pipe: their buffers are kernel memory no limit of the box counts). Not on it, among others: anything that
# reads or changes state the kernel keeps for the whole host (sysinfo, ustat, sysfs, adjtimex, sync, syncfs,
# io_setup, the keyrings, page-cache residency: mincore, cachestat, fadvise, readahead), socket calls,
# splice/tee/vmsplice, memory policies, credentials (setuid and the rest: nothing to gain), pidfds, io_uring, and
# every call made for administration. `bench/syscall_allowlist.py` runs the canonical MBPP and MBPP+ solutions under
# a kill-default version of this filter: each call they need is here.
ALLOWED_SYSCALLS = (
    # files and descriptors (the box's tmpfs, the read-only image, the five device nodes)
    "read", "write", "readv", "writev", "pread64", "pwrite64", "preadv", "pwritev", "preadv2", "pwritev2", "lseek",
    "_llseek", "close", "close_range", "dup", "dup2", "dup3", "open", "openat", "openat2", "creat", "stat", "fstat",
    "lstat", "newfstatat", "fstatat64", "statx", "access", "faccessat", "faccessat2", "readlink", "readlinkat",
    "getdents", "getdents64", "getcwd", "chdir", "fchdir", "mkdir", "mkdirat", "rmdir", "unlink", "unlinkat",
    "rename", "renameat", "renameat2", "link", "linkat", "symlink", "symlinkat", "chmod", "fchmod", "fchmodat",
    "fchmodat2", "chown", "fchown", "lchown", "fchownat", "truncate", "ftruncate", "fsync", "fdatasync", "fallocate",
    "utime", "utimes", "utimensat", "futimesat", "umask", "statfs", "fstatfs", "sendfile", "copy_file_range",
    "getxattr", "lgetxattr", "fgetxattr", "listxattr", "llistxattr", "flistxattr", "setxattr", "lsetxattr", "fsetxattr",
    "removexattr", "lremovexattr", "fremovexattr", "memfd_create",
    "poll", "ppoll", "select", "_newselect", "pselect6", "epoll_create", "epoll_create1", "epoll_ctl", "epoll_wait",
    "epoll_pwait", "epoll_pwait2", "eventfd", "eventfd2", "signalfd", "signalfd4", "timerfd_create",
    "timerfd_settime", "timerfd_gettime", "inotify_init", "inotify_init1", "inotify_add_watch", "inotify_rm_watch",
    # memory
    "brk", "mmap", "mmap2", "munmap", "mremap", "mprotect", "msync",
    # the test's own processes and threads
    "exit", "exit_group", "fork", "vfork", "wait4", "waitid", "getpid", "getppid", "gettid", "getuid", "geteuid",
    "getgid", "getegid", "getresuid", "getresgid", "getgroups", "getpgid", "getpgrp", "getsid", "set_tid_address",
    "set_robust_list", "rseq", "futex", "futex_waitv", "sched_yield", "sched_getaffinity", "sched_getparam",
    "sched_getscheduler", "sched_getattr", "sched_get_priority_max", "sched_get_priority_min",
    "sched_rr_get_interval", "getpriority", "getrusage", "times", "getrlimit", "ugetrlimit", "uname", "arch_prctl",
    "capget", "getcpu", "getrandom", "restart_syscall", "kill", "tkill", "tgkill",
    # signals and time
    "rt_sigprocmask", "rt_sigreturn", "rt_sigpending", "rt_sigsuspend", "rt_sigtimedwait", "sigaltstack", "pause",
    "nanosleep", "clock_nanosleep", "clock_gettime", "clock_getres", "gettimeofday", "time", "alarm", "getitimer",
    "setitimer", "timer_create", "timer_settime", "timer_gettime", "timer_getoverrun", "timer_delete",
    # System V IPC (a new IPC namespace per test)
    "shmget", "shmat", "shmdt", "shmctl",
    "semget", "semop", "semtimedop", "semctl", "msgget", "msgsnd", "msgrcv", "msgctl",
)
# refused with EPERM (a clear "not allowed" for honest code that tries): no program is ever executed (so nothing
# becomes dumpable again or runs outside Python: issue 39's cores); no pipe (pipe buffers are charged to the host
# user: a hoard of them shrinks the host's new pipes) and no FIFO or device node; no lock on a shared inode (flock;
# fcntl locks: see FCNTL_ALLOWED); no new session (a new scheduling autogroup)
# no socket of any family either: a socket's buffers, like a pipe's, are kernel memory charged to no limit of the box
# (about 280 MiB per box at its process and descriptor limits, round seven), and there is no network to reach
REFUSED_SYSCALLS = ("execve", "execveat", "pipe", "pipe2", "mknod", "mknodat", "flock", "setsid", "socket",
                    "socketpair")
# killed on use: the keyring calls (shared with the host kernel), namespaces and mounts, kernel modules, BPF,
# perf, kexec, handle-based opens, userfaultfd and io_uring, tracing and other processes' memory (an honest test
# never makes them: a test that does is ended at once)
KILLED_SYSCALLS = ("keyctl", "add_key", "request_key", "unshare", "setns", "mount", "umount2", "pivot_root", "chroot",
                   "fsopen", "fsconfig", "fsmount", "fspick", "move_mount", "open_tree", "mount_setattr",
                   "init_module", "finit_module", "delete_module", "bpf", "perf_event_open", "kexec_load",
                   "kexec_file_load", "open_by_handle_at", "name_to_handle_at", "userfaultfd", "io_uring_setup",
                   "io_uring_enter", "io_uring_register", "ptrace", "process_vm_readv", "process_vm_writev",
                   "pidfd_getfd", "syslog", "acct", "swapon", "swapoff", "reboot", "quotactl", "lookup_dcookie",
                   "vhangup", "iopl", "ioperm")
# NS CGROUP UTS IPC USER PID NET TIME
CLONE_NEW_FLAGS = (0x00020000, 0x02000000, 0x04000000, 0x08000000, 0x10000000, 0x20000000, 0x40000000, 0x00000080)
CLONE_NS_MASK = sum(CLONE_NEW_FLAGS)
# fcntl commands allowed: F_DUPFD, F_GETFD, F_SETFD, F_GETFL, F_SETFL, F_DUPFD_CLOEXEC, F_GETPIPE_SZ, F_ADD_SEALS,
# F_GET_SEALS (a memfd's). Not: locks (F_SETLK and the rest, OFD locks: a lock on an inode another box could see),
# leases, F_NOTIFY (dnotify), F_SETOWN/F_SETSIG, F_SETPIPE_SZ.
FCNTL_ALLOWED = (0, 1, 2, 3, 4, 1030, 1032, 1033, 1034)
# ioctl requests allowed: TCGETS and TIOCGWINSZ (isatty and the terminal size: ENOTTY on a file), FIONREAD, FIONBIO,
# FIOCLEX, FIONCLEX
IOCTL_ALLOWED = (0x5401, 0x5413, 0x541B, 0x5421, 0x5451, 0x5450)
PR_SET_DUMPABLE_NUMBER = 4
# madvise advice allowed: NORMAL, RANDOM, SEQUENTIAL, WILLNEED, DONTNEED, FREE, DONTFORK, DOFORK, DONTDUMP, DODUMP,
# WIPEONFORK, KEEPONFORK, POPULATE_READ, POPULATE_WRITE (what malloc and the interpreter use, on their own memory)
MADVISE_ALLOWED = (0, 1, 2, 3, 4, 8, 10, 11, 16, 17, 18, 19, 22, 23)
# prctl options allowed (reads, and the thread's name): PR_GET_PDEATHSIG, PR_GET_DUMPABLE, PR_SET_NAME, PR_GET_NAME,
# PR_GET_SECCOMP, PR_CAPBSET_READ, PR_GET_TIMERSLACK, PR_GET_NO_NEW_PRIVS; PR_SET_DUMPABLE is EPERM
PRCTL_ALLOWED = (2, 3, 15, 16, 21, 23, 30, 39)
RLIMIT_COUNT, SIGNAL_COUNT = 16, 64  # RLIMIT_CPU .. RLIMIT_RTTIME; signals 1 .. SIGRTMAX


class _ArgCmp(ctypes.Structure):
    _fields_ = [("arg", ctypes.c_uint), ("op", ctypes.c_int), ("datum_a", ctypes.c_uint64),
                ("datum_b", ctypes.c_uint64)]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


SECCOMP = []  # the compiled filter, built once by main()
ALL_BITS = (1 << 64) - 1


def blocks(arg, start, stop):
    """Comparisons that together match argument ``arg`` in [start, stop) and nothing else, the whole 64-bit register
    compared (so no value with bits in its upper half passes): aligned power-of-two blocks, a masked equality each."""
    out = []
    while start < stop:
        size = 1
        while start % (size * 2) == 0 and start + size * 2 <= stop:
            size *= 2
        out.append((arg, SCMP_CMP_MASKED_EQ, ALL_BITS & ~(size - 1), start))
        start += size
    return out
FILTER_DEFAULT = SCMP_ACT_ERRNO_ENOSYS  # what a call off the allow-list gets (bench/syscall_allowlist.py: a kill)


def syscall_filter(default=SCMP_ACT_ERRNO_ENOSYS):
    """The test children's system-call filter, compiled once to BPF (loaded by each with :func:`load_filter`):
    :data:`ALLOWED_SYSCALLS` and, with the arguments given here, ``clone`` without a namespace flag (``clone3``, whose
    flags a filter cannot read, is ENOSYS: libc falls back to ``clone``), :data:`MADVISE_ALLOWED`,
    :data:`FCNTL_ALLOWED`, :data:`IOCTL_ALLOWED`, :data:`PRCTL_ALLOWED`
    (``PR_SET_DUMPABLE`` is EPERM: a test child is never dumpable, so never cores), the test's own resource limits
    but ``RLIMIT_CORE`` (read only) and its own scheduling (pid 0 only: never the runner's), and every signal's
    action but ``SIGCHLD``'s (read only: a child ignoring it would have its children reaped by the kernel, their CPU
    time counted nowhere);
    :data:`REFUSED_SYSCALLS` get EPERM, :data:`KILLED_SYSCALLS` kill the test; everything else gets ``default``
    (ENOSYS; ``bench/syscall_allowlist.py`` kills instead, to find what a test needs). Returns (the BPF program's
    bytes, libc's handle); raises OSError when libseccomp cannot be loaded or a rule not added: the sandbox fails
    closed."""
    try:
        lib = ctypes.CDLL("libseccomp.so.2", use_errno=True)
    except OSError as exc:
        raise OSError("libseccomp.so.2 cannot be loaded (%s): install libseccomp2, or the sandbox has no system-call "
                      "filter and refuses to run candidates" % exc) from None
    lib.seccomp_init.restype = ctypes.c_void_p
    lib.seccomp_init.argtypes = [ctypes.c_uint32]
    lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
    lib.seccomp_rule_add_array.argtypes = [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int, ctypes.c_uint,
                                           ctypes.POINTER(_ArgCmp)]
    lib.seccomp_attr_set.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32]
    lib.seccomp_export_bpf.argtypes = [ctypes.c_void_p, ctypes.c_int]
    lib.seccomp_release.argtypes = [ctypes.c_void_p]
    ctx = lib.seccomp_init(default)
    if not ctx:
        raise OSError("seccomp_init failed")

    def rule(action, name, *cmps):
        if action == default:  # what every call not allowed gets anyway (libseccomp refuses such a rule)
            return
        number = lib.seccomp_syscall_resolve_name(name.encode())
        if number < 0:  # not a call of this architecture, or unknown to this libseccomp
            return
        args = (_ArgCmp * max(1, len(cmps)))(*[_ArgCmp(*c) for c in cmps])
        rc = lib.seccomp_rule_add_array(ctx, action, number, len(cmps), args)
        if rc < 0:
            raise OSError(-rc, "seccomp rule for %s: %s" % (name, os.strerror(-rc)))

    try:
        lib.seccomp_attr_set(ctx, SCMP_FLTATR_CTL_OPTIMIZE, 2)  # an older libseccomp: the linear filter, as correct
        for name in ALLOWED_SYSCALLS:
            rule(SCMP_ACT_ALLOW, name)
        for name in REFUSED_SYSCALLS:
            rule(SCMP_ACT_ERRNO_EPERM, name)
        for name in KILLED_SYSCALLS:
            rule(SCMP_ACT_KILL_PROCESS, name)
        rule(SCMP_ACT_ALLOW, "clone", (0, SCMP_CMP_MASKED_EQ, CLONE_NS_MASK, 0))
        for flag in CLONE_NEW_FLAGS:
            rule(SCMP_ACT_KILL_PROCESS, "clone", (0, SCMP_CMP_MASKED_EQ, flag, flag))
        low32 = 0xFFFFFFFF  # the kernel reads an int command: the upper half of the register is not looked at
        # memory advice that acts on this process's own mappings only: not how a file's pages are held in the page
        # cache, which a later box reading the same image copy could see (MADV_COLLAPSE made huge pages of it that
        # outlived the box: round seven), nor KSM, huge pages, cold or paged-out memory, guard regions
        for advice in MADVISE_ALLOWED:
            rule(SCMP_ACT_ALLOW, "madvise", (2, SCMP_CMP_MASKED_EQ, low32, advice))
        for cmd in FCNTL_ALLOWED:
            rule(SCMP_ACT_ALLOW, "fcntl", (1, SCMP_CMP_MASKED_EQ, low32, cmd))
        for cmd in IOCTL_ALLOWED:
            rule(SCMP_ACT_ALLOW, "ioctl", (1, SCMP_CMP_MASKED_EQ, low32, cmd))
        # Every allowed value of an int argument is matched on its low 32 bits (what the kernel reads): a rule that
        # allowed "anything but X" would let X through with garbage in the register's upper half.
        for option in PRCTL_ALLOWED:
            rule(SCMP_ACT_ALLOW, "prctl", (0, SCMP_CMP_MASKED_EQ, low32, option))
        rule(SCMP_ACT_ERRNO_EPERM, "prctl", (0, SCMP_CMP_MASKED_EQ, low32, PR_SET_DUMPABLE_NUMBER))
        # resource limits: this process's own (pid 0) only; RLIMIT_CORE stays 1 (read, never set). Allowed values are
        # whole-register blocks (:func:`blocks`); a refusal may match on the low 32 bits (refusing more is safe)
        core = (1, SCMP_CMP_MASKED_EQ, low32, RLIMIT_CORE_NUMBER)
        for cmp in blocks(1, 0, RLIMIT_CORE_NUMBER) + blocks(1, RLIMIT_CORE_NUMBER + 1, RLIMIT_COUNT):
            rule(SCMP_ACT_ALLOW, "prlimit64", (0, SCMP_CMP_EQ, 0, 0), cmp)
            rule(SCMP_ACT_ALLOW, "setrlimit", (0,) + cmp[1:])
        rule(SCMP_ACT_ALLOW, "prlimit64", (0, SCMP_CMP_EQ, 0, 0), (1, SCMP_CMP_EQ, RLIMIT_CORE_NUMBER, 0),
             (2, SCMP_CMP_EQ, 0, 0))
        rule(SCMP_ACT_ERRNO_EPERM, "prlimit64", core, (2, SCMP_CMP_NE, 0, 0))
        rule(SCMP_ACT_ERRNO_EPERM, "setrlimit", (0,) + core[1:])
        rule(SCMP_ACT_ERRNO_EPERM, "prlimit64", (0, SCMP_CMP_NE, 0, 0))
        # scheduling: the caller's own (pid 0) only, never the runner's or another test process's
        for name in ("sched_setscheduler", "sched_setparam", "sched_setattr", "sched_setaffinity"):
            rule(SCMP_ACT_ALLOW, name, (0, SCMP_CMP_EQ, 0, 0))
            rule(SCMP_ACT_ERRNO_EPERM, name, (0, SCMP_CMP_NE, 0, 0))
        rule(SCMP_ACT_ALLOW, "setpriority", (0, SCMP_CMP_EQ, 0, 0), (1, SCMP_CMP_EQ, 0, 0))  # PRIO_PROCESS, self
        rule(SCMP_ACT_ERRNO_EPERM, "setpriority", (0, SCMP_CMP_NE, 0, 0))
        rule(SCMP_ACT_ERRNO_EPERM, "setpriority", (0, SCMP_CMP_EQ, 0, 0), (1, SCMP_CMP_NE, 0, 0))
        # signal actions: any but SIGCHLD's, which may be read (a null new action) and not set
        for cmp in blocks(0, 1, SIGCHLD_NUMBER) + blocks(0, SIGCHLD_NUMBER + 1, SIGNAL_COUNT + 1):
            rule(SCMP_ACT_ALLOW, "rt_sigaction", cmp)
        rule(SCMP_ACT_ALLOW, "rt_sigaction", (0, SCMP_CMP_EQ, SIGCHLD_NUMBER, 0), (1, SCMP_CMP_EQ, 0, 0))
        rule(SCMP_ACT_ERRNO_EPERM, "rt_sigaction", (0, SCMP_CMP_MASKED_EQ, low32, SIGCHLD_NUMBER),
             (1, SCMP_CMP_NE, 0, 0))
        return _export(lib, ctx), libc()
    finally:
        lib.seccomp_release(ctx)


def _export(lib, ctx):
    """The filter's BPF program (seccomp_export_bpf into an anonymous file): loaded by each test child with one
    prctl, instead of libseccomp generating it again in every child."""
    fd = os.memfd_create("seccomp", os.MFD_CLOEXEC)
    try:
        rc = lib.seccomp_export_bpf(ctx, fd)
        if rc < 0:
            raise OSError(-rc, "seccomp_export_bpf: %s" % os.strerror(-rc))
        size = os.fstat(fd).st_size
        program = os.pread(fd, size, 0)
    finally:
        os.close(fd)
    if not program or len(program) % 8:
        raise OSError(errno.EINVAL, "seccomp_export_bpf wrote %d bytes, not a BPF program" % len(program))
    return program


def job_filter(job):
    """The filter to load in every test child: the BPF program the host compiled with :func:`syscall_filter` (the
    job's ``seccomp``, base64; the host compiles it once per process, not once per candidate), else compiled here."""
    program = job.get("seccomp")
    if not program:
        return syscall_filter(FILTER_DEFAULT)
    program = base64.b64decode(program)
    if len(program) % 8 or not program:
        raise SetupError("the job's system-call filter is not a BPF program")
    return program, libc()


def load_filter(compiled):
    """Install the filter in this process (a test child, after it dropped its privileges and set no_new_privs);
    raises OSError."""
    program, lib = compiled
    buf = ctypes.create_string_buffer(program, len(program))
    prog = _SockFprog(len(program) // 8, ctypes.cast(buf, ctypes.c_void_p))
    zero = ctypes.c_ulong(0)
    _call("prctl PR_SET_SECCOMP", lib.prctl(PR_SET_SECCOMP, ctypes.c_ulong(SECCOMP_MODE_FILTER),
                                            ctypes.c_void_p(ctypes.addressof(prog)), zero, zero))


def prctl(option, arg=0):
    zero = ctypes.c_ulong(0)
    return _call("prctl %d" % option, libc().prctl(option, ctypes.c_ulong(arg), zero, zero, zero))


def pivot_root(new, old):
    fn = getattr(libc(), "pivot_root", None)
    if fn is not None:
        return _call("pivot_root", fn(_b(new), _b(old)))
    number = SYS_PIVOT_ROOT.get(os.uname().machine)
    if number is None:
        raise SetupError("pivot_root: unknown system call number on %s" % os.uname().machine)
    return _call("pivot_root", libc().syscall(ctypes.c_long(number), _b(new), _b(old)))


def set_capabilities(effective, permitted, inheritable):
    """capset(2) for this thread: 64-bit masks."""
    header = struct.pack("Ii", CAP_V3, 0)
    data = struct.pack("6I", effective & 0xFFFFFFFF, permitted & 0xFFFFFFFF, inheritable & 0xFFFFFFFF,
                       effective >> 32, permitted >> 32, inheritable >> 32)
    _call("capset", libc().capset(ctypes.c_char_p(header), ctypes.c_char_p(data)))


def permitted_capabilities():
    header, data = ctypes.create_string_buffer(struct.pack("Ii", CAP_V3, 0)), ctypes.create_string_buffer(24)
    _call("capget", libc().capget(header, data))
    e0, p0, i0, e1, p1, i1 = struct.unpack("6I", data.raw)
    return p0 | (p1 << 32)


def leave_session_keyring():
    """Join a new, empty session keyring: the host's (a login's kerberos tickets, say) is no longer
    possessed, so no candidate can read its keys. Fails closed: a join that fails for any reason but a
    kernel without keys (the uid's key quota full, say) ends the setup, so no test inherits the host's
    keyring. (The test children cannot call keyctl at all: the system-call filter kills them.)"""
    number = SYS_KEYCTL.get(os.uname().machine)
    if number is not None:
        rc = libc().syscall(ctypes.c_long(number), ctypes.c_long(KEYCTL_JOIN_SESSION_KEYRING), None)
        if rc < 0 and ctypes.get_errno() != errno.ENOSYS:
            err = ctypes.get_errno()
            raise OSError(err, "cannot join a new session keyring: %s" % os.strerror(err))


def drop_bounding_set():
    """Empty the capability bounding set (so no exec can gain a capability) and set no_new_privs.
    Done once by the runner: it keeps its own capabilities (the bounding set limits only what an
    exec may gain; the runner never execs) and every test child inherits both."""
    prctl(PR_SET_NO_NEW_PRIVS, 1)
    try:
        fd = os.open("sys/kernel/cap_last_cap", os.O_RDONLY | os.O_CLOEXEC, dir_fd=_PROC[0]) if _PROC else \
            os.open("/proc/sys/kernel/cap_last_cap", os.O_RDONLY | os.O_CLOEXEC)
        try:
            last = int(os.read(fd, 64))
        finally:
            os.close(fd)
    except (OSError, ValueError):
        last = 63
    for cap in range(last + 1):
        try:
            prctl(PR_CAPBSET_DROP, cap)
        except OSError:
            pass  # no CAP_SETPCAP (an unprivileged runner without namespaces): nothing to drop


def drop_privileges():
    """What the candidate runs with: no capability in any set (the bounding set is already empty)."""
    prctl(PR_SET_NO_NEW_PRIVS, 1)
    try:
        prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL)
    except OSError:
        pass
    set_capabilities(0, 0, 0)


def write_file(path, text):
    fd = os.open(path, os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


# ---------------------------------------------------------------------------------------------
# Building the sandbox

def box_rlimits():
    """Lower this process's :data:`BOX_RLIMITS` (before it makes the user namespace, whose totals they cap)."""
    limit(dict(BOX_RLIMITS))


def setns(fd, nstype):
    fn = getattr(libc(), "setns", None)
    if fn is None:
        raise SetupError("setns(2) is unavailable")
    _call("setns", fn(fd, nstype))


def leased_user_namespace(lease):
    """A root host: a user namespace made by the leased uid (so the kernel charges what happens inside,
    inotify instances and message-queue bytes included, to that uid and not to host root), mapped
    1000 -> lease by this still privileged process, which then joins it (its file access is still root's,
    for the bind sources; its capabilities are those of the new namespace only)."""
    go_r, go_w = os.pipe()
    made_r, made_w = os.pipe()
    maker = os.fork()
    if maker == 0:
        code = 1
        try:
            os.close(go_w)
            os.close(made_r)
            os.setgroups([])
            os.setresgid(lease, lease, lease)
            os.setresuid(lease, lease, lease)
            box_rlimits()
            _call("unshare", libc().unshare(CLONE_NEWUSER))
            os.write(made_w, b"x")
            os.read(go_r, 1)  # alive until the runner holds the namespace
            code = 0
        finally:
            os._exit(code)
    os.close(go_r)
    os.close(made_w)
    try:
        if os.read(made_r, 1) != b"x":
            raise SetupError("the leased uid %s could not make a user namespace" % lease)
        write_file("/proc/%d/uid_map" % maker, "%d %d 1\n" % (INSIDE_UID, lease))
        write_file("/proc/%d/gid_map" % maker, "%d %d 1\n" % (INSIDE_UID, lease))
        ns = os.open("/proc/%d/ns/user" % maker, os.O_RDONLY | os.O_CLOEXEC)
    finally:
        os.close(go_w)
        os.close(made_r)
        os.waitpid(maker, 0)
    try:
        box_rlimits()
        setns(ns, CLONE_NEWUSER)
    finally:
        os.close(ns)


def enter_namespaces(job):
    """Make the user namespace (owned by the leased uid on a root host, by the host user otherwise; uid and
    gid 1000 inside mapped to it) and, inside it, every other namespace; returns the opened bind sources in
    the new PID namespace's init (the process that called this waits for it and exits with its status)."""
    lease = job.get("uid")
    uid, gid = os.geteuid(), os.getegid()
    try:
        if uid == 0:
            if lease is None:
                raise SetupError("a root host must lease an unprivileged uid for the sandbox")
            own_devices()
            leased_user_namespace(lease)
        else:  # unprivileged: a single line mapping our own ids needs no privilege
            box_rlimits()
            _call("unshare", libc().unshare(CLONE_NEWUSER))
            write_file("/proc/self/setgroups", "deny")
            write_file("/proc/self/uid_map", "%d %d 1\n" % (INSIDE_UID, uid))
            write_file("/proc/self/gid_map", "%d %d 1\n" % (INSIDE_UID, gid))
        _call("unshare", libc().unshare(CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS
                                        | CLONE_NEWCGROUP))
    except OSError as exc:
        raise SetupError("user namespaces are unavailable: %s" % exc) from exc
    sources = open_sources(job)  # in the new mount namespace (binds need that), still as the user who started us
    if uid == 0:  # now the leased uid (caps of the new namespace kept, none outside it)
        prctl(PR_SET_KEEPCAPS, 1)
        os.setgroups([])
        os.setresgid(INSIDE_UID, INSIDE_UID, INSIDE_UID)
        os.setresuid(INSIDE_UID, INSIDE_UID, INSIDE_UID)
        prctl(PR_SET_KEEPCAPS, 0)
        caps = permitted_capabilities()
        set_capabilities(caps, caps, 0)
    sys.stdout.flush()
    init = os.fork()
    if init:  # outside the PID namespace: wait for init, pass its status on
        os.close(0)
        while True:
            try:
                _, status = os.waitpid(init, 0)
                break
            except InterruptedError:
                continue
        os._exit(os.waitstatus_to_exitcode(status) & 0xFF if os.WIFEXITED(status) else 128 + os.WTERMSIG(status))
    prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    return sources


_DEVICES = ["/dev"]  # where open_sources finds the device nodes: the host's, or (a root host) the box's own


def own_devices():
    """A root host: device nodes of this box alone (same kind and numbers as the host's, on a small tmpfs of a
    private mount namespace, made while still root), so no lock, lease or notification on ``/dev/null`` is shared
    with the host or a neighbour box. The tmpfs is later covered by the box's root (its nodes stay bound)."""
    _call("unshare", libc().unshare(CLONE_NEWNS))
    mount(None, "/", None, MS_REC | MS_PRIVATE)
    where = "/tmp" if os.path.isdir("/tmp") and not os.path.islink("/tmp") else "/mnt"
    mount("tmpfs", where, "tmpfs", MS_NOSUID | MS_NOEXEC, "size=16k,nr_inodes=16,mode=0755")
    for name in DEVICES:
        if os.path.exists("/dev/" + name):
            path = "%s/%s" % (where, name)
            os.mknod(path, stat.S_IFCHR | 0o666, os.stat("/dev/" + name).st_rdev)
            os.chmod(path, 0o666)
    _DEVICES[:] = [where]


def _locked_flags(path):
    """Mount flags a bind of ``path`` has to keep (a user namespace may not clear them)."""
    f = os.statvfs(path).f_flag
    flags = f & (MS_NOSUID | MS_NODEV | MS_NOEXEC | MS_NOATIME | MS_NODIRATIME)
    return flags | (MS_RELATIME if f & 4096 else 0)


def bind_readonly(source, target, extra):
    mount(source, target, None, MS_BIND | MS_REC)
    mount(None, target, None, MS_REMOUNT | MS_BIND | MS_RDONLY | _locked_flags(target) | extra)
    if not os.statvfs(target).f_flag & 1:
        raise SetupError("%s is still writable after a read-only remount" % target)


def open_sources(job):
    """Every bind source, opened (``O_PATH``) while the runner still has the file access it was started
    with (a root host: before becoming the leased uid) and before any mount could hide a source: the pool's
    image (``image.py``: the box's own copy of the Python installation and the system files it needs) and the
    device nodes."""
    sources = {"image": ("image", os.open(job["image"], os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC))}
    for name in DEVICES:
        node = "%s/%s" % (_DEVICES[0], name)
        if os.path.exists(node):
            sources["/dev/" + name] = ("device", os.open(node, os.O_PATH | os.O_CLOEXEC))
    return sources


def build_root(job, sources):
    """The new root (see the module docstring) from the opened ``sources``; ends with this process in it, at ``/``.
    The root is an overlay of this box alone (its own superblock, inodes and dentries) over two read-only layers:
    a small tmpfs with the mount points, and the pool's image (a tmpfs copy of the Python installation). Nothing
    of the host's file systems is reachable but the five device nodes."""
    mount(None, "/", None, MS_REC | MS_PRIVATE)
    new = "/tmp" if os.path.isdir("/tmp") and not os.path.islink("/tmp") else "/mnt"
    mount("tmpfs", new, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,nr_inodes=4096,mode=0755")
    os.chdir(new)
    for d in ("top", "root", "top/dev", "top/proc", "top/sandbox", "top/tmp"):
        os.mkdir(d, 0o755)
    os.symlink("/sandbox", "top/dev/shm")
    for path, (kind, _) in sources.items():
        if kind == "device":  # a mount point file of our own, the host's node bound read-only over it
            os.close(os.open("top" + path, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_NOFOLLOW, 0o666))
    image = sources.pop("image")[1]
    try:
        mount("overlay", "root", "overlay", MS_RDONLY | MS_NOSUID | MS_NODEV,
              "lowerdir=%s/top:/proc/self/fd/%d" % (new, image))
    finally:
        os.close(image)
    os.chdir("root")
    for path, (_, what) in sorted(sources.items()):
        bind_readonly("/proc/self/fd/%d" % what, path.lstrip("/"), MS_NOSUID | MS_NOEXEC)
        os.close(what)
    proc = True
    try:
        mount("proc", "proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
        own = os.open("proc", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:  # a host /proc with parts covered refuses a new one in a user namespace: the host's, kept by
        proc = False  # the runner only (its "self" is still the reader: a test child sets its own OOM score there)
        own = os.open("/proc", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    _PROC[:] = [own]
    _OWN_PROC[0] = proc
    pivot_root(".", ".")
    umount(".")  # the host's tree, stacked on top by pivot_root, goes away
    os.chdir("/")
    if proc:
        for kind in NAMESPACE_KINDS:
            try:  # no namespace of any kind can be made inside (the system-call filter refuses them too), but the
                write_proc("sys/user/max_%s_namespaces" % kind, str(RUNNER_NAMESPACES.get(kind, 0)))
            except OSError:  # runner's own per test (an IPC namespace: fresh System V ids)
                pass
        for name, value in BOX_SYSCTLS:
            try:
                write_proc("sys/" + name, str(value))
            except FileNotFoundError:
                pass  # a kernel without this counter
        umount("/proc")  # candidates get no /proc: no kernel command line, host counters, mount table or devices
    mount(None, "/", None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)
    libc().sethostname(b"sandbox", 7)
    return {"proc": proc}


def write_proc(rel, text):
    """Write ``text`` to ``rel`` under the runner's own /proc (see :data:`_PROC`)."""
    fd = os.open(rel, os.O_WRONLY | os.O_CLOEXEC, dir_fd=_PROC[0])
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


_BOX = []  # (statvfs, stat) of /sandbox as it was mounted


def _box_state():
    """What a test could leave in an empty ``/sandbox``: its counts, mode and owner, and its times (a changed ACL,
    extended attribute, mode or timestamp changes its ctime; the box is mounted ``noatime``, so reading it does not)."""
    v, st = os.statvfs("/sandbox"), os.stat("/sandbox")
    return (v.f_bfree, v.f_ffree, st.st_mode, st.st_uid, st.st_gid, st.st_nlink, st.st_size,
            st.st_atime_ns, st.st_mtime_ns, st.st_ctime_ns)


def fresh_box(job):
    """Fresh kernel counters for the next test: an empty ``/sandbox`` (and ``/tmp``) on a new tmpfs (a new
    superblock: its inode numbers restart, whatever an ``O_TMPFILE`` consumed) and the PID namespace's last pid
    set back (the test child is pid 2, every test); :func:`clear_ipc` gave it a new IPC namespace. The last test's
    tmpfs is unmounted when it left anything (its pages freed now), else left covered (an unmount costs an RCU
    grace period)."""
    if not (_BOX and _box_state() == _BOX[0]):
        for d in ("/tmp", "/sandbox"):
            try:
                umount(d)
            except OSError:
                pass
    mount("tmpfs", "/sandbox", "tmpfs", MS_NOSUID | MS_NODEV | MS_NOATIME,
          "size=%dm,nr_inodes=%d,mode=0700,uid=%d,gid=%d" % (job["disk_mb"], job.get("inodes", 16384), INSIDE_UID,
                                                            INSIDE_UID))
    mount("/sandbox", "/tmp", None, MS_BIND)
    _BOX[:] = [_box_state()]
    try:  # pids restart: every test child is pid 2 (everything of the last test is dead and reaped by now)
        write_proc("sys/kernel/ns_last_pid", "1")
    except OSError:
        pass  # a kernel without ns_last_pid, or the host's /proc (the box could not mount its own)


def drop_to_lease(job):
    """``isolation: none`` on a root host: give the host's fresh box folder to the leased uid (by a
    descriptor, before any candidate code ran), then become that uid (no capabilities left)."""
    lease = job.get("uid")
    if os.geteuid() == 0:
        if lease is None:
            raise SetupError("a root host must lease an unprivileged uid for the sandbox")
        fd = os.open(job["box"], os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            os.fchown(fd, lease, lease)
        finally:
            os.close(fd)
        for cap in range(64):
            try:
                prctl(PR_CAPBSET_DROP, cap)
            except OSError:
                pass
        os.setgroups([])
        os.setresgid(lease, lease, lease)
        os.setresuid(lease, lease, lease)


def limit_runner(job):
    """The runner's own limits (children may only lower theirs further)."""
    child = job["limits"]
    cpu = (len(job["tests"]) + 1) * (int(child.get("RLIMIT_CPU", 0)) + 2) + 30  # never what a test is allowed
    for name, value in (("RLIMIT_CORE", (0, 1)), ("RLIMIT_AS", max(int(child.get("RLIMIT_AS", 0)), 1 << 30)),
                        ("RLIMIT_CPU", cpu)):
        res = getattr(resource, name)
        hard = resource.getrlimit(res)[1]
        soft, value = value if type(value) is tuple else (value, value)
        value = value if hard == resource.RLIM_INFINITY else min(value, hard)
        resource.setrlimit(res, (min(soft, value), value))


# ---------------------------------------------------------------------------------------------
# Running the tests

def limit(limits):
    for name, value in limits.items():
        res = getattr(resource, name)
        hard = resource.getrlimit(res)[1]
        value = value if hard == resource.RLIM_INFINITY else min(value, hard)
        resource.setrlimit(res, (value, value))


LEAVES = {"none": 0, "bool": 1, "int": 1, "float": 1, "complex": 2, "str": 1, "bytes": 1}
CONTAINERS = ("list", "tuple", "set", "frozenset", "dict")


def tree_ok(node):
    """Whether ``node`` (a test child's message, parsed) is a tagged tree :func:`encode` could have made,
    within its bounds: at most MAX_ITEMS nodes, MAX_DEPTH levels and MAX_CHARS characters of leaf text.
    A child may write anything to its pipe; the host gets only what passes this (iterative; stops at the
    first node over a bound, so a forged report costs the host nothing)."""
    items, chars, stack = 0, 0, [(node, 0)]
    while stack:
        item, depth = stack.pop()
        items += 1
        if items > MAX_ITEMS or depth > MAX_DEPTH or type(item) is not list or not item or type(item[0]) is not str:
            return False
        tag = item[0]
        if tag in LEAVES:
            if len(item) != LEAVES[tag] + 1:
                return False
            for leaf in item[1:]:
                if tag == "bool":
                    if type(leaf) is not bool:
                        return False
                elif type(leaf) is not str:
                    return False
                else:
                    chars += len(leaf)
            if chars > MAX_CHARS:
                return False
        elif tag in CONTAINERS:
            if len(item) != 2 or type(item[1]) is not list or len(item[1]) > MAX_ITEMS:
                return False
            if tag == "dict":
                for pair in item[1]:
                    if type(pair) is not list or len(pair) != 2:
                        return False
                    stack.append((pair[0], depth + 1))
                    stack.append((pair[1], depth + 1))
            else:
                stack.extend((x, depth + 1) for x in item[1])
        else:
            return False
    return True


def parse_message(data):
    """The child's bytes -> a clean message, or None when they are not one."""
    try:
        msg = json.loads(data.decode("utf-8"))
    except Exception:  # noqa: BLE001 - malformed, too deep, not UTF-8: the child sent no message
        return None
    if not isinstance(msg, dict) or msg.get("status") not in ("value", "error"):
        return None
    if msg["status"] == "error":
        return {"status": "error", "reason": str(msg.get("reason", ""))[:MAX_REASON]}
    if "value" not in msg or not tree_ok(msg["value"]):
        return None
    return {"status": "value", "value": msg["value"]}


def raise_oom_score():
    """This test child first when the sandbox runs out of memory. Its /proc files are its own only while it is
    dumpable (the runner is not, so a child starts with files owned by host root, which it cannot write): it is
    dumpable for the write only, before any candidate code, and not dumpable again after it, so the kernel makes
    no core of it whatever the host's ``core_pattern`` (a pipe helper included); the system-call filter keeps it
    so (issue 39)."""
    prctl(PR_SET_DUMPABLE, 1)
    try:
        if _PROC:
            write_proc("self/oom_score_adj", "1000")
        else:
            write_file("/proc/self/oom_score_adj", "1000")
    finally:
        prctl(PR_SET_DUMPABLE, 0)


def send(msg):
    """The test child's one message to the runner (fd 3)."""
    try:
        data = json.dumps(msg).encode()
    except BaseException as exc:  # noqa: BLE001
        data = json.dumps({"status": "error", "reason": "unsendable result: %s" % type(exc).__name__}).encode()
    view = memoryview(data)
    while view:
        view = view[os.write(3, view):]


def child(job, test, out, result_fd, box):
    """The test child: never returns."""
    try:
        os.setpgid(0, 0)
        try:  # fails closed: a test that could take the runner down with it does not run
            raise_oom_score()
            refused = None
        except OSError as exc:
            refused = "sandbox: this test's OOM score cannot be raised (%s)" % exc
        os.dup2(out, 1)  # first: ``out`` may be fd 3
        os.dup2(out, 2)
        if result_fd != 3:
            os.dup2(result_fd, 3)
        null = os.open("/dev/null", os.O_RDONLY)
        os.dup2(null, 0)
        # the runner's pipes to the host and its /proc included (close_range(2) where Python has it)
        os.closerange(4, 1 << 20)
        if refused:
            send({"status": "error", "reason": refused})
            return
        os.chdir(box)
        # RLIMIT_CPU: the host's ceiling for every test (the test's own limit is the host's, outside); RLIMIT_CORE 1:
        # the kernel's "no pipe helper" value, and less than any core file, for what this child may exec;
        # RLIMIT_NICE 0: no nice value below the runner's, so a test that the runner moves to SCHED_IDLE stays there
        limit(dict(job["limits"], RLIMIT_CORE=1, RLIMIT_NICE=0))
        drop_privileges()
        # last: no call of the candidate's runs unfiltered (a failure ends the test: fail closed)
        load_filter(SECCOMP[0])
        msg = evaluate(job, test)
        for stream in (sys.stdout, sys.stderr):  # what the candidate printed, into the output file
            try:
                stream.flush()
            except BaseException:  # noqa: BLE001
                pass
        send(msg)
    finally:
        os._exit(0)


CONTROL = {"buffer": b"", "kill": set(), "budget": False}  # what the host said on stdin (see the module docstring)


def read_control():
    """Read what the host wrote on stdin: ``K <i>`` (test ``i`` ran out of time), ``B`` (the candidate's budget is
    spent). End of file (the host is gone) counts as ``B``."""
    try:
        chunk = os.read(0, 4096)
    except BlockingIOError:
        return
    if not chunk:
        CONTROL["budget"] = True
        return
    CONTROL["buffer"] += chunk
    *lines, CONTROL["buffer"] = CONTROL["buffer"].split(b"\n")
    for line in lines:
        if line == b"B":
            CONTROL["budget"] = True
        elif line.startswith(b"K "):
            CONTROL["kill"].add(int(line[2:]))


SCHED_IDLE = getattr(os, "SCHED_IDLE", 5)
CLOCK_TICK = os.sysconf("SC_CLK_TCK")


def cpu_of(rusage):
    """A reaped process's CPU seconds from its ``wait4`` usage: its own and that of the children it reaped."""
    return rusage.ru_utime + rusage.ru_stime


class Usage:
    """What a test has used so far, read by the runner while it runs: CPU seconds (every process and thread of the
    test, the children it reaped included) and its tasks. With a ``/proc`` of the sandbox's own PID namespace (the
    runner is its init, so every process in it but this one is the test's) all of them are read; otherwise (no
    namespaces, or the host's ``/proc`` kept) only the test child's own CPU clock.

    Once a test runs more than one task (a thread or a process), every task of it runs ``SCHED_IDLE`` until it
    ends: what it runs past one task's share of a core is taken only from otherwise idle CPUs, whatever it forks.
    Children inherit the policy and none can leave it (``RLIMIT_NICE`` is 0)."""

    def __init__(self, pid, own_proc, reaped=None):
        self.pid, self.idle, self.reaped, self.gone = pid, False, reaped if reaped is not None else [], 0.0
        self.proc = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=_PROC[0]) if own_proc else None

    def reap(self):
        """Reap every ended process this runner is the parent of (the test child, and, as the PID namespace's
        init, the test's orphans), adding what each used (its own CPU time and that of the children it reaped) to
        :attr:`gone`: a process counted nowhere else once it is reaped. The test child's wait status goes into
        ``reaped``."""
        while True:
            try:
                got, st, ru = os.wait4(-1, os.WNOHANG)
            except (ChildProcessError, InterruptedError):
                return
            if got == 0:
                return
            self.gone += cpu_of(ru)
            if got == self.pid:
                self.reaped.append(st)

    def close(self):
        if self.proc is not None:
            os.close(self.proc)

    def cpu_seconds(self):
        if self.proc is None:
            try:  # the process-wide CPU clock of the test child (CPUCLOCK_SCHED of its pid)
                return time.clock_gettime((~self.pid << 3) | 2)
            except OSError:
                return 0.0
        self.reap()
        ticks, tids = 0, []
        for name in os.listdir(self.proc):
            if not name.isdigit() or name == "1":
                continue
            try:
                fd = os.open(name + "/stat", os.O_RDONLY | os.O_CLOEXEC, dir_fd=self.proc)
                try:
                    fields = os.read(fd, 4096).rsplit(b")", 1)[1].split()
                finally:
                    os.close(fd)
                ticks += sum(int(x) for x in fields[11:15])  # utime, stime, cutime, cstime
                fd = os.open(name + "/task", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=self.proc)
                try:
                    tids.extend(int(t) for t in os.listdir(fd))
                finally:
                    os.close(fd)
            except (OSError, IndexError, ValueError):
                continue  # it just ended
        if self.idle or len(tids) > 1:
            self.idle = True
            for tid in tids:
                try:
                    os.sched_setscheduler(tid, SCHED_IDLE, os.sched_param(0))
                except OSError:
                    pass
        return ticks / CLOCK_TICK + self.gone


def poll_interval(elapsed):
    """How long the runner waits between two looks at a running test: often at first (a test that forks is
    moved to SCHED_IDLE within 20 ms), then every 100 ms (the host, told the CPU time at each look, overruns a
    limit by at most that much and a round trip)."""
    return 0.02 if elapsed < 0.2 else 0.1


REPORT_EVERY_S = 0.5  # a C line at least this often, changed or not: the host kills a test it stops hearing about


def wait_result(read_fd, pid, index, cap, reaped, own_proc=False, used=None):
    """Read the child's message until it ends (EOF or the child's exit), the host says it is out of time (its
    limits are the host's: the runner never knows them), or the size cap. The runner looks at the running test on
    the clock (see :func:`poll_interval`), whatever the test writes to its pipe meanwhile: at each look it reaps
    the test's ended orphans (the runner is their init: see :meth:`Usage.reap`) and sends the test's CPU time so
    far (see :class:`Usage`) as ``C <i> <seconds>`` when it changed or :data:`REPORT_EVERY_S` passed; the host
    kills it (``K <i>``) past its CPU-time limit, its wall-clock ceiling, or when no such line came for
    ``sandbox.REPORT_GAP_S``. Returns (bytes, status) with status None, "timeout", "budget" or
    "result_too_large". Without pidfds (Linux before 5.3) the child is polled, and its wait status, once reaped,
    goes into ``reaped``."""
    start = time.monotonic()
    try:
        pidfd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        pidfd = None
    usage, reported, said = Usage(pid, own_proc, reaped), None, start
    next_look = start + poll_interval(0.0)  # most tests end before the first look: their CPU goes in the last line
    chunks, size, status = [], 0, None
    try:
        while True:
            if CONTROL["budget"] or index in CONTROL["kill"]:
                status = "budget" if CONTROL["budget"] else "timeout"
                break
            now = time.monotonic()
            if now >= next_look:
                cpu = usage.cpu_seconds()
                if cpu != reported or now - said >= REPORT_EVERY_S:
                    say("C %d %.3f" % (index, cpu))  # the host compares it with the test's limit
                    reported, said = cpu, now
                next_look = now + poll_interval(now - start)
            watch = [read_fd, 0] + ([pidfd] if pidfd is not None else [])
            ready = select.select(watch, [], [], max(0.0, next_look - time.monotonic()))[0]
            if 0 in ready:
                read_control()
                continue
            if pidfd is not None:
                exited = pidfd in ready
            else:
                if not reaped:
                    got, st, ru = os.wait4(pid, os.WNOHANG)
                    if got == pid:
                        reaped.append(st)
                        usage.gone += cpu_of(ru)
                exited = bool(reaped)
            if read_fd in ready or exited:
                if exited:
                    os.set_blocking(read_fd, False)
                try:
                    chunk = os.read(read_fd, 65536)
                except BlockingIOError:
                    chunk = b""
                if chunk:
                    chunks.append(chunk)
                    size += len(chunk)
                    if size > cap:
                        status = "result_too_large"
                        break
                    continue
                break
    finally:
        usage.close()
        if pidfd is not None:
            os.close(pidfd)
        if used is not None:
            used[0] += usage.gone  # what the processes reaped during the test used
    return b"".join(chunks), status


def end_test(pid, isolated, leased, reaped, used):
    """Kill everything the test started and reap it; returns the test child's wait status (or None). Adds to
    ``used[0]`` the CPU time of every process reaped here (each one's own and its reaped children's)."""
    status = reaped[0] if reaped else None
    for target in (lambda: os.killpg(pid, signal.SIGKILL), lambda: os.kill(pid, signal.SIGKILL)):
        try:
            target()
        except OSError:
            pass
    if isolated or leased:  # every other process of the PID namespace, or of the leased uid, but this one
        try:
            os.kill(-1, signal.SIGKILL)
        except OSError:
            pass
    give_up = time.monotonic() + (3600.0 if isolated or leased else 2.0)  # all are dead then: waiting ends
    while time.monotonic() < give_up:
        if not (isolated or leased):
            _kill_children()
        try:
            got, st, ru = os.wait4(-1, 0 if isolated or leased else os.WNOHANG)
        except ChildProcessError:
            break
        except InterruptedError:
            continue
        if got:
            used[0] += cpu_of(ru)
        if got == pid:
            status = st
        elif got == 0:
            time.sleep(0.01)
    return status


def clear_ipc():
    """A new IPC namespace for the runner (and so the next test), after a test's processes are dead: the last
    test's System V shared memory segments, semaphore sets and message queues die with its namespace, and System
    V ids restart, so nothing carries to the next test."""
    for attempt in range(200):  # the namespaces of earlier tests are freed asynchronously: their count drops soon
        try:
            return _call("unshare IPC", libc().unshare(CLONE_NEWIPC))
        except OSError as exc:
            if exc.errno != errno.ENOSPC or attempt == 199:
                raise
            time.sleep(0.005)


def _kill_children():
    """Unisolated and unprivileged: kill the orphans this subreaper adopted (best effort)."""
    me = str(os.getpid())
    try:
        names = os.listdir("/proc")
    except OSError:
        return
    for name in names:
        try:
            with open("/proc/%s/stat" % name, "rb") as fh:
                if fh.read().rsplit(b")", 1)[1].split()[1].decode() == me:
                    os.kill(int(name), signal.SIGKILL)
        except (OSError, IndexError, ValueError):
            continue


def describe_death(wstatus):
    if wstatus is not None and os.WIFSIGNALED(wstatus):
        sig = os.WTERMSIG(wstatus)
        names = {signal.SIGXCPU: "CPU time limit", signal.SIGXFSZ: "output size limit", signal.SIGKILL: "killed",
                 signal.SIGSEGV: "segmentation fault"}
        try:
            name = names.get(sig) or signal.Signals(sig).name
        except ValueError:
            name = "signal %d" % sig
        return "terminated by signal %d (%s)" % (sig, name)
    if wstatus is not None and os.WIFEXITED(wstatus):
        return "exited (code %d) without reporting a result" % os.WEXITSTATUS(wstatus)
    return "ended without reporting a result"


def say(line):
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def run_test(job, test, index, isolated, leased, box):
    """Fork one test child; return its result dict (the host adds its time)."""
    if isolated:
        fresh_box(job)
    out = os.memfd_create("output", os.MFD_CLOEXEC)
    read_fd, write_fd = os.pipe()
    say("S %d" % index)  # the host starts this test's clock
    pid = os.fork()
    if pid == 0:
        os.close(read_fd)
        child(job, test, out, write_fd, box)
    os.close(write_fd)
    reaped, used = [], [0.0]
    cap = int(job["max_result_bytes"])  # the same for every test: a value test's own cap is checked by the host
    try:
        data, status = wait_result(read_fd, pid, index, cap, reaped, isolated and _OWN_PROC[0], used)
    finally:
        wstatus = end_test(pid, isolated, leased, reaped, used)
        # the test's whole CPU time, every process of it reaped: what it used after the last look counts too (the
        # host judges the test on this line, before its end)
        say("C %d %.3f" % (index, used[0]))
        say("E %d" % index)  # the host stops this test's clock
        os.close(read_fd)
        if isolated:
            clear_ipc()
    try:
        output = os.pread(out, int(job["max_output_bytes"]), 0).decode("utf-8", "replace")
    except OSError:
        output = ""
    os.close(out)
    common = {"output": output}
    if status in ("timeout", "budget"):
        return dict(common, status="timeout", reason="exceeded its time limit" if status == "timeout"
                    else "candidate wall-clock budget exhausted")
    if status == "result_too_large":
        return dict(common, status="error", reason="result larger than %d bytes" % cap)
    msg = parse_message(data) if data else None
    if msg is None:
        reason = describe_death(wstatus) if not data else "malformed result message"
        return dict(common, status="error", reason=reason)
    return dict(msg, **common)


NOT_RUN = "not run: test %d ran out of time before it"


def run_tests(job, isolated, leased, box):
    """Every test's result, in order, until the host kills one at its limit: the tests after it are not run
    (:data:`NOT_RUN`), so no candidate code ever runs knowing that an earlier test was killed (a limit carries
    information about the reference's time). The values forwarded to the host are capped together
    (``max_report_bytes``), so a candidate's whole report costs the host at most that much to read, whatever each test
    returns."""
    results, killed = [], None
    left = int(job.get("max_report_bytes", job["max_result_bytes"]))
    for index, test in enumerate(job["tests"]):
        if CONTROL["budget"]:
            results.append({"status": "timeout", "reason": "candidate wall-clock budget exhausted", "output": ""})
            continue
        if killed is not None:  # no later test may learn that an earlier one ran out of time (its limit's one bit)
            results.append({"status": "error", "reason": NOT_RUN % killed, "output": ""})
            continue
        try:
            result = run_test(job, test, index, isolated, leased, box)
        except Exception as exc:  # noqa: BLE001 - a test that breaks the runner's bookkeeping fails alone
            result = {"status": "error", "reason": "runner: %s: %s" % (type(exc).__name__, str(exc)[:200]),
                      "output": ""}
        if index in CONTROL["kill"]:  # killed by the host, whatever the result says (a runner error included)
            killed = index
        if result.get("status") == "value":
            size = len(json.dumps(result["value"]))
            if size > left:
                result = dict(result, status="error", reason="the candidate's results together are larger than %d bytes"
                              % job["max_report_bytes"])
                del result["value"]
            else:
                left -= size
        results.append(result)
    return results


def read_job():
    """The job from stdin: a line with its length, then that many bytes (read unbuffered: what follows on stdin is
    the host's control lines, read by :func:`read_control`)."""
    head = b""
    while not head.endswith(b"\n"):
        byte = os.read(0, 1)
        if not byte or len(head) > 20:
            raise SetupError("no job on stdin")
        head += byte
    size, chunks = int(head), []
    while size:
        chunk = os.read(0, min(size, 1 << 20))
        if not chunk:
            raise SetupError("the job on stdin is cut short")
        chunks.append(chunk)
        size -= len(chunk)
    return json.loads(b"".join(chunks).decode("utf-8"))


def main():
    # as the PID namespace's init: no handler, so nothing inside can signal it
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    job = read_job()
    isolated = job.get("isolation") == "namespaces"
    leased = job.get("uid") is not None
    try:
        SECCOMP.append(job_filter(job))  # libseccomp (if needed) is loaded while the host's tree is the root
        if isolated:
            sources = enter_namespaces(job)
            report = build_root(job, sources)
            box = "/sandbox"
        else:
            drop_to_lease(job)
            prctl(PR_SET_NO_NEW_PRIVS, 1)
            prctl(PR_SET_CHILD_SUBREAPER, 1)
            report, box = {}, job["box"]
            os.chdir(box)
        limit_runner(job)
        leave_session_keyring()
        drop_bounding_set()
        prctl(PR_SET_DUMPABLE, 0)  # nothing inside may trace this process or read its /proc files
    except BaseException as exc:  # noqa: BLE001
        sys.stderr.write("sandbox setup failed: %s: %s\n" % (type(exc).__name__, exc))
        sys.stderr.flush()
        os._exit(3)
    sys.stdout.write("READY\n")
    sys.stdout.flush()
    if job.get("probe"):
        results = report
    else:
        results = run_tests(job, isolated, leased, box)
    sys.stdout.write(json.dumps(results) + "\n")
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
