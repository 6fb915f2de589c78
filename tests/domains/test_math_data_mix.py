"""Several train sources mixed by weight, and the MATH / CMATH train schemas (domains/math/data.py)."""

import json
import math
from collections import Counter
from pathlib import Path

import pytest

from c3_plugin.core.config import ConfigError, load_config
from c3_plugin.core.errors import DatasetError
from domains.math import data as dm
from domains.math.answer import last_boxed

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "math"
MATH_TRAIN = FIXTURES / "math_train_sample.jsonl"
CMATH_TRAIN = FIXTURES / "cmath_train_sample.jsonl"


def raw(path):
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def synthetic(name, size, seed=0):
    return {"name": name, "source": "synthetic", "size": size, "seed": seed}


# ----- the two train schemas ---------------------------------------------------------------------------

def test_math_schema_answers_are_the_last_boxed_and_metadata_is_kept():
    rows = dm.load_split({"name": "math_train", "source": str(MATH_TRAIN), "schema": "math"})
    upstream = raw(MATH_TRAIN)
    assert len(rows) == len(upstream) == 12
    # the first row boxes 15\frac{39}{40} first and \frac{639}{40} last: the last box is the answer
    assert rows[0]["answer"] == "\\frac{639}{40}" and "\\boxed{15\\frac{39}{40}}" in upstream[0]["solution"]
    for row, up in zip(rows, upstream):
        assert row["answer"] == last_boxed(up["solution"]).strip() and row["question"] == row["prompt"] == up["problem"]
        assert row["level"] == int(up["level"].split()[-1]) and row["subject"] == up["type"]
        assert row["datasource"] == "math_train"
    assert rows[2]["answer"] == "\\left( 3, \\frac{\\pi}{2} \\right)"  # nested braces inside the box
    assert len({r["id"] for r in rows}) == 12 and rows[0]["id"] == "math_train-0"


def test_math_schema_level_question_mark_and_missing_answers():
    assert dm.math_row({"problem": "p1", "solution": "so \\boxed{3}", "level": "Level ?", "type": "Geometry"}, "m",
                       0) == {
        "id": "m-0", "prompt": "p1", "question": "p1", "answer": "3", "datasource": "m", "level": None,
                              "subject": "Geometry"}
    assert dm.math_row({"problem": "p2", "solution": "no box here", "level": "Level 2", "type": "Algebra"}, "m",
                       1) is None
    with pytest.raises(DatasetError, match="schema 'math' needs columns 'problem' and 'solution'"):
        dm.math_row({"question": "q", "golden": "1"}, "m", 0)


def test_math_schema_drops_unanswerable_rows_with_a_warning(tmp_path):
    path = tmp_path / "m.jsonl"
    path.write_text(json.dumps({"problem": "a", "solution": "\\boxed{1}", "level": "Level 1", "type": "Algebra"}) + "\n"
                    + json.dumps({"problem": "b", "solution": "none", "level": "Level 1", "type": "Algebra"}) + "\n")
    with pytest.warns(UserWarning, match="1 row\\(s\\) without an answer were left out \\(schema "
                                         "math; first: row 2\\)"):
        rows = dm.load_split({"name": "m", "source": str(path), "schema": "math"})
    assert [r["answer"] for r in rows] == ["1"]


def test_cmath_schema_reads_golden_and_keeps_grade():
    rows = dm.load_split({"name": "cmath_train", "source": str(CMATH_TRAIN), "schema": "cmath"})
    upstream = raw(CMATH_TRAIN)
    assert set(upstream[0]) == {"question", "golden", "grade", "reasoning_step", "num_digits"}  # HF weitianwen/cmath
    assert [r["answer"] for r in rows] == [u["golden"] for u in upstream]
    assert "2/6" in [r["answer"] for r in rows] and "2813.18" in [r["answer"] for r in rows]
    assert Counter(r["grade"] for r in rows) == {g: 2 for g in range(1, 7)}
    for row, up in zip(rows, upstream):
        assert row["question"] == up["question"] and row["reasoning_step"] == up["reasoning_step"]
        assert row["num_digits"] == up["num_digits"]
    # the GitHub release (XiaoMi/cmath) names the question "input"; the bundled test copy "problem"/"answer"
    assert dm.cmath_row({"input": "q", "golden": "7", "grade": 3}, "c", 0)["question"] == "q"
    assert dm.load_split({"name": "cmath", "source": str(FIXTURES / "cmath.jsonl"), "schema": "cmath"})[0]["grade"] == 1
    with pytest.raises(DatasetError, match="schema 'cmath' needs a 'question'"):
        dm.cmath_row({"problem_text": "q"}, "c", 0)


