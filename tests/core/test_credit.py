import math
import types
import warnings

import numpy as np
import pytest
import scipy.stats
import torch
from comlrl.trainers.reinforce.magrpo import MAGRPOTrainer

from c3_plugin.core import credit
from tests import oracles


def ragged_group(rng, n=None):
    n = n or int(rng.integers(2, 7))
    return [list(rng.integers(0, 3, size=int(rng.integers(1, 6))).astype(float)) for _ in range(n)]


def test_loo_matches_oracle_on_ragged_groups():
    rng = np.random.default_rng(0)
    for _ in range(200):
        g = ragged_group(rng)
        np.testing.assert_allclose(credit.loo_advantages(g), oracles.loo_advantages(g), atol=1e-12)


def test_loo_known_values_and_weighting():
    # alternative 0: mean 1 (1 continuation), alternative 1: mean 0 (3), alternative 2: mean 0.5 (2)
    a = credit.loo_advantages([[1.0], [0.0, 0.0, 0.0], [1.0, 0.0]])
    assert a[0] == pytest.approx(1 - (0 * 3 + 0.5 * 2) / 5)
    assert a[1] == pytest.approx(0 - (1 * 1 + 0.5 * 2) / 3)
    assert a[2] == pytest.approx(0.5 - (1 + 0) / 4)
    # equal counts: advantages sum to zero
    assert credit.loo_advantages([[1, 0], [0, 0], [1, 1]]).sum() == pytest.approx(0.0)


@pytest.mark.parametrize("bad, fragment", [
    ([[1.0]], "at least 2 alternatives"),
    ([[1.0], []], "alternative 1 has no continuation"),
    ([[1.0], [0.0, float("nan")]], "alternative 1 has a non-finite"),
    ([[float("inf")], [0.0]], "alternative 0 has a non-finite"),
])
def test_loo_errors_name_the_alternative(bad, fragment):
    with pytest.raises(ValueError, match=fragment):
        credit.loo_advantages(bad)


def test_batch_loo_equals_single_group_with_nan_padding():
    rng = np.random.default_rng(1)
    groups = [ragged_group(rng, n=4) for _ in range(50)]
    padded = credit._pad(groups)
    batch = credit.loo_advantages_batch(padded)
    for g, row in zip(groups, batch):
        np.testing.assert_allclose(row, oracles.loo_advantages(g), atol=1e-12)


def test_tree_advantages_match_oracle():
    rng = np.random.default_rng(2)
    for branching in [(2, 4), (4, 4), (2, 2, 2), (8, 1), (1, 4, 3)]:
        rewards = rng.integers(0, 2, size=(3,) + branching).astype(float)
        got = credit.tree_advantages(rewards)
        want = oracles.tree_advantages(rewards.tolist(), branching)
        for g, w in zip(got, want):
            if w is None:
                assert g is None
            else:
                np.testing.assert_allclose(g, w, atol=1e-12)


@pytest.mark.parametrize("mode", ["mean", "rloo", "max", "raw"])
def test_group_advantages_match_oracle_and_comlrl(mode):
    rng = np.random.default_rng(3)
    r = rng.normal(size=(5, 8))
    got = credit.group_advantages(r, mode)
    for row, g in zip(r, got):
        np.testing.assert_allclose(g, oracles.group_advantages(list(row), mode), atol=1e-12)
        # CoMLRL 1.4.3's own MAGRPO advantage for the same returns
        theirs = MAGRPOTrainer._compute_advantages(types.SimpleNamespace(advantage_mode=mode), torch.tensor(row))
        np.testing.assert_allclose(g, theirs.numpy(), atol=1e-6)


def test_group_advantages_rejects_unknown_mode():
    with pytest.raises(ValueError, match="unknown mode 'median'"):
        credit.group_advantages([1.0, 0.0], "median")


def test_split_half_matches_oracle_and_scipy():
    rng = np.random.default_rng(4)
    groups = []
    for _ in range(300):
        n = int(rng.integers(2, 6))
        c = int(rng.integers(1, 7))
        groups.append([list(rng.integers(0, 3, size=c).astype(float)) for _ in range(n)])
    rho, used = credit.split_half_reliability(groups)
    o_rho, o_used = oracles.split_half_reliability(groups)
    assert used == o_used and used > 20
    assert rho == pytest.approx(o_rho, abs=1e-12)
    # scipy's Spearman on the same halves for the usable groups
    rhos = []
    for g in groups:
        if len(g) < 3 or any(len(x) < 2 for x in g):
            continue
        e = np.round(credit.loo_advantages([x[0::2] for x in g]), 12)
        o = np.round(credit.loo_advantages([x[1::2] for x in g]), 12)
        if np.ptp(e) == 0 or np.ptp(o) == 0:
            continue
        rhos.append(scipy.stats.spearmanr(e, o).statistic)
    assert rho == pytest.approx(np.mean(rhos), abs=1e-12)


