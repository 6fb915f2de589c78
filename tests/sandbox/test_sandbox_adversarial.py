"""The sandbox against an attacker who controls the candidate code, one class of hole at a time:
harm to the host, resources, failing closed, parallel sandboxes, hostile results. Every test
asserts that the attack fails *and* that the host is unharmed (a planted host file keeps its
owner, mode and content; /dev/null stays a 0666 character device; the reward returns numbers).

The module runs as whoever runs the suite and, when that is root, once more as an unprivileged
user (``test_the_attacks_fail_as_an_unprivileged_user_too``). Where the host cannot build the
sandbox's namespaces, every attack must be refused instead (``SandboxError``): fail closed.
"""

import json
import os
import re
import stat
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import pytest

import domains.code as dc
from c3_sandbox import image, launch, runner, values
from c3_sandbox import sandbox as sbx
from c3_sandbox.runner import seccomp
from c3_sandbox.sandbox import Limits, Sandbox, SandboxError, Test

REPO = Path(__file__).resolve().parents[2]
ROOT = os.geteuid() == 0
REFUSES = not sbx.namespaces_available()  # this host cannot isolate candidates: each attack must be refused
TIMEOUT = 3.0
SIGSYS = "terminated by signal 31 (SIGSYS)"  # a refused system call (the runner's seccomp filter)


def attack(code, tests, timeout_s=TIMEOUT, setup=""):
    """The results of a hostile candidate on ``tests``; None where this host refuses to run it (asserted)."""
    if REFUSES:
        with pytest.raises(SandboxError, match="refusing"):
            dc.execute(code, tests, setup, timeout_s=timeout_s)
        return None
    return dc.execute(code, tests, setup, timeout_s=timeout_s)


def pool(**kwargs):
    """A sandbox pool; None where this host refuses to build one (asserted)."""
    if REFUSES and kwargs.get("isolation") != "none":
        with pytest.raises(SandboxError, match="refusing"):
            Sandbox(**kwargs)
        return None
    return Sandbox(**kwargs)


def assert_devnull_intact():
    st = os.stat("/dev/null")
    assert stat.S_ISCHR(st.st_mode) and (os.major(st.st_rdev), os.minor(st.st_rdev)) == (1, 3)
    assert st.st_uid == 0 and stat.S_IMODE(st.st_mode) == 0o666


def assert_host_alive():
    if not REFUSES:
        assert dc.pass_rate("def f():\n    return 1", [Test(expected=1, expr="f()")]) == 1.0


@pytest.fixture
def host_secret():
    """A root-only host file in a folder the sandbox sees (/etc): (path, content); None when not root."""
    if not ROOT:
        yield None
        return
    path, content = f"/etc/c3-sandbox-secret-{uuid.uuid4().hex[:12]}", f"secret-{uuid.uuid4().hex}"
    with open(path, "w") as fh:
        fh.write(content)
    os.chmod(path, 0o600)
    try:
        yield path, content
    finally:
        os.unlink(path)


def assert_secret_intact(secret, results=()):
    if secret is None:
        return
    path, content = secret
    st = os.lstat(path)
    assert stat.S_ISREG(st.st_mode) and st.st_uid == 0 and st.st_gid == 0 and stat.S_IMODE(st.st_mode) == 0o600
    assert Path(path).read_text() == content
    assert not any(content in (r.output + r.reason) for r in results or [])


def _boxes():
    return {p for p in os.listdir(tempfile.gettempdir()) if p.startswith("c3sbx-")}


# --- Host harm -------------------------------------------------------------------------------

SPRAY = '''
import os
NAMES = ["out-%d.txt" % i for i in range(8)] + ["job.json", "runner.py", "result.json", "output"]
def spray(target):
    for d in {os.getcwd(), "/sandbox", "/tmp", os.environ.get("TMPDIR", "/tmp")}:
        for n in NAMES:
            p = os.path.join(d, n)
            try:
                os.unlink(p)
            except OSError:
                pass
            for make in (os.link, os.symlink):  # a hard link where the kernel allows one, else a symbolic one
                try:
                    make(target, p)
                    break
                except OSError:
                    pass
    return "sprayed"
def show():
    print("hello from a test")
    return 1
'''


def test_names_the_runner_used_cannot_be_swapped_for_host_files(host_secret):
    """Links (symbolic and hard) at every name the runner ever opened, read or chowned as root:
    the next test must not chown, truncate or read /dev/null or a host file through them."""
    target = host_secret[0] if host_secret else "/etc/passwd"
    tests = [Test("x", expr="spray('/dev/null')"), Test(1, expr="show()"), Test("x", expr=f"spray({target!r})"),
             Test(1, expr="show()")]
    before = os.stat("/etc/passwd")
    results = attack(SPRAY, tests)
    assert_devnull_intact()
    assert_secret_intact(host_secret, results)
    after = os.stat("/etc/passwd")
    assert (after.st_uid, after.st_mode, after.st_size) == (before.st_uid, before.st_mode, before.st_size)
    if results is not None:
        assert results[1].passed and results[3].passed and "hello from a test" in results[3].output


DEEP = '''
import os
def bury():
    base = os.environ["TMPDIR"]  # the box
    os.chdir(base)
    for i in range(5000):
        os.mkdir("d")
        os.chdir("d")
    for i in range(20):
        open("f%d" % i, "w").close()
    for name, target in (("to-root", "/"), ("to-passwd", "/etc/passwd"), ("to-null", "/dev/null")):
        os.symlink(target, name)
    os.chdir(base)
    os.mkdir("locked")
    open("locked/x", "w").close()
    os.chmod("locked", 0)
    os.symlink("/etc", "etc-link")
    return 1
'''


def test_deep_trees_links_and_locked_folders_do_not_break_the_clean_up(host_secret):
    before = _boxes()
    results = attack(DEEP, [Test(1, expr="bury()")], timeout_s=20.0)
    assert results is None or results[0].passed, results
    assert _boxes() <= before  # nothing of the sandbox left on the host's disk
    assert os.path.isfile("/etc/passwd") and os.listdir("/etc")
    assert_devnull_intact()
    assert_secret_intact(host_secret, results)


def test_the_runner_imports_nothing_the_candidate_can_write():
    code = ("import os, sys\n"
            "def plant():\n"
            "    for d in {os.getcwd(), '/sandbox', '/tmp'}:\n"
            "        for m in ('json', 'signal', 'select', 'time', 'resource', 'encodings', '_strptime'):\n"
            "            try:\n"
            "                open(os.path.join(d, m + '.py'), 'w').write('raise SystemExit(\"hijacked\")')\n"
            "            except OSError:\n"
            "                pass\n"
            "    return 0\n"
            "def flags():\n"
            "    writable = [p for p in sys.path if os.access(p or '.', os.W_OK)]\n"
            "    env = sorted(k for k in os.environ if k.startswith('PYTHON') and k != 'PYTHONHASHSEED')\n"
            "    return [bool(sys.flags.safe_path or sys.flags.isolated), "
            "bool(sys.flags.no_user_site), writable, env]\n")
    results = attack(code, [Test(0, expr="plant()"), Test([True, True, [], []], expr="flags()")])
    if results is not None:
        assert results[0].passed and results[1].passed, results[1].reason


SUICIDES = '''
import os, signal, stat
def die(sig):
    os.kill(os.getpid(), sig)
    return "survived"
class Weird(BaseException):
    def __str__(self):
        raise RuntimeError("no string for you")
def weird():
    raise Weird()
def forge(payload):
    for fd in range(3, 256):
        try:
            if stat.S_ISFIFO(os.fstat(fd).st_mode):
                os.write(fd, payload.encode("latin-1"))
        except OSError:
            pass
    os._exit(0)
def honest():
    return 1
'''


def test_a_test_that_dies_by_any_signal_or_raises_anything_fails_alone():
    calls = ["die(signal.SIGSEGV)", "die(40)", "die(signal.SIGRTMAX)", "die(signal.SIGXCPU)", "die(signal.SIGABRT)",
             "weird()", "forge('[' * 100000)", "forge('{\"status\": \"value\"}')", "forge('\\xff\\xfe not json')",
             "forge('{\"status\": \"value\", \"value\": ' + '[\"list\", [' * 300 + '[\"none\"]' + ']]' * 300 + '}')"]
    tests = [Test("survived", expr=c) for c in calls] + [Test(1, expr="honest()")]
    results = attack(SUICIDES, tests)
    if results is not None:
        assert [r.passed for r in results] == [False] * len(calls) + [True], [(r.status, r.reason) for r in results]
        assert all(r.status == "error" for r in results[:-1])
    assert_host_alive()


CAPS = '''
import ctypes, os, struct
def caps():
    libc = ctypes.CDLL(None, use_errno=True)
    header, data = ctypes.create_string_buffer(struct.pack("Ii", 0x20080522, 0)), ctypes.create_string_buffer(24)
    assert libc.capget(header, data) == 0
    eff0, prm0, inh0, eff1, prm1, inh1 = struct.unpack("6I", data.raw)
    bounding = [c for c in range(64) if libc.prctl(23, c, 0, 0, 0) == 1]  # PR_CAPBSET_READ
    ambient = [c for c in range(64) if libc.prctl(47, 1, c, 0, 0) == 1]  # PR_CAP_AMBIENT_IS_SET
    sets = ["%016x" % (lo | hi << 32) for lo, hi in ((inh0, inh1), (prm0, prm1), (eff0, eff1))]
    sets += ["%016x" % sum(1 << c for c in bounding), "%016x" % sum(1 << c for c in ambient)]
    ids = list(os.getresuid()) + list(os.getresgid())
    return [sets, str(libc.prctl(39, 0, 0, 0, 0)), 0 not in ids]  # PR_GET_NO_NEW_PRIVS
'''


def test_candidates_have_no_capability_no_new_privileges_and_are_not_root():
    expected = [["0000000000000000"] * 5, "1", True]
    results = attack(CAPS, [Test(expected, expr="caps()")])
    if results is not None:
        assert results[0].passed, results[0].reason


ESCAPE = '''
import ctypes, os
def escape(path):
    libc = ctypes.CDLL(None, use_errno=True)
    tricks = []
    def chroot_out():
        os.makedirs("jail", exist_ok=True)
        os.chroot("jail")
        for _ in range(64):
            os.chdir("..")
        os.chroot(".")
    def new_user_namespace():
        if libc.unshare(0x10000000 | 0x00020000) != 0:
            raise OSError(ctypes.get_errno(), "unshare")
        chroot_out()
    def become_root():
        os.setuid(0)
    def remount():
        if libc.mount(None, b"/", None, 32, None) != 0:
            raise OSError(ctypes.get_errno(), "mount")
    for trick in (chroot_out, new_user_namespace, become_root, remount):
        try:
            trick()
            tricks.append(trick.__name__)
        except Exception:
            pass
    try:
        return open(path).read(60)
    except Exception:
        return "blocked: " + ",".join(tricks)
'''


def test_no_escape_from_the_root_or_the_namespaces():
    me = str(Path(__file__).resolve())
    results = attack(ESCAPE, [Test(Path(me).read_text()[:60], expr=f"escape({me!r})")])
    if results is not None:
        # every trick blocked; the system-call filter now ends the test at the first filtered call (SIGSYS)
        assert not results[0].passed and results[0].reason in ("got 'blocked: '", SIGSYS), results[0].reason


DEVICES = '''
import os, sys
def probe():
    flags = {}
    for p in ("/", "/usr", "/etc", sys.prefix, "/dev/null", "/dev/urandom"):
        f = os.statvfs(p).f_flag
        flags[p] = (bool(f & os.ST_RDONLY), bool(f & os.ST_NOSUID))
    tries = []
    for attempt in (lambda: os.chmod("/dev/null", 0o600), lambda: os.chown("/dev/null", os.getuid(), -1),
                    lambda: os.unlink("/dev/null"), lambda: os.rename("/dev/null", "/dev/gone"),
                    lambda: os.utime("/dev/null"), lambda: open(os.path.join(sys.prefix, "c3-owned"), "w"),
                    lambda: open("/etc/c3-owned", "w"), lambda: os.mknod("/sandbox/null", 0o20666, os.makedev(1, 3))):
        try:
            attempt()
            tries.append("done")
        except OSError:
            tries.append("refused")
    with open("/dev/null", "w") as sink:
        sink.write("a sink still")
    return [sorted(set(flags.values())), tries]
'''


def test_device_nodes_and_host_files_cannot_be_changed_from_inside():
    results = attack(DEVICES, [Test([[(True, True)], ["refused"] * 8], expr="probe()")])
    if results is not None:
        assert results[0].passed, results[0].reason
    assert_devnull_intact()
    assert not os.path.exists(os.path.join(os.path.realpath(sys.base_prefix), "c3-owned"))
    assert not os.path.exists("/etc/c3-owned")


PROC = '''
import os
def look():
    if not os.path.isdir("/proc"):
        return [True, []]
    pids = [p for p in os.listdir("/proc") if p.isdigit()]
    leaks = []
    for path in ("/proc/1/environ", "/proc/1/mem", "/proc/1/fd/1", "/proc/1/root/etc/hostname", "/proc/1/maps"):
        for mode in ("rb", "wb"):
            try:
                with open(path, mode) as fh:
                    fh.read(1) if mode == "rb" else fh.write(b"READY")
                leaks.append(path + ":" + mode)
            except (OSError, ValueError):
                pass
    return [len(pids) <= 3, leaks]
'''


