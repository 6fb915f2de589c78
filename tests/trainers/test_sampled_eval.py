"""Sampled evaluation: a suite's ``num_samples: k`` decodes each item k times and logs avg@k and pass@k
(c3_plugin/trainers/bridge.py: evaluate; domains/math/metrics.py); greedy suites stay as they were."""

import json
from itertools import combinations
from math import comb
from pathlib import Path

import numpy as np
import pytest
import torch
from datasets import Dataset

from c3_plugin.core.config import load_config
from c3_plugin.core.plan import parse_plan
from c3_plugin.core.rewards import batched
from c3_plugin.run.dry_run import prepare
from c3_plugin.run.report import eval_metrics
from c3_plugin.run.testing import experiment_config, tiny_model, tiny_tokenizer
from c3_plugin.run.train import build_trainer
from c3_plugin.trainers import C3Config, C3Trainer
from domains.math import data as dm
from domains.math import default_eval_logger, eval_aggregator, math_workflow
from domains.math.metrics import pass_at_k

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "math"


def test_pass_at_k_is_the_share_of_k_subsets_holding_a_correct_sample():
    for n in range(1, 7):
        for c in range(n + 1):
            outcomes = [1] * c + [0] * (n - c)
            for k in range(1, n + 1):
                subsets = list(combinations(outcomes, k))  # the plain-count oracle
                assert pass_at_k(n, c, k) == pytest.approx(sum(any(s) for s in subsets) / len(subsets))
    assert pass_at_k(4, 1, 4) == 1.0 and pass_at_k(4, 0, 4) == 0.0 and pass_at_k(4, 1, 1) == 0.25
    assert pass_at_k(16, 3, 4) == pytest.approx(1 - comb(13, 4) / comb(16, 4))
    with pytest.raises(ValueError, match="1 <= k <= n"):
        pass_at_k(4, 1, 5)


def tagged(item, k, j, pass_k):
    return {**item, "eval_index": item["index"], "eval_sample": j, "eval_samples": k, "eval_pass_k": pass_k}


def test_aggregator_averages_each_items_decodes_then_the_items():
    # suite s: 2 items x 4 decodes, item 0 right once (c = 1), item 1 never; suite g: 2 greedy items, one right
    items = [{"answer": "1", "datasource": "s", "index": 0}, {"answer": "1", "datasource": "s", "index": 1}]
    batch = [tagged(it, 4, j, [1, 2, 4]) for it in items for j in range(4)] + [{"answer": "1", "datasource": "g"}] * 2
    finals = ["\\boxed{1}", "x", "y", "z", "\\boxed{2}", "a", "b", "c", "\\boxed{1}", "\\boxed{3}"]
    turns = [[["r"]] * len(finals), [[f] for f in finals]]
    agg = eval_aggregator(default_eval_logger(turns, batch))
    assert agg["s/accuracy"] == agg["s/avg@4"] == pytest.approx((0.25 + 0.0) / 2)
    assert agg["s/pass@4"] == 0.5 and agg["s/pass@1"] == pytest.approx(0.125)
    assert agg["s/pass@2"] == pytest.approx((1 - comb(3, 2) / comb(4, 2)) / 2)
    assert agg["s/boxed_rate"] == pytest.approx((0.25 + 0.25) / 2) and agg["s/n"] == 2
    assert agg["g/accuracy"] == 0.5 and agg["g/n"] == 2 and "g/avg@1" not in agg and "g/pass@1" not in agg
    assert agg["all/accuracy"] == pytest.approx((0.25 + 0 + 1 + 0) / 4) and agg["all/n"] == 4
    assert not any(k.startswith("all/") and "@" in k for k in agg)


# ----- the trainer's evaluation on tiny random models ------------------------------------------------

@batched
def target_reward(*completions, batch_items=None, prompts=None):
    """A reward we control: the item's own ``target``."""
    return [float(it["target"]) for it in batch_items]


def controlled_logger(seen):
    """The math logger, with ``correct`` set by the item: decode j of a sampled item is right iff j < item['c']."""
    def logger(agent_completions_turns, batch_items=None, prompts=None):
        seen.extend(batch_items)
        rows = default_eval_logger(agent_completions_turns, batch_items, prompts)
        for row, it in zip(rows, batch_items):
            if it.get("eval_samples"):
                row["correct"] = float(it["eval_sample"] < it["c"])
        return rows
    return logger


