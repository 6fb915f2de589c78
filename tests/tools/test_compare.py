"""``c3 compare`` end to end on tiny models saved to a folder (each run is its own ``python -m c3_plugin train``
process), and the ``c3`` console script."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from c3_plugin.core.config import ConfigError
from c3_plugin.core.stats import summarize
from c3_plugin.run.testing import template_config
from c3_plugin.tools.compare import aggregate, compare, controlled, markdown, plan, record_steps_line

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.timeout(900)
ONE_WORKER = pytest.mark.xdist_group("compare")  # the tests of the comparison fixture: one worker runs it once


@pytest.fixture(scope="module")
def base_config(tmp_path_factory):
    folder = tmp_path_factory.mktemp("compare")
    cfg = template_config(
        folder, dataset={"train": {"size": 4}, "eval": [{"name": "echo", "size": 3},
                                                        {"name": "copy", "size": 2, "seed": 9}]},
        output={"verbose": False, "plot": False, "save_model": False},
        c3={"num_train_epochs": 1, "max_new_tokens": 3, "instances_per_update": 2, "plan": "tree [2, 4]",
            "advantage_scaling": "none"},
        magrpo={"num_train_epochs": 1, "max_new_tokens": 3, "instances_per_update": 2, "plan": "independent 8",
                "advantage_scaling": "none"})  # one scaling: the runs differ in credit only
    path = folder / "base.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


@pytest.fixture(scope="module")
def comparison(base_config, tmp_path_factory):
    out = tmp_path_factory.mktemp("runs") / "h2h"
    logs: list[str] = []
    result = compare(base_config, ["c3", "magrpo"], [0, 1], out, log=logs.append)
    return out, result, logs


@ONE_WORKER
def test_compare_runs_every_algorithm_and_seed_once_and_aggregates(base_config, comparison):
    out, result, logs = comparison
    # what differs is printed first
    assert "effective settings that differ" in logs[0] and "| plan | credit |" in logs[0]
    assert "consent to other differences: none" in logs[0]
    record = json.loads((out / "summary.json").read_text())["controlled_comparison"]
    assert record["consent"] == "none" and record["allowed"] == [] and record["uncontrolled"] == {}
    assert (record["kind"]["plan"] == "credit" and record["differences"]["plan"]
            == {"c3": "tree [2, 4]", "magrpo": "independent 8"})
    assert "## Settings that differ" in (out / "summary.md").read_text()
    for run in ("c3-s0", "c3-s1", "magrpo-s0", "magrpo-s1"):
        summary = json.loads((out / run / "summary.json").read_text())
        assert summary["env_steps"] == 4 * 8 and summary["wall_s"] > 0 and summary["peak_rss_gib"] > 0
        assert json.loads((out / run / "config.json").read_text())["wandb"]["group"] == "h2h"
    assert result["metrics"] == ["eval/copy/accuracy", "eval/echo/accuracy"]
    for metric in result["metrics"]:
        finals = {algo: [json.loads((out / f"{algo}-s{s}" / "summary.json").read_text())["eval_after"][metric]
                         for s in (0, 1)]
                  for algo in ("c3", "magrpo")}
        for algo, values in finals.items():
            assert result["final"][metric]["algorithms"][algo] == summarize(values)
        pair = result["final"][metric]["pairs"]["c3 vs magrpo"]
        assert pair["n"] == 2 and "p_holm" in pair
        assert pair["diffs"] == pytest.approx([c - m for c, m in zip(finals["c3"], finals["magrpo"])])  # paired by seed
    assert result["costs"]["env_steps"]["c3"]["mean"] == 32
    assert json.loads((out / "summary.json").read_text())["metrics"] == result["metrics"]
    assert "| eval/echo/accuracy |" in (out / "summary.md").read_text()
    # a finished comparison is not redone; a run without its summary (killed) runs again, alone
    (out / "magrpo-s1" / "summary.json").unlink()
    logs = []
    compare(base_config, ["c3", "magrpo"], [0, 1], out, log=logs.append)
    assert sum("finished, kept" in line for line in logs) == 3 and any("magrpo-s1: " in line for line in logs)
    assert (out / "magrpo-s1" / "summary.json").exists()


@ONE_WORKER
def test_dashboard_is_one_self_contained_page(comparison):
    from c3_plugin.tools.dashboard import write_dashboard

    out, result, _ = comparison
    page = write_dashboard(out).read_text()
    assert page.count("<svg") >= 4  # two suites' eval curves, training curves, cost bars
    for text in ("eval/echo/accuracy", "c3 vs magrpo", "Credit diagnostics", "Costs per run", "href='c3-s0/'",
                 "<h2>Settings that differ</h2>",
                 "<tr><td>plan</td><td>credit</td><td>tree [2, 4]</td><td>independent 8</td>"):
        assert text in page, text
    assert "<script" not in page and "http://" not in page.replace("http://www.w3.org", "")  # nothing to fetch or run
    one_run = write_dashboard(out / "c3-s0").read_text()  # a single run folder (make demo writes the demo run's)
    assert "<svg" in one_run and "<h2>Results</h2>" in one_run and "Comparison" not in one_run
    # what training wrote: its example trace (each message's credit), its peak memory, the credit charts' definitions
    example = json.loads((out / "c3-s0" / "example_trace.json").read_text())
    trace = one_run[one_run.index("<h2>Example trace with per-message credit</h2>"):]
    for m in example["messages"]:
        if m["advantage"] is not None:
            assert f"<td>{m['advantage']:+.4f}</td></tr>" in trace, m
    assert "<td>peak memory (RSS) GiB</td>" in one_run and "<b>zero_signal_share</b> (" in one_run
    assert "Inert under these settings" in page and "<td>q_critic_alpha</td>" not in page
    for cell in before_after_cells(json.loads((out / "c3-s0" / "summary.json").read_text())):
        assert cell in one_run, cell


def before_after_cells(summary):
    """The cells the dashboard shows for a run's before/after table: every eval/ metric with its values and change."""
    from c3_plugin.run.report import before_after

    rows = before_after(summary)
    assert rows, summary
    return [f"<tr><td>{k}</td><td>{b:.4f}</td><td>{a:.4f}</td><td>{d:+.4f}</td></tr>" for k, b, a, d in rows]


