"""Scoring of the code domain: every comparison runs on the host, correct code passes.

The hacks here all passed (scored above 0) when assertions were evaluated inside the candidate's
interpreter: each now scores 0 (or no more than returning a constant), and a correct solution of
the same tests still scores 1."""

import ast
import json
from pathlib import Path

import pytest

import domains.code as dc
from c3_sandbox import sandbox
from c3_sandbox.assertions import AssertionFormError, CheckError, compile_assertion, evaluate
from c3_sandbox.sandbox import Sandbox, Test
from domains.code.data import TIME_CAP_S, TIME_FLOOR_S, mbppplus_inputs, time_limit

ROOT = Path(__file__).resolve().parents[2]
ISCLOSE = ["assert math.isclose(volume_sphere(10), 4188.790204786391, rel_tol=0.001)",
           "assert math.isclose(volume_sphere(25), 65449.84694978735, rel_tol=0.001)"]
SPHERE = "import math\ndef volume_sphere(r):\n    return 4 / 3 * math.pi * r ** 3"


def score(code, tests, setup=""):
    return dc.pass_rate(code, tests, setup, timeout_s=5.0)


# ----------------------------------------------------------------- hacks through in-sandbox comparisons


def test_monkeypatched_math_isclose_passes_nothing():
    hack = "import math\nmath.isclose = lambda *a, **k: True\ndef volume_sphere(r):\n    return 0"
    assert score(hack, ISCLOSE, "import math") == 0.0
    assert score(SPHERE, ISCLOSE, "import math") == 1.0


@pytest.mark.parametrize("hack, tests", [
    ("import builtins\nbuiltins.abs = lambda x: 0\ndef f(x):\n    return 0", ["assert abs(f(2) - 3.14) < 1e-6"]),
    ("__builtins__.len = lambda x: 3\ndef f(x):\n    return []", ["assert len(f(2)) == 3"]),
    ("set = lambda *a: {1, 2}\ndef f(x):\n    return []", ["assert set(f(2)) == set([1, 2])"]),
    ("import builtins\nbuiltins.callable = lambda o: True\nf = 5", ["assert callable(f)"]),
])
def test_replaced_builtins_pass_nothing(hack, tests):
    assert score(hack, tests) == 0.0


RIGGED = ("class R:\n"
          "    __hash__ = None\n"
          "    def __eq__(self, o): return True\n"
          "    def __ne__(self, o): return True\n"
          "    def __lt__(self, o): return True\n"
          "    def __gt__(self, o): return True\n"
          "    def __le__(self, o): return True\n"
          "    def __ge__(self, o): return True\n"
          "    def __sub__(self, o): return self\n"
          "    def __rsub__(self, o): return self\n"
          "    def __abs__(self): return 0\n"
          "    def __bool__(self): return True\n"
          "    def __contains__(self, o): return True\n"
          "    def __len__(self): return 3\n"
          "    @property\n"
          "    def __class__(self): return int\n"
          "def f(x):\n    "
          "return R()\n")


@pytest.mark.parametrize("test, right", [
    ("assert f(2) in (4, 5)", "def f(x):\n    return x * 2"),
    ("assert 3 < f(2) < 5", "def f(x):\n    return x * 2"),
    ("assert abs(f(2) - 4) < 1e-9", "def f(x):\n    return x * 2"),
    ("assert 4 in f(2)", "def f(x):\n    return [x * 2]"),
    ("assert f(2) != 5", "def f(x):\n    return x * 2"),
    ("assert isinstance(f(2), int)", "def f(x):\n    return x * 2"),
    ("assert f(2) == True", "def f(x):\n    return x > 1"),
    ("assert f(2) >= 4 and f(2) <= 4", "def f(x):\n    return x * 2"),
])
def test_objects_with_rigged_operators_pass_nothing(test, right):
    assert score(RIGGED, [test]) == 0.0
    assert score(right, [test]) == 1.0


