"""Building the box (namespaces, the new root, devices, the fresh ``/sandbox`` per test) and its limits (rlimits of
the runner and of each test child; one part of the runner program: ``c3_sandbox/runner/__init__.py``)."""

import ctypes
import errno
import os
import resource
import signal
import stat
import struct
import sys

from .wire import INSIDE_UID, SetupError

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



def limit(limits):
    for name, value in limits.items():
        res = getattr(resource, name)
        hard = resource.getrlimit(res)[1]
        value = value if hard == resource.RLIM_INFINITY else min(value, hard)
        resource.setrlimit(res, (value, value))


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