def test_only_the_sandbox_processes_are_visible_and_the_runner_is_out_of_reach():
    results = attack(PROC, [Test([True, []], expr="look()")])
    if results is not None:
        assert results[0].passed, results[0].reason


KEYRING_HOST = '''
import ctypes, os, sys, warnings
warnings.simplefilter("ignore")
NR = {"x86_64": (248, 250), "aarch64": (217, 219)}[os.uname().machine]  # add_key, keyctl
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall(NR[1], 1, None)  # a session keyring of our own, as a login session has
secret = sys.argv[2].encode()
assert libc.syscall(NR[0], b"user", b"c3-secret", secret, len(secret), ctypes.c_long(-3)) > 0
import domains.code as dc
from c3_sandbox.sandbox import Test
print(dc.execute(sys.argv[1], [Test("", expr="steal()")])[0].reason)
'''
KEYRING_THIEF = '''
import ctypes, os
def steal():
    nr = {"x86_64": 250, "aarch64": 219}[os.uname().machine]
    libc = ctypes.CDLL(None, use_errno=True)
    kid = libc.syscall(nr, 10, ctypes.c_long(-3), b"user", b"c3-secret", 0)  # KEYCTL_SEARCH the session keyring
    if kid < 0:
        return "not found"
    buf = ctypes.create_string_buffer(256)
    n = libc.syscall(nr, 11, kid, buf, 256)  # KEYCTL_READ
    return buf.raw[:max(n, 0)].decode(errors="replace")
'''


@pytest.mark.skipif(os.uname().machine not in ("x86_64", "aarch64"),
                    reason="system call numbers known for x86_64 and aarch64")
def test_keys_of_the_host_session_keyring_are_not_possessed_inside():
    secret = f"key-{uuid.uuid4().hex}"
    run = subprocess.run([sys.executable, "-c", KEYRING_HOST, KEYRING_THIEF, secret], cwd=REPO, capture_output=True,
                         text=True, timeout=120, env=dict(os.environ, PYTHONPATH=str(REPO)))
    if REFUSES and "refusing" in run.stderr:
        return
    assert run.returncode == 0, run.stderr[-2000:]
    # the keyring is not the host's ("not found"), and keyctl itself is filtered (the test ends by SIGSYS)
    assert secret not in run.stdout and ("not found" in run.stdout or SIGSYS in run.stdout), run.stdout


# --- Fail closed -----------------------------------------------------------------------------

def test_without_namespaces_candidates_are_refused_unless_isolation_none_is_explicit(monkeypatch, caplog):
    probe = sbx.isolation_probe()
    monkeypatch.setattr(launch, "_PROBE", dict(probe, namespaces=False, reason="no user namespaces here (test)"))
    with pytest.raises(SandboxError, match="refusing to run model-written code.*no user namespaces "
                                           "here.*isolation: none"):
        Sandbox(workers=1)
    with pytest.raises(ValueError, match="isolation"):
        Sandbox(workers=1, isolation="maybe")
    with pytest.warns(RuntimeWarning, match="WITHOUT namespaces"), caplog.at_level("WARNING"):
        sb = Sandbox(workers=1, isolation="none")
    assert "WITHOUT namespaces" in caplog.text
    assert sb.run("def f():\n    return 2", [Test(2, expr="f()")])[0].passed
    sb.close()
    monkeypatch.setattr(sbx, "_DEFAULT", None)
    monkeypatch.setattr(sbx, "_ISOLATION", ["namespaces"])
    with pytest.raises(SandboxError, match="refusing"):
        dc.pass_rate("def f():\n    return 1", [Test(1, expr="f()")])
    with pytest.raises(SandboxError, match="refusing"):
        dc.dry_run_probe()
    dc.configure("none")
    try:
        with pytest.warns(RuntimeWarning):
            report = dc.dry_run_probe()
        assert report["sandbox_isolation"].startswith("NONE") and "WITHOUT namespaces" in report["sandbox_warning"]
        assert report["probe_ok"]
    finally:
        dc.configure("namespaces")
        if sbx._DEFAULT is not None:
            sbx._DEFAULT.close()


def test_the_config_chooses_the_isolation(tmp_path, monkeypatch):
    from c3_plugin.core.config import ConfigError, load_config

    monkeypatch.setattr(sbx, "_ISOLATION", ["namespaces"])
    base = {"algorithm": "c3", "domain": "code", "dataset": {"train": {"name": "mbpp_train", "source": "x.jsonl"}}}
    cfg = load_config(data=dict(base, code={"isolation": "none"}))
    dc.DOMAIN.validate_config(cfg, None)
    assert sbx._ISOLATION == ["none"]
    dc.DOMAIN.validate_config(load_config(data=base), None)
    assert sbx._ISOLATION == ["namespaces"]
    dc.DOMAIN.validate_config(load_config(data=base, overrides=["code.isolation=none"]), None)  # the override's null
    assert sbx._ISOLATION == ["none"]
    dc.configure("namespaces")
    with pytest.raises((ValueError, ConfigError), match="isolation"):
        dc.DOMAIN.validate_config(load_config(data=dict(base, code={"isolation": "chroot"})), None)


# --- Resources -------------------------------------------------------------------------------

HOG = '''
import os, time
def hog(children, mb):
    pids = []
    for _ in range(children):
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                block = bytearray(mb << 20)
                for i in range(0, len(block), 4096):
                    block[i] = 1
                time.sleep(1.0)
                code = 0
            finally:
                os._exit(code)
        pids.append(pid)
    return "owned" if all(os.waitpid(p, 0)[1] == 0 for p in pids) else "stopped"
'''


def test_the_whole_sandbox_has_one_memory_limit():
    sb = pool(workers=1, limits=Limits(box_memory_mb=200))
    if sb is None:
        return
    try:
        under = sb.run(HOG, [Test("owned", expr="hog(1, 40)")], timeout_s=15.0)[0]
        assert under.passed, under.reason
        if sb.box_limits == "rlimits only":  # the documented fallback: each process alone is capped
            r = sb.run(HOG, [Test("owned", expr="hog(1, 2000)")], timeout_s=15.0)[0]
        else:  # four children under the per-process cap, together over the sandbox's
            r = sb.run(HOG, [Test("owned", expr="hog(4, 100)")], timeout_s=15.0)[0]
        assert not r.passed
    finally:
        sb.close()
    assert_host_alive()


DAEMONS = '''
import os, signal, time
def daemon(body):
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            try:
                os.closerange(3, 1024)  # hold nothing of the test's: it ends as soon as spawn() does
                body()
            finally:
                os._exit(0)
        os._exit(0)
def killer():
    end = time.time() + 8.0
    while time.time() < end:
        try:
            os.kill(-1, signal.SIGKILL)
        except OSError:
            pass
        time.sleep(0.005)
def spawn():
    daemon(lambda: os.execv("/bin/sleep", ["sleep", "4242.25"]))
    daemon(killer)
    time.sleep(0.3)
    return "spawned"
def honest():
    time.sleep(0.5)
    return 1
'''


def _host_has(marker):
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if marker in Path(f"/proc/{pid}/cmdline").read_bytes():
                found.append(pid)
        except OSError:
            pass
    return found


def test_processes_that_leave_the_group_die_before_the_next_test():
    results = attack(DAEMONS, [Test("spawned", expr="spawn()"), Test(1, expr="honest()")], timeout_s=5.0)
    if results is not None:
        assert results[1].passed, results[1].reason
    time.sleep(0.2)
    assert not _host_has(b"4242.25")
    assert_host_alive()


SHM = '''
import ctypes
def make(key):
    return ctypes.CDLL(None, use_errno=True).shmget(key, 4096, 0o1666)
def find(key):
    return ctypes.CDLL(None, use_errno=True).shmget(key, 0, 0)
'''


def _host_shm_keys():
    lines = Path("/proc/sysvipc/shm").read_text().splitlines()[1:]
    return {int(line.split()[0]) for line in lines}


def test_system_v_shared_memory_does_not_outlive_the_candidate():
    key = 0x0C3C0000 + os.getpid() % 0xFFFF
    try:
        first = attack(SHM, [Test(-1, expr=f"make({key})")])
        if first is not None:
            assert first[0].reason.startswith("got ") and int(first[0].reason[4:]) >= 0  # the segment was made inside
        assert key not in _host_shm_keys()
        second = attack(SHM, [Test(-1, expr=f"find({key})")])
        assert second is None or second[0].passed  # the next candidate does not find it either
    finally:
        if key in _host_shm_keys():  # clean up after an unisolated sandbox
            import ctypes

            libc = ctypes.CDLL(None)
            libc.shmctl(libc.shmget(key, 0, 0), 0, None)


def test_the_host_name_is_not_the_candidate_s():
    code = ("import socket\ndef name():\n    try:\n        socket.sethostname('owned')\n    except OSError:\n        "
            "pass\n    return socket.gethostname()")
    results = attack(code, [Test("sandbox", expr="name()")])
    if results is not None:
        assert results[0].passed, results[0].reason
    assert os.uname().nodename != "owned"


FILL = '''
import os
def fill(where, mb):
    for i in range(mb):
        try:
            with open(os.path.join(where, "fill-%d" % i), "wb") as fh:
                fh.write(b"x" * (1 << 20))
        except OSError:
            return "stopped at %d MB" % i
    return "owned"
'''


def test_the_box_is_size_capped():
    tests = [Test("owned", expr=f"fill({where}, 200)") for where in ("'.'", "os.environ['TMPDIR']", "'/tmp'")]
    before = _boxes()
    results = attack(FILL, tests, timeout_s=20.0)
    if results is not None:
        assert not any(r.passed for r in results), [r.reason for r in results]
    assert _boxes() <= before


def test_the_runner_has_limits_of_its_own():
    """Read from the host (candidates have no /proc): the runner, the sandbox's PID 1, dumps no core and has an
    address-space limit."""
    limits = _while_a_candidate_sleeps(lambda inner: Path(f"/proc/{inner['1']}/limits").read_text())
    if limits is None:
        return
    rows = {line[:26].strip(): line[26:].split()[:2] for line in limits.splitlines()[1:]}
    # soft 0 (and not dumpable: no core at all); hard 1, so a test child can be given RLIMIT_CORE 1 (issue 39)
    assert rows["Max core file size"] == ["0", "1"] and rows["Max address space"][1] != "unlimited", rows


def test_huge_results_are_cut_off_in_the_sandbox():
    code = "def big():\n    return 'x' * (64 << 20)\ndef many():\n    return [[i] for i in range(10 ** 6)]"
    results = attack(code, [Test("x", expr="big()"), Test([], expr="many()")], timeout_s=10.0)
    if results is not None:
        assert not any(r.passed for r in results)
        assert "larger than" in results[0].reason and "too deep or too large" in results[1].reason


# --- What the host does with a result ----------------------------------------------------------

def test_decoding_is_iterative_bounded_and_raises_one_error_type():
    ResultError = getattr(values, "ResultError", None)
    assert ResultError is not None and issubclass(ResultError, ValueError)
    deep = ["none"]
    for _ in range(200_000):
        deep = ["list", [deep]]
    flood = ["set", [["int", str(7 + k * ((1 << 61) - 1))] for k in range(50_000)]]
    bad = [deep, flood, [], None, "int", ["int"], ["int", 5], ["int", "9" * 100_000], ["bool", 1], ["float", "x"],
           ["bytes", "!"], ["list", [["none"]] * 200_000], ["str", "y" * (1 << 25)],
           ["dict", [[["list", []], ["none"]]]], ["set", [["list", []]]], ["dict", [[["none"]]]], ["tuple", "ab"],
           ["spam", []], [["list"], []]]
    for node in bad:
        start = time.perf_counter()
        with pytest.raises(ResultError):
            values.decode(node)
        assert time.perf_counter() - start < 2.0
    nested = ["none"]
    for _ in range(64):
        nested = ["dict", [[["int", "1"], nested]]]
    assert values.decode(nested) is not None  # as deep as the runner encodes


FORGE = '''
import json, os, stat
def send(message):
    data = message.encode()
    for fd in range(3, 256):
        try:
            if stat.S_ISFIFO(os.fstat(fd).st_mode):
                os.write(fd, data)
        except OSError:
            pass
    os._exit(0)
def nested(depth):
    node = '["none"]'
    for _ in range(depth):
        node = '["list", [' + node + ']]'
    return '{"status": "value", "value": ' + node + '}'
def flood(n):
    m = (1 << 61) - 1
    return json.dumps({"status": "value", "value": ["set", [["int", str(7 + k * m)] for k in range(n)]]})
'''


def _item(expr, expected, atol=0.0):
    return {"tests": json.dumps([{"expr": expr, "expected": expected, "atol": atol}]), "setup": ""}


def test_hostile_results_fail_their_test_and_never_the_reward():
    """One batch: forged messages (deep, malformed, hash-flooding), a huge int against a float with a
    tolerance, NaN against a huge int, and one honest candidate: a list of numbers comes back."""
    forged = [("send(nested(180))", ["none"]), ("send(nested(900))", ["none"]), ("send(flood(60000))", ["none"]),
              ("send('{\"status\": \"value\", \"value\": [\"int\", 5]}')", ["int", "5"]),
              ("send('{\"status\": \"value\", \"value\": [\"dict\", [[1]]]}')", ["none"]),
              ("send('{\"status\": \"value\", \"value\": {\"a\": 1}}')", ["none"])]
    items = [_item(expr, exp) for expr, exp in forged]
    codes = [FORGE] * len(forged)
    items += [_item("f()", ["float", "1.5"], 1e-6), _item("f()", ["int", str(10 ** 400)], 1e-6),
              _item("f()", ["int", "3"])]
    codes += ["def f():\n    return 10 ** 400", "def f():\n    return float('nan')", "def f():\n    return 3"]
    reward = dc.tasks.make_reward()
    if REFUSES:
        with pytest.raises(SandboxError):
            reward(["plan"] * len(codes), codes, batch_items=items)
        return
    start = time.perf_counter()
    scores = reward(["plan"] * len(codes), codes, batch_items=items)
    assert scores == [0.0] * (len(codes) - 1) + [1.0]
    assert time.perf_counter() - start < 60