@pytest.fixture
def one_run(tmp_path):
    """A finished run folder as training writes it: five evaluations of the anchor items logged to metrics.jsonl
    (before, three during training, after) and summary.json with its before/after evaluations on more items."""
    run = tmp_path / "math-c3-reasoner_actor-s0"
    run.mkdir()
    rows = []
    for step, acc in ((0, 0.25), (64, 0.3125), (128, 0.375), (192, 0.4375), (256, 0.5)):
        rows.append({"env_step": step, "eval/compare/accuracy": acc, "eval/reward_mean": acc})
        if step:
            rows.append({"env_step": step, "train/update_step": step // 32, "train/reward_mean": 0.4,
                         "budget/total_tokens_generated": 20 * step})
    (run / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    (run / "config.json").write_text(json.dumps({"algorithm": "c3", "seed": 0}))
    summary = {"algorithm": "c3", "workflow": "reasoner_actor", "env_steps": 256, "updates": 8, "wall_s": 612.25,
               "totals": {"tokens_generated": 5120, "messages": 320},
               "eval_before": {"eval/compare/accuracy": 0.2708, "eval/reward_mean": 0.2708,
                               "eval_anchor/compare/accuracy": 0.25, "env_step": 0.0},
               "eval_after": {"eval/compare/accuracy": 0.5625, "eval/reward_mean": 0.5625,
                              "eval_anchor/compare/accuracy": 0.5, "env_step": 256.0}}
    (run / "summary.json").write_text(json.dumps(summary))
    return run, summary


def test_single_run_dashboard_shows_results_before_after_and_every_evaluation(one_run):
    """A run folder's page: the final metrics and costs, the before/after table the run printed, and the eval curve
    with a point at each of the run's five evaluations."""
    from c3_plugin.tools.dashboard import write_dashboard

    run, summary = one_run
    page = write_dashboard(run).read_text()
    assert "<h2>Results</h2>" in page and "c3 on reasoner_actor: 256 env steps, 8 updates, 5120 tokens" in page
    for row in ("<tr><td>eval/compare/accuracy</td><td>0.5625</td></tr>", "<tr><td>env steps</td><td>256</td></tr>",
                "<tr><td>tokens</td><td>5120</td></tr>", "<tr><td>wall s</td><td>612.2</td></tr>",
                "<tr><td>updates</td><td>8</td></tr>"):
        assert row in page, row
    for cell in before_after_cells(summary):  # the printed table's rows: 0.2708 -> 0.5625, +0.2917
        assert cell in page, cell
    assert "eval_anchor/* are the curves' end points" in page  # the curve is on fewer items than the table
    curve = page[page.index("<g id=\"curve:eval/compare/accuracy:c3\">"):]
    assert curve[:curve.index("</g>\n   </g>")].count("<use ") == 5  # one marker per evaluation
    (run / "summary.json").unlink()  # still running: the curves, and no final numbers
    assert "has not finished" in write_dashboard(run).read_text()


def run_without_signal(one_run):
    """``one_run`` with item counts logged (16 items during training, 48 at the end) and an Actor whose zero-signal
    share was 1.0 in each of its 4 batches."""
    run, summary = one_run
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    for row in rows:
        if "eval/compare/accuracy" in row:
            row["eval/compare/n"] = 16.0
        if "train/update_step" in row:
            row.update({"credit/Reasoner_u0/zero_signal_share": 0.5, "credit/Actor_u1/zero_signal_share": 1.0})
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    summary["eval_after"]["eval/compare/n"] = 48.0
    (run / "summary.json").write_text(json.dumps(summary))
    return run, rows


def test_single_run_dashboard_names_its_eval_sets_and_warns_of_an_agent_without_signal(one_run):
    """Item counts beside the final accuracies, which eval set each curve shows (16 items during training, 48 in the
    final table), and a warning for an agent whose zero-signal share was 1.0 in every batch (and none for one that
    had signal)."""
    from c3_plugin.tools.dashboard import write_dashboard

    run, rows = run_without_signal(one_run)
    page = write_dashboard(run).read_text()
    final = "<tr><td>eval/compare/accuracy</td><td>0.5625 <small>(48 items, 95% CI [0.423, 0.693])</small></td></tr>"
    assert final in page  # 27 of 48 items right: the Wilson interval
    assert ("eval/compare/accuracy at every evaluation on 16 eval items; the results table's final "
            "value is on 48 items" in page)
    warnings = [line for line in page.splitlines() if "class='warning'" in line]
    assert len(warnings) == 1 and "no learning signal for Actor_u1" in warnings[0] and "all 4 batches" in warnings[0]
    for row in rows:  # one batch with signal: no warning
        if "credit/Actor_u1/zero_signal_share" in row:
            row["credit/Actor_u1/zero_signal_share"] = 0.75
            break
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert "class='warning'" not in write_dashboard(run).read_text()


EXAMPLE = {"update_step": 1, "env_step": 32, "instance": "p0", "task": "What is 2 + 3?", "branching": [2, 4],
           "leaf": 0, "return": 1.0,
           "messages": [{"step": 0, "kind": "decision", "role": "Reasoner", "agent": 0, "decision": 0,
                         "alternative": 0, "message": "Add 2 and 3 <b>", "truncated": False, "advantage": 0.375},
                        {"step": 1, "kind": "decision", "role": "Actor", "agent": 1, "decision": 1,
                         "alternative": 0, "message": "\\boxed{5}", "truncated": False, "advantage": -0.125}]}


def test_single_run_dashboard_defines_its_credit_charts_and_shows_an_example_trace_and_peak_memory(one_run):
    """Each credit chart has its definition under it; the run's example_trace.json is a table of the path's messages
    with each one's credit (escaped), then its return; the results table has the run's peak memory."""
    from c3_plugin.tools.dashboard import write_dashboard

    run, _ = run_without_signal(one_run)
    summary = json.loads((run / "summary.json").read_text())
    (run / "summary.json").write_text(json.dumps({**summary, "peak_rss_gib": 3.5, "peak_gpu_gib": 12.25}))
    (run / "example_trace.json").write_text(json.dumps(EXAMPLE))
    page = write_dashboard(run).read_text()
    assert "<b>zero_signal_share</b> (Actor's messages at decision point 1): share of groups whose alternatives" in page
    assert "<b>zero_signal_share</b> (Reasoner's messages at decision point 0)" in page
    section = page[page.index("<h2>Example trace with per-message credit</h2>"):page.index("<h2>Runs</h2>")]
    assert "<b>task</b>: <code>What is 2 + 3?</code>" in section
    assert ("<tr><td>0</td><td>Reasoner</td><td>0</td><td><code>Add 2 and 3 &lt;b&gt;</code></td><td>+0.3750</td></tr>"
            in section)
    assert "<td><code>\\boxed{5}</code></td><td>-0.1250</td></tr>" in section
    assert "return (the leaf's reward): 1.0000" in section
    assert "<tr><td>peak memory (RSS) GiB</td><td>3.50</td></tr>" in page
    assert "<tr><td>peak GPU memory GiB</td><td>12.25</td></tr>" in page
    (run / "example_trace.json").unlink()
    assert "Example trace" not in write_dashboard(run).read_text()
    # unfinished: the largest peak its batches logged (memory/peak_rss_gib), and its chart over env steps
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    batches = [r for r in rows if "train/update_step" in r]
    for r, gib in zip(batches, (1.5, 2.0, 2.75, 2.75)):
        r["memory/peak_rss_gib"] = gib
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (run / "summary.json").unlink()
    page = write_dashboard(run).read_text()
    assert "peak memory (RSS) GiB so far: 2.75" in page and '<g id="curve:memory/peak_rss_gib:c3">' in page


def test_a_chart_of_one_logged_step_gets_axes_from_zero_and_its_value_written(one_run):
    """A run evaluated once during training: its eval chart's axes start at 0 and the point carries its value (not
    autoscaled around the point); a chart of several steps is autoscaled without labels."""
    from c3_plugin.tools.dashboard import write_dashboard

    run, _ = one_run
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    kept = [r for r in rows if "eval/compare/accuracy" not in r or r["env_step"] == 64]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in kept))
    page = write_dashboard(run).read_text()
    assert 'id="single-point:eval/compare/accuracy"' in page and "0.312 at 64 env steps" in page
    assert 'id="single-point:train/reward_mean"' not in page  # four batches: a curve


