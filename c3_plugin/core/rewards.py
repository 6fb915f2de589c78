"""CoMLRL's reward contract, as the workflow trainers call it.

CoMLRL calls ``reward_func`` once per joint action through
:func:`comlrl.utils.reward_utils.call_reward_function`: each agent's completion as a one-item list,
with ``prompts`` and ``batch_items`` when the signature takes them (positionally or by keyword, or
the completions as one list), and takes a list, a scalar or a tensor back. Every such reward works
here unchanged: :func:`leaf_rewards` makes the same call per leaf.

The fast path: a reward marked with :func:`batched` is called once per batch of leaves as
``reward_func(*per_agent_completions, batch_items=items, prompts=prompts)`` and must return one value
per leaf. The shipped domains' rewards are batched (the code domain runs a batch's sandboxes together).
"""

from __future__ import annotations

import functools
import inspect
import math
import numbers
import warnings
from typing import Any, Callable, Sequence, TypeVar

from comlrl.utils.reward_utils import call_reward_function

from c3_plugin.core.errors import RewardValueError

F = TypeVar("F", bound=Callable[..., Any])


def batched(fn: F) -> F:
    """Mark ``fn`` as a batched reward: one call scores many joint actions (see the module docstring)."""
    fn.batched = True  # type: ignore[attr-defined]
    return fn


def is_batched(fn: Any) -> bool:
    return bool(getattr(fn, "batched", False))


def _signature(fn: Any) -> inspect.Signature | None:
    try:
        return inspect.signature(fn)
    except (TypeError, ValueError):
        return None


REWARD_FIX = ("a reward returns one finite number (int or float) per joint action, never a string, None, NaN or inf; "
              "map a failure to the bottom of its reward_range")


def _name(fn: Any) -> str:
    return getattr(fn, "__name__", type(fn).__name__)


def _item_id(items: Sequence[Any], i: int) -> str:
    item = items[i] if 0 <= i < len(items) else {}
    return repr(item.get("id", i)) if isinstance(item, dict) else repr(i)


def finite_rewards(raw: Any, reward_func: Any, items: Sequence[Any], first: int = 0) -> list[float]:
    """``raw`` (a reward's return: a list, a tuple, an array, a tensor or one number) as floats, refused with
    :class:`RewardValueError` (naming the reward, the value, the joint action and its item) unless every value is a
    finite real number; ``first``: the index of the first joint action ``raw`` scores."""
    if raw is None:
        raise RewardValueError(f"reward_func {_name(reward_func)!r} returned None for joint action {first} (item "
                               f"{_item_id(items, first)}); {REWARD_FIX}")
    if hasattr(raw, "tolist") and not isinstance(raw, numbers.Number):
        raw = raw.tolist()
    values = list(raw) if isinstance(raw, (list, tuple)) else [raw]
    out = []
    for j, v in enumerate(values):
        if hasattr(v, "item") and not isinstance(v, (str, bytes)):  # a numpy or torch scalar
            v = v.item()
        if isinstance(v, (str, bytes)) or not isinstance(v, numbers.Real) or not math.isfinite(float(v)):
            raise RewardValueError(f"reward_func {_name(reward_func)!r} returned {v!r} ({type(v).__name__}) for joint "
                                   f"action {first + j} (item {_item_id(items, first + j)}); {REWARD_FIX}")
        out.append(float(v))
    return out


def _checked(reward_func: Callable[..., Any], items: Sequence[Any], first: int) -> Callable[..., Any]:
    """``reward_func`` with the same signature, its return refused by :func:`finite_rewards` before CoMLRL's call
    coerces it (``float("1.0")``)."""

    @functools.wraps(reward_func)
    def call(*args: Any, **kwargs: Any) -> Any:
        raw = reward_func(*args, **kwargs)
        finite_rewards(raw, reward_func, items, first)
        return raw

    return call


def leaf_rewards(reward_func: Callable[..., Any], per_agent: Sequence[Sequence[str]], items: Sequence[dict],
                 prompts: Sequence[str]) -> list[float]:
    """Raw rewards of ``len(items)`` joint actions; ``per_agent[a][i]`` is agent ``a``'s completion in
    joint action ``i``. A batched reward is called once; any other once per joint action, as CoMLRL does."""
    n = len(items)
    if is_batched(reward_func):
        raw = reward_func(*per_agent, batch_items=list(items), prompts=list(prompts))
        values = finite_rewards(raw, reward_func, items)
        if len(values) != n:
            raise ValueError(f"batched reward_func {getattr(reward_func, '__name__', reward_func)!r} returned "
                             f"{len(values)} rewards for {n} joint actions; a @batched reward returns one value per "
                             "joint action (drop @batched to be called once per joint action, as CoMLRL does)")
        return values
    signature = _signature(reward_func)
    out = []
    for i in range(n):
        values = call_reward_function(_checked(reward_func, items, i), [prompts[i]],
                                      [[completions[i]] for completions in per_agent], num_agents=len(per_agent),
                                      batch_items=[items[i]], signature=signature)
        if not values:
            raise ValueError(f"reward_func returned no value for joint action {i} (item {items[i].get('id', i)!r})")
        if len(values) > 1 and len(set(values)) > 1:  # CoMLRL's MAGRPO keeps the first value; say so once
            warnings.warn(f"reward_func returned {len(values)} different values for one joint action ({values}); the "
                          "workflow trainers, like CoMLRL's MAGRPO, use the first as the team's joint reward",
                          stacklevel=3)
        out.append(values[0])
    return out