def eval_rows(sampled=True):
    rows = []
    for i, c in enumerate([0, 1, 3, 4]):
        rows.append({"id": f"s-{i}", "prompt": f"q{i}", "question": f"q{i}", "answer": "1", "datasource": "s",
                     "target": [0.0, 0.5, 1.0, 0.25][i], "c": c, **dm.sampling_columns(
                         {"name": "s",
                          **({"num_samples": 4, "temperature": 0.7, "pass_k": [2, 4]} if sampled else {})})})
    for i in range(2):
        rows.append({"id": f"g-{i}", "prompt": f"w{i}", "question": f"w{i}", "answer": "1", "datasource": "g",
                     "target": float(i), "c": 0, **dm.sampling_columns({"name": "g"})})
    return rows


def trainer(evals, seen=None, batch=4, logger=None):
    tok = tiny_tokenizer()
    train = Dataset.from_list([{"id": f"p{i}", "prompt": f"t{i}", "question": f"t{i}", "answer": "1", "target": 0.0}
                               for i in range(2)])
    args = experiment_config(C3Config, num_train_epochs=1, max_new_tokens=4, instances_per_update=2,
                             agent_devices="cpu", eval_batch_size=batch)
    tr = C3Trainer(agents=[tiny_model(tok, 0), tiny_model(tok, 1)], tokenizer=tok, reward_func=target_reward,
                   train_dataset=train, eval_dataset=Dataset.from_list(evals), eval_logger=logger
                   or controlled_logger(seen if seen is not None else []),
                   eval_aggregator=eval_aggregator, args=args, workflow=math_workflow("reasoner_actor"))
    tr.verbose = False
    return tr


def test_sampled_suite_logs_avg_and_pass_at_k_against_a_hand_computation(monkeypatch):
    seen, calls = [], []
    tr = trainer(eval_rows(), seen)
    collect = tr.collect
    monkeypatch.setattr(tr, "collect", lambda items, **kw: calls.append((len(items),
                                                                         {k: v for k, v in kw.items() if k != "tick"}))
                        or collect(items, **kw))  # tick: the progress bar's
    state = torch.random.get_rng_state()
    out = tr.evaluate()
    assert torch.equal(state, torch.random.get_rng_state())  # the training's random stream is left as it was
    # c = 0, 1, 3, 4 right decodes of 4: avg@4 = (0 + 1/4 + 3/4 + 1) / 4; pass@4 = 3/4;
    # pass@2 = (0 + (1 - C(3,2)/C(4,2)) + 1 + 1) / 4 = (0 + 1/2 + 1 + 1) / 4
    assert out["eval/s/avg@4"] == out["eval/s/accuracy"] == pytest.approx(0.5)
    assert out["eval/s/pass@4"] == pytest.approx(0.75) and out["eval/s/pass@2"] == pytest.approx(0.625)
    assert out["eval/s/n"] == 4 and out["eval/g/n"] == 2 and "eval/s/pass@1" not in out and "eval/g/avg@4" not in out
    assert out["eval/reward_mean"] == pytest.approx(np.mean([0.0, 0.5, 1.0, 0.25, 0.0, 1.0]))
    assert "eval/s/accuracy" in eval_metrics(out) and "eval/g/accuracy" in eval_metrics(out)  # the naming rule holds
    # the logger saw every decode: 4 x 4 tagged sampled rows, then the 2 greedy items as they are
    sampled = [it for it in seen if it.get("eval_index") is not None]
    assert [(it["eval_index"], it["eval_sample"]) for it in sampled] == [(i, j) for i in range(4) for j in range(4)]
    assert [it["id"] for it in seen if it.get("eval_index") is None] == ["g-0", "g-1"]
    # decoding: the sampled suite as `independent 4` at the suite's temperature, 4 // 4 = 1 item per batch
    sampled_calls = [kw for n, kw in calls if kw.get("sampling") is not None]
    assert len(sampled_calls) == 4 and all(n == 1 for n, kw in calls if kw.get("sampling") is not None)
    assert all(kw["plan"] == parse_plan("independent 4") and kw["sampling"].temperature == 0.7
               and not kw["sampling"].greedy
               for kw in sampled_calls)
    greedy_calls = [(n, kw) for n, kw in calls if kw.get("sampling") is None]
    assert greedy_calls == [(2, {"plan": parse_plan({"tree": [1, 1]}), "greedy": True})]
    # a sampled evaluation is reproducible (its generator is seeded by the run's seed) ...
    seen.clear()
    again = tr.evaluate()
    assert again == out
    # ... and the anchor logic reuses the full pool's decodes: eval/* on the first 2 items
    tr.args.eval_num_samples = 2
    full = tr.evaluate(num_eval_samples=0)
    assert full["eval_anchor/s/avg@4"] == pytest.approx((0 + 0.25) / 2) and full["eval/s/avg@4"] == pytest.approx(0.5)