def chromium():
    """Chromium from Debian's packages, installed here when missing (with apt and root)."""
    import os
    import shutil

    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        assert (shutil.which("apt-get") and os.geteuid()
                == 0), "no Chromium and no apt/root to install it: apt-get install chromium"
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        subprocess.run(["apt-get", "update", "-qq"], check=True, capture_output=True, env=env)
        subprocess.run(["apt-get", "install", "-y", "-qq", "chromium"], check=True, capture_output=True, env=env)
        browser = shutil.which("chromium")
    return browser


@pytest.mark.browser
def test_single_run_dashboard_renders_its_tables_in_headless_chromium(one_run):
    """Chromium loads a run's page: no console errors, and the document it built holds the results and the
    before/after table with the run's values."""
    from c3_plugin.tools.dashboard import write_dashboard

    run, summary = one_run
    page = write_dashboard(run)
    proc = subprocess.run([chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--enable-logging=stderr",
                           "--v=0", "--dump-dom", page.resolve().as_uri()], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    console = [line for line in proc.stderr.splitlines() if "CONSOLE" in line or "Uncaught" in line]
    assert console == [], console
    dom = proc.stdout
    assert "<h2>Results</h2>" in dom and "<td>eval/compare/accuracy</td><td>0.5625</td>" in dom
    for cell in before_after_cells(summary):
        assert cell.replace("<tr>", "").replace("</tr>", "") in dom, cell


@pytest.mark.browser
def test_single_run_dashboard_shows_item_counts_and_the_no_signal_warning_in_headless_chromium(one_run):
    from c3_plugin.tools.dashboard import write_dashboard

    run, _ = run_without_signal(one_run)
    (run / "example_trace.json").write_text(json.dumps(EXAMPLE))
    proc = subprocess.run([chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom",
                           write_dashboard(run).resolve().as_uri()], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    dom = proc.stdout
    assert "<td>0.5625 <small>(48 items, 95% CI [0.423, 0.693])</small></td>" in dom and "on 16 eval items" in dom
    assert '<p class="warning"><b>Warning</b>: no learning signal for Actor_u1' in dom
    assert "<b>zero_signal_share</b> (Actor's messages at decision point 1)" in dom  # the credit chart's definition
    assert "<td><code>Add 2 and 3 &lt;b&gt;</code></td><td>+0.3750</td>" in dom  # the example trace's credit


@ONE_WORKER
@pytest.mark.browser
def test_dashboard_renders_in_headless_chromium_without_console_errors(comparison, tmp_path):
    """Chromium from Debian's packages (installed here when missing, with apt and root) loads the page: no console
    errors, and the screenshot is not blank (the charts are drawn)."""
    import numpy as np
    from PIL import Image

    from c3_plugin.tools.dashboard import write_dashboard

    browser = chromium()
    page = write_dashboard(comparison[0])
    shot = tmp_path / "dashboard.png"
    proc = subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--enable-logging=stderr", "--v=0",
                           "--window-size=1280,2400", f"--screenshot={shot}", page.resolve().as_uri()],
                          capture_output=True, text=True, timeout=120)
    assert shot.exists(), proc.stderr[-3000:]
    console = [line for line in proc.stderr.splitlines() if "CONSOLE" in line or "Uncaught" in line]
    assert console == [], console
    pixels = np.asarray(Image.open(shot).convert("L"), dtype=float)
    assert pixels.std() > 10 and (pixels < 128).mean() > 0.005  # lines, text and bars drawn on the white page