def test_assert_equal_true_does_not_accept_seven():
    assert score("def f(x):\n    return 7", ["assert f(1) == True"]) == 0.0
    assert score("def f(x):\n    return True", ["assert f(1) == True"]) == 1.0
    # Python's own semantics otherwise: 1 == True holds (MBPP's mbpp-414 reference returns 1/0), and a
    # bare assert asks for truth
    assert score("def f(x):\n    return 1", ["assert f(1) == True", "assert f(1)"]) == 1.0


def test_a_frame_inspecting_truth_value_gains_nothing_over_a_constant():
    """In the sandbox, `not f(2)` ran next to the candidate, which could see the `not`; now the sandbox
    only reports bool(f(2)) and the host applies `not`."""
    peek = ("import sys\n"
            "def f(x):\n"
            "    fr = sys._getframe(1)\n"
            "    while fr is not None:\n"
            "        if 'not ' in repr(fr.f_locals.get('test')):\n"
            "            return False\n"
            "        fr = fr.f_back\n    "
            "return True\n")
    tests = ["assert f(1)", "assert not f(2)"]
    assert score(peek, tests) == score("def f(x):\n    return True", tests) == 0.5
    assert score("def f(x):\n    return x == 1", tests) == 1.0


EXPECTED = 4188.790204786391
SNOOP = ("import gc, os, re, sys\n"
         "def _floats(v, out, depth=0):\n"
         "    if depth > 4:\n"
         "        return\n"
         "    if type(v) is float:\n"
         "        out.append(v)\n"
         "    elif type(v) is str:\n"
         "        out.extend(float(m) for m in re.findall(r'\\d+\\.\\d{6,}', v))\n"
         "    elif type(v) in (list, tuple, set):\n"
         "        for x in list(v)[:10000]:\n"
         "            _floats(x, out, depth + 1)\n"
         "    elif type(v) is dict:\n"
         "        for k, x in list(v.items())[:10000]:\n"
         "            _floats(k, out, depth + 1)\n"
         "            _floats(x, out, depth + 1)\n"
         "def volume_sphere(r):\n"
         "    seen = []\n"
         "    fr = sys._getframe(1)\n"
         "    while fr is not None:\n"
         "        _floats(list(fr.f_code.co_consts) + list(fr.f_locals.values()), seen)\n"
         "        fr = fr.f_back\n"
         "    for o in gc.get_objects():\n"
         "        if type(o) in (dict, list, tuple):\n"
         "            _floats(o, seen, 3)\n"
         "    for p in ('/sandbox/job.json', 'job.json', '/proc/self/cmdline'):\n"
         "        try:\n"
         "            _floats(open(p, errors='replace').read(), seen)\n"
         "        except OSError:\n"
         "            pass\n"
         "    found = [v for v in seen if v > 1000]\n"
         "    return found[0] if found else 0.0\n")


@pytest.mark.parametrize("test", [f"assert math.isclose(volume_sphere(10), {EXPECTED!r}, rel_tol=1e-9)",
                                  f"assert abs(volume_sphere(10) - {EXPECTED!r}) < 1e-9",
                                  f"assert volume_sphere(10) == {EXPECTED!r}"])
def test_the_expected_value_is_nowhere_in_the_sandbox(test):
    assert score(SNOOP, [test], "import math") == 0.0
    assert score(SPHERE, [test], "import math") == 1.0


def test_a_test_sees_no_later_test_input():
    """Each test child holds its own inputs only: nothing in its frames, objects or files names the next test's."""
    snoop = ("import gc, re, sys\n"
             "def f(x):\n"
             "    texts = []\n"
             "    fr = sys._getframe(1)\n"
             "    while fr is not None:\n"
             "        texts.append(repr(fr.f_locals))\n"
             "        fr = fr.f_back\n"
             "    texts += [repr(o)[:100000] for o in gc.get_objects() if type(o) in (dict, list)]\n"
             "    for p in ('/sandbox/job.json', 'job.json'):\n"
             "        try:\n"
             "            texts.append(open(p).read())\n"
             "        except OSError:\n"
             "            pass\n"
             "    found = sorted(set(re.findall(r'needle-\\d', ' '.join(texts))) - {x})\n"
             "    return found[0] if found else ''\n")
    tests = ["assert f('needle-0') == 'needle-1'", "assert f('needle-1') == 'needle-2'",
             "assert f('needle-2') == 'needle-0'"]
    assert score(snoop, tests) == 0.0
    assert score("def f(x):\n    return 'needle-%d' % ((int(x[-1]) + 1) % 3)", tests) == 1.0


