"""C3 against a learned critic, both scored against fresh Monte Carlo references (the paper's Section 4).

Training points: groups that ``c3 diagnose`` collected at the opening decision point (``n``
alternatives, ``c`` continuations each, their texts kept in ``raw.jsonl``). Held-out points: new
groups at the same decision point with ``c + 2 r`` continuations per alternative (a diagnosis with
another seed): the first ``c`` are C3's own, the next ``r`` reference A, the last ``r`` reference B.

The critic is a decision-value head ``Q(h, a)``: features are the frozen policy model's mean-pooled
last hidden state over context + alternative; the head (ridge regression or a one-hidden-layer MLP,
picked by cross-validated loss over training decision points) regresses an alternative's mean return.
A state-value critic would shift every alternative of a point by one constant and never change their
order, so it is not the competitor here.

Scores: per held-out point the Spearman correlation of an estimator's values for the ``n``
alternatives with reference A's, averaged over the points where the reference and every estimator
order the alternatives (no constant vector); reference B against reference A is the ceiling two
independent references reach. Intervals: percentile bootstrap over points; C3 - critic: paired test.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from c3_plugin.core.credit import masked_spearman
from c3_plugin.core.stats import paired_comparison
from c3_plugin.tools.diagnose import RAW, diagnose
from c3_plugin.tools.session import Session, bootstrap_ci


def load_points(folder: str | Path, u: int = 0) -> tuple[list[str], list[list[str]], np.ndarray]:
    """(contexts [G], alternatives [G][n], returns [G, n, c]) of the chunks of decision ``u`` that kept their texts."""
    chunks = [json.loads(line) for line in (Path(folder) / RAW).read_text().splitlines() if line.strip()]
    chunks = sorted((ch for ch in chunks if ch["u"] == u and "alternatives" in ch), key=lambda ch: ch["first"])
    if not chunks:
        raise ValueError(f"{folder}: no groups with their texts at decision point {u}; rerun c3 diagnose there")
    return ([x for ch in chunks for x in ch["contexts"]], [x for ch in chunks for x in ch["alternatives"]],
            np.concatenate([np.asarray(ch["groups"], dtype=np.float64) for ch in chunks]))


def embed(session: Session, texts: Sequence[str], agent: int = 0, batch: int = 16) -> np.ndarray:
    """Mean-pooled last hidden states of the frozen policy ``agent`` (no chat template): the critic's features."""
    import torch

    model, tok = session.trainer.agents[agent], session.trainer.tokenizers[agent]
    device = next(model.parameters()).device
    out = []
    with torch.no_grad():
        for s in range(0, len(texts), batch):
            enc = tok(list(texts[s:s + batch]), return_tensors="pt", padding=True, truncation=True,
                      max_length=512).to(device)
            hidden = model(**enc, output_hidden_states=True).hidden_states[-1].float()
            mask = enc["attention_mask"].unsqueeze(-1).float()
            out.append(((hidden * mask).sum(1) / mask.sum(1)).cpu().numpy())
    return np.concatenate(out)


def _ridge(x: np.ndarray, y: np.ndarray, alpha: float):
    mu, sd = x.mean(0), x.std(0) + 1e-6
    z = (x - mu) / sd
    w = np.linalg.solve(z.T @ z + alpha * np.eye(z.shape[1]), z.T @ (y - y.mean()))
    return lambda q: ((q - mu) / sd) @ w + y.mean()


def _mlp(x: np.ndarray, y: np.ndarray, lr: float, epochs: int = 200, hidden: int = 128, seed: int = 0):
    import torch

    torch.manual_seed(seed)
    mu, sd = x.mean(0), x.std(0) + 1e-6
    xt, yt = torch.tensor((x - mu) / sd, dtype=torch.float32), torch.tensor(y, dtype=torch.float32)
    net = torch.nn.Sequential(torch.nn.Linear(x.shape[1], hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, 1))
    opt = torch.optim.AdamW(net.parameters(), lr=lr, weight_decay=0.01)
    for _ in range(epochs):
        opt.zero_grad()
        torch.nn.functional.mse_loss(net(xt).squeeze(-1), yt).backward()
        opt.step()
    net.eval()
    return lambda q: net(torch.tensor((q - mu) / sd, dtype=torch.float32)).squeeze(-1).detach().numpy()


