"""No certainty the data lack: equal seeds say "no variation over n seeds" instead of a zero-width interval; a cost
that cannot be negative never shows an interval below 0 (its range over few seeds); the single-run dashboard draws
no error bar on one value; the no-signal warning names every agent when no leaf's reward ever differed."""

import json

from matplotlib.container import ErrorbarContainer

from c3_plugin.tools.compare import aggregate, markdown
from c3_plugin.tools.dashboard import cost_figure, no_signal_warnings, write_dashboard


def finished_run(folder, accuracy, wall_s=1.0, tokens=100):
    folder.mkdir(parents=True, exist_ok=True)
    rows = [{"env_step": 0, "eval/echo/accuracy": 0.0}, {"env_step": 32, "eval/echo/accuracy": accuracy}]
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (folder / "summary.json").write_text(json.dumps({
        "algorithm": folder.name.split("-")[0], "env_steps": 32, "wall_s": wall_s,
        "totals": {"messages": 10, "tokens_generated": tokens}, "eval_after": {"eval/echo/accuracy": accuracy}}))


def test_equal_seeds_say_no_variation_and_costs_never_go_below_zero(tmp_path):
    out = tmp_path / "h2h"
    for seed, wall in enumerate((1.0, 10.0, 2.0)):
        finished_run(out / f"c3-s{seed}", 0.5, wall_s=wall)
        finished_run(out / f"magrpo-s{seed}", 0.5, wall_s=3.0)
    result = aggregate(out, ["c3", "magrpo"], [0, 1, 2])
    text = markdown(result)
    assert "| eval/echo/accuracy | 0.500, no variation over 3 seeds | 0.500, no variation over 3 seeds |" in text
    assert "+0.000 no variation over 3 seeds" in text  # the paired difference
    assert "[0.500, 0.500]" not in text and "[+0.000, +0.000]" not in text
    wall = next(line for line in text.splitlines() if line.startswith("| wall_s |"))
    assert "4.333 +- 4.933, range [1.000, 10.000]" in wall and "3.000, no variation over 3 seeds" in wall
    assert "[-" not in wall  # the t-interval, [-7.9, 16.6], would say a wall time below 0
    (out / "summary.json").write_text(json.dumps(result))
    page = write_dashboard(out).read_text()
    assert "0.500 <small>no variation over 3 seeds</small>" in page and "[0.500, 0.500]" not in page


def test_the_single_run_dashboard_draws_no_error_bar_on_one_value(tmp_path):
    finished_run(tmp_path / "c3-s0", 0.5)
    one = [{"algorithm": "c3", "seed": 0, "rows": [], "summary": json.loads((tmp_path / "c3-s0" / "summary.json")
                                                                            .read_text())}]
    bars = [c for ax in cost_figure(one).axes for c in ax.containers if isinstance(c, ErrorbarContainer)]
    assert bars == []
    two = one + [{**one[0], "seed": 1, "summary": {**one[0]["summary"], "wall_s": 3.0}}]
    assert [c for ax in cost_figure(two).axes for c in ax.containers if isinstance(c, ErrorbarContainer)]


def test_no_signal_names_every_agent_when_no_reward_ever_differed():
    """MAGRPO with every reward 0 logged a zero-signal share for the Reasoner only, so the warning named it alone."""
    rows = [{"env_step": 8 * i, "train/reward_mean": 0.0, "train/reward_std": 0.0,
             "credit/Reasoner_u0/zero_signal_share": 1.0} for i in range(1, 4)]
    warnings = no_signal_warnings([{"algorithm": "magrpo", "seed": 0, "rows": rows}])
    assert warnings == ["no learning signal for any agent (Reasoner_u0): every leaf of all 3 batches got the same "
                        "reward (0; train/reward_std 0), so no decision point's credit carries a signal from the "
                        "reward"]
    rows[1]["train/reward_std"] = 0.5  # one batch with signal: only the point without any is named
    assert [w.split(":")[0] for w in no_signal_warnings([{"algorithm": "magrpo", "seed": 0, "rows": rows}])] == [
        "no learning signal for Reasoner_u0"]
