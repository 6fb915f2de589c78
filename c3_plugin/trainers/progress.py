"""Progress on CoMLRL's training bar: what a workflow trainer waits on, and its last update's numbers.

CoMLRL's epoch loop draws a tqdm bar over the epoch's items (desc ``Epoch e/E``) that ticks once per item,
and a workflow trainer updates once per ``instances_per_update`` items; :func:`show` puts on that bar's
postfix the ``phase`` (``queue k/N`` items for the next update, ``rollout d/D`` decision steps generated,
``credit``, ``update``, ``eval``) and the last update's ``env_step``, ``reward`` and ``loss``. A display, not a
metric: nothing happens without a bar.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, MutableMapping

from tqdm import tqdm


def training_bar(shown: bool) -> Any:
    """CoMLRL's bar over the epoch's items (the newest open tqdm bar whose desc starts ``Epoch``), or None:
    ``shown`` false (``verbose`` off, where CoMLRL opens none, or a rank other than 0), or no bar open (an
    epoch's last short batch is flushed after CoMLRL closed its bar)."""
    if not shown:
        return None
    with tqdm.get_lock():
        bars = [bar for bar in list(getattr(tqdm, "_instances", ()))
                if str(getattr(bar, "desc", "")).startswith("Epoch ")]
    return max(bars, key=lambda bar: getattr(bar, "start_t", 0.0), default=None)


def show(postfix: MutableMapping[str, Any], fields: Mapping[str, Any], bar: Any) -> None:
    """Set ``fields`` in ``postfix``, replacing those of the same name (None drops one), and draw it on ``bar``."""
    for key, value in fields.items():
        if value is None:
            postfix.pop(key, None)
        else:
            postfix[key] = value
    if bar is not None:
        bar.set_postfix(postfix)


def rollout_ticks(show_fields: Callable[..., None], steps: int) -> Callable[[], None]:
    """A rollout's tick (one call per decision step generated) that shows ``phase=rollout d/D`` through
    ``show_fields``, ``d`` of the workflow's ``steps`` decision steps (shown at ``0/D`` now)."""
    done = 0

    def tick() -> None:
        nonlocal done
        done = min(done + 1, steps)
        show_fields(phase=f"rollout {done}/{steps}")

    show_fields(phase=f"rollout 0/{steps}")
    return tick