def test_checks_that_would_run_inside_are_refused_with_their_form():
    with pytest.raises(AssertionFormError, match=r"the check 'f\(i\) == i' would run inside the sandbox"):
        dc.execute("def f(x):\n    return x", ["assert all(f(i) == i for i in range(3))"])
    with pytest.raises(AssertionFormError, match="not a single assert statement"):
        dc.execute("def f(x):\n    return x", ["f(1) == 1"])
    with pytest.raises(AssertionFormError, match=r"\[f\(x\) < 2 for x in"):
        compile_assertion("assert sum([f(x) < 2 for x in range(3)]) == 3")


@pytest.mark.parametrize("source", [
    "assert operator.eq(f(1), 2)", "assert operator.contains(f(1), 2)", "assert cmath.isclose(f(1), 2)",
    "assert re.fullmatch('a+', f('a'))", "assert re.search('a', f('a'))",
    "assert str.startswith(f('a'), 'a')", "assert set.issubset(f(1), {1, 2})", "assert f(1).__eq__(2)",
    "assert f('ab').startswith('a')",
])
def test_library_verdicts_that_would_run_inside_are_refused(source):
    """A comparison or predicate computed in the sandbox by a module or type name (``operator.eq``, ``cmath.isclose``,
    ``re.fullmatch``, ``str.startswith`` with ``str`` shadowed by the candidate): the candidate would decide it."""
    with pytest.raises(AssertionFormError, match="would run inside the sandbox"):
        compile_assertion(source)
    assert compile_assertion("assert math.isclose(f(1), 2)").probes  # the host computes math.isclose itself


# ----------------------------------------------------------------- the split and the host evaluator


@pytest.mark.parametrize("source, check, probes", [
    ("assert set(similar_elements((3, 4), (4, 5))) == set((4, 5))", "set(_p0) == set((4, 5))",
     [("similar_elements((3, 4), (4, 5))", "iter")]),
    ("assert math.isclose(volume_sphere(10), 4188.79, rel_tol=0.001)", "math.isclose(_p0, 4188.79, rel_tol=0.001)",
     [("volume_sphere(10)", "value")]),
    ("assert not check_str('dawood')", "not _p0", [("check_str('dawood')", "truth")]),
    ("assert callable(f)", "_p0", [("f", "callable")]),
    ("assert is_tree_balanced(root) == False", "_p0 == False", [("is_tree_balanced(root)", "value")]),
    ("assert sorted(f(1), key=lambda t: t[1]) == [1]", "_p0 == [1]", [("sorted(f(1), key=lambda t: t[1])", "value")]),
    ("assert [f(1), g(2)][0] == 1", "[_p0, _p1][0] == 1", [("f(1)", "value"), ("g(2)", "value")]),
])
def test_assertions_split_into_sandbox_probes_and_a_host_check(source, check, probes):
    a = compile_assertion(source)
    assert a.check == check and [(p.source, p.mode) for p in a.probes] == probes and not a.pending


def test_constants_the_host_cannot_compute_are_evaluated_without_candidate_code():
    a = compile_assertion("assert tuple_size((1, 2)) == sys.getsizeof((1, 2))", {"tuple_size"})
    assert a.check == "_p0 == _c0" and a.pending == ["sys.getsizeof((1, 2))"] and a.modules == ["sys"]
    # `sys` here means the module even though the reference imported it, and no setup imports it (MBPP task 596)
    code = "import sys\ndef tuple_size(t):\n    return sys.getsizeof(t)"
    assert score(code, ["assert tuple_size((1, 2)) == sys.getsizeof((1, 2))"]) == 1.0
    assert score("def tuple_size(t):\n    return 0", ["assert tuple_size((1, 2)) == sys.getsizeof((1, 2))"]) == 0.0