def test_a_report_with_the_wrong_number_of_results_fails_every_test(monkeypatch):
    sb = pool(workers=1)
    if sb is None:
        return
    tests = [Test(1, expr="f()"), Test(2, expr="g()")]
    for report in ([{"status": "value", "value": ["int", "1"]}], [1, 2],
                   [{"status": "value", "value": ["int", "1"]}] * 3):
        monkeypatch.setattr(sb, "raw", lambda *a, report=report, **k: report)
        results = sb.run("", tests)
        assert len(results) == 2 and not any(r.passed for r in results)
    sb.close()


# --- Parallel sandboxes ----------------------------------------------------------------------

HOLD = '''
import os, time
def hold(n, seconds):
    pids = []
    for _ in range(n):
        pid = os.fork()
        if pid == 0:
            time.sleep(seconds)
            os._exit(0)
        pids.append(pid)
    for p in pids:
        os.waitpid(p, 0)
    return n
'''
OTHER_POOL = '''
import sys
from c3_sandbox.sandbox import Sandbox, Test
sb = Sandbox(workers=1)
print("start", flush=True)
r = sb.run(sys.argv[1], [Test(28, expr="hold(28, 5.0)")], timeout_s=15.0)[0]
print("done", r.passed, r.reason, flush=True)
'''


def test_sandboxes_of_other_processes_and_pools_do_not_collide():
    """Another process's pool holds 29 processes of its sandbox's uid (the per-uid limit is 32)
    while two pools here fork 8 each: they must not share its uid, or their forks would fail."""
    if REFUSES:
        assert pool(workers=1) is None
        return
    other = subprocess.Popen([sys.executable, "-c", OTHER_POOL, HOLD], cwd=REPO, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env=dict(os.environ, PYTHONPATH=str(REPO)))
    try:
        assert other.stdout.readline().strip() == "start"
        time.sleep(1.5)  # its candidate is holding its processes now
        pools = [Sandbox(workers=1), Sandbox(workers=1)]
        out = {}
        threads = [threading.Thread(target=lambda i=i: out.__setitem__(i, pools[i].run(HOLD, [Test(8, expr="hold(8, "
                                                                                                           "1.0)")])[0]))
                   for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert out[0].passed and out[1].passed, (out[0].reason, out[1].reason)
        rest, err = other.communicate(timeout=60)
        assert rest.startswith("done True"), rest + err
        for p in pools:
            p.close()
    finally:
        if other.poll() is None:
            other.kill()


# --- isolation: none (explicit) ----------------------------------------------------------------

def test_an_unisolated_box_is_removed_without_following_links(tmp_path, host_secret):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("keep")
    code = DEEP.replace('("to-null", "/dev/null")', f'("to-null", "/dev/null"), ("to-outside", {str(outside)!r})')
    moved = f"/tmp/c3-moved-box-{uuid.uuid4().hex[:8]}"
    code += (f"def move():\n    box = os.environ['TMPDIR']\n    os.rename(box, {moved!r})\n"
             f"    os.symlink({str(outside)!r}, box)\n    return 1\n")
    before = _boxes()
    with pytest.warns(RuntimeWarning):
        sb = Sandbox(workers=1, isolation="none")
    try:
        r, swap = sb.run(code, [Test(1, expr="bury()"), Test(1, expr="move()")], timeout_s=30.0)
        assert r.passed, r.reason
        if ROOT:  # the box's folder is root's: the leased uid can neither move its box nor put a link in its place
            assert not swap.passed and "PermissionError" in swap.reason
    finally:
        sb.close()
        if not ROOT:  # unisolated as the host user, the candidate may move its box away (documented); tidy up
            sbx.remove_tree(moved)
    assert _boxes() <= before and not os.path.lexists(moved)
    assert (outside / "keep.txt").read_text() == "keep"
    assert_devnull_intact()
    assert_secret_intact(host_secret)
    # remove_tree itself: links to folders and files, a 000 folder, depth beyond its descriptor stack
    tree = tmp_path / "tree"
    deep = tree
    for _ in range(300):
        deep = deep / "d"
    deep.mkdir(parents=True)
    (deep / "to-outside").symlink_to(outside)
    (tree / "to-keep").symlink_to(outside / "keep.txt")
    (tree / "locked").mkdir()
    (tree / "locked" / "x").write_text("x")
    (tree / "locked").chmod(0)
    sbx.remove_tree(str(tree))
    assert not tree.exists() and (outside / "keep.txt").read_text() == "keep"


# --- The same attacks as an unprivileged user ---------------------------------------------------

def _exposing_script(paths):
    """sh lines that, in a private mount namespace, make ``paths`` reachable for every user: each
    ancestor folder others may not enter is covered by a tmpfs through which the path is bound back.
    Every path is staged before any ancestor is covered, so paths under one closed folder (a clone,
    its venv and the Python installation all under /root) all come back."""
    stage, cover = ["set -e"], []
    for k, path in enumerate(paths):
        parts = Path(path).parts
        for i in range(2, len(parts)):
            top = Path(*parts[:i])
            if os.stat(top).st_mode & 0o001 == 0:
                stage += [f'S{k}=$(mktemp -d)', f'mount --bind "{path}" "$S{k}"']
                cover += [f'mountpoint -q "{top}" || mount -t tmpfs -o mode=0755 none "{top}"',
                          f'mkdir -p "{path}"', f'mount --move "$S{k}" "{path}"']
                break
    return stage + cover


def run_as_nobody(argv: str, timeout: float | None = None, env: str = "", capture: bool = True):
    """Run ``python argv`` as ``nobody`` in a private mount namespace where the Python installation, the virtual
    environment and the repository are readable (``_exposing_script``); ``env``: ``NAME=value `` words before it."""
    needed = sorted({os.path.realpath(sys.base_prefix), os.path.realpath(sys.prefix), str(REPO)})
    script = _exposing_script(needed) + [
        "exec setpriv --reuid=65534 --regid=65534 --clear-groups env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/tmp "
        f"PYTHONDONTWRITEBYTECODE=1 TMPDIR=/tmp {env}{sys.executable} {argv}"]
    return subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", "\n".join(script)], cwd=REPO,
                          capture_output=capture, text=True, timeout=timeout)


def test_the_attacks_fail_as_an_unprivileged_user_too():
    """Run as root, this re-runs the module as ``nobody`` (the Python installation, the virtual
    environment and the repository made readable in a private mount namespace only). An
    unprivileged user without user namespaces sees every attack refused instead: fail closed."""
    if not ROOT:
        return  # this run is the unprivileged one
    run = run_as_nobody(f"-m pytest -q -p no:cacheprovider -x -k 'not unprivileged_user' "
                        f"{Path(__file__).relative_to(REPO)}", timeout=900)
    tail = (run.stdout + run.stderr)[-3000:]
    assert run.returncode == 0, tail
    passed = re.search(r"(\d+) passed", run.stdout)
    assert passed and int(passed.group(1)) >= 20 and "failed" not in run.stdout, tail


def test_an_infinite_expected_value_is_matched_only_by_itself():
    """MBPP+'s float tolerance ``atol + rtol * |expected|`` is infinite at an infinite expected value: any number
    would pass (``return -12345.678`` scored on Mbpp/300). Infinities equal only themselves, as in EvalPlus."""
    assert not values.equal(-12345.678, float("inf"), 1e-6,
                            1e-7) and not values.equal(float("-inf"), float("inf"), 1e-6, 1e-7)
    assert values.equal(float("inf"), float("inf"), 1e-6, 1e-7) and values.equal(1.0 + 1e-9, 1.0, 1e-6, 1e-7)
    assert not values.equal(complex(1, 5), complex(1, float("inf")), 1e-6, 1e-7)
    items = [_item("f()", ["float", "inf"], 1e-6)] * 2
    codes = ["def f():\n    return -12345.678", "def f():\n    return float('inf')"]
    reward = dc.tasks.make_reward()
    if REFUSES:
        with pytest.raises(SandboxError):
            reward(["plan"] * 2, codes, batch_items=items)
        return
    assert reward(["plan"] * 2, codes, batch_items=items) == [0.0, 1.0]
    assert_host_alive()


def test_a_lone_surrogate_in_an_error_never_reaches_a_prompt():
    """``raise ValueError(chr(0xD800))``: the error reason and the output are candidate text that the multi-turn
    feedback step puts into the next prompt; a lone surrogate there made the tokenizer raise."""
    code = "import sys\ndef f():\n    sys.stdout.write(chr(0xDFFF))\n    raise ValueError(chr(0xD800) + 'x')"
    results = attack(code, [Test(expected=1, expr="f()")])
    if results is None:
        return
    assert not results[0].passed
    text = dc.tasks.feedback_text(results, [Test(expected=1, expr="f()")], "f() == 1")
    text.encode("utf-8")  # raises UnicodeEncodeError on a lone surrogate
    from c3_plugin.run.testing import tiny_tokenizer

    assert tiny_tokenizer()(text)["input_ids"]
    assert_host_alive()


def _nr(name):
    """This architecture's number of a system call, resolved by libseccomp (the library the filter is built with)."""
    import ctypes

    lib = ctypes.CDLL("libseccomp.so.2")
    lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
    return lib.seccomp_syscall_resolve_name(name.encode())


def _raw(name, args):
    return f"import ctypes\ndef f():\n    ctypes.CDLL(None).syscall({_nr(name)}, {args})\n    return 1"


SYSCALL_ATTACKS = {
    "keyctl (read the session keyring)": _raw("keyctl", "0, -3"),
    "add_key": _raw("add_key", "b'user', b'k', b'v', 1, -3"),
    "request_key (the kernel would run /sbin/request-key on the host)": _raw("request_key", "b'dns_resolver', "
                                                                                            "b'example.com', None, 0"),
    "unshare(CLONE_NEWUSER)": _raw("unshare", "0x10000000"),
    "bpf": _raw("bpf", "0, None, 0"),
    "perf_event_open": _raw("perf_event_open", "None, 0, -1, -1, 0"),
}


@pytest.mark.parametrize("name", list(SYSCALL_ATTACKS))
def test_the_system_call_filter_kills_a_candidate_that_tries_a_refused_call(name):
    """libseccomp filter in every test child: the keyring, namespaces, BPF, perf ... end the test (SIGSYS), even
    when the candidate catches the error it expects. (Sockets of every family are refused with EPERM since round
    seven: ``test_a_candidate_execs_nothing_and_makes_no_pipe_special_file_or_lock``.)"""
    results = attack(SYSCALL_ATTACKS[name], [Test(expected=1, expr="f()")])
    if results is None:
        return
    assert not results[0].passed and results[0].reason == SIGSYS, (name, results[0])
    assert_host_alive()


def test_what_honest_code_needs_passes_the_filter():
    honest = {"threads": "import threading\ndef f():\n    out = []\n    t = threading.Thread(target=lambda: "
                         "out.append(1))\n    t.start()\n    t.join()\n    return out[0]",
              "fork": "import os\ndef f():\n    pid = os.fork()\n    if pid == 0:\n        os._exit(0)\n    "
                      "os.waitpid(pid, 0)\n    return 1",
              # a file with its flags read and set (the honest uses of fcntl), an alarm and a select
              "file and fcntl flags": "import os, fcntl\ndef f():\n    fd = os.open('x', os.O_RDWR | os.O_CREAT)\n    "
                                       "fcntl.fcntl(fd, fcntl.F_SETFL, os.O_NONBLOCK)\n    os.write(fd, b'ab')\n"
                                       "    return int(fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_NONBLOCK != 0)",
              "alarm and select": "import os, signal, select\ndef f():\n    signal.alarm(5)\n    "
                                  "fd = os.open('y', os.O_RDWR | os.O_CREAT)\n    "
                                  "r = select.select([fd], [], [], 1)[0]\n    "
                                  "signal.alarm(0)\n    return len(r)"}
    for name, code in honest.items():
        results = attack(code, [Test(expected=1, expr="f()")])
        if results is None:
            return
        assert results[0].passed, (name, results[0])


def test_without_libseccomp_the_sandbox_fails_closed(monkeypatch):
    """A runner that cannot load libseccomp never becomes ready: an infrastructure error, never a score. (The host
    compiles the filter for its runners; on a machine without libseccomp it cannot either, and leaves it to them.)"""
    def no_libseccomp(*args):
        raise OSError("libseccomp.so.2 cannot be loaded")

    monkeypatch.setattr(launch, "_FILTERS", {})
    monkeypatch.setattr(seccomp, "syscall_filter", no_libseccomp)
    monkeypatch.setattr(launch, "_SOURCE",
                        [runner.source().replace('"libseccomp.so.2"', '"libseccomp-missing.so.0"')])
    with pytest.raises(SandboxError):
        dc.execute("def f():\n    return 1", [Test(expected=1, expr="f()")], timeout_s=TIMEOUT)


