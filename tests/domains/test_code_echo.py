"""A copy of the prompt's example earns nothing in training (issue 50): the hidden tests the example's echo passes
are found on the host and leave the train split's reward, a task it passes whole leaves the set, and the real sandbox
scores the echo candidate as the host computed."""

import json

import domains.code as dc
from domains.code.data import decode_tests, load_split
from domains.code.echo import drop_echoed, echo_answer, echo_reward, echoed

SPEC = {"name": "mbpp_train", "kind": "mbpp", "source": "data/mbpp/full.jsonl", "id_range": [660, 680],
        "calibrate": False}


def _echo_code(row):
    found, value = echo_answer(decode_tests(row["visible_tests"])[0])
    assert found, row["example"]
    return f"def {row['entry_point']}(*a, **k):\n    return {value!r}\n"


def test_the_echo_s_tests_leave_the_train_reward_and_whole_echoed_tasks_leave_the_set():
    rows = load_split(SPEC)
    before = dict(zip([r["id"] for r in rows], echo_reward(rows)))
    assert before["mbpp_train-667"] == before["mbpp_train-674"] == 1.0 and before["mbpp_train-669"] == 0.5
    kept, figures = drop_echoed(rows)
    assert figures["left_out"] == ["mbpp_train-667", "mbpp_train-674"]
    assert figures["dropped_tests"] == 8 and figures["hidden_tests_per_task"] == {1: 4, 2: 15}
    assert echo_reward(kept) == [0.0] * len(kept) and len(kept) == len(rows) - 2
    row = next(r for r in kept if r["id"] == "mbpp_train-669")
    assert row["echo_dropped"] == 1 and len(json.loads(row["tests"])) == 1 and not any(echoed(row))


def test_the_real_sandbox_scores_the_echo_as_the_host_computed():
    """The echo candidate of task 669 passes one hidden test of two (0.5, the offline figure) on the row as loaded,
    and none of what the train split keeps (0.0)."""
    rows = {r["id"]: r for r in load_split(SPEC)}
    kept = {r["id"]: r for r in drop_echoed(list(rows.values()))[0]}
    code = "```python\n" + _echo_code(rows["mbpp_train-669"]) + "```"
    assert dc.reward(["plan"], [code], batch_items=[rows["mbpp_train-669"]]) == [0.5]
    assert dc.reward(["plan"], [code], batch_items=[kept["mbpp_train-669"]]) == [0.0]
    canonical = "```python\n" + rows["mbpp_train-669"]["canonical"] + "\n```"
    assert dc.reward(["plan"], [canonical], batch_items=[kept["mbpp_train-669"]]) == [1.0]  # honest code still earns


def test_the_code_domain_s_train_split_is_the_filtered_one(tmp_path):
    section = {"train": dict(SPEC), "dry_run": True}
    train, _ = dc.load_datasets(section)
    ids = set(train["id"])
    assert "mbpp_train-667" not in ids and "mbpp_train-669" in ids and len(ids) == 19
    cfg = type("Cfg", (), {"domain_cfg": dc.CodeConfig()})()
    report = dc.DOMAIN.dry_run(cfg, train, None)
    assert report["train_echo"]["tasks_left_out"] == ["mbpp_train-667", "mbpp_train-674"]
