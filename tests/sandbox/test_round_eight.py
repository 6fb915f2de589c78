"""Issue 50's attacks and honest uses (round eight): each test stands alone (no frame walk reaches an earlier test's
result), huge pages and memory files are refused, ``zoneinfo`` has its database, and the standard-library uses the
sandbox cannot offer fail as the README says. As root, the module runs again as ``nobody``."""

import re
from pathlib import Path

from c3_sandbox import sandbox as sbx
from c3_sandbox.sandbox import Test
from tests.sandbox.test_sandbox_adversarial import REPO, ROOT, attack, run_as_nobody

# Everything of earlier tests a test could reach: result-like dicts and lists of them in any frame above it or in the
# collector's view, and the runner's state of the tests run so far (its results and the report's room left)
EARLIER = '''
import gc, sys
def _result_like(v):
    return type(v) is dict and "status" in v and "output" in v
def f(x):
    found, frame = 0, sys._getframe()
    while frame is not None:
        for v in list(frame.f_locals.values()) + list(frame.f_globals.values()):
            if type(v) is list and any(_result_like(r) for r in v):
                found += 1
            elif _result_like(v):
                found += 1
            elif type(v) is dict and ("results" in v or "left" in v):
                found += len(v.get("results") or ()) + (1 if v.get("left") else 0)
        frame = frame.f_back
    found += sum(1 for o in gc.get_objects() if _result_like(o))
    return found
'''


def test_each_test_stands_alone():
    """The issue's four identical ``f(2)`` tests returned 1, 2, 3, 4 by walking to the runner's results; each test's
    child now drops everything of the earlier tests before candidate code runs, so each sees none (0, four times)."""
    results = attack(EARLIER, [Test(expected=0, expr="f(2)") for _ in range(4)])
    if results is not None:
        assert all(r.passed for r in results), [(r.status, r.reason) for r in results]


HUGE = '''
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
def err(ok):
    return 0 if ok else ctypes.get_errno()
def f():
    out = {}
    # PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB (with MAP_POPULATE: the pages are taken)
    addr = libc.mmap(None, 2 << 20, 3, 0x02 | 0x20 | 0x40000 | 0x8000, -1, 0)
    out["mmap MAP_HUGETLB"] = err(addr not in (None, 2 ** 64 - 1))
    for name, flags in (("memfd_create", 0), ("memfd_create MFD_HUGETLB", 4)):
        try:
            os.memfd_create("x", flags)
            out[name] = 0
        except OSError as exc:
            out[name] = exc.errno
    out["shmget SHM_HUGETLB"] = err(libc.shmget(0, 2 << 20, 0o600 | 0o1000 | 0x800) >= 0)  # IPC_CREAT
    out["shmget"] = err(libc.shmget(0, 4096, 0o600 | 0o1000) >= 0)
    plain = libc.mmap(None, 1 << 20, 3, 0x02 | 0x20, -1, 0)
    out["mmap"] = err(plain not in (None, 2 ** 64 - 1))
    return out
'''


def _huge_pages(value=None):
    """The host's reserved huge-page pool (``nr_hugepages``), set to ``value`` when given and allowed; None when the
    machine has no pool to read."""
    path = "/proc/sys/vm/nr_hugepages"
    try:
        if value is not None:
            with open(path, "w") as f:
                f.write(str(value))
        with open(path) as f:
            return int(f.read())
    except OSError:
        return None


def _free_huge_pages():
    with open("/proc/meminfo") as f:
        return int(re.search(r"HugePages_Free:\s+(\d+)", f.read()).group(1))


def test_huge_pages_and_memory_files_are_refused():
    """MAP_HUGETLB, SHM_HUGETLB and memory files (MFD_HUGETLB with them) get EPERM from the filter, with a reserved
    pool where this host lets the test make one (as root: 4 pages, then the old size back) so that the kernel itself
    would have granted them; the pool is whole afterwards. The plain calls still work."""
    before = _huge_pages()
    reserved = _huge_pages(max(before, 4)) if ROOT and before is not None else None
    try:
        free = _free_huge_pages() if reserved else None
        results = attack(HUGE, [Test(expected={"mmap MAP_HUGETLB": 1, "memfd_create": 1, "memfd_create MFD_HUGETLB": 1,
                                               "shmget SHM_HUGETLB": 1, "shmget": 0, "mmap": 0}, expr="f()")])
        if results is not None:
            assert results[0].passed, results[0].reason
            if reserved:
                assert free >= 4 and _free_huge_pages() == free  # the pool was there to take, and nothing took it
    finally:
        if reserved is not None:
            _huge_pages(before)