def test_compare_refuses_runs_with_different_budgets(base_config, tmp_path):
    with pytest.raises(ConfigError, match="expected_env_steps: c3 has 32, magrpo has 16"):
        compare(base_config, ["c3", "magrpo"], [0], tmp_path / "bad", overrides=["magrpo.plan=independent 4"],
                run=False)
    with pytest.raises(ConfigError, match="at least two algorithms"):
        compare(base_config, ["c3"], [0], tmp_path / "bad")


def test_a_mistyped_algorithm_is_refused_before_any_config_loads(tmp_path, entry_point):
    """``--algorithms c3 magrop``: one line naming the nearest algorithm, before a config is read (a missing config
    file would fail later); the same error as JSON under --json."""
    args = ["-m", "c3_plugin", "compare", "--config", str(tmp_path / "not_read.yaml"), "--algorithms", "c3", "magrop",
            "--seeds", "0", "--out", str(tmp_path / "h2h")]
    code, out, err = entry_point(*args)
    assert code == 2 and out.strip().splitlines() == [out.strip()], out + err
    assert out.startswith("error: ConfigError: unknown algorithm 'magrop' (did you mean 'magrpo'?)"), out
    code, out, _ = entry_point(*args, "--json")
    assert code == 2 and "did you mean 'magrpo'" in json.loads(out)["error"]
    assert not (tmp_path / "h2h").exists()


def finished_run(folder, accuracy, env_steps=32):
    """A run folder as training leaves it: two evaluations in metrics.jsonl and the final one in summary.json."""
    folder.mkdir(parents=True, exist_ok=True)
    rows = [{"env_step": 0, "eval/echo/accuracy": 0.0}, {"env_step": env_steps, "eval/echo/accuracy": accuracy}]
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (folder / "summary.json").write_text(json.dumps({"env_steps": env_steps, "wall_s": 1.0, "totals": {"messages": 10},
                                                     "eval_after": {"eval/echo/accuracy": accuracy}}))