@pytest.mark.parametrize("check, env, result", [
    ("_p0 == True", {"_p0": 7}, False),
    ("_p0 == True", {"_p0": 1}, True),
    ("_p0 == [1, 2]", {"_p0": (1, 2)}, False),  # a tuple is not a list
    ("_p0 in (1.0, 2)", {"_p0": 1}, True),
    ("1 < _p0 <= 3", {"_p0": 3}, True),
    ("_p0 is None", {"_p0": None}, True),
    ("math.isclose(_p0, 1.0, rel_tol=1e-3)", {"_p0": 1.0001}, True),
    ("round(_p0, 2) == 3.14", {"_p0": 3.14159}, True),
    ("isinstance(_p0, (int, float))", {"_p0": "3"}, False),
    ("sorted(_p0) == [1, 2] and len(_p0) == 2", {"_p0": {2, 1}}, True),
])
def test_the_host_evaluator(check, env, result):
    assert evaluate(check, env) is result


@pytest.mark.parametrize("check, env", [
    ("_p0 ** 10000000", {"_p0": 12345}), ("_p0 * 10000000", {"_p0": "x" * 10}), ("_p0.real", {"_p0": 1}),
    ("open('x')", {}), ("__import__('os')", {}), ("set(_p0)", {"_p0": [[1]]}), ("_p0[5]", {"_p0": [1]}),
])
def test_the_host_evaluator_refuses_what_it_should_not_run(check, env):
    with pytest.raises(CheckError):
        evaluate(check, env)


@pytest.mark.parametrize("report", [
    {"status": "value", "value": ["bogus", 1]}, {"status": "value", "value": ["tuple", [["int", "x"]]]},
    {"status": "value", "value": ["int", "5"]}, {"status": "value", "value": ["tuple", [["int", "1"], ["int", "1"]]]},
    {"status": "value"}, {"status": "value", "value": None}, {"status": "error", "reason": ["not", "text"]}, {},
])
def test_hostile_results_fail_the_test_and_never_raise(report):
    for test in (Test.from_assert("assert set(f(1)) == {1}"), Test(expected=5, expr="f()")):
        result = Sandbox._judge(test, report)
        assert isinstance(result, sandbox.TestResult) and not result.passed


def test_verdicts_run_in_a_judge_process_bounded_in_time_and_memory(monkeypatch):
    """Issue 39, 3: what a value makes the check cost is spent in a judge process, never in the host: a gigabyte of
    ``%``-formatting ends in the judge's memory limit, a quadratic ``sum`` in its time limit (the judge is then
    replaced), and the next verdict is reached as usual."""
    import resource
    import time

    from c3_sandbox import judge
    from c3_sandbox.runner import encode

    pool = judge.JudgePool(1)
    value = lambda *v: {"status": "value", "value": encode(tuple(v))}  # noqa: E731
    before = resource.getrusage(resource.RUSAGE_SELF)
    start = time.perf_counter()
    memory = Sandbox._judge(Test.from_assert("assert f(1) % {'a': f(2)} == ''"),
                            value("%(a)s" * 500_000, "y" * 2000), pool, [30.0])
    # the quadratic sum takes ~4 s on an idle core (the memory case above keeps the default time: on a loaded machine
    # its gigabyte may take more than 1 s to reach the limit)
    monkeypatch.setattr(judge, "JUDGE_TEST_S", 1.0)
    slow = Sandbox._judge(Test.from_assert("assert sum(f(1), []) == []"), value([[k] for k in range(49_000)]), pool,
                          [30.0])
    spent = Sandbox._judge(Test.from_assert("assert f(1) == 2"), value(2), pool, [0.0])
    honest = Sandbox._judge(Test.from_assert("assert f(1) == 2"), value(2), pool, [30.0])
    after = resource.getrusage(resource.RUSAGE_SELF)
    pool.close()
    assert not memory.passed and "memory" in memory.reason.lower(), memory.reason
    assert not slow.passed and "longer than 1.0s" in slow.reason, slow.reason
    assert not spent.passed and "budget" in spent.reason, spent.reason
    assert honest.passed, honest.reason
    assert after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime < 1.0
    assert time.perf_counter() - start < 60  # the limits cut CPU work short, even on a loaded machine