ZONES = '''
import datetime, zoneinfo
def f():
    paris = datetime.datetime(2024, 7, 1, 12, tzinfo=zoneinfo.ZoneInfo("Europe/Paris"))
    return [paris.utcoffset().total_seconds(), len(zoneinfo.available_timezones()) > 300]
'''


def test_zoneinfo_has_its_database():
    """The image ships the time-zone database (the host's, or the ``tzdata`` package's): ``zoneinfo`` works."""
    results = attack(ZONES, [Test(expected=[7200.0, True], expr="f()")])
    if results is not None:
        assert results[0].passed, results[0].reason


UNOFFERED = '''
def attempt(fn):
    try:
        fn()
        return "works"
    except BaseException as exc:
        return type(exc).__name__
def run_asyncio():
    import asyncio
    async def one():
        return 1
    asyncio.run(one())
def run_pool():
    import multiprocessing
    with multiprocessing.Pool(2) as p:
        p.map(abs, [1, 2])
def run_subprocess():
    import subprocess
    subprocess.run(["/bin/true"])
def f():
    return [attempt(run_asyncio), attempt(run_pool), attempt(run_subprocess)]
'''


def test_the_standard_library_uses_the_box_does_not_offer_fail_as_documented():
    """asyncio's loop needs a socket pair, multiprocessing a pipe, subprocess a pipe and an exec: each is refused
    (EPERM), so each fails at once with PermissionError (c3_sandbox/README.md, "Honest code")."""
    results = attack(UNOFFERED, [Test(expected=["PermissionError"] * 3, expr="f()")])
    if results is not None:
        assert results[0].passed, results[0].reason


def test_round_eight_holds_as_an_unprivileged_user_too():
    """Run as root, this re-runs the module as ``nobody`` (no cgroups, no huge-page pool of its own making)."""
    if not ROOT:
        return  # this run is the unprivileged one
    run = run_as_nobody(f"-m pytest -q -p no:cacheprovider -k 'not unprivileged_user' "
                        f"{Path(__file__).relative_to(REPO)}", timeout=600)
    tail = (run.stdout + run.stderr)[-3000:]
    assert run.returncode == 0, tail
    assert re.search(r"\b5 passed", run.stdout) and "failed" not in run.stdout, tail


def test_a_wrong_answer_costs_the_host_a_length_not_a_parse(monkeypatch):
    """An ``assert f() == y`` test has a value cap tied to ``y`` (as a value test has): a wrong 99,990-item list fails
    with the cap's reason, and the host parses no report line longer than a test's cap allows (the runner writes one
    line per test); an honest answer as large as a large expected value still passes (issue 50, point 5)."""
    parsed = []
    loads = sbx.json.loads

    def spy(text, *args, **kwargs):
        parsed.append(len(text))
        return loads(text, *args, **kwargs)

    monkeypatch.setattr(sbx.json, "loads", spy)
    wrong = [Test.from_assert("assert f() == [1, 2, 3]") for _ in range(3)]
    cap = wrong[0].value_cap()
    assert cap == 8 * len('["list", [["int", "1"], ["int", "2"], ["int", "3"]]]') + 4096
    results = attack("def f():\n    return list(range(99990))", wrong)
    if results is None:
        return
    assert all(not r.passed and r.reason == f"result larger than {cap} bytes" for r in results), results
    assert parsed == [], parsed  # every line was refused by its length alone
    big = [Test.from_assert("assert f() == [%s]" % ", ".join(map(str, range(20000))))]
    assert big[0].value_cap() > 8 * 20000
    assert attack("def f():\n    return list(range(20000))", big)[0].passed
    assert Test.from_assert("assert len(f()) == 3").value_cap() is None  # not a comparand of f() itself: no cap
