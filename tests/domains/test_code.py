import json
import re
from pathlib import Path

import numpy as np
import pytest

import domains.code as dc
from c3_plugin import materialize, replay_check
from c3_plugin.core.config import load_config
from c3_plugin.core.protocol import Generation
from c3_plugin.run.testing import tiny_model, tiny_tokenizer
from c3_plugin.run.train import train

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "code"


@pytest.fixture(scope="module")
def mbpp():
    return dc.load_split({"name": "mbpp", "source": str(FIX / "mbpp.jsonl")})


def test_mbpp_rows_hide_their_tests_from_the_prompt(mbpp):
    assert len(mbpp) == 8 and mbpp[0]["id"] == "mbpp-11" and mbpp[0]["entry_point"] == "remove_Occ"
    for row in mbpp:
        hidden = json.loads(row["tests"])
        assert len(hidden) >= 2 and len(json.loads(row["visible_tests"])) == 1
        assert row["example"] in row["question"] and f"`{row['signature']}`" in row["question"]
        for t in hidden:
            assert t["assert"] not in row["question"] and all(p not in row["question"] for p, _ in t["probes"])
            assert 2.0 <= t["timeout_s"] <= 30.0  # relative to the canonical solution's own time
        assert dc.pass_rate(row["canonical"], dc.decode_tests(row["tests"]), row["setup"]) == 1.0


def test_mbppplus_expected_outputs_come_from_the_canonical_solution(tmp_path, monkeypatch):
    monkeypatch.setenv("C3_CACHE", str(tmp_path))
    rows = dc.load_split({"name": "mbppplus", "source": str(FIX / "mbppplus.jsonl")})
    assert [r["id"] for r in rows] == ["mbppplus-Mbpp/2", "mbppplus-Mbpp/3", "mbppplus-Mbpp/4"]
    first = rows[0]
    tests = dc.decode_tests(first["tests"])
    assert all(t.entry_point == "similar_elements" and t.expr is None for t in tests)
    assert len(tests) + 1 == 3 + 5 and first["dropped_inputs"] == []  # the tuple inputs arrive as tuples
    assert all(type(a) is tuple for t in tests for a in t.args)
    assert dc.pass_rate(first["canonical"], tests) == 1.0
    assert dc.pass_rate("def similar_elements(a, b):\n    return (0,)", tests) == 0.0
    assert list(tmp_path.glob("mbppplus-expected-*.json"))  # cached by content hash


def test_mbppplus_first_run_shows_a_progress_bar_and_a_cached_run_none(tmp_path, monkeypatch, capsys):
    """Computing MBPP+ expected outputs takes minutes on a full set: the first run shows a bar on stderr."""
    monkeypatch.setenv("C3_CACHE", str(tmp_path))
    dc.load_split({"name": "mbppplus", "source": str(FIX / "mbppplus.jsonl")})
    err = capsys.readouterr().err
    assert re.search(r"mbppplus: expected outputs of 3 reference solutions \(once; cached\): +100%\|.*\| 3/3 \[",
                     err), err
    dc.load_split({"name": "mbppplus", "source": str(FIX / "mbppplus.jsonl")})
    assert "expected outputs" not in capsys.readouterr().err  # cached: nothing to wait for


def test_the_dry_run_leaves_the_reference_runs_to_the_run_and_says_what_they_cost(tmp_path, monkeypatch, capsys):
    """A code dry-run on a machine that has not measured the references yet runs none of them (minutes on a full
    set): it counts the rows, lists what the run will measure with an estimate, and writes nothing to the cache.
    Once the run has measured them, the dry-run reads the cache and counts exactly."""
    monkeypatch.setenv("C3_CACHE", str(tmp_path))
    section = {"train": {"name": "mbpp_train", "source": str(FIX / "mbpp.jsonl"), "test_split": False},
               "eval": [{"name": "mbppplus", "source": str(FIX / "mbppplus.jsonl")}], "dry_run": True}
    train, evals = dc.load_datasets(section)
    assert len(train) == 8 and len(evals) == 3 and list(tmp_path.iterdir()) == []  # nothing run, nothing cached
    assert "reference solutions" not in capsys.readouterr().err  # no measuring bar either
    cfg = type("Cfg", (), {"domain_cfg": dc.CodeConfig()})()
    report = dc.DOMAIN.dry_run(cfg, train, evals)
    assert [(p["set"], p["what"], p["solutions"]) for p in report["reference_runs"]["pending"]] == [
        ("mbpp_train", "times", 8), ("mbppplus", "expected outputs and times", 3)]
    assert report["reference_runs"]["estimated_minutes"] >= 0 and report["probe"]["probe_ok"]
    assert "before its first step the run measures the reference solutions" in report["notes"][0]
    dc.load_datasets({k: v for k, v in section.items() if k != "dry_run"})  # the run measures and caches them
    train, evals = dc.load_datasets(section)
    assert len(evals) == 3 and "reference_runs" not in dc.DOMAIN.dry_run(cfg, train, evals)