def old_greedy_evaluate(tr):
    """The greedy evaluation as it was before sampled suites (the oracle): batches of eval_batch_size items."""
    items = [{**dict(r), "id": str(r["id"])} for r in tr.eval_dataset]
    plan = parse_plan({"tree": [1] * tr.workflow.num_decisions})
    rewards, outputs = [], []
    for s in range(0, len(items), int(tr.args.eval_batch_size)):
        ro = tr.collect(items[s:s + int(tr.args.eval_batch_size)], plan=plan, greedy=True)
        rewards.extend(ro.rewards.reshape(-1).tolist())
        outputs.extend(tr._path_outputs(ro))
    metrics = {"eval/reward_mean": float(np.mean(rewards))}
    turns = [[[o[s.index] for s in tr.workflow.decision_steps if tr.workflow.roles[s.name].agent == a] for o in outputs]
             for a in range(tr.num_agents)]
    detailed = tr.eval_logger(agent_completions_turns=turns, batch_items=items, prompts=[it["prompt"] for it in items])
    metrics.update({f"eval/{k}": float(v) for k, v in tr.eval_aggregator(detailed, num_turns=1).items()})
    return metrics


@pytest.mark.parametrize("batch", [1, 4])
def test_greedy_evaluation_is_unchanged(batch):
    rows = eval_rows(sampled=False)
    assert all(r["eval_samples"] == 0 for r in rows)
    rows = [{k: v for k, v in r.items() if k not in dm.SAMPLING_COLUMNS} for r in rows]  # greedy suites add no columns
    tr = trainer(rows, batch=batch, logger=default_eval_logger)
    state = torch.random.get_rng_state()
    out = tr.evaluate()
    assert torch.equal(state, torch.random.get_rng_state())
    expected = old_greedy_evaluate(tr)
    assert {k: v for k, v in out.items() if k != "env_step" and not k.startswith("eval/turn_")} == expected
    assert (out["eval/turn_1/reward_mean"] == out["eval/turn_1/expected_return"]
            == pytest.approx(expected["eval/reward_mean"]))
    assert not any("@" in k for k in out)
    # a greedy suite beside a sampled one keeps its metrics
    mixed = trainer(eval_rows(sampled=True), batch=batch, logger=default_eval_logger).evaluate()
    assert {k: v for k, v in mixed.items()
            if k.startswith("eval/g/")} == {k: v for k, v in out.items() if k.startswith("eval/g/")}


def test_eval_bar_moves_with_each_decision_step_of_a_batch(capsys):
    """One batch holds every item (eval_batch_size 8 >= 6 items): the bar still moves as the Reasoner's messages, then
    the Actor's, are generated (half the items each), with the remaining time on show; a sampled suite's one-item
    batches move in the same shares."""
    rows = [{k: v for k, v in r.items() if k not in dm.SAMPLING_COLUMNS} for r in eval_rows(sampled=False)]
    tr = trainer(rows, batch=8, logger=default_eval_logger)
    tr.verbose = True
    tr.evaluate()
    frames = [f.strip() for f in capsys.readouterr().err.replace("\n", "\r").split("\r") if f.strip()]
    counts = [f.split("|")[2].split()[0] for f in frames if f.startswith("eval @ env_step 0")]
    assert counts == ["0.0/6", "3.0/6", "6.0/6", "6.0/6"], frames  # drawn at the start, after each step, and on close
    assert all("<" in f.split("[")[-1] for f in frames)  # elapsed<remaining
    tr = trainer(eval_rows(sampled=True), batch=4, logger=default_eval_logger)
    tr.verbose = True
    tr.evaluate()
    err = capsys.readouterr().err
    # 4 sampled items alone, then 2 greedy ones
    assert all(f"{x:.1f}/6" in err for x in (0.5, 1.0, 3.5, 4.0, 5.0, 6.0)), err
    tr.verbose = False
    tr.evaluate()
    assert capsys.readouterr().err == ""  # output.verbose: false draws nothing


