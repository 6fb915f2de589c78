"""bench/syscall_allowlist.py: with its kill-default filter a call off the allow-list kills the test, where the real
filter answers ENOSYS (so the bench's "all canonical solutions pass" means no canonical solution makes such a call)."""

import pytest

import domains.code as dc
from bench.syscall_allowlist import kill_by_default
from c3_sandbox import launch
from c3_sandbox import sandbox as sbx
from c3_sandbox.sandbox import SandboxError, Test

OFF_LIST = "import os\ndef f():\n    try:\n        os.getloadavg()\n    except OSError:\n        return 'refused'\n" \
           "    return 'read'\n"  # sysinfo: not a call a test may make


def test_the_kill_default_runner_kills_what_the_real_one_refuses(monkeypatch):
    test = [Test(expected="refused", expr="f()")]
    if not sbx.namespaces_available():  # this host cannot isolate candidates: it must refuse them (fail closed)
        with pytest.raises(SandboxError, match="refusing"):
            dc.execute(OFF_LIST, test)
        return
    assert dc.execute(OFF_LIST, test)[0].passed  # the real filter: ENOSYS, caught
    monkeypatch.setattr(launch, "FILTER_DEFAULT", launch.FILTER_DEFAULT)  # restored after the test
    kill_by_default()
    killed = dc.execute(OFF_LIST, test)[0]
    assert not killed.passed and "signal 31" in killed.reason, killed
    honest = dc.execute("def f():\n    return 'refused'\n", test)[0]
    assert honest.passed, honest.reason