def test_auto_schema_is_unchanged_and_unknown_schema_refused():
    rows = dm.load_split({"name": "cmath_train", "source": str(CMATH_TRAIN)})
    assert set(rows[0]) == {"id", "prompt", "question", "answer", "datasource"}  # auto keeps no metadata
    assert rows[0]["answer"] == raw(CMATH_TRAIN)[0]["golden"]
    with pytest.raises(DatasetError, match="unknown schema 'maths'"):
        dm.load_split({"name": "x", "source": str(CMATH_TRAIN), "schema": "maths"})


def test_a_list_of_hub_configs_loads_each_with_the_config_in_the_ids(monkeypatch):
    import datasets

    calls = []

    def fake(source, config=None, split=None, revision=None):
        calls.append((source, config, split, revision))
        return [{"problem": f"{config} p{i}", "solution": f"\\boxed{{{i}}}", "level": "Level 1", "type": config}
                for i in range(2)]

    monkeypatch.setattr(datasets, "load_dataset", fake)
    rows = dm.load_split({"name": "math_train", "source": "EleutherAI/hendrycks_math",
                          "config": ["algebra", "geometry"], "split": "train", "revision": "abc", "schema": "math"})
    assert calls == [("EleutherAI/hendrycks_math", c, "train", "abc") for c in ("algebra", "geometry")]
    assert [r["id"] for r in rows] == ["math_train-algebra-0", "math_train-algebra-1", "math_train-geometry-0",
                                       "math_train-geometry-1"]
    assert {r["datasource"] for r in rows} == {"math_train"}
    calls.clear()
    dm.load_split({"name": "math_train"})  # the built-in name: MATH-lighteval's train split with the math schema
    assert calls == [("DigitalLearningGmbH/MATH-lighteval", "default", "train", None)]


# ----- mixing ------------------------------------------------------------------------------------------

def test_mix_counts_is_proportional_and_sums_to_the_total():
    assert dm.mix_counts([10, 10], [1, 1], 20) == [10, 10]
    assert dm.mix_counts([7, 3], [1, 1], 10) == [5, 5]
    assert dm.mix_counts([5, 5, 5], [1, 1, 1], 10) == [4, 3, 3]  # largest remainder, ties to the earlier source
    assert dm.mix_counts([100, 1], [2, 1], 101) == [67, 34]
    for total in range(1, 40):
        counts = dm.mix_counts([total, total, total], [0.5, 0.3, 0.2], total)
        assert sum(counts) == total
        assert all(abs(c - total * w) < 1 for c, w in zip(counts, [0.5, 0.3, 0.2]))


def test_no_weights_concatenates_every_row_once_in_source_order():
    section = {"train": [synthetic("a", 6), synthetic("b", 4, seed=1)]}
    train, _ = dm.load_datasets(section, seed=0)
    assert [r["id"] for r in train] == [f"a-{i}" for i in range(6)] + [f"b-{i}" for i in range(4)]
    assert train["datasource"] == ["a"] * 6 + ["b"] * 4
    assert dm.load_datasets(section, seed=5)[0]["id"] == train["id"]  # no weights: the seed changes nothing