SPINNER = '''
import os, time
def f():
    for _ in range(30):
        if os.fork() == 0:
            os.setsid()
            while True:
                pass
    time.sleep(6)
    return 1
'''


def test_a_candidate_that_forks_spinners_does_not_take_a_neighbours_cpu():
    """Two concurrent candidates: 30 spinning processes, each in its own session, in one sandbox must not time out
    the other's honest tests. Each sandbox's cgroup gets the same CPU weight, whatever its process count."""
    from c3_sandbox import cgroups

    sb = pool(workers=2)
    if sb is None:
        return
    honest = "def g(n):\n    return sum(i * i for i in range(n))"
    tests = [Test(expected=sum(i * i for i in range(1_500_000)), expr="g(1500000)") for _ in range(3)]
    alone = time.perf_counter()
    assert all(r.passed for r in sb.run(honest, tests, timeout_s=10))
    alone = time.perf_counter() - alone
    spin = threading.Thread(target=lambda: sb.run(SPINNER, [Test(expected=1, expr="f()")], timeout_s=8))
    spin.start()
    time.sleep(1.5)  # the spinners are running
    start = time.perf_counter()
    results = sb.run(honest, tests, timeout_s=10)
    beside = time.perf_counter() - start
    spin.join()
    assert all(r.passed for r in results)
    assert cgroups.cpu_weighted() or cgroups.available() is None  # where the host has cgroups, the CPU is weighted
    if cgroups.cpu_weighted():
        assert beside < 3 * alone + 1.0, (alone, beside)  # one sandbox's share, not 1/31 of the machine
    assert_host_alive()


# --- Resource counters, /proc, the box between tests, the OOM score, the host's cost ------------

def _sandboxed_processes():
    """{pid inside its sandbox: host pid} of this process's descendants that run in a PID namespace of their own
    (the sandboxes' processes; read from ``status`` and ``stat``, which need no ptrace access)."""
    inner = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/status") as st:
                nspids = [line.split()[1:] for line in st if line.startswith("NSpid:")][0]
            if len(nspids) < 2:  # in the host's PID namespace (the runner's waiting parent outside it, say)
                continue
            chain = int(name)
            while chain > 1 and chain != os.getpid():
                with open(f"/proc/{chain}/stat", "rb") as fh:
                    chain = int(fh.read().rsplit(b")", 1)[1].split()[1])
            if chain == os.getpid():
                inner[nspids[-1]] = int(name)
        except (OSError, ValueError, IndexError):
            continue
    return inner


OOM = '''
import time
def sleep():
    time.sleep(2.5)
    return 1
'''


def _while_a_candidate_sleeps(look):
    """``look({pid inside the sandbox: host pid})`` while a candidate sleeps in its test (read from the host);
    None where this host refuses to run candidates."""
    sb = pool(workers=1)
    if sb is None:
        return None
    out = {}
    run = threading.Thread(target=lambda: out.setdefault("r",
                                                         sb.run(OOM, [Test(expected=1, expr="sleep()")], timeout_s=6)))
    run.start()
    time.sleep(1.5)
    seen = look(_sandboxed_processes())
    run.join()
    sb.close()
    assert out["r"][0].passed, out["r"][0].reason
    return seen


def _namespace_owner(pid):
    """The uid that owns ``pid``'s user namespace (NS_GET_OWNER_UID)."""
    import array
    import fcntl

    fd = os.open(f"/proc/{pid}/ns/user", os.O_RDONLY)
    try:
        buf = array.array("I", [0])
        fcntl.ioctl(fd, 0xB704, buf)  # _IO(0xb7, 0x4)
        return buf[0]
    finally:
        os.close(fd)


COUNTERS = '''
import ctypes, os, time
def hold():
    libc = ctypes.CDLL(None, use_errno=True)
    rt = ctypes.CDLL("librt.so.1", use_errno=True)
    queue = rt.mq_open(b"/c3q", os.O_CREAT | os.O_RDWR, 0o600, None)  # first: the descriptors run out below
    fds = []
    for _ in range(200):
        fd = libc.inotify_init1(0)
        if fd < 0:
            break
        fds.append(fd)
    time.sleep(2.5)
    return [len(fds), min(queue, 0)]
'''


def test_resource_counters_are_the_box_s_own_and_charged_to_its_own_user():
    """inotify instances and message-queue bytes are charged to the user who owns the sandbox's user namespace:
    that is the leased uid on a root host (host root before), and the box's own low limits cap what a candidate
    holds (no inotify instance, no message queue), so the host user keeps its own."""
    from c3_sandbox import uids

    sb = pool(workers=1)
    if sb is None:
        return
    out = {}
    run = threading.Thread(target=lambda: out.setdefault("r", sb.run(COUNTERS, [Test(expected=[0, -1], expr="hold()")],
                                                                      timeout_s=6)))
    run.start()
    time.sleep(1.5)  # the candidate holds its instances now
    owners = set()
    inside = _sandboxed_processes()
    assert inside, "no sandboxed process found"
    for pid in inside.values():
        try:
            owners.add(_namespace_owner(pid))
        except OSError:  # not dumpable (the runner, and the test children: issue 39): on an unprivileged host, the
            assert not ROOT  # namespace is read from the runner's parent outside the PID namespace, inside it
            parent = int(Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()[1])
            while parent > 1 and parent in inside.values():
                parent = int(Path(f"/proc/{parent}/stat").read_bytes().rsplit(b")", 1)[1].split()[1])
            if os.stat(f"/proc/{parent}/ns/user").st_ino != os.stat("/proc/self/ns/user").st_ino:
                owners.add(_namespace_owner(parent))
    libc = __import__("ctypes").CDLL(None, use_errno=True)
    host = [libc.inotify_init1(0) for _ in range(8)]
    run.join()
    for fd in host:
        if fd >= 0:
            os.close(fd)
    result = out["r"][0]
    assert result.passed, result.reason  # no inotify instance (of 200 tried), mq_open refused
    assert all(fd >= 0 for fd in host)
    assert owners, "no sandboxed process found"
    if ROOT:
        assert all(uids.UID_BASE <= o < uids.UID_BASE + uids.UID_COUNT for o in owners), owners  # never host root
    else:
        assert owners == {os.geteuid()}
    sb.close()


NO_PROC = '''
import os
def look():
    readable = []
    for path in ("/proc/cmdline", "/proc/self/mountinfo", "/proc/self/mounts", "/proc/stat", "/proc/meminfo",
                 "/proc/partitions", "/proc/diskstats", "/proc/devices", "/proc/locks", "/proc/key-users",
                 "/proc/sys/kernel/random/boot_id", "/proc/uptime", "/proc/loadavg", "/proc/vmstat", "/sys/block"):
        try:
            with open(path, "rb") as fh:
                fh.read(1)
            readable.append(path)
        except OSError:
            pass
    return [readable, os.listdir("/proc"), os.cpu_count() is not None]
'''


def test_the_kernel_command_line_mount_table_devices_and_host_counters_are_not_readable():
    """Candidates have no /proc (the runner keeps its own, by a descriptor): no kernel command line, mount paths
    and device numbers, or host-wide counters; honest code that asks for the CPU count still gets one."""
    results = attack(NO_PROC, [Test(expected=[[], [], True], expr="look()")])
    if results is not None:
        assert results[0].passed, results[0].reason


BOX_MARKS = '''
import os
ACL = bytes.fromhex("02000000" "01000700ffffffff" "02000700e8030000" "04000500ffffffff" "10000700ffffffff"
                    "20000500ffffffff")
def mark(how):
    if how == "times":
        os.utime("/sandbox", (1, 1))
    elif how == "xattr":
        os.setxattr("/sandbox", "user.c3", b"left")
    else:
        os.setxattr("/sandbox", "system.posix_acl_access", ACL)
    return how
def read():
    st = os.stat("/sandbox")
    return [st.st_mtime == 1 or st.st_atime == 1, sorted(os.listxattr("/sandbox")), oct(st.st_mode)]
'''


def test_box_timestamps_attributes_and_acls_do_not_reach_the_next_test():
    """Each of a test's marks on an otherwise untouched ``/sandbox`` (its times, a user extended attribute, a POSIX
    ACL) is gone in the next test: the box is reused only when nothing about it changed."""
    tests = []
    for how in ("times", "xattr", "acl"):
        tests += [Test(expected=None, expr=f"mark({how!r})"), Test(expected=[False, [], "0o40700"], expr="read()")]
    results = attack(BOX_MARKS, tests)
    if results is not None:
        for mark, read in zip(results[::2], results[1::2]):
            assert "got '" in mark.reason, mark.reason  # the mark was made (its value is no test's expected None)
            assert read.passed, (mark.reason, read.reason)


def test_every_test_child_is_the_first_to_go_when_the_sandbox_runs_out_of_memory():
    """The test child's OOM score adjustment is 1000 (it was silently left at the runner's, so an out-of-memory
    test could take the runner down), and the runner's is not."""
    def scores(inner):
        return {k: int(Path(f"/proc/{pid}/oom_score_adj").read_text()) for k, pid in inner.items()}

    found = _while_a_candidate_sleeps(scores)
    if found is None:
        return
    assert found.get("1") is not None and found["1"] < 1000, found  # the runner (the sandbox's PID 1)
    assert [v for k, v in found.items() if k != "1"] == [1000], found  # the one test child


REPORT = '''
def many(n):
    return [[i] for i in range(n)]
def forged():
    import os
    os.write(3, b'{"status": "value", "value": [' + b",".join([b"[]"] * 1_300_000) + b']}')
    os._exit(0)
'''


def test_the_host_reads_a_bounded_report_whatever_the_candidate_sends(monkeypatch):
    """A forged 4 MiB report of 1.3 M empty lists is refused inside the sandbox (the host never parses it), a wrong
    answer far larger than the expected value is refused by the host before it is decoded (the sandbox never knows
    the expected value's size: issue 39), and a whole candidate's values are capped together: right-looking results
    of 100,000 items each reach the host only up to ``max_report_bytes``; the tests over it fail with the reason."""
    sizes = []
    real = sbx._launch

    def spy(*args, **kwargs):
        out, err, rc, seconds = real(*args, **kwargs)
        sizes.append(len(out))
        return out, err, rc, seconds

    monkeypatch.setattr(sbx, "_launch", spy)
    sb = pool(workers=1, limits=Limits(max_report_bytes=4 << 20))
    if sb is None:
        return
    # an assert: no value cap of its own
    forged = sb.run(REPORT, [Test.from_assert("assert forged() == []", ["forged"])])[0]
    assert not forged.passed and forged.reason == "malformed result message", forged.reason
    assert sizes[-1] < 64 << 10  # the host read a short report, not the 4 MiB
    wrong = sb.run(REPORT, [Test(expected=[[1]], expr="many(49990)") for _ in range(3)])
    cap = f"result larger than {8 * len(json.dumps(['list', [['list', [['int', '1']]]]])) + 4096} bytes"
    assert [r.reason for r in wrong[:2]] == [cap] * 2, wrong[0].reason  # its own cap: 8 x the expected size + 4 KiB
    assert "together are larger than" in wrong[2].reason, wrong[2].reason  # the third is over the report's cap
    assert sizes[-1] <= sbx._report_cap(sb.limits, 3)
    expected = [[i] for i in range(49_990)]
    start = time.perf_counter()
    results = sb.run(REPORT, [Test(expected=expected, expr="many(49990)") for _ in range(6)], timeout_s=10)
    host_s = time.perf_counter() - start
    passed = [r.passed for r in results]
    assert passed == [True, True] + [False] * 4, passed  # 1,488,600 bytes each: two fit in 4 MiB
    assert all("together are larger than" in r.reason for r in results if not r.passed)
    assert sizes[-1] <= sbx._report_cap(sb.limits, 6)
    sb.close()
    assert host_s < 120


IPC = '''
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
def make(key):
    return [libc.shmget(key, 4096, 0o1666), libc.semget(key, 1, 0o1666), libc.msgget(key, 0o1666)]
def find(key):
    return [libc.shmget(key, 0, 0), libc.semget(key, 0, 0), libc.msgget(key, 0)]
'''


def test_system_v_objects_do_not_carry_anything_to_the_candidate_s_next_test():
    """A shared memory segment, a semaphore set and a message queue made by one test are gone in the next one
    (the runner removes every System V object of the sandbox's IPC namespace after each test)."""
    results = attack(IPC, [Test(expected=None, expr="make(4242)"), Test(expected=[-1, -1, -1], expr="find(4242)")])
    if results is not None:
        made = json.loads(results[0].reason[4:])
        assert all(x >= 0 for x in made), made  # the first test made all three
        assert results[1].passed, results[1].reason


# --- Issue 39: nothing derived from the answer inside, no core ever, the host's judging bounded ----------------