# ----------------------------------------------------------------- honest scoring of correct code


def test_time_limits_are_relative_to_the_canonical_solution():
    assert (time_limit(0.001) == TIME_FLOOR_S and time_limit(6.0) == 24.0
            and time_limit(100.0) == TIME_CAP_S == time_limit(None))


def test_a_slow_canonical_solution_gets_the_time_it_needs(tmp_path, monkeypatch):
    """mbpp-123 (`amicable_numbers_sum(9999)`) takes about 6 s: above the old fixed 5 s limit."""
    monkeypatch.setenv("C3_CACHE", str(tmp_path))
    row = dc.load_split({"name": "mbpp", "source": str(ROOT / "data/mbpp/full.jsonl"), "id_range": [123, 123]})[0]
    tests = dc.decode_tests(row["visible_tests"]) + dc.decode_tests(row["tests"])
    assert all(TIME_FLOOR_S <= t.timeout_s <= TIME_CAP_S for t in tests) and max(t.timeout_s for t in tests) > 5.0
    assert dc.pass_rate(row["canonical"], tests) == 1.0


def test_whole_mbpp_files_load_with_the_right_entry_points():
    full = dc.load_split({"name": "mbpp_full", "kind": "mbpp", "source": str(ROOT / "data/mbpp/full.jsonl"),
                          "test_split": False, "calibrate": False})
    sanitized = dc.load_split({"name": "mbpp_sanitized", "source": str(ROOT / "data/mbpp/sanitized.jsonl"),
                               "calibrate": False})
    assert len(full) == 974 and len(sanitized) == 427  # task 596 used to stop both (`sys` without an import)
    isclose = [r for r in sanitized if "math.isclose" in r["example"]]
    assert len(isclose) == 13
    for r in isclose:
        assert r["entry_point"] != "math" and f"def {r['entry_point']}(" in r["canonical"]
        assert f"`{r['signature']}`" in r["question"] and r["signature"].startswith(r["entry_point"] + "(")
    by_id = {r["task_id"]: r for r in full}
    t596 = json.loads(by_id["596"]["tests"])[0]
    assert t596["check"] == "_p0 == _c0" and t596["consts"][0][0] == "int"


# MBPP+ tasks whose base inputs stay as EvalPlus passes them, though the original asserts differ: the
# reference accepts lists for tuples (98, 104, 140, 145) and string keys for int keys (301, 582); 87's base
# inputs are EvalPlus's corrected ones; 803's assert computes its argument (14 * 14).
MBPPPLUS_AS_EVALPLUS = {"Mbpp/87", "Mbpp/98", "Mbpp/104", "Mbpp/140", "Mbpp/145", "Mbpp/301", "Mbpp/582", "Mbpp/803"}


def test_mbppplus_inputs_keep_their_python_types():
    rows = [json.loads(line) for line in (ROOT / "data/mbppplus/test.jsonl").read_text().splitlines()]
    mismatched = set()
    for r in rows:
        calls = [n for a in ast.parse(r["assertion"]).body if isinstance(a, ast.Assert) for n in ast.walk(a.test)
                 if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == r["entry_point"]]
        inputs = mbppplus_inputs(r)[: len(r["base_input"])]
        try:
            literal = [[ast.literal_eval(x) for x in c.args] for c in calls]
        except ValueError:
            mismatched.add(r["task_id"])
            continue
        if len(literal) != len(inputs) or not all(dc.equal(list(a), b) for a, b in zip(literal, inputs)):
            mismatched.add(r["task_id"])
    assert mismatched == MBPPPLUS_AS_EVALPLUS
    by_id = {r["task_id"]: r for r in rows}
    assert (mbppplus_inputs(by_id["Mbpp/124"])[0] == [0, 1j]
            and type(mbppplus_inputs(by_id["Mbpp/580"])[0][0][2][2]) is tuple)
    assert str(mbppplus_inputs(by_id["Mbpp/124"])[3 + 3][1]) == "(-0-1j)"  # the sign of a zero survives