def test_weights_set_the_shares_of_a_mix_as_large_as_its_sources():
    section = {"train": [{**synthetic("a", 30), "weight": 0.5}, {**synthetic("b", 10, seed=1), "weight": 0.5}]}
    train, _ = dm.load_datasets(section, seed=0)
    rows = train.to_list()
    assert len(rows) == 40 and Counter(r["datasource"] for r in rows) == {"a": 20, "b": 20}
    assert len({r["id"] for r in rows}) == 40
    b = [r for r in rows if r["datasource"] == "b"]
    assert sorted(Counter(r["id"].split("#")[0] for r in b).values()) == [2] * 10  # every b row twice
    assert sum("#1" in r["id"] for r in b) == 10  # the second copies carry "#1"
    a_ids = {r["id"] for r in rows if r["datasource"] == "a"}
    assert a_ids <= {f"a-{i}" for i in range(30)} and len(a_ids) == 20  # a sample of a, without replacement
    for r in rows:  # every row traces back to its source row
        assert r["id"].split("#")[0].startswith(r["datasource"] + "-")
    by_id = {s["id"]: s for s in dm.synthetic_rows("b", size=10, seed=1)}
    assert all(r["question"] == by_id[r["id"].split("#")[0]]["question"] for r in b)


def test_mixing_is_deterministic_per_seed_and_independent_of_source_order():
    specs = [{**synthetic("a", 50), "weight": 3}, {**synthetic("b", 50, seed=1), "weight": 1}]
    one = dm.load_datasets({"train": specs}, seed=0)[0]["id"]
    assert one == dm.load_datasets({"train": specs}, seed=0)[0]["id"]
    assert Counter(i.split("-")[0] for i in one) == {"a": 75, "b": 25}
    other = dm.load_datasets({"train": specs}, seed=1)[0]["id"]
    assert sorted(one) != sorted(other) and len(other) == 100
    swapped = dm.load_datasets({"train": specs[::-1]}, seed=0)[0]["id"]
    assert sorted(swapped) == sorted(one)  # a source's sample depends on (seed, its name), not its position


def test_weights_proportional_to_the_sizes_are_plain_concatenation():
    specs = [{**synthetic("a", 30), "weight": 3}, {**synthetic("b", 10, seed=1), "weight": 1}]
    mixed = dm.load_datasets({"train": specs}, seed=7)[0]["id"]
    plain = dm.load_datasets({"train": [synthetic("a", 30), synthetic("b", 10, seed=1)]}, seed=7)[0]["id"]
    assert mixed == plain


def test_math_and_cmath_train_mixed_from_the_fixtures_with_eval_overlap_dropped():
    specs = [{"name": "math_train", "source": str(MATH_TRAIN), "schema": "math", "weight": 0.5},
             {"name": "cmath_train", "source": str(CMATH_TRAIN), "schema": "cmath", "weight": 0.5}]
    # shares its first rows with cmath_train_sample
    evals = [{"name": "cmath", "source": str(FIXTURES / "cmath.jsonl")}]
    kept = len(dm.check_overlap(dm.load_split(specs[1]), dm.load_split(evals[0]), drop=True))
    assert 0 < kept < 12
    with pytest.raises(DatasetError, match="evaluation problem\\(s\\) from cmath"):
        dm.load_datasets({"train": specs, "eval": evals})
    train, ev = dm.load_datasets({"train": specs, "eval": evals, "drop_overlap": True}, seed=0)
    rows = train.to_list()
    share = dm.mix_counts([12, kept], [0.5, 0.5], 12 + kept)
    assert len(rows) == 12 + kept and Counter(r["datasource"]
                                              for r in rows) == {"math_train": share[0], "cmath_train": share[1]}
    eval_questions = set(ev["question"])
    assert not any(r["question"] in eval_questions for r in rows)
    # the union of both schemas' columns, None where a source has none
    m = next(r for r in rows if r["datasource"] == "math_train")
    c = next(r for r in rows if r["datasource"] == "cmath_train")
    assert m["grade"] is None and isinstance(m["level"], int) and c["level"] is None and isinstance(c["grade"], int)