LENGTH_ORACLE = '''
import ctypes, json, os, sys
def _leaks():
    """Every number the candidate's process can find that the host derived from the expected value or the
    reference: payload caps and time limits in the frames above, and their text anywhere in raw memory."""
    found = {}
    frame = sys._getframe()
    while frame is not None:
        for value in list(frame.f_locals.values()):
            for d in ([value] if isinstance(value, dict) else []) + (value if isinstance(value, list) else []):
                if isinstance(d, dict):
                    for key in ("max_bytes", "timeout_s", "candidate_timeout_s"):
                        if key in d:
                            found.setdefault(key, d[key])
        frame = frame.f_back
    return found
def _raw(codes):
    """Whether the text of ``codes`` (character codes: the needle is never in this source, nor built through a
    temporary text) is anywhere in this process's memory near its heaps (Python's, malloc's, mmap'd) but in the
    needle itself (write(2) from an
    unmapped page fails with EFAULT instead of crashing the scanner)."""
    needle = bytes(codes)
    own = (id(needle), id(needle) + sys.getsizeof(needle))
    libc = ctypes.CDLL(None, use_errno=True)
    libc.malloc.restype = ctypes.c_void_p
    fd = os.open("scan", os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)  # no pipe or memory file in the box: a file
    anchors = {(a & ~0xFFFF) + page * 65536 for a in (id(sys.modules), libc.malloc(64), libc.malloc(1 << 20))
               for page in range(-1024, 1024)}
    try:
        for start in sorted(anchors):
            n = libc.pwrite(fd, ctypes.c_void_p(start), 65536, ctypes.c_long(0))
            data = os.pread(fd, n, 0) if n > 0 else b""
            at = data.find(needle)
            while at >= 0:
                if not own[0] <= start + at < own[1]:
                    return True
                at = data.find(needle, at + 1)
    finally:
        os.close(fd)
    return False
def truth():
    cap = _leaks().get("max_bytes")
    if cap is None:
        return None
    # a value test's cap is 8 x len(json of the expected value) + 4096: 14 bytes for True, 15 for False
    return {len(json.dumps(["bool", True])): True, len(json.dumps(["bool", False])): False}.get((cap - 4096) // 8)
def seen():
    limit, cap = [50, 46, 55, 49, 56, 50, 56], [34, 109, 97, 120, 95, 98, 121, 116, 101, 115, 34, 58, 32]
    return [sorted(_leaks()), _raw(limit), _raw(cap)]
def cpu():
    import resource
    return resource.getrlimit(resource.RLIMIT_CPU)[0]  # was the test's time limit + 2 s
'''


def test_nothing_derived_from_the_expected_value_or_the_reference_is_inside_the_sandbox():
    """Issue 39, 1: a value test's payload carried its cap (8 x the expected value's encoding + 4 KiB) and its time
    limit; a candidate walking its frames read True/False off the cap (8 of 50 MBPP+ bool tasks passed). The runner
    now gets the inputs only: no frame, no byte of its memory holds a cap or a time limit (2.71828 s, the JSON
    key ``"max_bytes": ``: both were in the job the runner parsed before it forked the test)."""
    tests = [Test(expected=True, expr="truth()", timeout_s=2.71828), Test(expected=False, expr="truth()"),
             Test(expected=[[], False, False], expr="seen()", timeout_s=2.71828),
             Test(expected=None, expr="cpu()", timeout_s=2.0), Test(expected=None, expr="cpu()", timeout_s=9.0)]
    results = attack(LENGTH_ORACLE, tests)
    if results is not None:
        assert not results[0].passed and not results[1].passed, (results[0].reason, results[1].reason)
        assert results[2].passed, results[2].reason
        assert results[3].reason == results[4].reason, (results[3].reason, results[4].reason)  # one CPU ceiling


SETUP_COMPARAND = '''
def f(x):
    globals()["expected"] = 3
    return 3
def g(x):
    x.append(9)  # the setup's own list, changed in place through the argument
    return x
'''


def test_a_comparand_defined_in_the_setup_cannot_be_changed_by_the_candidate():
    """Issue 39, 1: ``assert f(1) == expected`` with ``expected`` from the setup: ``f`` rebinding the name made the
    probe agree with it. The setup's own values are evaluated without candidate code, once, on loading."""
    asserts = ["assert f(1) == expected", "assert f(1) + 1 == expected + 1", "assert g(listed) == listed"]
    results = attack(SETUP_COMPARAND, asserts, setup="expected = 5\nlisted = [1]") if not REFUSES else None
    if REFUSES:
        with pytest.raises(SandboxError):
            dc.execute(SETUP_COMPARAND, ["assert f(1) == expected"], setup="expected = 5")
        return
    assert [r.passed for r in results] == [False, False, False], [r.reason for r in results]
    honest = dc.execute("def f(x):\n    return 5\ndef g(x):\n    return x", asserts, setup="expected = 5\nlisted = [1]")
    assert all(r.passed for r in honest), [r.reason for r in honest]


CRASHES = '''
import ctypes, os, resource, signal, subprocess, sys
libc = ctypes.CDLL(None, use_errno=True)
def keyctl():
    libc.syscall({"x86_64": 250, "aarch64": 219}.get(os.uname().machine, 250), 0, 0)
    return 1
def segv():
    ctypes.string_at(0)
    return 1
def abort():
    os.abort()
def dumpable_again():
    libc.prctl(4, 1, 0, 0, 0)  # PR_SET_DUMPABLE
    os.abort()
def core_limit_lowered():
    for soft in (0, resource.RLIM_INFINITY):
        try:
            resource.setrlimit(resource.RLIMIT_CORE, (soft, soft))
        except (OSError, ValueError):
            pass
    os.abort()
def exec_and_crash():
    """An exec'd image is dumpable again (the kernel resets it on exec): it crashes in a fresh process."""
    subprocess.run(["/bin/sh", "-c", "ulimit -c 0; kill -SEGV $$"])
    subprocess.run([sys.executable, "-c", "import os; os.abort()"])
    return 1
'''
CORE_CALLS = ["keyctl()", "segv()", "abort()", "dumpable_again()", "core_limit_lowered()", "exec_and_crash()"]


def _core_server(path, out, stop):
    """A stand-in for a core socket helper (``core_pattern`` ``@<path>``, Linux 6.16+): records every connection the
    kernel makes to hand it a core."""
    import socket

    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server:
        server.bind(str(path))
        os.chmod(path, 0o777)
        server.listen(16)
        server.settimeout(0.1)
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                continue
            (out / f"connection.{len(os.listdir(out))}").write_text("core")
            conn.close()


@pytest.fixture(params=["pipe", "socket"])
def core_helper(tmp_path, request):
    """As root: the host's ``core_pattern`` pointed at a stand-in helper that records every run: a pipe helper
    (``|helper``) or a core socket (``@socket``) (restored afterwards, whatever happens); yields the folder it records
    into, or None where ``core_pattern`` cannot be written (not root; a kernel without core sockets)."""
    pattern = Path("/proc/sys/kernel/core_pattern")
    if not ROOT:
        yield None
        return
    old = pattern.read_text().rstrip("\n")
    out = tmp_path / "cores"
    out.mkdir(mode=0o777)
    stop, server = threading.Event(), None
    if request.param == "pipe":
        helper = tmp_path / "helper.sh"
        helper.write_text(f"#!/bin/sh\necho \"$1 $2 $3\" > {out}/ran.$1\ncat > /dev/null\n")
        helper.chmod(0o755)
        new = f"|{helper} %p %e %s"
    else:
        sock = tmp_path / "core.sock"
        server = threading.Thread(target=_core_server, args=(sock, out, stop), daemon=True)
        server.start()
        while not sock.exists():
            time.sleep(0.01)
        new = f"@{sock}"
    try:
        pattern.write_text(new + "\n")
    except OSError:
        stop.set()
        yield None
        return
    try:
        yield out
    finally:
        pattern.write_text(old + "\n")
        stop.set()
        if server is not None:
            server.join()


def test_no_candidate_ever_dumps_core_or_starts_the_host_s_core_helper(core_helper):
    """Issue 39, 2: test children were dumpable (to write their OOM score) and the filter kills with SIGSYS, a
    core-dumping signal; RLIMIT_CORE=0 does not stop a pipe ``core_pattern``, so a candidate calling ``keyctl`` made
    the host run its core helper as root. Test children are not dumpable now (and cannot become so), and what they
    exec has RLIMIT_CORE 1 (the kernel's "no pipe" value, under any file core's minimum) that it cannot lower: with a
    stand-in helper as the host's ``core_pattern``, no crash of any kind runs it."""
    results = attack(CRASHES, [Test(expected=0, expr=c) for c in CORE_CALLS])
    if core_helper is not None:
        time.sleep(0.5)  # a helper started by the kernel has long written its line by now
        assert sorted(os.listdir(core_helper)) == [], [p.read_text() for p in core_helper.iterdir()]
    if results is not None:
        assert not any(r.passed for r in results), [r.reason for r in results]
        assert results[0].reason == SIGSYS
    probe = attack("import ctypes, resource\ndef f():\n    return [ctypes.CDLL(None).prctl(3, 0, 0, 0, 0), "
                   "list(resource.getrlimit(resource.RLIMIT_CORE))]", [Test(expected=[0, [1, 1]], expr="f()")])
    if probe is not None:
        assert probe[0].passed, probe[0].reason  # PR_GET_DUMPABLE is 0, the core limit 1 (soft and hard)
    assert_host_alive()


HOST_WORK = '''
def flood(n):
    m = (1 << 61) - 1
    return [7 + k * m for k in range(n)]
def wide():
    return "%300000000d"
def lists(n):
    return [[k] for k in range(n)]
def width():
    return 300000000
'''


def _host_cost(run):
    """(host CPU seconds, host peak resident MiB above the baseline) of ``run()`` in this process."""
    import resource

    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        pass
    rss = lambda key: int(next(x for x in Path("/proc/self/status").read_text().splitlines()  # noqa: E731
                               if x.startswith(key + ":")).split()[1]) / 1024
    base, me = rss("VmRSS"), resource.getrusage(resource.RUSAGE_SELF)
    out = run()
    after = resource.getrusage(resource.RUSAGE_SELF)
    return out, after.ru_utime + after.ru_stime - me.ru_utime - me.ru_stime, rss("VmHWM") - base


def test_the_host_s_own_work_on_a_candidate_s_output_is_bounded(monkeypatch):
    """Issue 39, 3: the host's check built a set from a decoded list of 20,000 colliding ints (12.3 s of host CPU,
    the GIL held) and formatted ``'%300000000d' % 2`` (+286 MiB). Checks run in a judge process with a time and a
    memory limit, and refuse hash-flooding containers and huge format widths outright."""
    from c3_sandbox import judge

    monkeypatch.setattr(judge, "JUDGE_TEST_S", 1.0)
    tests = ["assert set(flood(40000)) == set((4, 5))", "assert frozenset(flood(40000)) == frozenset()",
             "assert wide() % 2 == 1", "assert '%*d' % (width(), 1) == ''",
             "assert sum(lists(49000), []) == []"]  # quadratic: no guard of its own, the judge's time limit ends it
    results, cpu, peak = _host_cost(lambda: attack(HOST_WORK, tests, timeout_s=10.0))
    if results is not None:
        assert [r.passed for r in results] == [False] * 5, [r.reason for r in results]
        assert all("collide" in r.reason for r in results[:2]) and "format width" in results[2].reason
        assert "format width" in results[3].reason and "longer than 1.0s" in results[4].reason, results[4].reason
    assert cpu < 2.0 and peak < 100, (cpu, peak)
    assert_host_alive()


# --- No kernel state shared with the host or a neighbour (issue 39, principle 4) -----------------
# Each box reads its own overlay over a tmpfs image of the Python installation (domains/code/image.py), not the
# host's folders; each test gets a fresh tmpfs, IPC and PID namespace. Against the host's folders bound into the
# box, every attack below got through.

STDLIB = os.path.dirname(os.__file__)  # the same path inside the box (the image keeps the host's paths)


def _negative_dentries():
    return int(Path("/proc/sys/fs/dentry-state").read_text().split()[4])


DENTRIES = '''
import os
def spray(n):
    d = os.path.dirname(os.__file__)
    for i in range(n):
        try:
            os.stat("%s/c3-no-such-%d" % (d, i))
        except OSError:
            pass
    return 1
'''


def test_a_candidate_adds_no_negative_dentries_to_the_host_s_cache():
    """150,000 lookups of missing names in the standard library's folder: on the host's folders each one stayed in
    the host's dentry cache (+150k); on the box's tmpfs image a negative dentry is dropped on last use."""
    before = _negative_dentries()
    results = attack(DENTRIES, [Test(expected=1, expr="spray(150000)")], timeout_s=20)
    grown = _negative_dentries() - before
    if results is not None:
        assert results[0].passed, results[0].reason
        assert grown < 50_000, grown


EVICT = '''
import os
def evict(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    except OSError:
        os.close(fd)
        return "refused"  # not a call a test may make (the system-call filter)
    try:
        os.preadv(fd, [bytearray(1 << 16)], 0, os.RWF_NOWAIT)
        return "cached"  # still resident in its own copy
    except BlockingIOError:
        return "evicted"
    except OSError:
        return "cannot tell"  # the box's overlay refuses RWF_NOWAIT
    finally:
        os.close(fd)
'''