def test_relative_sources_resolve_from_the_config_folder_then_the_working_directory(tmp_path, monkeypatch):
    (tmp_path / "configs").mkdir()
    (tmp_path / "here.jsonl").write_text((FIX / "mbpp.jsonl").read_text())
    monkeypatch.chdir(tmp_path)
    by_config = dc.load_split({"name": "mbpp", "source": "../here.jsonl"}, base_dir=str(tmp_path / "configs"))
    by_cwd = dc.load_split({"name": "mbpp", "source": "here.jsonl"}, base_dir=str(tmp_path / "configs"))
    assert len(by_config) == len(by_cwd) == 8
    with pytest.raises(dc.CodeDatasetError,
                       match=r"nope.jsonl does not exist \(looked in the config folder .*configs and the working"):
        dc.load_split({"name": "mbpp", "source": "nope.jsonl"}, base_dir=str(tmp_path / "configs"))


def test_sanitized_and_train_ranges_load():
    rows = dc.load_split({"name": "mbpp_sanitized", "source": str(FIX / "mbpp_sanitized.jsonl")})
    assert len(rows) == 3 and all(dc.pass_rate(r["canonical"], dc.decode_tests(r["tests"]), r["setup"])
                                  == 1.0 for r in rows)
    train = dc.load_split({"name": "mbpp_train", "kind": "mbpp", "source": str(FIX / "mbpp_train.jsonl"),
                           "id_range": [601, 974]})
    assert len(train) == 8 and all(601 <= int(r["task_id"]) <= 974 for r in train)
    with pytest.raises(dc.CodeDatasetError, match="does not exist"):
        dc.load_split({"name": "mbpp", "source": str(FIX / "nope.jsonl")})


@pytest.mark.parametrize("text, code", [
    ("Here:\n```python\ndef f():\n    return 1\n```\nand better:\n```python\ndef f():\n    return 2\n```",
     "def f():\n    return 2\n"),
    ("```\nx = 1\n```", "x = 1\n"),
    ("def f(): return 3", "def f(): return 3"),
    (None, ""),
])
def test_extract_code(text, code):
    assert dc.extract_code(text) == code


ADD = "def add(a, b):\n    return a + b\n"
# issue 36: right answers the extraction lost (the first seven scored 0 before), and the last block winning
READER_CASES = {
    "fence_line_with_trailing_text": "Here it is:\n```python  # solution\n" + ADD + "```\nDone.",
    "crlf_line_endings": ("Sure.\n```python\n" + ADD + "```\n").replace("\n", "\r\n"),
    "unclosed_final_fence": "Answer:\n```python\n" + ADD,
    "prose_line_before_bare_code": "Here is the function.\n" + ADD,
    "prose_line_after_bare_code": ADD + "This adds two numbers.",
    "prose_around_bare_code": "Solution below:\n" + ADD + "\nHope this helps!",
    "text_block": "```text\n" + ADD + "```",
    "last_block_wins": "```python\ndef add(a, b):\n    return 0\n```\nFixed:\n```python\n" + ADD + "```",
    "a_later_output_block_is_no_candidate": "```python\n" + ADD + "```\n```output\n5\n```",
}


@pytest.mark.parametrize("case", list(READER_CASES))
def test_code_is_extracted_as_a_reader_reads_it(case):
    assert dc.extract_code(READER_CASES[case]) == dc.extract_code(f"```python\n{ADD}```") == ADD


def test_reader_cases_score_like_the_same_code_fenced_plainly():
    item = {"tests": '[{"expr": "add(2, 3)", "expected": ["int", "5"]}, '
                     '{"expr": "add(-1, 1)", "expected": ["int", "0"]}]', "setup": ""}
    texts = [f"```python\n{ADD}```", *READER_CASES.values(), "Here is the function.\ndef add(a, b):\n    return a +"]
    scores = dc.reward(["plan"] * len(texts), texts, batch_items=[item] * len(texts))
    assert scores == [1.0] * (len(texts) - 1) + [0.0]  # prose is dropped only when what remains parses


def test_reward_is_the_hidden_pass_rate_and_never_raises_on_model_output(mbpp):
    item = mbpp[0]
    good = f"```python\n{item['canonical']}\n```"
    missing_name = "```python\ndef something_else(s, ch):\n    return s\n```"
    garbage = "```python\ndef remove_Occ(s, ch:\n```"
    scores = dc.reward(["plan"] * 4, [good, missing_name, garbage, "\x00" * 10000], batch_items=[item] * 4)
    assert scores == [1.0, 0.0, 0.0, 0.0]
    assert dc.reward.reward_range == (0.0, 1.0)


def test_eval_metrics_per_suite(mbpp):
    wf = dc.reasoner_actor()
    logger = dc.make_eval_logger(wf)
    items = [dict(mbpp[0]), dict(mbpp[1], datasource="other")]
    turns = [[["plan"], ["plan"]], [[f"```python\n{mbpp[0]['canonical']}\n```"], ["def broken(:"]]]
    agg = dc.eval_aggregator(logger(agent_completions_turns=turns, batch_items=items))
    assert agg["mbpp/pass@1"] == 1.0 and agg["mbpp/test_pass_rate"] == 1.0 and agg["mbpp/syntax_valid_rate"] == 1.0
    assert agg["other/pass@1"] == 0.0 and agg["other/syntax_valid_rate"] == 0.0 and agg["all/timeout_rate"] == 0.0


