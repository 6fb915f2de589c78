"""The sandbox against hostile candidates: every attack passes nothing, ends within its
timeout and leaves the host (and the next candidate) unharmed."""

import os
import socket
import threading
import time

import pytest

import domains.code as dc
from c3_sandbox.sandbox import Sandbox, SandboxError, Test

TIMEOUT = 2.0


def run(code, expected="owned", expr="f()", timeout_s=TIMEOUT):
    start = time.perf_counter()
    results = dc.execute(code, [Test(expected=expected, expr=expr)], timeout_s=timeout_s)
    elapsed = time.perf_counter() - start
    assert elapsed < timeout_s + 15, f"took {elapsed:.1f}s"
    return results[0]


def assert_host_alive():
    assert dc.pass_rate("def f():\n    return 1", [Test(expected=1, expr="f()")]) == 1.0


def test_honest_candidates_pass_and_tests_are_separate():
    code = "calls = []\ndef f(x):\n    calls.append(x)\n    return len(calls)"
    results = dc.execute(code, [Test(expected=1, expr="f(1)"), Test(expected=1, expr="f(2)")])
    assert [r.passed for r in results] == [True, True]  # no state leaks from one test to the next
    assert dc.pass_rate(code, ["assert f(5) == 1", "assert f(5) == 2"]) == 0.5


@pytest.mark.parametrize("code, fragment", [
    ("import sys\ndef f():\n    sys.exit(0)", "SystemExit"),
    ("def f():\n    raise SystemExit", "SystemExit"),
    ("import os\ndef f():\n    os._exit(0)", "without reporting"),
    ("import sys\nsys.exit(0)\ndef f():\n    return 'owned'", "SystemExit"),
    ("import os\nos._exit(0)", "without reporting"),
])
def test_early_exit_passes_nothing(code, fragment):
    r = run(code)
    assert not r.passed and fragment in r.reason


def test_rigged_equality_and_subclasses_do_not_pass():
    for code in ("class A:\n    def __eq__(self, o): return True\n    __hash__ = None\ndef f():\n    return A()",
                 "class S(str):\n    def __eq__(self, o): return True\ndef f():\n    return S('x')",
                 "set = lambda *a: type('X', (), {'__eq__': lambda s, o: True})()\ndef f():\n    return 1"):
        r = run(code, expr="set(f())" if code.startswith("set") else "f()")
        assert not r.passed and "not plain builtin data" in r.reason
    assert not run("def f():\n    return b\"x\"", expected="x").passed  # bytes are not str: type-strict
    assert not run("def f():\n    return (1, 2)", expected=[1, 2]).passed


def test_infinite_loop_times_out():
    r = run("def f():\n    while True:\n        pass", timeout_s=1.0)
    assert not r.passed and r.status == "timeout"


def test_fork_bomb_is_contained():
    r = run("import os\ndef f():\n    while True:\n        os.fork()", timeout_s=2.0)
    assert not r.passed
    assert_host_alive()


def test_memory_bomb_fails():
    r = run("def f():\n    x = bytearray(1 << 34)\n    return 'owned'")
    assert not r.passed and "MemoryError" in r.reason


def test_huge_output_is_capped():
    r = run("import sys\ndef f():\n    while True:\n        sys.stdout.write('x' * 65536)")
    assert not r.passed and len(r.output) <= 2000


def test_files_outside_are_invisible_and_safe(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("secret")
    r = run(f"def f():\n    return open({str(victim)!r}).read()", expected="secret")
    assert not r.passed
    r = run(f"import os\ndef f():\n    os.remove({str(victim)!r})\n    return 'owned'")
    assert not r.passed and victim.read_text() == "secret"
    fixture = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fixtures", "code",
                           "mbpp.jsonl")
    for path in (fixture, os.path.abspath(__file__)):
        assert not run(f"def f():\n    return open({path!r}).read()[:10]", expected=open(path).read()[:10]).passed
    r = run("import shutil\ndef f():\n    shutil.rmtree('/usr', ignore_errors=False)\n    return 'owned'")
    assert not r.passed and os.path.exists("/usr/bin")


def test_parent_environment_is_unreadable(monkeypatch):
    monkeypatch.setenv("C3_SECRET_TOKEN", "hunter2")
    assert not run("import os\ndef f():\n    return os.environ.get('C3_SECRET_TOKEN')", expected="hunter2").passed
    code = ("import os\ndef f():\n    for p in os.listdir('/proc') if os.path.exists('/proc') else []:\n"
            "        try:\n            d = open('/proc/%s/environ' % p, 'rb').read()\n        except Exception:\n      "
            "      continue\n        if b'hunter2' in d:\n            return 'hunter2'\n    return 'nothing'")
    assert not run(code, expected="hunter2").passed


def test_killing_the_parent_harms_nothing():
    """The runner is the PID namespace's init: a signal from inside is dropped (or refused), so the
    next test still runs and the host is untouched."""
    for attack in ("os.kill(os.getppid(), 9)", "os.kill(1, 9)", "os.killpg(0, 9)", "os.kill(-1, 9)", "os.kill(1, 2)"):
        code = f"import os\ndef f():\n    {attack}\n    return 'owned'\ndef g():\n    return 1"
        first, second = dc.execute(code, [Test(expected="owned", expr="f()"), Test(expected=1, expr="g()")],
                                   timeout_s=TIMEOUT)
        assert second.passed, (attack, second)
    assert_host_alive()


def test_sockets_cannot_reach_the_host():
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    port = server.getsockname()[1]
    hits = []
    threading.Thread(target=lambda: hits.append(server.accept()), daemon=True).start()
    code = (f"import socket\ndef f():\n    s = socket.create_connection(('127.0.0.1', {port}), "
            "timeout=1)\n    return 'owned'")
    r = run(code)
    assert not r.passed and not hits
    server.close()


def test_many_candidates_at_once_and_infra_errors_are_not_scored():
    sb = Sandbox(workers=2)
    jobs = [(f"def f():\n    return {i}", [Test(expected=i % 3, expr="f()")], "") for i in range(8)]
    results = sb.run_many(jobs)
    assert [r[0].passed for r in results] == [i % 3 == i for i in range(8)]
    broken = Sandbox(workers=1)
    broken.python = "/nonexistent/python"
    with pytest.raises(SandboxError, match="did not start"):
        broken.run("def f():\n    return 1", [Test(expected=1, expr="f()")])
    sb.close()
    broken.close()