def test_sampled_suites_from_the_config_through_the_math_domain(tmp_path):
    """The run path: suites from dataset.eval, the math domain's own logger; the Actor's prefill boxes the
    answer, so items whose gold is 7 are right on every decode and those whose gold is 8 never."""
    path = tmp_path / "sevens.jsonl"
    path.write_text("".join(json.dumps({"problem": f"q{i}", "answer": "7" if i % 2 == 0 else "8"})
                            + "\n" for i in range(4)))
    aime = [{"name": n, "suite": "aime", "source": str(FIXTURES / f"{n}.jsonl"), "limit": 1, "num_samples": 2,
             "temperature": 0.9}
            for n in ("aime24", "aime25")]
    cfg = load_config(data={
        "algorithm": "c3", "domain": "math", "agent_model": {"name": "tiny", "device": "cpu"},
        "workflow": {"name": "reasoner_actor", "prefix": {"Actor": "\\boxed{7} "},
                     "max_new_tokens": {"Reasoner": 3, "Actor": 3}},
        "dataset": {"train": {"name": "t", "source": "synthetic", "size": 2},
                    "eval": [{"name": "sevens", "source": str(path), "num_samples": 3, "top_p": 0.9, "pass_k": [1, 3]},
                             {"name": "math500", "source": str(FIXTURES / "math500.jsonl"), "limit": 2}, *aime]},
        "output": {"base_dir": str(tmp_path), "verbose": False}, "c3": {"num_train_epochs": 1, "eval_batch_size": 4}})
    domain, wf, train, evals = prepare(cfg)
    assert set(evals["datasource"]) == {"sevens", "math500", "aime"}
    assert [i for i in evals["id"] if i.startswith("aime")] == ["aime24-60", "aime25-0"]  # one suite, two id prefixes
    tok = tiny_tokenizer()
    tr = build_trainer(cfg, domain, wf, train, evals, tmp_path, [tiny_model(tok, 0), tiny_model(tok, 1)], tok)
    out = tr.evaluate()
    assert out["eval/sevens/avg@3"] == out["eval/sevens/accuracy"] == 0.5
    assert out["eval/sevens/pass@3"] == out["eval/sevens/pass@1"] == 0.5 and out["eval/sevens/n"] == 4
    assert out["eval/sevens/boxed_rate"] == 1.0 and "eval/aime/avg@2" in out and out["eval/aime/n"] == 2
    assert "eval/math500/accuracy" in out and not any(k.startswith("eval/math500/") and "@" in k for k in out)
    assert out["eval/all/n"] == 8


@pytest.mark.parametrize("spec, fragment", [
    ({"num_samples": 0, "temperature": 0.6}, "temperature set without num_samples"),
    ({"num_samples": -2}, "num_samples must be a positive integer"),
    ({"num_samples": 2.5}, "num_samples must be a positive integer"),
    ({"num_samples": 4, "pass_k": [8]}, "pass_k is a list of integers in \\[1, num_samples=4\\]"),
    ({"num_samples": 4, "top_p": 1.5}, "top_p must be in \\(0, 1\\]"),
    ({"num_samples": 4, "temperature": 0}, "temperature must be > 0"),
    ({"num_sample": 4}, "unknown key 'dataset.eval\\[0\\].num_sample'; did you mean 'num_samples'"),
])
def test_bad_sampling_settings_are_refused(spec, fragment):
    with pytest.raises(dm.DatasetError, match=fragment):
        dm.load_datasets({"eval": [{"name": "m", "source": str(FIXTURES / "math500.jsonl"), **spec}]})


def test_one_suite_decodes_one_way_and_ids_stay_unique():
    a = {"name": "aime24", "suite": "aime", "source": str(FIXTURES / "aime24.jsonl"), "num_samples": 16}
    with pytest.raises(dm.DatasetError, match="suite 'aime' decode differently"):
        dm.load_datasets({"eval": [a, {**a, "name": "aime25", "source": str(FIXTURES / "aime25.jsonl"),
                                       "num_samples": 4}]})
    with pytest.raises(dm.DatasetError, match="occur more than once"):
        dm.load_datasets({"eval": [{"name": "m", "source": str(FIXTURES / "math500.jsonl")}] * 2})
    _, ev = dm.load_datasets({"eval": [a, {**a, "name": "aime25", "source": str(FIXTURES / "aime25.jsonl")}]})
    assert set(ev["datasource"]) == {"aime"} and len(set(ev["id"])) == len(ev) == 10
    assert set(ev["eval_samples"]) == {16} and ev[0]["eval_pass_k"] == [16] and ev[0]["eval_temperature"] is None
