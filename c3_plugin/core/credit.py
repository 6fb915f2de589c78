"""Credit and its diagnostics: pure, vectorised functions over arrays (no I/O, no config).

Conventions. A *group* is the set of alternatives sampled from one context; for each
alternative it holds the returns of its continuations. Ragged groups are passed as one
sequence per alternative; batched groups as an array ``[..., n, c]`` in which ``NaN``
marks a missing continuation. Every function here has a plain-loop oracle in
``tests/oracles.py``.
"""

from __future__ import annotations

import warnings
from typing import Any, Hashable, Sequence

import numpy as np

NORMALIZATIONS = ("none", "batch_scale", "batch_zscore", "group_zscore")
GROUP_MODES = ("mean", "rloo", "max", "raw")


def _ragged(returns: Sequence[Sequence[float]], what: str) -> tuple[np.ndarray, np.ndarray]:
    """Validate one group; returns (flat values, continuation count per alternative)."""
    if len(returns) < 2:
        raise ValueError(f"{what}: needs at least 2 alternatives for a leave-one-out baseline, got {len(returns)}")
    counts = np.fromiter((len(r) for r in returns), dtype=np.int64, count=len(returns))
    if np.any(counts == 0):
        raise ValueError(f"{what}: alternative {int(np.argmin(counts))} has no continuation returns")
    flat = np.concatenate([np.asarray(r, dtype=np.float64).ravel() for r in returns])
    bad = ~np.isfinite(flat)
    if bad.any():
        owner = int(np.searchsorted(np.cumsum(counts), np.flatnonzero(bad)[0], side="right"))
        raise ValueError(f"{what}: alternative {owner} has a non-finite return")
    return flat, counts


def loo_advantages(returns: Sequence[Sequence[float]]) -> np.ndarray:
    """Leave-one-out advantages of one group.

    ``A_j = mean(R_j) - sum_{k!=j} c_k mean(R_k) / sum_{k!=j} c_k``: each alternative's mean
    return minus the continuation-weighted mean return of the other alternatives.
    """
    flat, counts = _ragged(returns, "loo_advantages")
    sums = np.add.reduceat(flat, np.concatenate(([0], np.cumsum(counts)[:-1])))
    return sums / counts - (sums.sum() - sums) / (counts.sum() - counts)


def loo_advantages_batch(values: np.ndarray) -> np.ndarray:
    """Leave-one-out advantages for a batch of groups ``[..., n, c]`` (NaN = no continuation)."""
    values = np.asarray(values, dtype=np.float64)
    if values.ndim < 2 or values.shape[-2] < 2:
        raise ValueError(f"loo_advantages_batch: needs shape [..., n>=2, c], got {values.shape}")
    present = ~np.isnan(values)
    counts = present.sum(-1)
    if np.any(counts == 0):
        raise ValueError("loo_advantages_batch: some alternative has no continuation returns")
    sums = np.where(present, values, 0.0).sum(-1)
    total_s, total_c = sums.sum(-1, keepdims=True), counts.sum(-1, keepdims=True)
    return sums / counts - (total_s - sums) / (total_c - counts)


def tree_advantages(rewards: np.ndarray) -> list[np.ndarray | None]:
    """C3 advantages at every decision point of a uniform tree.

    ``rewards`` is ``[instances, b_0, ..., b_{K-1}]``. The group at decision ``u`` is the
    ``b_u`` children of one depth-``u`` context; each child's continuations are all leaves
    below it. Returns, per decision point, the advantages of its nodes in row-major order,
    or ``None`` where ``b_u < 2`` (no alternative to compare against).
    """
    rewards = np.asarray(rewards, dtype=np.float64)
    shape = rewards.shape
    out: list[np.ndarray | None] = []
    for u in range(len(shape) - 1):
        b = shape[1 + u]
        if b < 2:
            out.append(None)
            continue
        groups = rewards.reshape(int(np.prod(shape[: 1 + u])), b, -1)
        out.append(loo_advantages_batch(groups).reshape(-1))
    return out