def _resident(path):
    """Whether the host's ``path`` is in the page cache (a read that must not wait for the disk)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        return os.preadv(fd, [bytearray(1 << 16)], 0, os.RWF_NOWAIT) > 0
    except BlockingIOError:
        return False
    finally:
        os.close(fd)


def test_a_candidate_cannot_evict_the_host_s_files_from_the_page_cache():
    """``posix_fadvise(DONTNEED)`` on the box's copy of a Python file: the host's file stays cached (on the bound
    host folder it was evicted and the host's next import read it from disk), and the box's copy, on tmpfs,
    stays resident too (and its overlay refuses ``RWF_NOWAIT``: no page-cache probe tells anything)."""
    path = os.path.join(STDLIB, "_pydecimal.py")
    Path(path).read_bytes()
    assert _resident(path)
    results = attack(EVICT, [Test(expected="evicted", expr=f"evict({path!r})")])
    if results is not None:
        assert not results[0].passed and results[0].status == "failed", results[0].reason
        assert _resident(path)


LOCKER = '''
import fcntl, os, time
def hold(path, seconds):
    fd = os.open(path, os.O_RDONLY)
    for lock in (lambda: fcntl.flock(fd, fcntl.LOCK_EX), lambda: fcntl.lockf(fd, fcntl.LOCK_SH)):  # and a POSIX one
        try:
            lock()
        except OSError:
            pass  # refused by the system-call filter: nothing to see, the watcher still looks
    time.sleep(seconds)
    return 1
'''
WATCHER = '''
import fcntl, os, struct, time
def seen(path, seconds):
    """Whether another sandbox's lock on ``path`` is visible from here, within ``seconds``."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        fd = os.open(path, os.O_RDONLY)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return "flock"
            except OSError:
                pass  # refused here too: the lock is not seen this way
            query = struct.pack("hhqqi", fcntl.F_WRLCK, 0, 0, 0, 0)
            try:
                if struct.unpack("hhqqi", fcntl.fcntl(fd, fcntl.F_GETLK, query))[0] != fcntl.F_UNLCK:
                    return "posix lock"
            except OSError:
                pass
        finally:
            os.close(fd)
        time.sleep(0.05)
    return "nothing"
'''


def test_two_concurrent_sandboxes_share_no_lock_on_a_file_both_read():
    """One sandbox locks the interpreter's own executable and a Python file (flock and a POSIX read lock) while a
    concurrent one looks for the locks: on the bound host folders they were one inode, an exact covert channel;
    each box's overlay is a superblock of its own, so the second box sees nothing, and neither does the host."""
    sb = pool(workers=2)
    if sb is None:
        return
    for path in ("/usr/bin/true", os.path.join(STDLIB, "os.py")):
        jobs = [(LOCKER, [Test(expected=1, expr=f"hold({path!r}, 3.0)")], ""),
                (WATCHER, [Test(expected="nothing", expr=f"seen({path!r}, 2.5)")], "")]
        results = sb.run_many(jobs, timeout_s=8)
        assert results[0][0].passed, results[0][0].reason
        assert results[1][0].passed, (path, results[1][0].reason)
    sb.close()


NOTIFY = '''
import ctypes, os, time
def watch(seconds):
    libc = ctypes.CDLL(None, use_errno=True)
    fd = libc.inotify_init1(os.O_NONBLOCK)
    if fd < 0:
        return "no inotify"
    d = os.path.dirname(os.__file__)
    for where in (d, d + "/__pycache__"):
        libc.inotify_add_watch(fd, where.encode(), 0x20 | 0x01)  # IN_OPEN | IN_ACCESS
    time.sleep(seconds)
    try:
        events = os.read(fd, 1 << 16)
    except BlockingIOError:
        events = b""
    return "saw colorsys" if b"colorsys" in events else "saw nothing"
'''
IMPORTER = '''
import time
def load():
    time.sleep(0.8)
    import colorsys, wave
    return 1
'''


def test_a_sandbox_cannot_watch_a_neighbour_s_imports():
    """An inotify watch on the standard library's folders saw a concurrent sandbox import ``colorsys``; the box has
    no inotify instance now (``user.max_inotify_instances`` 0), and each box's folders are its own anyway."""
    sb = pool(workers=2)
    if sb is None:
        return
    results = sb.run_many([(NOTIFY, [Test(expected="no inotify", expr="watch(2.5)")], ""),
                           (IMPORTER, [Test(expected=1, expr="load()")], "")], timeout_s=8)
    assert results[1][0].passed, results[1][0].reason
    assert results[0][0].passed, results[0][0].reason
    sb.close()


CACHE_PROBE = '''
import os
def send(path, bit):
    fd = os.open(path, os.O_RDONLY)
    if bit:
        os.read(fd, 1 << 20)
    else:
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        except OSError:
            pass  # not a call a test may make: the later box must read the same answer anyway
    os.close(fd)
    return 1
def receive(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.preadv(fd, [bytearray(4096)], 0, os.RWF_NOWAIT)
        return "cached"
    except BlockingIOError:
        return "evicted"
    except OSError:
        return "cannot tell"  # the box's overlay refuses RWF_NOWAIT
    finally:
        os.close(fd)
'''


def test_a_finished_sandbox_leaves_nothing_in_the_page_cache_for_a_later_one():
    """A sandbox that evicts (bit 0) or reads (bit 1) a rarely used Python file, then a later sandbox that asks
    whether it is cached (``preadv2(RWF_NOWAIT)``): through the host's page cache that was a channel; every box's
    copy is on tmpfs now, always resident, so the receiver reads the same whatever was sent."""
    path = os.path.join(STDLIB, "aifc.py")
    got = []
    for bit in (0, 1, 0):
        send = attack(CACHE_PROBE, [Test(expected=1, expr=f"send({path!r}, {bit})")])
        if send is None:
            return
        assert send[0].passed, send[0].reason
        got.append(attack(CACHE_PROBE, [Test(expected="evicted", expr=f"receive({path!r})")])[0])
    assert not any(r.passed for r in got) and len({r.reason for r in got}) == 1, [r.reason for r in got]


COUNTERS_PER_TEST = '''
import ctypes, os
def counters():
    fd = os.open("/sandbox", os.O_TMPFILE | os.O_RDWR, 0o600)  # an inode, no name: the box looks unused after
    child = os.fork()
    if child == 0:
        os._exit(0)
    os.waitpid(child, 0)
    libc = ctypes.CDLL(None, use_errno=True)
    ids = [libc.shmget(0, 4096, 0o600), libc.semget(0, 1, 0o600), libc.msgget(0, 0o600)]  # IPC_PRIVATE
    return [os.fstat(fd).st_ino, os.getpid(), child] + ids
'''


def test_pid_inode_and_system_v_counters_restart_with_every_test():
    """Each test reads the next tmpfs inode number (an ``O_TMPFILE`` leaves no file, so the box looked unused), its
    own and its child's pids and fresh System V ids: before, each test saw the last one's counters moved on (a
    channel from one test to the next, and the test's position); now every test sees the same."""
    sb = pool(workers=1)
    if sb is None:
        return
    raw = sb.raw(COUNTERS_PER_TEST, [{"index": i, "expr": "counters()"} for i in range(3)], "", 5.0)
    assert all(r["status"] == "value" for r in raw), raw
    values = [r["value"] for r in raw]
    assert values[0] == values[1] == values[2], values
    sb.close()


HOST_TREE = '''
import os
def look():
    there = [p for p in ("/etc/passwd", "/etc/hostname", "/usr/include", "/work", "/home",
                         os.path.join(os.path.dirname(os.__file__), "site-packages")) if os.path.exists(p)]
    share = sorted(os.listdir("/usr/share")) if os.path.isdir("/usr/share") else []
    return [there, os.statvfs("/").f_blocks * os.statvfs("/").f_frsize <= 1 << 20, share]
'''


def test_the_box_reads_its_own_copy_not_the_host_s_folders():
    """The host's folders are not there: no /etc/passwd, no /usr/share but the time-zone database (issue 50), no
    headers, no third-party packages; the root's file system is the box's own small one (not the host's disk, not the
    shared image's tmpfs)."""
    share = ["zoneinfo"] if image.zoneinfo_source() else []
    results = attack(HOST_TREE, [Test(expected=[[], True, share], expr="look()")])
    if results is not None:
        assert results[0].passed, results[0].reason


# --- Round five on principle 4: attacks on the box's own image and per-test counters ------------------------------

WRITE_IMAGE = '''
import os
def tamper():
    target = os.__file__
    evil = os.path.join(os.path.dirname(target), "evil.py")
    tries = {"open for writing": lambda: os.open(target, os.O_WRONLY),
             "create a file": lambda: os.open(evil, os.O_CREAT | os.O_WRONLY),
             "chmod": lambda: os.chmod(target, 0o777), "utime": lambda: os.utime(target, (0, 0)),
             "setxattr": lambda: os.setxattr(target, "user.c3", b"x"),
             "rename": lambda: os.rename(target, target + "x"),
             "hard link": lambda: os.link(target, "/sandbox/os.py"), "mkdir in /": lambda: os.mkdir("/evil"),
             "truncate": lambda: os.truncate(target, 0)}
    done = []
    for name, step in tries.items():
        try:
            step()
            done.append(name)
        except OSError:
            pass
    return done
'''


def test_the_image_cannot_be_changed_from_inside():
    """Every way of writing to the box's copy of the Python installation fails (an overlay without an upper layer is
    read-only), and the pool's image on the host is unchanged: a later box reads the same files."""
    image = sbx._image()
    copy = os.path.join(image, os.__file__.lstrip("/"))
    before = os.stat(copy)
    results = attack(WRITE_IMAGE, [Test(expected=[], expr="tamper()")])
    if results is not None:
        assert results[0].passed, results[0].reason
        after = os.stat(copy)
        assert (after.st_size, after.st_mtime_ns, after.st_mode) == (before.st_size, before.st_mtime_ns, before.st_mode)
        assert not os.path.exists(os.path.join(os.path.dirname(copy), "evil.py"))


STATFS = '''
import os
def sizes(host_devices):
    small = [os.statvfs(p).f_blocks * os.statvfs(p).f_frsize <= 1 << 20 for p in ("/", os.__file__, "/usr/bin/true")]
    return [all(small), any(os.stat(p).st_dev in host_devices for p in ("/", os.__file__, "/usr/bin/true"))]
'''


def test_the_shared_image_s_file_system_is_not_observable():
    """``statvfs`` on any file of the image reports the box's own 1 MiB layer, not the host tmpfs that holds the
    image (whose free space other users of /dev/shm change: a channel), and no host device number (the overlay's
    own numbers)."""
    devices = sorted({os.stat(p).st_dev for p in (sbx._image(), os.__file__, "/usr/bin/true", "/")})
    results = attack(STATFS, [Test(expected=[True, False], expr=f"sizes({devices!r})")])
    if results is not None:
        assert results[0].passed, results[0].reason


PAGEOUT = '''
import ctypes, mmap, os
def send(path):
    fd = os.open(path, os.O_RDONLY)
    m = mmap.mmap(fd, 0, prot=mmap.PROT_READ)
    for call in (lambda: m.madvise(21), lambda: os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)):  # MADV_PAGEOUT
        try:
            call()
        except OSError:
            pass  # refused by the system-call filter
    m.close()
    os.close(fd)
    return 1
def receive(path):
    fd = os.open(path, os.O_RDONLY)
    size = min(os.fstat(fd).st_size, 16 << 12)
    m = mmap.mmap(fd, size, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ | mmap.PROT_WRITE)
    vec = (ctypes.c_ubyte * 16)()
    addr = ctypes.addressof(ctypes.c_char.from_buffer(m))
    rc = ctypes.CDLL(None, use_errno=True).mincore(ctypes.c_void_p(addr), ctypes.c_size_t(size), vec)
    if rc != 0:
        return "refused"  # mincore is not a call a test may make (the system-call filter)
    return "resident" if all(v & 1 for v in vec[:(size + 4095) // 4096]) else "evicted"
'''


def test_mincore_and_madv_pageout_tell_a_later_box_nothing():
    """The page-cache channel by other calls: ``MADV_PAGEOUT`` and ``fadvise`` on a mapping of an image file, then
    ``mincore`` in a later box. Image pages live on tmpfs (no swap to page out to here; and they are charged to
    the host, not the box): always resident."""
    path = os.path.join(STDLIB, "sunau.py")
    send = attack(PAGEOUT, [Test(expected=1, expr=f"send({path!r})")])
    if send is None:
        return
    assert send[0].passed, send[0].reason
    got = attack(PAGEOUT, [Test(expected="evicted", expr=f"receive({path!r})")])
    assert not got[0].passed and got[0].reason in ("got 'resident'", "got 'refused'"), got[0].reason


DNOTIFY = '''
import fcntl, os, signal, time
def watch(seconds):
    seen = []
    signal.signal(signal.SIGIO, lambda *a: seen.append(1))
    fd = os.open(os.path.dirname(os.__file__), os.O_RDONLY)
    try:
        fcntl.fcntl(fd, fcntl.F_NOTIFY, fcntl.DN_ACCESS | fcntl.DN_MODIFY | fcntl.DN_MULTISHOT)
    except OSError:
        return "no dnotify"
    time.sleep(seconds)
    return "saw %d" % len(seen) if seen else "saw nothing"
'''


def test_dnotify_on_the_library_folder_does_not_see_a_neighbour():
    """dnotify (``fcntl(F_NOTIFY)``) is not limited by the inotify count: a watch on the standard library's folder
    while a concurrent box imports from it sees nothing (each box's overlay directory is its own inode)."""
    sb = pool(workers=2)
    if sb is None:
        return
    results = sb.run_many([(DNOTIFY, [Test(expected="saw nothing", expr="watch(2.5)")], ""),
                           (IMPORTER.replace("colorsys, wave", "colorsys, wave, sunau, chunk"),
                            [Test(expected=1, expr="load()")], "")], timeout_s=8)
    assert results[1][0].passed, results[1][0].reason
    assert results[0][0].passed or results[0][0].reason == "got 'no dnotify'", results[0][0].reason
    sb.close()


IPC_FLOOD = '''
import ctypes
def flood():
    libc = ctypes.CDLL(None, use_errno=True)
    made = 0
    for _ in range(3000):
        if libc.semget(0, 1, 0o600) < 0:
            break
        made += 1
    return made > 0
'''


def test_a_candidate_that_leaves_thousands_of_system_v_objects_does_not_stall_the_next_test():
    """Every test leaves 3,000 semaphore sets behind (each IPC namespace is freed in the background): the runner's
    next new IPC namespace is still made (it waits for the count to drop), and a last honest test passes."""
    results = attack(IPC_FLOOD + "\ndef honest():\n    return 1\n",
                     [Test(expected=True, expr="flood()") for _ in range(8)] + [Test(expected=1, expr="honest()")],
                     timeout_s=10)
    if results is not None:
        assert all(r.passed for r in results), [r.reason for r in results if not r.passed]


def _host_sees_a_lock(path, seconds, seen):
    """The host's own look for a lock on ``path`` (flock and POSIX), for ``seconds``; appends what it saw."""
    import fcntl
    import struct

    end = time.monotonic() + seconds
    while time.monotonic() < end and not seen:
        with open(path, "rb") as fh:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                fcntl.flock(fh, fcntl.LOCK_UN)
            except BlockingIOError:
                seen.append("flock")
            query = struct.pack("hhqqi", fcntl.F_WRLCK, 0, 0, 0, 0)
            if struct.unpack("hhqqi", fcntl.fcntl(fh, fcntl.F_GETLK, query))[0] != fcntl.F_UNLCK:
                seen.append("posix lock")
        time.sleep(0.05)


def test_a_lock_on_dev_null_is_not_seen_by_a_concurrent_box_or_the_host():
    """Found in round five: with the image, the five device nodes were the last inodes two boxes shared (a flock on
    ``/dev/null`` was a channel); an unprivileged host cannot give a box nodes of its own (a root host does). Since
    round six no test may take a lock on anything (``flock`` is EPERM, ``fcntl`` lock commands off the allow-list):
    neither a concurrent box nor the host sees one, as root and as ``nobody``."""
    sb = pool(workers=2)
    if sb is None:
        return
    seen = []
    look = threading.Thread(target=_host_sees_a_lock, args=("/dev/null", 2.5, seen))
    look.start()
    results = sb.run_many([(LOCKER, [Test(expected=1, expr="hold('/dev/null', 3.0)")], ""),
                           (WATCHER, [Test(expected="nothing", expr="seen('/dev/null', 2.5)")], "")], timeout_s=8)
    look.join()
    assert results[0][0].passed, results[0][0].reason
    assert results[1][0].passed, results[1][0].reason
    assert not seen, seen
    sb.close()


def test_an_image_folder_that_is_not_a_tmpfs_is_refused_with_the_fix(monkeypatch, tmp_path):
    """The image must be on a tmpfs (on a disk file system its negative dentries and page cache would be the host's
    again): another folder is refused, naming the variable that chooses it."""
    from c3_sandbox import image

    disk = REPO / ".git" if (REPO / ".git").exists() else tmp_path
    if image._is_tmpfs(str(disk)):
        return  # this checkout itself is on a tmpfs: nothing to refuse here
    monkeypatch.setenv(image.IMAGE_ENV, str(disk))
    with pytest.raises(image.ImageError, match=image.IMAGE_ENV):
        image.image_for(sys.base_prefix, "/no-such-python")


# --- Round six (issue 39): an allow-list of calls, fail-fast after a kill, CPU looks on the clock ---------------

ATTEMPTS = '''
import ctypes, errno
libc = ctypes.CDLL(None, use_errno=True)
def attempt(out, name, call):
    """Record in ``out`` what ``call`` got: "done", or its errno's name."""
    try:
        call()
        out[name] = "done"
    except OSError as exc:
        out[name] = errno.errorcode.get(exc.errno, str(exc.errno))
def checked(rc):
    if rc < 0:
        raise OSError(ctypes.get_errno(), "")
'''
REFUSED_KINDS = ATTEMPTS + '''
import fcntl, os, socket, stat, struct
from functools import partial
def tries():
    """Each way a test could run a program, make a pipe, a FIFO or a device node, take a lock (on any inode, through
    any command spelling) or start a session: what happened to it ("done" or the errno's name)."""
    out = {}
    attempt = partial(globals()["attempt"], out)
    fd = os.open("/sandbox/f", os.O_RDWR | os.O_CREAT, 0o600)
    lock = ctypes.create_string_buffer(struct.pack("hhqqi", fcntl.F_WRLCK, 0, 0, 0, 0), 32)
    attempt("pipe", os.pipe)
    attempt("pipe2", lambda: os.pipe2(os.O_CLOEXEC))
    attempt("mkfifo", lambda: os.mkfifo("/sandbox/fifo"))
    attempt("mknod", lambda: os.mknod("/sandbox/null", 0o666 | stat.S_IFCHR, os.makedev(1, 3)))
    attempt("flock", lambda: fcntl.flock(fd, fcntl.LOCK_EX))
    attempt("lockf", lambda: fcntl.lockf(fd, fcntl.LOCK_EX))
    attempt("OFD lock", lambda: fcntl.fcntl(fd, 37, lock.raw))  # F_OFD_SETLK
    attempt("lease", lambda: fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_RDLCK))
    attempt("F_SETLK, upper bits set", lambda: checked(libc.syscall(FCNTL, fd, (1 << 32) | fcntl.F_SETLK, lock)))
    attempt("setsid", os.setsid)
    attempt("socketpair", socket.socketpair)  # socket buffers: kernel memory no limit of the box counts
    attempt("AF_UNIX socket", lambda: socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM))
    attempt("AF_INET socket", lambda: socket.socket(socket.AF_INET))  # what uuid1 and name lookups try
    attempt("AF_NETLINK socket", lambda: socket.socket(16, socket.SOCK_RAW))
    attempt("AF_VSOCK socket", lambda: socket.socket(40, socket.SOCK_STREAM))  # outside the network namespace
    attempt("AF_UNIX, upper bits set", lambda: checked(libc.syscall(SOCKET, (1 << 32) | 1, 1, 0)))
    attempt("execve of a memory file", lambda: os.execve(os.memfd_create("x"), ["x"], {}))
    attempt("execv", lambda: os.execv("/usr/bin/true", ["true"]))  # last: on success nothing is reported
    return out
'''


def test_a_candidate_execs_nothing_and_makes_no_pipe_special_file_or_lock():
    """Round six: an exec'd program is dumpable again and runs outside Python's reach; a pipe's buffer is charged to
    the host user (and, like a socket's, to no limit of the box: round seven measured ~280 MiB of socket buffers per
    box outside its cgroup's memory.max); a FIFO, device node or lock is state on an inode another box or the host
    can see. The allow-list refuses them all (EPERM where a program may try them honestly: exec, pipes, sockets,
    special files, flock, setsid), and a lock command with garbage in its upper 32 bits is refused as the kernel would
    read it."""
    code = REFUSED_KINDS.replace("FCNTL", str(_nr("fcntl"))).replace("SOCKET", str(_nr("socket")))
    eperm = ("pipe", "pipe2", "mkfifo", "mknod", "flock", "setsid", "socketpair", "AF_UNIX socket", "AF_INET socket",
             "AF_NETLINK socket", "AF_VSOCK socket", "AF_UNIX, upper bits set", "execve of a memory file", "execv")
    results = attack(code, [Test(expected=[], expr="sorted(k for k, v in tries().items() if v == 'done')"),
                            Test(expected=["EPERM"] * len(eperm), expr=f"[tries()[k] for k in {eperm!r}]")])
    if results is not None:
        assert results[0].passed and results[1].passed, [r.reason for r in results]
    assert_host_alive()


PIPE_HOARD = '''
import fcntl, os, time
def hoard(seconds):
    """Pipes at their largest size (1 MiB, what an unprivileged user may set) in as many processes as the box allows:
    past fs.pipe-user-pages-soft (64 MiB) every new pipe of the same host user gets 2 pages."""
    end = time.time() + seconds
    for _ in range(24):
        try:
            if os.fork() == 0:
                try:
                    while True:
                        r, w = os.pipe()
                        fcntl.fcntl(w, 1031, 1 << 20)  # F_SETPIPE_SZ
                except OSError:
                    pass
                time.sleep(max(0.0, end - time.time()))
                os._exit(0)
        except OSError:
            break
    time.sleep(max(0.0, end - time.time()))
    return 1
'''


def test_a_candidate_cannot_shrink_the_host_user_s_new_pipes():
    """Pipe buffers are charged to the host user who owns the box (the host user itself when the host is not root:
    the ``nobody`` re-run): a candidate hoarding them shrank every new pipe of the host's to 8 KiB. A test may make
    no pipe at all now; the host's pipes keep their 64 KiB while the hoarder runs."""
    sizes, done = [], threading.Event()

    def look():
        import fcntl

        while not done.is_set():
            r, w = os.pipe()
            sizes.append(fcntl.fcntl(w, 1032))  # F_GETPIPE_SZ
            os.close(r)
            os.close(w)
            time.sleep(0.05)

    watcher = threading.Thread(target=look)
    watcher.start()
    try:
        results = attack(PIPE_HOARD, [Test(expected=1, expr="hoard(2.5)")], timeout_s=5)
    finally:
        done.set()
        watcher.join()
    if results is not None:
        assert results[0].passed, results[0].reason
    assert sizes and min(sizes) >= 65536, sorted(set(sizes))


PEEK = '''
import time
def spin():
    while True:
        pass
def after():
    return "ran"
'''


def test_no_test_runs_after_the_host_killed_one():
    """The bit left open in round four: a later test could read, in its copy of the runner's memory, whether an
    earlier one was killed at its limit (which tells something of the reference's time). Once the host kills a test,
    the runner runs none of the candidate's later tests: they fail as not run."""
    results = attack(PEEK, [Test(expected=1, expr="spin()"), Test(expected="ran", expr="after()"),
                            Test(expected="ran", expr="after()")], timeout_s=1.0)
    if results is not None:
        assert results[0].status == "timeout", results[0].reason
        assert [r.passed for r in results[1:]] == [False, False], [r.reason for r in results]
        from c3_sandbox.runner import NOT_RUN

        assert all(r.reason == NOT_RUN % 0 for r in results[1:]), [r.reason for r in results]
    honest = attack(PEEK, [Test(expected="ran", expr="after()") for _ in range(3)], timeout_s=1.0)
    if honest is not None:
        assert all(r.passed for r in honest), [r.reason for r in honest]


DRIP = '''
import os, time
def drip():
    """Spins the CPU and writes a byte on the result pipe every few milliseconds: a runner that looked at the test's
    CPU time only when its pipe was quiet never looked."""
    while True:
        end = time.monotonic() + 0.004
        while time.monotonic() < end:
            pass
        os.write(3, b" ")
'''


def test_a_dripping_result_pipe_does_not_stop_the_cpu_clock():
    """The runner looks at a running test on the clock, whatever it writes meanwhile: a test that drips bytes on its
    result pipe while spinning is killed at its CPU-time limit (before: at the wall-clock ceiling, 3 x as late)."""
    results = attack(DRIP, [Test(expected=1, expr="drip()")], timeout_s=1.0)
    if results is not None:
        assert results[0].status == "timeout" and results[0].reason == "exceeded 1.0s of CPU time", results[0]


def test_a_test_whose_cpu_time_goes_unreported_is_killed(monkeypatch):
    """The host kills a running test it has heard nothing about for ``REPORT_GAP_S`` (the runner reports every
    ``REPORT_EVERY_S`` on its own clock): here a runner that never reports, so a spinning test with a 20 s limit
    ends after about 2 s, not at its 60 s wall-clock ceiling."""
    source = runner.source()
    line = 'say("C %d %.3f" % (index, cpu))'
    assert source.count(line) == 1
    monkeypatch.setattr(launch, "_SOURCE", [source.replace(line, "pass")])
    start = time.monotonic()
    results = attack(PEEK, [Test(expected=1, expr="spin()")], timeout_s=20.0)
    if results is not None:
        assert results[0].status == "timeout", results[0]
        assert "unreported" in results[0].reason and time.monotonic() - start < 10, results[0]


HOST_WIDE = '''
import ctypes, errno
libc = ctypes.CDLL(None, use_errno=True)
def calls():
    """Calls that read or change what the kernel keeps for the whole host, or probe the page cache: each one's errno
    (0 when it worked)."""
    buf = ctypes.create_string_buffer(4096)
    out = {}
    for name, args in CALLS:
        rc = libc.syscall(NUMBERS[name], *[buf if a == "buf" else a for a in args])
        out[name] = 0 if rc >= 0 else errno.errorcode.get(ctypes.get_errno(), ctypes.get_errno())
    return out
'''
HOST_WIDE_CALLS = [("sysinfo", ("buf",)), ("ustat", (0, "buf")), ("adjtimex", ("buf",)), ("sync", ()),
                   ("syncfs", (0,)), ("io_setup", (1, "buf")), ("sysfs", (3,)), ("mincore", (0, 4096, "buf")),
                   ("fadvise64", (0, 0, 0, 4)), ("readahead", (0, 0, 4096)), ("cachestat", (0, "buf", "buf", 0)),
                   ("membarrier", (0, 0, 0)), ("mlock", (0, 4096)), ("set_mempolicy", (0, 0, 0)),
                   ("tee", (0, 1, 4096, 0)), ("splice", (0, 0, 1, 0, 4096, 0)), ("setuid", (0,)),
                   ("pidfd_open", (1, 0)), ("personality", (0xFFFFFFFF,)), ("setsockopt", (0, 1, 7, "buf", 4)),
                   ("sendmsg", (0, "buf", 0))]


def test_host_wide_kernel_state_is_not_a_call_a_test_can_make():
    """Off the allow-list, whatever their arguments: the host's load and memory (``sysinfo``), file systems
    (``ustat``, ``sysfs``, ``sync``), its clock, AIO contexts, page-cache residency and eviction, memory policies,
    socket buffer sizes, splicing, credentials, pidfds. Each fails with ENOSYS, as a call this kernel lacks."""
    calls = [(n, a) for n, a in HOST_WIDE_CALLS if _nr(n) >= 0]
    code = HOST_WIDE.replace("CALLS", repr(calls)).replace("NUMBERS", repr({n: _nr(n) for n, _ in calls}))
    results = attack(code, [Test(expected=dict.fromkeys([n for n, _ in calls], "ENOSYS"),
                                 expr="calls()")])
    if results is not None:
        assert results[0].passed, results[0].reason


def test_the_allow_list_is_a_list_of_known_calls_and_names_no_refused_one():
    """The filter's lists: disjoint, every name a call libseccomp knows on some architecture, and none of the calls
    this module attacks with is allowed."""
    allowed, refused = set(seccomp.ALLOWED_SYSCALLS), set(seccomp.REFUSED_SYSCALLS)
    killed = set(seccomp.KILLED_SYSCALLS)
    assert len(allowed) == len(seccomp.ALLOWED_SYSCALLS)
    assert not allowed & refused and not allowed & killed and not refused & killed
    conditional = {"socket", "socketpair", "clone", "fcntl", "ioctl", "prctl", "madvise", "prlimit64", "setrlimit",
                   "rt_sigaction", "setpriority", "sched_setscheduler", "sched_setparam", "sched_setattr",
                   "sched_setaffinity"}
    assert not allowed & conditional
    assert not allowed & {n for n, _ in HOST_WIDE_CALLS} and not allowed & {"clone3", "execve", "socket"}
    unknown = [n for n in allowed | refused | killed if _nr(n) < 0 and n not in
               ("_llseek", "fstatat64", "mmap2", "ugetrlimit", "_newselect", "open", "creat", "stat", "lstat",
                "access", "readlink", "getdents", "mkdir", "rmdir", "unlink", "rename", "link", "symlink", "chmod",
                "chown", "lchown", "utime", "utimes", "futimesat", "poll", "select", "epoll_create", "epoll_wait",
                "eventfd", "signalfd", "inotify_init", "fork", "vfork", "getpgrp", "time", "alarm", "pause",
                "dup2", "pipe", "mknod", "getrlimit", "iopl", "ioperm", "arch_prctl")]
    assert not unknown, unknown  # a misspelt name would allow nothing and be dropped silently
    compiled = seccomp.syscall_filter()
    assert len(compiled[0]) % 8 == 0 and len(compiled[0]) // 8 < 4096  # the kernel's limit on one BPF program


AUTOREAP = '''
import os, signal, time
def burn(children, each):
    """Children that each spin ``each`` seconds of CPU; the parent sleeps meanwhile. With SIGCHLD ignored the kernel
    reaps them itself, and their CPU time went nowhere the runner could count it."""
    try:
        signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    except OSError:
        pass
    for _ in range(children):  # one at a time: alive, no child has used more than the limit
        pid = os.fork()
        if pid == 0:
            end = time.process_time() + each
            while time.process_time() < end:
                pass
            os._exit(0)
        try:  # until it has ended, never reaping it: the kernel does (SIGCHLD ignored), or it stays a zombie
            os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)
        except ChildProcessError:
            pass  # reaped by the kernel already
    return 1