def test_one_seed_has_no_interval_and_an_arm_without_runs_is_reported_as_missing(tmp_path):
    """One seed: "n/a (1 seed)" where an interval would be, in summary.md and on the dashboard; an algorithm without a
    finished run (--aggregate-only while it runs) is reported as missing instead of crashing; the dashboard's title
    names the seeds its results are over and the runs left out."""
    from c3_plugin.tools.compare import markdown
    from c3_plugin.tools.dashboard import write_dashboard

    out = tmp_path / "h2h"
    finished_run(out / "c3-s0", 0.5)
    finished_run(out / "magrpo-s0", 1.0)
    (out / "c3-s1").mkdir()  # started, not finished
    result = aggregate(out, ["c3", "magrpo"], [0, 1])
    text = markdown(result)
    assert "0.500, interval n/a (1 seed)" in text and "+- 0.000" not in text and "[0.500, 0.500]" not in text
    assert "-0.500 interval n/a (1 seed)" in text and "[-0.500, -0.500]" not in text  # the paired difference
    assert text.startswith("# Comparison: c3, magrpo over seeds [0]") and "left out): c3-s1, magrpo-s1" in text
    (out / "summary.json").write_text(json.dumps(result))
    page = write_dashboard(out).read_text()
    assert "interval n/a (1 seed)" in page and "&plusmn; 0.000" not in page and "[-0.500, -0.500]" not in page
    assert ("<h1>Comparison h2h: c3, magrpo, seeds [0] (unfinished, left out of the results: "
            "c3-s1, magrpo-s1)</h1>" in page)
    (out / "magrpo-s0" / "summary.json").unlink()  # an arm with no finished run
    result = aggregate(out, ["c3", "magrpo"], [0, 1])
    assert set(result["final"]["eval/echo/accuracy"]["algorithms"]) == {"c3"} and "magrpo-s0" in result["missing_runs"]
    assert "| eval/echo/accuracy | 0.500, interval n/a (1 seed) | - |" in markdown(result)
    finished_run(out / "c3-s1", 0.75)  # two seeds: an interval
    two = markdown(aggregate(out, ["c3", "magrpo"], [0, 1]))
    assert "| eval/echo/accuracy | 0.625 +- 0.177 [-0.963, 2.213] | - |" in two


def synthetic_comparison(base_config, folder):
    """A comparison folder without training: two finished runs per arm (seeds 0 and 1) and the controlled-comparison
    record ``c3 compare`` plans for ``base_config`` (plan ``tree [2, 4]`` against ``independent 8``, C3 under
    ``credit: loo``)."""
    for seed, (c3, magrpo) in enumerate(((0.5, 0.25), (0.75, 0.5))):
        finished_run(folder / f"c3-s{seed}", c3)
        finished_run(folder / f"magrpo-s{seed}", magrpo)
    result = aggregate(folder, ["c3", "magrpo"], [0, 1])
    result["controlled_comparison"] = controlled(plan(base_config, ["c3", "magrpo"], [0], folder))
    (folder / "summary.json").write_text(json.dumps(result, default=str))
    return result


def test_summary_shows_the_differences_in_effect_first_and_the_inert_ones_apart(base_config, tmp_path):
    """Under credit: loo the C3-only q_critic_* settings (and the consent, the diagnostics switch, and the sharing of
    parallel samples in a workflow without parallel roles) differ but change nothing: summary.md's differences table
    holds what differs in effect (the plan, the credit and the estimator it names), and the inert ones are listed
    apart, each with why; under credit: value_assisted the q_critic_* settings are in effect."""
    from c3_plugin.tools.compare import in_effect

    result = synthetic_comparison(base_config, tmp_path / "h2h")
    record = result["controlled_comparison"]
    assert set(in_effect(record)) == {"plan", "credit", "estimator"}
    assert {"q_critic_alpha", "q_critic_model", "allow_estimator_change", "credit_diagnostics",
            "share_parallel_samples"} <= set(record["inert"])
    assert "read only under credit: value_assisted" in record["inert"]["q_critic_alpha"]
    text = markdown(result)
    section = text[text.index("## Settings that differ"):text.index("## Costs per run")]
    table = section[section.index("In effect:"):section.index("Inert under these settings")]
    assert "| plan | credit | tree [2, 4] | independent 8 |" in table and "q_critic" not in table
    inert = section[section.index("Inert under these settings"):]
    assert "- q_critic_alpha (c3: 1.0, magrpo: (absent)): c3: read only under credit: value_assisted" in inert
    assert "| q_critic" not in inert  # a list apart, not table rows
    assisted = controlled(plan(base_config, ["c3", "magrpo"], [0], tmp_path / "va",
                               ["c3.credit=value_assisted", "c3.allow_estimator_change=true"]))
    assert {"q_critic_alpha", "q_critic_model", "allow_estimator_change"} <= set(in_effect(assisted))
    assert "q_critic_alpha" not in assisted["inert"] and "credit_diagnostics" in assisted["inert"]