HEADS = {**{f"ridge alpha={a:g}": functools.partial(_ridge, alpha=a) for a in (1.0, 10.0, 100.0, 1000.0)},
         **{f"mlp lr={lr:g}": functools.partial(_mlp, lr=lr) for lr in (1e-4, 1e-3)}}


def fit_critic(x: np.ndarray, y: np.ndarray, point: np.ndarray, folds: int = 5, seed: int = 0) -> tuple[str, Any, dict]:
    """The head with the lowest cross-validated MSE (folds split by decision point), refit on every point."""
    rng = np.random.default_rng(seed)
    fold_of = rng.permutation(np.unique(point)) % folds
    fold = fold_of[np.searchsorted(np.unique(point), point)]
    losses = {}
    for name, make in HEADS.items():
        err = [np.mean((make(x[fold != f], y[fold != f])(x[fold == f]) - y[fold == f]) ** 2) for f in range(folds)]
        losses[name] = float(np.mean(err))
    best = min(losses, key=losses.get)
    return best, HEADS[best](x, y), losses


def critic_comparison(session: Session, train_dir: str | Path, out_dir: str | Path, held_out: int = 60, n: int = 4,
                      c: int = 4, reference: int = 16, seed: int = 1000) -> dict[str, Any]:
    """Collect (or resume) the held-out groups, fit the critic on ``train_dir``'s groups, score both; writes
    ``critic.json``."""
    out = Path(out_dir)
    diagnose(session, out / "heldout", groups=held_out, n=n, c=c + 2 * reference, decisions="0", seed=seed,
             progress=True)
    tr_ctx, tr_alt, tr_ret = load_points(train_dir)
    ho_ctx, ho_alt, ho_ret = load_points(out / "heldout")
    x_tr = embed(session, [f"{h}\n{a}" for h, alts in zip(tr_ctx, tr_alt) for a in alts])
    y_tr = tr_ret.mean(-1).reshape(-1)
    head, critic, losses = fit_critic(x_tr, y_tr, np.repeat(np.arange(len(tr_ctx)), n))
    held_out = [f"{h}\n{a}" for h, alts in zip(ho_ctx, ho_alt) for a in alts]
    pred = critic(embed(session, held_out)).reshape(len(ho_ctx), n)
    ref_a = ho_ret[..., c:c + reference].mean(-1)
    estimates = {"C3 (4 continuations)": ho_ret[..., :c].mean(-1), "learned critic": pred,
                 "reference B (16)": ho_ret[..., c + reference:].mean(-1)}

    def ordered(v: np.ndarray) -> np.ndarray:
        return np.ptp(v, -1) > 1e-12

    valid = np.ones((len(ho_ctx), n), dtype=bool)
    corr = {k: masked_spearman(v, ref_a, valid) for k, v in estimates.items()}
    common = ordered(ref_a) & np.all([ordered(v) for v in estimates.values()], 0)
    rows = []
    for name, rho in corr.items():
        for scope, mask in (("common", common), ("own", ordered(ref_a) & ordered(estimates[name]))):
            vals = rho[mask]
            lo, hi = bootstrap_ci(lambda idx, vals=vals: float(vals[idx].mean()), len(vals),
                                  seed=seed) if len(vals) > 1 else (float("nan"),) * 2
            rows.append({"estimator": f"{name} [{scope}]", "points": int(mask.sum()),
                         "rank_corr": float(vals.mean()) if len(vals) else float("nan"), "lo": lo, "hi": hi})
    pair = paired_comparison(corr["C3 (4 continuations)"][common], corr["learned critic"][common])
    result = {"held_out_points": len(ho_ctx), "train_points": len(tr_ctx), "n": n, "c": c, "reference": reference,
              "critic_head": head, "critic_cv_mse": losses, "rows": rows, "c3_minus_critic": pair,
              "per_point": {k: [None if not np.isfinite(x) else float(x) for x in v] for k, v in corr.items()}}
    (out / "critic.json").write_text(json.dumps(result, indent=2))
    return result