'''


def test_children_reaped_by_the_kernel_still_count_against_the_limit():
    """Round seven: 3 x 0.6 s of CPU in children, one after the other, under a 1 s limit passed while their parent
    ignored SIGCHLD (children reaped by the kernel are counted in nobody's times). A test may not set SIGCHLD's
    action now (EPERM; reading it is allowed), and the runner, their init once orphaned, reaps and counts every ended
    orphan."""
    results = attack(AUTOREAP + "\ndef sig():\n    return signal.getsignal(signal.SIGCHLD) == signal.SIG_DFL\n",
                     [Test(expected=True, expr="sig()"), Test(expected=1, expr="burn(3, 0.6)")], timeout_s=1.0)
    if results is not None:
        assert results[0].passed, results[0].reason
        assert results[1].status == "timeout", results[1]  # (at its CPU limit; on a loaded machine maybe its wall)


RUNNER_LIMITS = ATTEMPTS + '''
import os, resource
from functools import partial
def limits():
    """The runner is pid 1 of the box, the same uid as the test: its limits and scheduling were the test's to change
    (prlimit(1, RLIMIT_NOFILE, 0) broke its next test). What each attempt got, and the test's own changes."""
    out = {}
    attempt = partial(globals()["attempt"], out)
    attempt("prlimit runner NOFILE", lambda: resource.prlimit(1, resource.RLIMIT_NOFILE, (3, 3)))
    attempt("prlimit runner read", lambda: resource.prlimit(1, resource.RLIMIT_CPU))
    attempt("sched runner idle", lambda: os.sched_setscheduler(1, os.SCHED_IDLE, os.sched_param(0)))
    attempt("nice runner", lambda: os.setpriority(os.PRIO_PROCESS, 1, 19))
    attempt("nice the group", lambda: os.setpriority(os.PRIO_PGRP, 0, 19))
    attempt("affinity runner", lambda: os.sched_setaffinity(1, {0}))
    attempt("core limit, upper bits set", lambda: checked(libc.syscall(PRLIMIT, 0, (1 << 32) | 4, LIMIT, None)))
    attempt("dumpable, upper bits set", lambda: checked(libc.prctl(ctypes.c_ulong((1 << 32) | 4), 1, 0, 0, 0)))
    attempt("own NOFILE", lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (32, 32)))
    attempt("own nice", lambda: os.setpriority(os.PRIO_PROCESS, 0, 5))
    return out