def test_comparison_dashboard_lists_the_settings_that_differ_in_effect_and_the_inert_ones_apart(base_config, tmp_path):
    from c3_plugin.tools.dashboard import write_dashboard

    synthetic_comparison(base_config, tmp_path / "h2h")
    page = write_dashboard(tmp_path / "h2h").read_text()
    section = page[page.index("<h2>Settings that differ</h2>"):page.index("<h2>Evaluation</h2>")]
    table = section[:section.index("<h3>Inert under these settings</h3>")]
    assert "<tr><td>plan</td><td>credit</td><td>tree [2, 4]</td><td>independent 8</td></tr>" in table
    assert "q_critic" not in table
    assert ("<li><code>q_critic_alpha</code> (c3: 1.0, magrpo: (absent)): c3: read only under credit: value_assisted"
            in section)


@pytest.mark.browser
def test_comparison_dashboard_shows_intervals_and_the_differences_in_headless_chromium(base_config, tmp_path):
    """Chromium's document of a two-seed comparison's page: the title's seeds, the 95% intervals over seeds and of the
    paired difference, and the settings that differ (in effect in the table, the inert ones listed apart)."""
    from c3_plugin.tools.dashboard import write_dashboard

    synthetic_comparison(base_config, tmp_path / "h2h")
    proc = subprocess.run([chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom",
                           write_dashboard(tmp_path / "h2h").resolve().as_uri()],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    dom = proc.stdout
    assert "<h1>Comparison h2h: c3, magrpo, seeds [0, 1]</h1>" in dom
    assert "<td>0.625 ± 0.177 <small>[-0.963, 2.213]</small></td>" in dom  # c3's final accuracy over two seeds
    # the paired difference, equal in both seeds: no zero-width interval
    assert "<td>+0.250 <small>no variation over 2 seeds</small></td>" in dom and "[+0.250, +0.250]" not in dom
    assert "<h2>Settings that differ</h2>" in dom
    assert "<tr><td>plan</td><td>credit</td><td>tree [2, 4]</td><td>independent 8</td></tr>" in dom
    assert "<h3>Inert under these settings</h3>" in dom and "<code>q_critic_alpha</code>" in dom


def test_aggregate_without_finished_runs_names_the_fix(tmp_path):
    with pytest.raises(ConfigError, match="no finished run"):
        aggregate(tmp_path, ["c3", "magrpo"], [0])


def test_console_script_lists_its_commands_and_dry_runs(tmp_path, entry_point):
    out = subprocess.run([sys.executable, "-m", "c3_plugin", "--help"], cwd=ROOT, capture_output=True, text=True,
                         check=True).stdout
    assert all(cmd in out for cmd in ("train", "dry-run", "compare", "dashboard", "diagnose", "plan-budget", "audit"))
    spec = tmp_path / "ws.json"  # offline, the W&B workspace is written as its specification
    code, _, err = entry_point("-m", "c3_plugin", "dashboard", "--wandb", "me/proj", "--group", "h2h", "--metric",
                               "eval/math500/accuracy", "--out", str(spec))
    assert code == 0, err
    written = json.loads(spec.read_text())
    assert (written["entity"] == "me" and "h2h" in json.dumps(written["spec"])
            and "eval/math500/accuracy" in json.dumps(written))
    code, dry, err = entry_point("-m", "c3_plugin", "dry-run", "--config", "configs/math/demo_cpu.yaml", "--json")
    assert code == 0 and json.loads(dry)["status"] == "ok", err


@pytest.mark.torchrun
def test_compare_hands_each_run_to_the_launcher(base_config, tmp_path):
    """--launcher: each run is a torchrun job of 2 data-parallel ranks (the same budget, rank 0's summary)."""
    out = tmp_path / "launched"
    launcher = f"{sys.executable} -m torch.distributed.run --standalone --nproc_per_node 2"
    result = compare(base_config, ["c3", "magrpo"], [0], out, launcher=launcher, log=lambda *_: None)
    for run in ("c3-s0", "magrpo-s0"):
        summary = json.loads((out / run / "summary.json").read_text())
        assert summary["world_size"] == 2 and summary["env_steps"] == 32
    assert result["costs"]["env_steps"]["magrpo"]["mean"] == 32


def test_compare_refuses_settings_that_differ_beyond_the_credit_unless_allowed(base_config, tmp_path):
    """A learning rate that differs is not credit: refused with the key, the table and both flags; accepted when
    named or with the bare flag, and the consent is recorded."""
    lr = ["magrpo.agent_learning_rate=1e-3"]
    with pytest.raises(ConfigError, match=r"differ beyond the credit") as info:
        compare(base_config, ["c3", "magrpo"], [0], tmp_path / "lr", overrides=lr, run=False)
    text = str(info.value)
    assert "| agent_learning_rate | refused |" in text and "refused: agent_learning_rate (c3 vs magrpo)" in text
    assert "--allow-differences agent_learning_rate" in text and "bare --allow-differences" in text
    assert not (tmp_path / "lr").exists()  # refused before anything is written
    configs = plan(base_config, ["c3", "magrpo"], [0], tmp_path / "lr", lr)
    for allow, consent in ((["agent_learning_rate"], "named"), (True, "all")):
        record = controlled(configs, allow)
        assert record["allowed"] == ["agent_learning_rate"] and record["consent"] == consent
        assert record["kind"]["agent_learning_rate"] == "allowed" and record["kind"]["plan"] == "credit"
        assert record["differences"]["agent_learning_rate"] == {"c3": 5e-06, "magrpo": 1e-3}
    with pytest.raises(ConfigError, match="differ beyond the credit"):
        controlled(configs, ["clip_eps"])  # naming another key does not allow this one
    with pytest.raises(ConfigError, match="did you mean 'agent_learning_rate'"):
        controlled(configs, ["agent_learning_rat"])
    # the advantage scaling is not credit either: MAGRPO's CoMLRL default against C3's leave-one-out values
    with pytest.raises(ConfigError, match=r"\| advantage_scaling \| refused \| none \| group_zscore \|"):
        controlled(plan(base_config, ["c3", "magrpo"], [0], tmp_path / "z", ["magrpo.advantage_scaling=group_zscore"]))
    # a credit field may differ: MAGRPO's advantage mode
    record = controlled(plan(base_config, ["c3", "magrpo"], [0], tmp_path / "m", ["magrpo.advantage_mode=max"]))
    assert record["kind"]["advantage_mode"] == "credit"


def test_cli_allow_differences_flags(base_config, tmp_path, entry_point):
    """The compare sub-parser: no flag refuses, a named key or the bare flag consents (then --aggregate-only finds no
    finished run, which is the next check)."""
    base = ["-m", "c3_plugin", "compare", "--config", str(base_config), "--algorithms", "c3", "magrpo",
            "--seeds", "0", "--out", str(tmp_path / "cli"), "--aggregate-only", "--override",
            "magrpo.agent_learning_rate=1e-3"]
    for extra, expect in (([], "--allow-differences agent_learning_rate"),
                          (["--allow-differences", "agent_learning_rate"], "no finished run"),
                          (["--allow-differences"], "no finished run")):
        code, out, err = entry_point(*base, *extra)
        assert code != 0 and expect in out + err, (extra, out[-2000:], err[-2000:])


def test_the_diff_walks_every_field_of_the_algorithm_configs(base_config, tmp_path):
    """New shared fields (WorkflowConfig) are diffed without a list to update: every field but the output-only ones."""
    import dataclasses

    from c3_plugin.core.estimator_rules import NOT_OPTIMISATION
    from c3_plugin.trainers.c3 import C3Config
    from c3_plugin.trainers.magrpo import WorkflowMAGRPOConfig

    configs = plan(base_config, ["c3", "magrpo"], [0], tmp_path / "f")
    from c3_plugin.tools.compare import settings_listing

    listing = settings_listing(configs["c3", 0], ["c3", "magrpo"])
    for name, cls in (("c3", C3Config), ("magrpo", WorkflowMAGRPOConfig)):
        fields = {f.name for f in dataclasses.fields(cls)} - set(NOT_OPTIMISATION)
        assert fields <= set(listing["settings"][name]), fields - set(listing["settings"][name])
        assert not set(NOT_OPTIMISATION) & set(listing["settings"][name])


SHIPPED = [("configs/math/c3.yaml", ["c3", "magrpo", "mappo"], []),
           ("configs/math/demo_cpu.yaml", ["c3", "magrpo", "mappo"], []),
           ("configs/math/h2h_cpu.yaml", ["c3", "magrpo", "mappo"], []),
           ("configs/math/h2h_frozen_cpu.yaml", ["c3", "magrpo"], []),
           ("configs/travel/c3.yaml", ["c3", "magrpo"], ["dataset.train.source=data/travelplanner/train.jsonl",
                                                         "dataset.train.split=train",
                                                         "dataset.train.eval_panels=null"])]


@pytest.mark.parametrize("path, algorithms, overrides", SHIPPED, ids=[p for p, _, _ in SHIPPED])
def test_shipped_head_to_heads_differ_in_credit_only(path, algorithms, overrides, tmp_path):
    """c3 compare's planning and check on the shipped head-to-heads (the code configs' data loading runs MBPP+'s
    reference solutions once, minutes: those are covered field by field below)."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        record = controlled(plan(ROOT / path, algorithms, [0], tmp_path / "h2h", overrides))
    assert record["uncontrolled"] == {} and record["allowed"] == []
    assert set(record["kind"].values()) <= {"credit", "derived"}
    # every agent steps as often in both arms
    assert record["optimizer_steps"]["c3"] == record["optimizer_steps"]["magrpo"]
    if "mappo" not in algorithms:
        assert "advantage_scaling" not in record["differences"]
    else:
        assert record["kind"]["advantage_scaling"] == "credit"  # MAPPO's own batch standardisation of GAE advantages


def test_every_shipped_config_shares_its_settings_but_the_credit():
    """Every shipped config with several workflow-algorithm sections: the algorithm sections' fields differ in credit
    only."""
    from c3_plugin.core.config import load_config
    from c3_plugin.run.dry_run import optimisation_settings

    checked = 0
    for path in sorted((ROOT / "configs").glob("*/*.yaml")):
        cfg = load_config(path)
        names = [n for n in ("c3", "magrpo", "mappo") if n in cfg.raw or n == cfg.algorithm]
        # a c3 vs magrpo study: its mappo section is demo_cpu's (another curriculum)
        if path.name == "h2h_frozen_cpu.yaml":
            names = ["c3", "magrpo"]
        if not hasattr(cfg.algo, "plan") or len(names) < 2:
            continue
        listing = optimisation_settings(cfg, None, None, names)
        assert listing["uncontrolled"] == {}, (path.name, listing["uncontrolled"])
        assert listing["settings"]["c3"]["advantage_scaling"] == listing["settings"]["magrpo"]["advantage_scaling"]
        checked += 1
    assert checked >= 10


def test_compare_shows_its_runs_progress_before_each_run(tmp_path, monkeypatch, capsys):
    """A progress line on stderr before each run it starts and after the last: runs done of all (a run finished
    before is kept, left out of the rate), the time left, the run under way; each run's process draws below it."""
    from c3_plugin.tools import compare as cmp

    out = tmp_path / "h2h"
    (out / "c3-s0").mkdir(parents=True)
    (out / "c3-s0" / "summary.json").write_text("{}")  # finished before: kept

    def run(command):
        name = next(a.split("=", 1)[1] for a in command if a.startswith("output.run_name="))
        (out / name).mkdir()
        (out / name / "summary.json").write_text("{}")
        return 0

    monkeypatch.setattr(cmp.subprocess, "call", run)
    configs = dict.fromkeys([("c3", 0), ("magrpo", 0), ("c3", 1), ("magrpo", 1)])
    assert cmp.execute("base.yaml", configs, out, [], log=lambda *_: None) == ["magrpo-s0", "c3-s1", "magrpo-s1"]
    lines = capsys.readouterr().err.splitlines()
    assert [line.split("|")[2].split()[0] for line in lines] == ["1/4", "2/4", "3/4", "4/4"], lines
    assert [line.rsplit(", ", 1)[1] for line in lines] == ["running magrpo-s0]", "running c3-s1]", "running magrpo-s1]",
                                                           "done]"]
    assert all(line.startswith("compare: ") and "<" in line for line in lines)
    assert "<?" in lines[0] and "<?" not in lines[2]  # the time left, once a run has finished


def test_unequal_optimizer_steps_are_shown_and_compared_only_with_consent(tmp_path):
    """A head-to-head whose arms step an agent unequally often differs in more than credit: c3 compare refuses it
    without consent and says so; the equal-steps setting in both arms makes it a credit-only comparison."""
    import warnings

    path = ROOT / "configs/math/h2h_cpu.yaml"
    # C3's Reasoner writes 2 messages per instance, MAGRPO's 8
    per_step = ["c3.minibatch_size=4", "magrpo.minibatch_size=4"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(ConfigError, match="optimizer_updates_per_agent") as refused:
            controlled(plan(path, ["c3", "magrpo"], [0], tmp_path / "a", per_step))
        assert "refused" in str(refused.value)
        record = controlled(plan(path, ["c3", "magrpo"], [0], tmp_path / "b", per_step),
                            ["optimizer_updates_per_agent"])
        c3_steps, magrpo_steps = record["optimizer_steps"]["c3"], record["optimizer_steps"]["magrpo"]
        assert c3_steps[0] < c3_steps[1] == magrpo_steps[0] == magrpo_steps[1]
        assert record["kind"]["optimizer_updates_per_agent"] == "allowed"
        assert "unequal, compared with consent" in record_steps_line(record)
        equal = ["c3.minibatch_size=null", "magrpo.minibatch_size=null", "c3.minibatches_per_ppo_epoch=2",
                 "magrpo.minibatches_per_ppo_epoch=2"]
        record = controlled(plan(path, ["c3", "magrpo"], [0], tmp_path / "c", equal))
    assert record["optimizer_steps"]["c3"] == record["optimizer_steps"]["magrpo"] and record["uncontrolled"] == {}
    assert record_steps_line(record).endswith("(equal)")
    text = markdown({"algorithms": ["c3", "magrpo"], "seeds": [0], "missing_runs": [], "metrics": [], "final": {},
                     "auc": {}, "costs": {}, "controlled_comparison": record})
    assert "optimizer steps per agent: c3 " in text  # summary.md shows each arm's steps
