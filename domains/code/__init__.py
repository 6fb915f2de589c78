"""The code domain: MBPP and MBPP+ with a real subprocess sandbox, plan -> code teams and a
multi-turn team that reads execution feedback from the trace."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from c3_plugin.core.cache import cache_dir
from c3_plugin.core.domain import Domain, single_train_source
from c3_plugin.core.sources import check_overlap
from c3_sandbox.assertions import Assertion, AssertionFormError, compile_assertion, defined_names
from c3_sandbox.runner import encode
from c3_sandbox.sandbox import (
    UNSAFE,
    Limits,
    Sandbox,
    SandboxError,
    Test,
    TestResult,
    configure,
    default_sandbox,
    namespaces_available,
)
from c3_sandbox.values import decode, equal

from .data import PENDING, CodeDatasetError, decode_tests, evaluate_constants, load_split
from .echo import drop_echoed
from .prompts import multi_turn, reasoner_actor, reasoner_coder_reviewer, workflows
from .tasks import (
    DEFAULTS,
    eval_aggregator,
    extract_code,
    make_eval_logger,
    make_outcome,
    make_reward,
    run_visible_tests,
    syntax_valid,
)


@dataclass
class CodeConfig:
    """The config's ``code:`` section."""

    timeout_s: float = 5.0  # CPU-time limit of a test without its own (wall: 3x; dataset tests: 4 x canonical, 2-30 s)
    # namespaces: refuse to run candidates where the host cannot isolate them; none: run them anyway, unisolated
    # (unsafe; said loudly)
    isolation: str = "namespaces"


def configure_from(cfg, workflow=None) -> None:
    """Apply the config's ``code:`` section to the default sandbox (called when a run is prepared).
    ``--override code.isolation=none`` arrives as None (the override syntax's null): that is "none"."""
    isolation = getattr(cfg.domain_cfg, "isolation", "namespaces")
    configure("none" if isolation is None else isolation)
    timeout = float(getattr(cfg.domain_cfg, "timeout_s", 5.0))
    if not timeout > 0:
        raise ValueError(f"code.timeout_s must be positive, got {timeout}")
    DEFAULTS["timeout_s"] = timeout


def _as_tests(tests: Sequence[Any], setup: str, sandbox: Sandbox) -> list[Test]:
    """Test objects from ``Test`` instances or ``assert`` statements. An assert is compiled into sandbox
    probes and a host check (``assertions.py``); constants the host does not compute itself are
    evaluated once in a sandbox without candidate code. Raises ValueError (AssertionFormError) for an
    assert the host cannot judge."""
    out: list[Test] = []
    for t in tests:
        names = defined_names(setup)
        out.append(t if isinstance(t, Test) else Test(assertion=compile_assertion(str(t), names, setup, names)))
    fresh = [t.assertion for t, given in zip(out, tests) if not isinstance(given, Test)]
    evaluate_constants(sandbox, fresh, ["test"] * len(fresh))
    return out


def execute(code: str, tests: Sequence[Any], setup: str = "", timeout_s: float = 5.0) -> list[TestResult]:
    """Run ``code`` on each test in a fresh sandbox; one ``TestResult`` (passed, status, reason) per test.
    ``timeout_s``: the limit of each test that has none of its own. Raises ValueError for a test the
    host cannot judge, ``SandboxError`` when the sandbox machinery itself fails (an infrastructure
    error); never raises on what the candidate's code does or returns."""
    sb = default_sandbox()
    return sb.run(str(code), _as_tests(tests, setup, sb), setup, timeout_s)


def pass_rate(code: str, tests: Sequence[Any], setup: str = "", timeout_s: float = 5.0) -> float:
    """Share of ``tests`` that ``code`` passes, in [0, 1]. Tests run in order; once one is killed at its time limit the
    later ones are not run and count as failed (``runner.NOT_RUN``), so a candidate that times out mid-list scores the
    tests before it."""
    results = execute(code, tests, setup, timeout_s)
    return sum(r.passed for r in results) / len(results) if results else 0.0


ECHO: dict[str, Any] = {}  # what drop_echoed took out of the train split (the dry-run reports it)


def load_datasets(section: Mapping[str, Any], seed: int = 0, config: Any = None):
    import datasets

    base, measure = section.get("base_dir"), not section.get("dry_run")
    PENDING.clear()
    train = load_split({"name": "mbpp_train", **single_train_source(section, "code")}, base,
                       measure=measure) if section.get("train") else []
    # the train reward scores only the hidden tests a copy of the prompt's example fails (echo.py; issue 50)
    train, ECHO["train"] = drop_echoed(train)
    evals = [row for spec in section.get("eval") or [] for row in load_split(spec, base, measure=measure)]
    train = check_overlap(train, evals, drop=bool(section.get("drop_overlap", False)))
    clean = lambda rows: [{k: v for k, v in r.items() if k != "dropped_inputs"} for r in rows]  # noqa: E731 (a list of reasons)
    return (datasets.Dataset.from_list(clean(train)) if train else None,
            datasets.Dataset.from_list(clean(evals)) if evals else None)


