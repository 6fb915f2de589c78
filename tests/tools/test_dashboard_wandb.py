"""The W&B comparison workspace built and written offline: sections, panels against ``env_step``, the run set
filtered to one comparison's group and grouped by job type (no network: ``publish`` offline never calls W&B)."""

import json
import re
from urllib.parse import unquote

import pytest

pytest.importorskip("wandb_workspaces")

from c3_plugin.tools.dashboard_wandb import CREDIT, publish, workspace_spec  # noqa: E402

METRICS = ["eval/reward_mean", "eval/gsm8k/accuracy", "eval/math500/accuracy"]
ALGORITHMS = ["c3", "magrpo", "mappo"]


@pytest.fixture(autouse=True)
def offline(monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")


def written(tmp_path, group="cmp_math_2025", roles=None, name="ws.json"):
    spec = workspace_spec("me", "proj", group, METRICS, ALGORITHMS, roles=roles)
    out = tmp_path / name
    assert publish(spec, online=False, out_path=out) == str(out)
    return json.loads(out.read_text())


def sections(view):
    return {s["name"]: s for s in view["spec"]["section"]["panelBankConfig"]["sections"]}


def panels(section):
    return [p["config"] for p in section["panels"]]


def runset(view):
    (rs,) = view["spec"]["section"]["runSets"]
    return rs


def test_offline_spec_is_json_with_the_four_sections(tmp_path):
    view = written(tmp_path)
    assert (view["entity"], view["project"], view["displayName"]) == ("me", "proj", "c3 compare: cmp_math_2025")
    assert list(sections(view)) == ["Evaluation", "Costs", "Training", "Credit diagnostics"]
    assert view["spec"]["section"]["settings"]["xAxis"] == "env_step"


def test_every_panel_is_a_line_plot_against_env_step_with_a_band_per_job_type(tmp_path):
    for section in sections(written(tmp_path)).values():
        assert section["localPanelSettings"]["xAxis"] == "env_step"
        for p in section["panels"]:
            assert p["viewType"] == "Run History Line Plot"
            c = p["config"]
            assert (c["xAxis"], c["groupBy"], c["groupAgg"],
                    c["groupArea"]) == ("env_step", "jobType", "mean", "minmax")


def test_evaluation_has_one_panel_per_metric(tmp_path):
    evaluation = panels(sections(written(tmp_path))["Evaluation"])
    assert [c["chartTitle"] for c in evaluation] == METRICS
    assert [c["metrics"] for c in evaluation] == [[m] for m in METRICS]


def test_costs_and_training_keys(tmp_path):
    s = sections(written(tmp_path))
    costs = {m for c in panels(s["Costs"]) for m in c["metrics"]}
    assert costs == {"budget/total_tokens_generated", "budget/total_messages", "budget/total_env_steps",
                     "time/update_s", "time/rollout_s"}
    assert [c["metrics"] for c in panels(s["Training"])] == [["train/reward_mean"], ["train/loss"]]


def test_runset_is_the_group_grouped_by_job_type(tmp_path):
    rs = runset(written(tmp_path))
    leaves = {(f["key"]["section"], f["key"]["name"]): (f["op"], f["value"]) for f in rs["filters"]["filters"]}
    assert leaves == {("run", "group"): ("=", "cmp_math_2025"), ("run", "jobType"): ("IN", ALGORITHMS)}
    assert rs["grouping"] == [{"section": "run", "name": "jobType"}]
    # one stable color per algorithm
    colors = written(tmp_path, name="again.json")["spec"]["section"]["customRunColors"]
    groups = [json.loads(unquote(k).split(":", 2)[2]) for k in colors]
    assert (sorted(g["value"] for (g,) in groups) == sorted(ALGORITHMS)
            and {g["key"] for (g,) in groups} == {"run:jobType"})


def test_changing_the_group_changes_only_the_filter(tmp_path):
    a, b = written(tmp_path, "cmp_a", name="a.json"), written(tmp_path, "cmp_b", name="b.json")
    group = {f["key"]["name"]: f["value"] for f in runset(b)["filters"]["filters"]}["group"]
    assert group == "cmp_b" and "cmp_a" not in json.dumps(runset(b)) and b["displayName"] == "c3 compare: cmp_b"
    titles = [[c["chartTitle"] for c in panels(s)] for s in sections(a).values()]
    assert titles == [[c["chartTitle"] for c in panels(s)] for s in sections(b).values()]


def matches(regex, key):
    return re.search(regex, key) is not None


def test_credit_panels_by_regex_without_roles(tmp_path):
    credit = panels(sections(written(tmp_path))["Credit diagnostics"])
    assert len(credit) == len(CREDIT) and all(c["useMetricRegex"] and c["metrics"] == [] for c in credit)
    for d, c in zip(CREDIT, credit):
        assert matches(c["metricRegex"],
                       f"credit/reasoner_u0/{d}") and matches(c["metricRegex"], f"credit/actor_u12/{d}")
        assert not matches(c["metricRegex"],
                           f"credit/reasoner_u0/{d}_x") and not matches(c["metricRegex"], "eval/reward_mean")


def test_credit_panels_per_given_role(tmp_path):
    credit = panels(sections(written(tmp_path, roles=["reasoner", "actor"]))["Credit diagnostics"])
    assert len(credit) == 2 * len(CREDIT)
    by_title = {c["chartTitle"]: c["metricRegex"] for c in credit}
    for role, other in (("reasoner", "actor"), ("actor", "reasoner")):
        for d in CREDIT:
            regex = by_title[f"credit/{role}_u*/{d}"]
            assert matches(regex, f"credit/{role}_u0/{d}") and matches(regex, f"credit/{role}_u3/{d}")
            assert not matches(regex, f"credit/{other}_u0/{d}")


def test_publish_offline_needs_a_path_and_quotes_are_refused(tmp_path):
    spec = workspace_spec("me", "proj", "g", METRICS, ALGORITHMS)
    with pytest.raises(ValueError, match="out_path"):
        publish(spec, online=False, out_path=None)
    with pytest.raises(ValueError, match="quote"):
        workspace_spec("me", "proj", "it's", METRICS, ALGORITHMS)
    out = tmp_path / "nested" / "ws.json"
    publish(spec, online=False, out_path=out)
    assert json.loads(out.read_text())["spec"]["section"]["runSets"][0]["filters"]["filters"][0]["value"] == "g"
