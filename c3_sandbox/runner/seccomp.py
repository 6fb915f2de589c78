"""The test children's system-call filter: an allow-list built with libseccomp through ctypes, compiled by the host
and sent in the job (one part of the runner program: ``c3_sandbox/runner/__init__.py``)."""

import base64
import ctypes
import errno
import os

from .build import _call, libc
from .wire import SetupError

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
    "removexattr", "lremovexattr", "fremovexattr",
    "poll", "ppoll", "select", "_newselect", "pselect6", "epoll_create", "epoll_create1", "epoll_ctl", "epoll_wait",
    "epoll_pwait", "epoll_pwait2", "eventfd", "eventfd2", "signalfd", "signalfd4", "timerfd_create",
    "timerfd_settime", "timerfd_gettime", "inotify_init", "inotify_init1", "inotify_add_watch", "inotify_rm_watch",
    # memory
    "brk", "munmap", "mremap", "mprotect", "msync",
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
    "shmat", "shmdt", "shmctl",
    "semget", "semop", "semtimedop", "semctl", "msgget", "msgsnd", "msgrcv", "msgctl",
)
# refused with EPERM (a clear "not allowed" for honest code that tries): no program is ever executed (so nothing
# becomes dumpable again or runs outside Python: issue 39's cores); no pipe (pipe buffers are charged to the host
# user: a hoard of them shrinks the host's new pipes) and no FIFO or device node; no lock on a shared inode (flock;
# fcntl locks: see FCNTL_ALLOWED); no new session (a new scheduling autogroup)
# no socket of any family either: a socket's buffers, like a pipe's, are kernel memory charged to no limit of the box
# (about 280 MiB per box at its process and descriptor limits, round seven), and there is no network to reach
# no memory file (issue 50): its inode number comes from a counter the whole host shares (a channel between
# concurrent boxes), and one that is not mapped is memory no RLIMIT_AS counts; a test writes files in its /sandbox
REFUSED_SYSCALLS = ("execve", "execveat", "pipe", "pipe2", "mknod", "mknodat", "flock", "setsid", "socket",
                    "socketpair", "memfd_create")
# Huge pages (issue 50): mmap's MAP_HUGETLB and shmget's SHM_HUGETLB draw on the host's huge-page pool, which is
# host-wide and counted by no limit of the box (one box took a reserved pool of 8 whole): refused with EPERM. The
# calls are allowed without the flag (memfd_create's MFD_HUGETLB goes with memfd_create itself).
MAP_HUGETLB, SHM_HUGETLB = 0x40000, 0x800
HUGETLB_FLAGS = (("mmap", 3, MAP_HUGETLB), ("mmap2", 3, MAP_HUGETLB), ("shmget", 2, SHM_HUGETLB))
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
    :data:`ALLOWED_SYSCALLS` and, with the arguments given here, ``mmap`` and ``shmget`` without a huge-page flag
    (:data:`HUGETLB_FLAGS`: EPERM with it), ``clone`` without a namespace flag (``clone3``, whose
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
    lib = _libseccomp()
    ctx = lib.seccomp_init(default)
    if not ctx:
        raise OSError("seccomp_init failed")
    try:
        lib.seccomp_attr_set(ctx, SCMP_FLTATR_CTL_OPTIMIZE, 2)  # an older libseccomp: the linear filter, as correct
        rule = _rule_adder(lib, ctx, default)
        for name in ALLOWED_SYSCALLS:
            rule(SCMP_ACT_ALLOW, name)
        for name in REFUSED_SYSCALLS:
            rule(SCMP_ACT_ERRNO_EPERM, name)
        for name in KILLED_SYSCALLS:
            rule(SCMP_ACT_KILL_PROCESS, name)
        _argument_rules(rule)
        return _export(lib, ctx), libc()
    finally:
        lib.seccomp_release(ctx)


def _libseccomp():
    """libseccomp through ctypes, its functions typed (raises OSError when it cannot be loaded)."""
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
    return lib


def _rule_adder(lib, ctx, default):
    """``rule(action, name, *comparisons)``: adds one rule to ``ctx`` (none for ``default``, nor for a call this
    architecture or libseccomp does not know)."""
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

    return rule


def _argument_rules(rule):
    """The rules that read a call's arguments (see :func:`syscall_filter`)."""
    for name, arg, flag in HUGETLB_FLAGS:  # a flags word: the bit alone decides (set in the upper half: not the flag)
        rule(SCMP_ACT_ALLOW, name, (arg, SCMP_CMP_MASKED_EQ, flag, 0))
        rule(SCMP_ACT_ERRNO_EPERM, name, (arg, SCMP_CMP_MASKED_EQ, flag, flag))
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