def test_split_half_exclusions():
    two_alternatives = [[1, 0, 1, 0], [0, 0, 1, 1]]
    constant_half = [[1, 0], [1, 1], [1, 0]]  # the even half is all ones
    assert (credit.split_half_reliability([two_alternatives, constant_half])
            == (pytest.approx(float("nan"), nan_ok=True), 0))
    perfect = [[1, 1, 1, 1], [0, 0, 0, 0], [1, 1, 0, 0]]
    rho, used = credit.split_half_reliability([perfect, constant_half])
    assert used == 1 and rho == pytest.approx(1.0)


def test_influence_matches_oracle_and_limits():
    rng = np.random.default_rng(5)
    for _ in range(100):
        outcomes = [list(rng.choice(["a", "b", 3, None], size=int(rng.integers(1, 8))))
                    for _ in range(int(rng.integers(2, 5)))]
        assert credit.influence(outcomes) == pytest.approx(oracles.influence(outcomes), abs=1e-12)
    # Y determined by J: plug-in I = log n plus the Miller-Madow terms (n-1)/2N
    n, c = 4, 50
    det = [[j] * c for j in range(n)]
    assert credit.influence(det) == pytest.approx(math.log(n) + (n - 1) / (2 * n * c))
    # Y independent of J: the corrected estimate is closer to 0 than the plug-in
    indep = [list(rng.integers(0, 3, size=40)) for _ in range(4)]
    corrected = credit.influence(indep)
    joint = np.zeros((4, 3))
    for j, ys in enumerate(indep):
        for y in ys:
            joint[j, y] += 1
    p = joint / joint.sum()
    plug = float((p[p > 0] * np.log(p[p > 0] / (p.sum(1, keepdims=True) @ p.sum(0, keepdims=True))[p > 0])).sum())
    assert abs(corrected) < plug


def test_noise_variance_formula_and_errors():
    assert credit.noise_variance(0.25, 2, 8) == pytest.approx(0.25 * 4 / 8)
    assert credit.noise_variance(0.2, 4, 16) == pytest.approx(0.2 * 16 / 48)
    with pytest.raises(ValueError, match="n >= 2"):
        credit.noise_variance(0.2, 1, 8)
    with pytest.raises(ValueError, match="budget"):
        credit.noise_variance(0.2, 2, 0)


def test_variance_and_zero_signal_diagnostics_match_oracles():
    rng = np.random.default_rng(6)
    groups = [[list(rng.integers(0, 2, size=4).astype(float)) for _ in range(3)] for _ in range(100)]
    adv = [credit.loo_advantages(g) for g in groups]
    assert credit.within_group_variance(np.array(adv)) == pytest.approx(oracles.within_group_variance(adv))
    assert credit.within_group_variance([list(a) for a in adv]) == pytest.approx(oracles.within_group_variance(adv))
    assert credit.zero_signal_share(groups) == pytest.approx(oracles.zero_signal_share(groups))
    assert credit.zero_signal_share(np.array(groups)) == pytest.approx(oracles.zero_signal_share(groups))
    assert credit.pooled_return_variance(np.array(groups)) == pytest.approx(oracles.pooled_return_variance(groups))


def test_normalisation_default_keeps_leave_one_out():
    adv = credit.loo_advantages([[1.0], [0.0]])  # +1, -1
    np.testing.assert_array_equal(credit.normalize_advantages(adv), adv)
    skewed = np.array([0.5, 0.0, 0.0, 0.0])
    scaled = credit.normalize_advantages(skewed, "batch_scale")
    assert scaled[1] == 0.0 and scaled[0] > 0  # zeros and signs survive
    shifted = credit.normalize_advantages(skewed, "batch_zscore")
    assert shifted[1] < 0  # re-centering moves the baseline: documented, not the default
    with pytest.warns(UserWarning, match="2-alternative"):
        z = credit.normalize_advantages(np.array([0.1, -0.1, 0.3, 0.2]), "group_zscore", groups=np.array([0, 0, 1, 1]))
    np.testing.assert_allclose(np.abs(z), 1.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        credit.normalize_advantages(np.array([0.1, -0.1, 0.3]), "group_zscore", groups=np.array([0, 0, 0]))
    with pytest.raises(ValueError, match="unknown mode"):
        credit.normalize_advantages(adv, "zscore")