LIMIT = ctypes.create_string_buffer(bytes(16))
'''


def test_a_test_changes_its_own_limits_and_scheduling_and_never_the_runner_s():
    """Resource limits and scheduling of the caller only (pid 0); RLIMIT_CORE and PR_SET_DUMPABLE stay refused when
    the request hides them in a register's upper half (the kernel reads 32 bits); then the next test still runs."""
    code = RUNNER_LIMITS.replace("PRLIMIT", str(_nr("prlimit64")))
    want = {"prlimit runner NOFILE": "EPERM", "prlimit runner read": "EPERM", "sched runner idle": "EPERM",
            "nice runner": "EPERM", "nice the group": "EPERM", "affinity runner": "EPERM",
            "core limit, upper bits set": "EPERM", "dumpable, upper bits set": "EPERM", "own NOFILE": "done",
            "own nice": "done"}
    results = attack(code + "\ndef honest():\n    return 1\n",
                     [Test(expected=want, expr="limits()"), Test(expected=1, expr="honest()")])
    if results is not None:
        assert results[0].passed, results[0].reason
        assert results[1].passed, results[1].reason


FUTEX = '''
import ctypes, os, time
libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
class Timespec(ctypes.Structure):
    _fields_ = [("s", ctypes.c_long), ("ns", ctypes.c_long)]
def word():
    """The address of a word in a shared, read-only mapping of the image's os.py."""
    fd = os.open(os.__file__, os.O_RDONLY)
    return libc.mmap(None, 4096, 1, 1, fd, 0) + 64  # PROT_READ, MAP_SHARED
def listen(seconds):
    """Shared FUTEX_WAITs of 0.2 s on that word: whether a wake ever ended one."""
    addr = word()
    value = ctypes.c_uint32.from_address(addr).value
    woken, end = False, time.time() + seconds
    while time.time() < end:
        rc = libc.syscall(NR_FUTEX, ctypes.c_void_p(addr), 0, ctypes.c_uint32(value),
                          ctypes.byref(Timespec(0, 2 * 10 ** 8)), None, 0)
        woken = woken or rc == 0
    return woken
def talk(seconds):
    """Shared FUTEX_WAKEs of every waiter on that word, every 0.25 s: how many were woken."""
    addr = word()
    woke, end = 0, time.time() + seconds
    while time.time() < end:
        woke += max(0, libc.syscall(NR_FUTEX, ctypes.c_void_p(addr), 1, 1 << 30, None, None, 0))
        time.sleep(0.25)
    return woke
'''


def test_two_concurrent_sandboxes_cannot_wake_each_other_through_a_mapped_image_file():
    """Round seven (a red team's): a process-shared futex on a mapped file is keyed by the file's inode and offset,
    and an overlay maps its lower file itself, so two concurrent boxes mapping one image's ``os.py`` could wait and
    wake each other (an exact channel). Concurrent sandboxes never read the same copy of the image now
    (``image.lease``): the waiter is never woken, the waker wakes nobody."""
    sb = pool(workers=2)
    if sb is None:
        return
    code = FUTEX.replace("NR_FUTEX", str(_nr("futex")))
    results = sb.run_many([(code, [Test(expected=False, expr="listen(2.5)")], ""),
                           (code, [Test(expected=0, expr="talk(2.5)")], "")], timeout_s=6)
    sb.close()
    assert results[0][0].passed and results[1][0].passed, (results[0][0].reason, results[1][0].reason)


LATE = '''
import time
def spin_then(seconds, value):
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass
    print("after the limit")
    return value
'''


def test_the_host_s_kill_decides_the_test_whatever_the_runner_ran_after_it(monkeypatch):
    """Round seven (a red team's): a test that ends between the host's kill and the runner reading it (by watching
    the runner's looks) had its value judged, and the runner, not yet told, ran the next tests. The host's decision
    stands now: the killed test is a timeout and every later result is dropped (not run, no output), whatever the
    runner sends. Here a runner that ignores every kill stands in for the race at its widest."""
    source = runner.source()
    line = 'CONTROL["kill"].add(int(line[2:]))'
    assert source.count(line) == 1
    monkeypatch.setattr(launch, "_SOURCE", [source.replace(line, "pass")])
    results = attack(LATE, [Test(expected=1, expr="spin_then(1.6, 1)"), Test(expected=2, expr="spin_then(0, 2)")],
                     timeout_s=1.0)
    if results is not None:
        from c3_sandbox.runner import NOT_RUN

        assert results[0].status == "timeout" and "CPU time" in results[0].reason, results[0]
        assert not results[1].passed and results[1].reason == NOT_RUN % 0 and results[1].output == "", results[1]


def test_cpu_used_after_the_runner_s_last_look_counts(monkeypatch):
    """Round seven (a red team's): CPU burnt between the runner's last look and the test's end (every core for one
    look interval) was never reported. The runner sends the test's whole CPU time, every process reaped, before its
    end line, and the host judges it: here a runner whose periodic reports are removed, so only that last line tells
    the host that a 1.0 s test used 1.6 s."""
    source = runner.source()
    line = 'say("C %d %.3f" % (index, cpu))'
    assert source.count(line) == 1
    monkeypatch.setattr(launch, "_SOURCE", [source.replace(line, "pass")])
    results = attack(LATE, [Test(expected=1, expr="spin_then(1.6, 1)")], timeout_s=1.0)
    if results is not None:
        assert results[0].status == "timeout" and "CPU time" in results[0].reason, results[0]


ADVICE = '''
import ctypes, errno, os
libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
def advise():
    """Each advice on a shared mapping of an image file (2 MiB of the largest one near the interpreter): its errno
    name, or "done". COLLAPSE made that range one huge page that outlived the box, seen by a later candidate reading
    the same copy of the image by its page-fault count; the others change how shared pages are held too."""
    lib = max((os.path.join(d, n) for d in {os.path.dirname(os.__file__), os.path.dirname(os.path.dirname(
        os.__file__))} for n in os.listdir(d) if os.path.isfile(os.path.join(d, n))), key=os.path.getsize)
    fd = os.open(lib, os.O_RDONLY)
    size = min(2 << 20, os.fstat(fd).st_size & ~4095)
    addr = libc.mmap(None, size, 1, 1, fd, 0)  # PROT_READ, MAP_SHARED
    out = {}
    for name, advice in (("COLLAPSE", 25), ("HUGEPAGE", 14), ("NOHUGEPAGE", 15), ("COLD", 20), ("PAGEOUT", 21),
                         ("MERGEABLE", 12), ("REMOVE", 9), ("own memory: DONTNEED", 4), ("own memory: WILLNEED", 3)):
        rc = libc.madvise(addr, size, advice)
        out[name] = "done" if rc == 0 else errno.errorcode.get(ctypes.get_errno())
    return out
'''


def test_memory_advice_cannot_change_how_a_shared_file_is_held():
    """Round seven (a red team's): ``madvise(MADV_COLLAPSE)`` on a mapping of an image file left a huge page in that
    copy's page cache, seen by the next candidate given the same copy (its page faults over the range: 32 before,
    1 after): a channel between successive boxes. ``madvise`` is allowed only with advice that acts on the process's
    own mappings (``seccomp.MADVISE_ALLOWED``)."""
    want = dict.fromkeys(["COLLAPSE", "HUGEPAGE", "NOHUGEPAGE", "COLD", "PAGEOUT", "MERGEABLE", "REMOVE"], "ENOSYS")
    want.update({"own memory: DONTNEED": "done", "own memory: WILLNEED": "done"})
    results = attack(ADVICE, [Test(expected=want, expr="advise()")])
    if results is not None:
        assert results[0].passed, results[0].reason
