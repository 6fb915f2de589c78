"""Plain-loop oracles for the vectorised credit functions: slow, obvious, kept for tests."""

from __future__ import annotations

import math
from collections import Counter


def mean(xs):
    return sum(xs) / len(xs)


def loo_advantages(returns):
    out = []
    for j, rj in enumerate(returns):
        num = den = 0.0
        for k, rk in enumerate(returns):
            if k != j:
                num += len(rk) * mean(rk)
                den += len(rk)
        out.append(mean(rj) - num / den)
    return out


def tree_advantages(rewards, branching):
    """rewards: nested lists [instance][a_0]...[a_{K-1}]; returns per depth a flat list or None."""
    def leaves(node):
        if not isinstance(node, list):
            return [node]
        out = []
        for child in node:
            out.extend(leaves(child))
        return out

    def nodes_at(tree, depth):
        if depth == 0:
            return [tree]
        out = []
        for child in tree:
            out.extend(nodes_at(child, depth - 1))
        return out

    result = []
    for u, b in enumerate(branching):
        if b < 2:
            result.append(None)
            continue
        flat = []
        for inst in rewards:
            for parent in nodes_at(inst, u):
                flat.extend(loo_advantages([leaves(child) for child in parent]))
        result.append(flat)
    return result


def group_advantages(returns, mode):
    g = len(returns)
    if mode == "raw":
        return list(returns)
    if mode == "max":
        return [r - max(returns) for r in returns]
    if mode == "rloo" and g > 1:
        return [r - (sum(returns) - r) / (g - 1) for r in returns]
    return [r - mean(returns) for r in returns]


def average_ranks(xs):
    order = sorted(range(len(xs)), key=lambda i: xs[i])
    ranks = [0.0] * len(xs)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and xs[order[j + 1]] == xs[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return ranks


def pearson(x, y):
    mx, my = mean(x), mean(y)
    sxy = sum((a - mx) * (b - my) for a, b in zip(x, y))
    sxx = sum((a - mx) ** 2 for a in x)
    syy = sum((b - my) ** 2 for b in y)
    return sxy / math.sqrt(sxx * syy)


def split_half_reliability(groups):
    rhos = []
    for g in groups:
        if len(g) < 3 or any(len(r) < 2 for r in g):
            continue
        even = [round(a, 12) for a in loo_advantages([r[0::2] for r in g])]
        odd = [round(a, 12) for a in loo_advantages([r[1::2] for r in g])]
        if len(set(even)) == 1 or len(set(odd)) == 1:
            continue
        rhos.append(pearson(average_ranks(even), average_ranks(odd)))
    return (mean(rhos) if rhos else float("nan")), len(rhos)


def entropy_mm(counter):
    n = sum(counter.values())
    h = -sum(c / n * math.log(c / n) for c in counter.values() if c)
    return h + (sum(1 for c in counter.values() if c) - 1) / (2 * n)


def influence(outcomes):
    j_counts = Counter()
    y_counts = Counter()
    joint = Counter()
    for j, ys in enumerate(outcomes):
        for y in ys:
            j_counts[j] += 1
            y_counts[y] += 1
            joint[(j, y)] += 1
    return entropy_mm(j_counts) + entropy_mm(y_counts) - entropy_mm(joint)


def sample_var(xs):
    m = mean(xs)
    return sum((x - m) ** 2 for x in xs) / (len(xs) - 1)


def within_group_variance(groups):
    return mean([sample_var(g) for g in groups])


def zero_signal_share(groups):
    return mean([1.0 if len({mean(r) for r in g}) == 1 else 0.0 for g in groups])


def pooled_return_variance(groups):
    return mean([sample_var(r) for g in groups for r in g if len(r) >= 2])


def average_copies(owners, advantages):
    """Mean advantage per owner, owners in order of first appearance."""
    sums, counts, order = {}, {}, []
    for o, a in zip(owners, advantages):
        if o not in sums:
            order.append(o)
            sums[o], counts[o] = 0.0, 0
        sums[o] += a
        counts[o] += 1
    return order, [sums[o] / counts[o] for o in order]


def shared_advantages(rewards):
    """Parallel-role credit over the cross product R[j][k] (sibling alternative j, own sample k):
    A_k = mean_j R[j][k] - mean over k' != k of mean_j R[j][k']."""
    n0, n1 = len(rewards), len(rewards[0])
    col = [mean([rewards[j][k] for j in range(n0)]) for k in range(n1)]
    return [col[k] - mean([col[q] for q in range(n1) if q != k]) for k in range(n1)]