class Scripted:
    """A backend that writes fixed messages per role (the Actor's code is wrong on purpose)."""

    texts = {"Reasoner": "Remove the first and last occurrence.",
             "Actor": "```python\ndef remove_Occ(s, ch):\n    return s\n```"}

    def generate(self, prompts, n, sampling):
        return [[Generation(self.texts[p.role], [1, 2], [-0.1, -0.2]) for _ in range(n)] for p in prompts]


def test_multi_turn_feedback_is_recorded_in_the_trace_and_replays(mbpp):
    wf = dc.multi_turn()
    assert [s.kind for s in wf.steps] == ["decision", "decision", "feedback", "decision", "decision"]
    items = [dict(mbpp[0])]
    ro = materialize(wf, "tree [2, 1, 1, 2]", items, Scripted(), lambda leaves: dc.reward(
        *[[leaf.outputs[i] for leaf in leaves] for i in (0, 4)], batch_items=[leaf.item for leaf in leaves]))
    fb = [e for e in ro.entries if e.kind == "feedback"]
    assert len(fb) == 2 and all("failed" in e.message and "remove_Occ" in e.message for e in fb)
    second = ro.decision_entries(2)[0]
    assert fb[0].message in second.context  # the Reasoner reads the execution result from the trace
    assert replay_check(ro.entries, wf) == []
    # `return s` passes remove_Occ("", "l") only
    assert ro.rewards.shape == (1, 2, 1, 1, 2) and np.all(ro.rewards == 0.25)


@pytest.mark.parametrize("algorithm, workflow", [("c3", "reasoner_actor"), ("magrpo", "reasoner_actor"),
                                                 ("c3", "multi_turn")])
def test_training_runs_on_mbpp_with_tiny_models(tmp_path, algorithm, workflow):
    plan = {"c3": "tree [2, 4]" if workflow == "reasoner_actor" else "tree [2, 1, 1, 2]",
            "magrpo": "independent 4"}[algorithm]
    data = {"algorithm": algorithm, "domain": "code", "agent_model": {"device": "cpu"},
            "workflow": {"name": workflow, "max_new_tokens": {"Reasoner": 6, "Actor": 8}},
            "dataset": {"train": {"name": "mbpp_train", "kind": "mbpp", "source": str(FIX / "mbpp_train.jsonl"),
                                  "id_range": [601, 974], "limit": 4},
                        "eval": [{"name": "mbpp", "source": str(FIX / "mbpp.jsonl"), "limit": 2}]},
            "output": {"base_dir": str(tmp_path), "verbose": False, "plot": False, "save_model": False},
            algorithm: {"num_train_epochs": 1, "max_new_tokens": 8, "instances_per_update": 2, "plan": plan}}
    cfg = load_config(data=data)
    tok = tiny_tokenizer()
    summary = train(cfg, models=[tiny_model(tok, 0), tiny_model(tok, 1)], tokenizer=tok)
    leaves = 8 if plan != "independent 4" else 4
    assert summary["env_steps"] == 4 * (4 if workflow == "multi_turn" else leaves)
    assert "eval/mbpp/pass@1" in summary["eval_after"] and "eval/mbpp/syntax_valid_rate" in summary["eval_after"]


def test_code_timeout_s_from_the_config_reaches_the_reward():
    """``code.timeout_s`` limits every test without a limit of its own, in the reward and the eval logger."""
    import json as _json
    from types import SimpleNamespace

    from domains.code import DEFAULTS, DOMAIN, CodeConfig, configure_from, encode

    item = {"tests": _json.dumps([{"expr": "f()", "expected": encode(1)}])}  # no limit of its own
    # 2.5 s of CPU time (a test's limit is CPU time; its wall clock may run Limits.wall_factor times longer)
    slow = ("import time\ndef f():\n    end = time.process_time() + 2.5\n    while time.process_time() < end:\n"
            "        pass\n    return 1")
    try:
        configure_from(SimpleNamespace(domain_cfg=CodeConfig(timeout_s=1.0)))
        assert DOMAIN.make_reward(None)(["plan"], [slow], batch_items=[item]) == [0.0]
        # [agent][item][turn]
        row = DOMAIN.make_eval_logger(DOMAIN.workflow())([[["plan"]], [[slow]]], batch_items=[item])[0]
        assert row["timeout"] == 1.0 and row["pass_rate"] == 0.0
        configure_from(SimpleNamespace(domain_cfg=CodeConfig(timeout_s=10.0)))
        assert DOMAIN.make_reward(None)(["plan"], [slow], batch_items=[item]) == [1.0]
        with pytest.raises(ValueError, match="code.timeout_s must be positive"):
            configure_from(SimpleNamespace(domain_cfg=CodeConfig(timeout_s=0)))
    finally:
        DEFAULTS["timeout_s"] = 5.0