def average_copies(owners: np.ndarray, advantages: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """One advantage per shared sample: the mean over its copies.

    ``owners[i]`` names the sample that node ``i`` holds (copies of one sample share it).
    Returns ``(unique owners, mean advantage)`` in order of first appearance, so input
    without copies comes back unchanged. For a sample shared by the ``n0`` alternatives of
    a parallel role, averaging the per-parent tree advantages ``R[j,k] - mean_{k'!=k} R[j,k']``
    gives ``mean_j R[j,k] - mean_{k'!=k} mean_j R[j,k']``: its own alternatives as the
    baseline, the other role's sampled actions as continuations.
    """
    owners = np.asarray(owners).reshape(-1)
    adv = np.asarray(advantages, dtype=np.float64).reshape(-1)
    if owners.shape != adv.shape:
        raise ValueError(f"average_copies: {owners.shape[0]} owners for {adv.shape[0]} advantages")
    uniq, first, inverse = np.unique(owners, return_index=True, return_inverse=True)
    mean = np.bincount(inverse, weights=adv, minlength=len(uniq)) / np.bincount(inverse, minlength=len(uniq))
    order = np.argsort(first, kind="stable")
    return uniq[order], mean[order]


def group_advantages(returns: Any, mode: str = "mean") -> np.ndarray:
    """MAGRPO's group advantages over independent runs (CoMLRL's modes), last axis = group.

    ``mean``: R - mean; ``rloo``: R - mean of the others; ``max``: R - max; ``raw``: R.
    """
    r = np.asarray(returns, dtype=np.float64)
    mode = str(mode).lower()
    if mode not in GROUP_MODES:
        raise ValueError(f"group_advantages: unknown mode {mode!r}; use one of {GROUP_MODES}")
    if r.ndim == 0 or r.shape[-1] == 0:
        raise ValueError("group_advantages: needs at least one run per group")
    if not np.all(np.isfinite(r)):
        raise ValueError("group_advantages: a return is not finite")
    g = r.shape[-1]
    if mode == "raw":
        return r.copy()
    if mode == "max":
        return r - r.max(-1, keepdims=True)
    if mode == "rloo" and g > 1:
        return (r * g - r.sum(-1, keepdims=True)) / (g - 1)
    return r - r.mean(-1, keepdims=True)


def _pad(groups: Sequence[Sequence[Sequence[float]]]) -> np.ndarray:
    """Ragged groups -> ``[G, n_max, c_max]`` with NaN padding."""
    n_max = max((len(g) for g in groups), default=0)
    c_max = max((len(r) for g in groups for r in g), default=0)
    out = np.full((len(groups), n_max, c_max), np.nan)
    for gi, g in enumerate(groups):
        for j, r in enumerate(g):
            out[gi, j, : len(r)] = r
    return out


def masked_spearman(x: np.ndarray, y: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """Row-wise Spearman correlation (average ranks for ties) over the entries where ``valid``."""
    def ranks(v: np.ndarray) -> np.ndarray:
        vv = valid[:, None, :]
        less = ((v[:, None, :] < v[:, :, None]) & vv).sum(-1)
        equal = ((v[:, None, :] == v[:, :, None]) & vv).sum(-1)
        return np.where(valid, less + (equal + 1) / 2.0, 0.0)

    rx, ry = ranks(x), ranks(y)
    m = valid.sum(-1, keepdims=True)
    dx = np.where(valid, rx - rx.sum(-1, keepdims=True) / m, 0.0)
    dy = np.where(valid, ry - ry.sum(-1, keepdims=True) / m, 0.0)
    den = np.sqrt((dx * dx).sum(-1) * (dy * dy).sum(-1))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, (dx * dy).sum(-1) / np.where(den > 0, den, 1.0), np.nan)


def split_half_per_group(groups: Sequence[Sequence[Sequence[float]]] | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per group: the Spearman correlation between its even- and odd-continuation advantage vectors,
    and whether the group is usable (see :func:`split_half_reliability`). Returns ``(rho [G], used [G])``."""
    values = groups if isinstance(groups, np.ndarray) else _pad(groups)
    if values.size == 0:
        return np.zeros(0), np.zeros(0, dtype=bool)
    alive = ~np.isnan(values[..., 0])  # [G, n]: the alternative exists
    halves = []
    for part in (values[..., 0::2], values[..., 1::2]):
        cnt = (~np.isnan(part)).sum(-1)
        ok = alive & (cnt > 0)
        sums = np.where(np.isnan(part), 0.0, part).sum(-1)
        means = np.where(ok, sums / np.maximum(cnt, 1), 0.0)
        w_s = np.where(ok, sums, 0.0).sum(-1, keepdims=True)
        w_c = np.where(ok, cnt, 0).sum(-1, keepdims=True)
        with np.errstate(invalid="ignore", divide="ignore"):
            adv = means - (w_s - sums) / (w_c - cnt)
        halves.append((np.round(adv, 12), ok))
    (a_even, ok_even), (a_odd, ok_odd) = halves
    usable = (alive.sum(-1) >= 3) & np.all(ok_even == alive, -1) & np.all(ok_odd == alive, -1)
    rho = masked_spearman(np.where(alive, a_even, 0.0), np.where(alive, a_odd, 0.0), alive)
    return rho, usable & np.isfinite(rho)


def split_half_reliability(groups: Sequence[Sequence[Sequence[float]]] | np.ndarray) -> tuple[float, int]:
    """Mean Spearman correlation between even- and odd-continuation advantage vectors.

    Groups with fewer than 3 alternatives, an alternative with fewer than 2 continuations,
    or a half that gives every alternative the same advantage are excluded. Returns
    ``(mean_rho, groups_used)``; ``mean_rho`` is NaN when no group qualifies.
    """
    rho, used = split_half_per_group(groups)
    return (float(rho[used].mean()) if used.any() else float("nan")), int(used.sum())


def _entropy_mm(counts: np.ndarray) -> float:
    """Plug-in entropy (nats) with the Miller-Madow correction (m - 1) / (2N)."""
    counts = counts[counts > 0]
    n = counts.sum()
    p = counts / n
    return float(-(p * np.log(p)).sum() + (len(counts) - 1) / (2.0 * n))


def influence(outcomes: Sequence[Sequence[Hashable]]) -> float:
    """Plug-in mutual information I(J; Y) in nats between the alternative index J and a
    categorical downstream outcome Y (any hashable: a string, a tuple of test results), each
    entropy Miller-Madow corrected."""
    lengths = np.fromiter((len(o) for o in outcomes), dtype=np.int64, count=len(outcomes))
    if len(outcomes) < 2 or np.any(lengths == 0):
        raise ValueError("influence: needs at least 2 alternatives, each with at least one outcome")
    codes: dict[Hashable, int] = {}
    y_codes = np.fromiter((codes.setdefault(y, len(codes)) for o in outcomes for y in o), dtype=np.int64,
                          count=int(lengths.sum()))
    j_codes = np.repeat(np.arange(len(outcomes)), lengths)
    joint = np.bincount(j_codes * len(codes) + y_codes, minlength=len(outcomes) * len(codes))
    return _entropy_mm(lengths) + _entropy_mm(np.bincount(y_codes)) - _entropy_mm(joint)


def noise_variance(sigma2: float, n: int, budget: float) -> float:
    """The noise law: variance of the rollout noise on one C3 advantage, ``sigma2 n^2 / (B_u (n-1))``."""
    if n < 2:
        raise ValueError(f"noise_variance: n={n}; leave-one-out needs n >= 2")
    if budget <= 0:
        raise ValueError(f"noise_variance: budget must be positive, got {budget}")
    return float(sigma2) * n * n / (float(budget) * (n - 1))


def observed_noise_variance(adv_a: np.ndarray, adv_b: np.ndarray) -> float:
    """Half the variance of the difference of two advantage vectors computed from
    independent continuations of the same alternatives."""
    d = np.asarray(adv_a, dtype=np.float64).ravel() - np.asarray(adv_b, dtype=np.float64).ravel()
    return float(0.5 * d.var(ddof=1))


def pooled_return_variance(values: np.ndarray) -> float:
    """sigma^2: the mean within-alternative sample variance of continuation returns ``[..., n, c]``."""
    values = np.asarray(values, dtype=np.float64)
    cnt = (~np.isnan(values)).sum(-1)
    mean = np.nanmean(values, -1, keepdims=True) if values.size else values
    ss = np.nansum((values - mean) ** 2, -1)
    ok = cnt >= 2
    if not ok.any():
        raise ValueError("pooled_return_variance: needs an alternative with 2 or more continuations")
    return float((ss[ok] / (cnt[ok] - 1)).mean())


def within_group_variance(advantages: np.ndarray | Sequence[Sequence[float]]) -> float:
    """Mean over groups of the sample variance of the advantages across a group's alternatives."""
    a = (np.asarray(advantages, dtype=np.float64) if isinstance(advantages, np.ndarray)
         else _pad([[[x] for x in g] for g in advantages])[..., 0])
    return float(np.nanvar(a, axis=-1, ddof=1).mean())


def zero_signal_share(values: np.ndarray | Sequence[Sequence[Sequence[float]]]) -> float:
    """Share of groups in which every alternative has the same mean return (all advantages 0)."""
    v = np.asarray(values, dtype=np.float64) if isinstance(values, np.ndarray) else _pad(values)
    means = np.nanmean(v, -1)
    return float(np.mean(np.nanmax(means, -1) == np.nanmin(means, -1)))


def normalize_advantages(adv: np.ndarray, mode: str = "none", groups: np.ndarray | None = None,
                         eps: float = 1e-6) -> np.ndarray:
    """Scale advantages for the loss.

    ``none`` (default) keeps the leave-one-out values; ``batch_scale`` divides by the batch
    standard deviation without re-centering (signs and zeros survive); ``batch_zscore``
    also subtracts the batch mean, which moves every baseline by one offset;
    ``group_zscore`` z-scores each group (``groups`` gives group ids) with its population
    standard deviation, as CoMLRL 1.4.3 normalises a group of joint runs; it turns any
    2-alternative group into +-1, so it warns when it sees one, and a group of one (which it
    would silently zero) is an error.
    """
    a = np.asarray(adv, dtype=np.float64)
    if mode not in NORMALIZATIONS:
        raise ValueError(f"normalize_advantages: unknown mode {mode!r}; use one of {NORMALIZATIONS}")
    if mode == "none" or a.size == 0:
        return a.copy()
    if mode == "batch_scale":
        return a / max(float(a.std()), eps)
    if mode == "batch_zscore":
        return (a - a.mean()) / max(float(a.std()), eps)
    if groups is None:
        raise ValueError("normalize_advantages: group_zscore needs group ids")
    g = np.unique(np.asarray(groups), return_inverse=True)[1]
    size = np.bincount(g)
    if np.any(size == 1):
        raise ValueError(f"normalize_advantages: group_zscore got {int((size == 1).sum())} group(s) of one message, "
                         "whose advantage it would set to 0; group the runs of one instance and decision point "
                         "together (independent plans) or use batch_scale / none")
    if np.any(size == 2):
        warnings.warn("group_zscore on 2-alternative groups maps every advantage to +-1", stacklevel=2)
    mean = np.bincount(g, weights=a) / size
    std = np.sqrt(np.bincount(g, weights=(a - mean[g]) ** 2) / size)
    return (a - mean[g]) / np.maximum(std[g], eps)


CREDITS = ("loo", "value_assisted")


def value_assisted_advantages(values: np.ndarray, q: np.ndarray, alpha: float = 1.0, eps: float = 1e-8) -> np.ndarray:
    """Value-assisted C3 credit for a batch of groups, z-scored per group: the C3 reference code's default.

    ``values`` ``[..., n, c]`` holds each alternative's continuation returns (NaN = no continuation),
    ``q`` ``[..., n]`` a learned decision-value critic's ``Q_hat(h_u, a_j)`` for each alternative. The
    alternative's mean return is compared with a baseline that mixes C3's leave-one-out baseline over the
    other alternatives' returns and the same baseline over their critic values:

    ``A_j = mean(R_j) - [(1 - alpha) b^R_j + alpha b^Q_j]``, ``b^X_j = sum_{k!=j} c_k X_k / sum_{k!=j} c_k``,

    that is ``A_j = LOO_j + alpha (b^R_j - b^Q_j)``: the leave-one-out advantage plus ``alpha`` times how far
    the critic's values of the other alternatives fall below their observed mean returns (a critic that
    predicts those means adds nothing, whatever ``alpha``). Then ``A`` is z-scored over the group's ``n``
    alternatives with its population variance, ``(A - mean) / sqrt(var + eps)``: a group whose credit is
    constant gets 0, and a 2-alternative group always gets +-1 (or 0). ``alpha`` in ``[0, 1]``; 0 gives the
    z-scored leave-one-out advantage.

    This is the formula of ``C3CreditProvider.compute`` (``c3/credit/c3/provider.py``, variant
    ``value_assisted``, baseline mode ``loo``, ``c3_va_alpha`` default 1) and of the per-group z-score that
    ``_compute_c3_credit`` (``openrlhf/trainer/ppo_utils/experience_maker.py``) applies, in the C3
    authors' reference implementation (github.com/EIT-EAST-Lab/C3). Their sibling baselines are plain
    means over the other nodes; the continuation weights ``c_k`` here equal them in a uniform tree.
    """
    values = np.asarray(values, dtype=np.float64)
    q = np.asarray(q, dtype=np.float64)
    if not 0.0 <= float(alpha) <= 1.0:
        raise ValueError(f"value_assisted_advantages: alpha must be in [0, 1], got {alpha}")
    if q.shape != values.shape[:-1]:
        raise ValueError(f"value_assisted_advantages: critic values {q.shape} do not match groups {values.shape[:-1]}")
    if not np.all(np.isfinite(q)):
        raise ValueError("value_assisted_advantages: a critic value is not finite")
    loo = loo_advantages_batch(values)  # validates the groups
    counts = (~np.isnan(values)).sum(-1).astype(np.float64)
    means = np.where(np.isnan(values), 0.0, values).sum(-1) / counts
    rest = counts.sum(-1, keepdims=True) - counts

    def baseline(x: np.ndarray) -> np.ndarray:
        weighted = counts * x
        return (weighted.sum(-1, keepdims=True) - weighted) / rest

    adv = loo + float(alpha) * (baseline(means) - baseline(q))
    centred = adv - adv.mean(-1, keepdims=True)
    return centred / np.sqrt((centred ** 2).mean(-1, keepdims=True) + float(eps))
