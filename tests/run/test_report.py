"""run.report's learning curve: every legend entry draws something, and a chart of single points gets axes that
show where the point is."""

import matplotlib.pyplot as plt

from c3_plugin.run.report import history_figure


def visible(line) -> bool:
    """A line draws something: two points or more joined by a stroke, or a marker."""
    joined = len(line.get_xdata()) >= 2 and line.get_linestyle() not in ("None", "", " ") and line.get_linewidth() > 0
    return joined or line.get_marker() not in (None, "None", "", " ")


def test_learning_curve_has_no_legend_entry_without_a_visible_line():
    """One training batch logged (a 1-point series, which a marker-less line would not draw) and two evaluations:
    every legend entry's line is visible."""
    history = [{"env_step": 0, "eval/echo/accuracy": 0.25}, {"env_step": 8, "train/reward_mean": 0.5},
               {"env_step": 8, "eval/echo/accuracy": 0.5}]
    fig = history_figure(history)
    ax = fig.axes[0]
    labelled = {line.get_label(): line for line in ax.get_lines() if not line.get_label().startswith("_")}
    assert set(labelled) == {"train reward (batch mean)", "eval/echo/accuracy"}
    assert [t.get_text() for t in ax.get_legend().get_texts()] == list(labelled)
    assert all(visible(line) for line in labelled.values()), {k: visible(v) for k, v in labelled.items()}
    assert not ax.texts  # several steps: autoscaled, no labels
    plt.close(fig)


def test_a_single_evaluation_gets_axes_from_zero_and_its_value_written_beside_it():
    """One evaluation at step 64: autoscaling would show 63.95..64.05 by 0.3..0.33; the axes run from 0 past the
    step and over [0, 1] for an accuracy, and the point carries its value."""
    fig = history_figure([{"env_step": 64, "eval/echo/accuracy": 0.3125, "train/reward_mean": 0.5}])
    ax = fig.axes[0]
    low, high = ax.get_xlim()
    assert low == 0 and high > 64
    low, high = ax.get_ylim()
    assert low < 0 < 1 < high
    assert sorted(t.get_text() for t in ax.texts) == ["0.312 at 64 env steps", "0.5 at 64 env steps"]
    assert all(visible(line) for line in ax.get_lines())
    plt.close(fig)


def test_a_flat_share_is_drawn_on_its_whole_range():
    """A zero-signal share of 1.0 in every batch: autoscaling would show 0.96..1.04; the axis holds [0, 1]."""
    from c3_plugin.run.report import frame_axes

    fig, ax = plt.subplots()
    ax.plot([32, 64, 96], [1.0, 1.0, 1.0])
    assert frame_axes(ax, [([32, 64, 96], [1.0, 1.0, 1.0])], bounded=True) is False  # several steps: no labels
    low, high = ax.get_ylim()
    assert low < 0 and high > 1 and not ax.texts
    ax.plot([32, 64], [3.5, 3.5])
    frame_axes(ax, [([32, 64], [3.5, 3.5])], bounded=False)  # a flat unbounded curve: from 0
    assert ax.get_ylim()[0] < 0 < 3.5 < ax.get_ylim()[1]
    plt.close(fig)