reward = make_reward()
outcome = make_outcome(reward)  # per leaf: pass/fail on each hidden test, reusing the reward's sandbox results


def dry_run_probe(config: CodeConfig | None = None) -> dict[str, Any]:
    """Score fixed candidates in the real sandbox (``config`` was applied to it by ``configure_from``): a correct
    function, a wrong one, an early exit."""
    item = {"tests": '[{"expr": "add(2, 3)", "expected": ["int", "5"]}, {"expr": "add(-1, 1)", '
                     '"expected": ["int", "0"]}]', "setup": ""}
    right = reward(["plan"], ["```python\ndef add(a, b):\n    return a + b\n```"], batch_items=[item])[0]
    wrong = reward(["plan"], ["def add(a, b):\n    return a + b if a > 0 else 7"], batch_items=[item])[0]
    exits = reward(["plan"], ["import sys\nsys.exit(0)"], batch_items=[item])[0]
    sb = default_sandbox()
    report = {"probe_reward": right, "probe_wrong_reward": wrong, "probe_exit_reward": exits,
              "sandbox_isolation": ("namespaces (user, mount, pid, net, ipc, uts, cgroup) + "
                                    "pivot_root + no capabilities"
                                    if sb.isolation == "namespaces" else f"NONE - {UNSAFE}"),
              "sandbox_limits": f"{sb.box_limits} for the whole sandbox; rlimits per test",
              "probe_ok": right == 1.0 and wrong == 0.5 and exits == 0.0}
    if sb.isolation == "none":
        report["sandbox_warning"] = UNSAFE
    return report


# The reference runs' cost on 2 cores (measured: MBPP's train and test splits and MBPP+, 1,273 solutions on 45,956
# tests,
# in 195 s): a sandbox job per solution, then each test.
SECONDS_PER_REFERENCE_SOLUTION, SECONDS_PER_REFERENCE_TEST = 0.025, 0.0036


def dry_run(cfg, train, evals) -> dict[str, Any]:
    """The sandbox probe, and the reference runs the dry-run left to the run (not cached on this machine yet):
    what they are, and about how long the run spends on them before its first step."""
    out: dict[str, Any] = {"probe": dry_run_probe(cfg.domain_cfg)}
    if ECHO.get("train"):
        echo = ECHO["train"]
        out["train_echo"] = {"hidden_tests_dropped": echo["dropped_tests"], "tasks_left_out": echo["left_out"],
                             "hidden_tests_per_task": echo["hidden_tests_per_task"]}
    if PENDING:
        minutes = sum(p["solutions"] * SECONDS_PER_REFERENCE_SOLUTION
                      + p["tests"] * SECONDS_PER_REFERENCE_TEST for p in PENDING) / 60
        out["reference_runs"] = {"pending": list(PENDING), "estimated_minutes": round(minutes, 1),
                                 "cache": str(cache_dir())}
        out["notes"] = ["code: before its first step the run measures the reference solutions in the sandbox ("
                        + ", ".join(f"{p['set']}: {p['what']} of {p['solutions']} solutions "
                                    f"on {p['tests']} tests" for p in PENDING)
                        + f"): about {max(minutes, 0.1):.1f} min on 2 cores, once per machine (cached in "
                          f"{cache_dir()}); until then an MBPP+ eval count is an upper bound (a task whose reference "
                          "fails on all but one input is dropped)"]
    return out


DOMAIN = Domain(name="code", load_datasets=load_datasets, workflows=workflows,
                make_reward=lambda config: reward,  # one reward; the config reaches the sandbox through validate_config
                make_eval_logger=make_eval_logger, eval_aggregator=eval_aggregator, dry_run=dry_run,
                config_cls=CodeConfig, default_workflow="reasoner_actor", outcome=outcome,
                validate_config=configure_from)

__all__ = ["Assertion", "AssertionFormError", "CodeConfig", "CodeDatasetError", "DOMAIN", "Limits", "Sandbox",
           "SandboxError", "Test", "TestResult", "compile_assertion", "configure", "decode", "decode_tests", "encode",
           "equal", "execute", "extract_code", "load_datasets", "load_split", "make_outcome", "multi_turn",
           "namespaces_available", "outcome", "pass_rate", "reasoner_actor", "reasoner_coder_reviewer", "reward",
           "run_visible_tests", "syntax_valid", "workflows"]