@pytest.mark.parametrize("specs, fragment", [
    ([{**synthetic("a", 4), "weight": 0}, {**synthetic("b", 4), "weight": 1}],
     "weight 0; a weight is a finite number > 0"),
    ([{**synthetic("a", 4), "weight": -1}, {**synthetic("b", 4), "weight": 1}], "weight -1"),
    ([{**synthetic("a", 4), "weight": "half"}, {**synthetic("b", 4), "weight": 1}], "weight 'half'"),
    ([{**synthetic("a", 4), "weight": True}, {**synthetic("b", 4), "weight": 1}], "weight True"),
    ([{**synthetic("a", 4), "weight": math.nan}, {**synthetic("b", 4), "weight": 1}], "weight nan"),
    ([{**synthetic("a", 4), "weight": 1}, synthetic("b", 4)], "give a weight to every source or to none; b has none"),
    ([synthetic("a", 4), synthetic("a", 4)], "source names must differ"),
    ([{"source": "synthetic", "size": 4}], "its own 'name'"),
    ([{**synthetic("a", 4), "wieght": 1}], "unknown key 'dataset.train\\[0\\].wieght'; did you mean 'weight'"),
])
def test_bad_sources_are_refused_by_name(specs, fragment):
    with pytest.raises(DatasetError, match=fragment):
        dm.load_datasets({"train": specs})


def test_a_source_left_empty_by_drop_overlap_cannot_be_weighted():
    specs = [{"name": "c", "source": str(FIXTURES / "cmath.jsonl"), "weight": 1}, {**synthetic("a", 4), "weight": 1}]
    with pytest.raises(DatasetError, match="source 'c' has no rows"):
        dm.load_datasets({"train": specs, "eval": [{"name": "cmath", "source": str(FIXTURES / "cmath.jsonl")}],
                          "drop_overlap": True})


# ----- the single-mapping form and the run path -------------------------------------------------------

def test_the_single_mapping_form_is_unchanged():
    spec = {"name": "gsm8k_train", "source": str(FIXTURES / "gsm8k_train.jsonl"), "limit": 6}
    train, ev = dm.load_datasets({"train": spec,
                                  "eval": [{"name": "math500", "source": str(FIXTURES / "math500.jsonl")}]}, seed=3)
    upstream = raw(FIXTURES / "gsm8k_train.jsonl")[:6]
    assert train.column_names == ["id", "prompt", "question", "answer", "datasource"]
    assert train.to_list() == [dm.normalise_row(r, "gsm8k_train", i) for i, r in enumerate(upstream)]
    assert ev.column_names == ["id", "prompt", "question", "answer", "datasource"]  # greedy suites add no columns
    assert dm.load_datasets({"train": {**spec, "weight": 2}}, seed=0)[0]["id"] == train["id"]  # a lone weight is moot


def test_the_list_form_through_config_dry_run_and_compare_fingerprint():
    from c3_plugin.run.dry_run import dry_run_report
    from c3_plugin.tools.compare import fingerprint

    data = {"algorithm": "c3", "domain": "math", "agent_model": {"name": "no/such-model"},
            "dataset": {"train": [{"name": "math_train", "source": str(MATH_TRAIN), "schema": "math", "weight": 2},
                                  {"name": "cmath_train", "source": str(CMATH_TRAIN), "schema": "cmath", "weight": 1}],
                        "eval": [{"name": "aime24", "source": str(FIXTURES / "aime24.jsonl")}]},  # disjoint from both
            "c3": {"num_train_epochs": 1, "instances_per_update": 8}}
    cfg = load_config(data=data)
    assert [s["name"] for s in cfg.dataset.train_sources()] == ["math_train", "cmath_train"]
    report = dry_run_report(cfg)
    assert report["status"] == "unverified" and not report["errors"]  # no/such-model: a hub name, offline
    assert report["train_rows"] == 24 and report["expected_env_steps"] == 24 * 8
    print_ = fingerprint(cfg)
    assert print_["train"] == data["dataset"]["train"] and print_["train_rows"] == 24
    single = (load_config(data={**data, "dataset": {**data["dataset"],
                                                    "train": {"name": "t", "source": str(MATH_TRAIN)}}}))
    assert single.dataset.train_sources() == [{"name": "t", "source": str(MATH_TRAIN)}]
    with pytest.raises(ConfigError, match="dataset.train: expected a mapping or a list of mappings"):
        load_config(data={**data, "dataset": {"train": ["math_train"]}})
