import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from c3_plugin.core.loss import pad_batch, ppo_loss, sequence_logprobs
from c3_plugin.run.testing import tiny_model, tiny_tokenizer
from c3_plugin.trainers.update import PolicySample, ppo_update


@pytest.fixture(scope="module")
def tok():
    return tiny_tokenizer()


def plain_logprobs(model, prompt, completion, temperature=1.0):
    """Oracle: one unpadded forward per sequence, one log-softmax per token."""
    ids = torch.tensor([list(prompt) + list(completion)])
    logits = model(input_ids=ids).logits[0].float() / temperature
    out = []
    for i, t in enumerate(completion):
        out.append(torch.log_softmax(logits[len(prompt) - 1 + i], -1)[t])
    return torch.stack(out)


def plain_ppo_loss(new, old, adv, clip):
    """Oracle: token-mean clipped surrogate with explicit loops."""
    total, count = 0.0, 0
    for seq_new, seq_old, a in zip(new, old, adv):
        for n, o in zip(seq_new, seq_old):
            r = math.exp(n - o)
            total += -min(r * a, min(max(r, 1 - clip), 1 + clip) * a)
            count += 1
    return total / count


def batch(rng, n=5):
    prompts = [list(rng.integers(6, 200, size=int(rng.integers(2, 9)))) for _ in range(n)]
    comps = [list(rng.integers(6, 200, size=int(rng.integers(1, 7)))) for _ in range(n)]
    return prompts, comps


def test_padded_logprobs_equal_unpadded_oracle(tok):
    model = tiny_model(tok).eval()
    rng = np.random.default_rng(0)
    prompts, comps = batch(rng)
    with torch.no_grad():
        lp, mask = sequence_logprobs(model, prompts, comps, tok.pad_token_id, temperature=0.7)
        for r, (p, c) in enumerate(zip(prompts, comps)):
            assert int(mask[r].sum()) == len(c)
            torch.testing.assert_close(lp[r, : len(c)], plain_logprobs(model, p, c, 0.7), atol=1e-5, rtol=1e-5)
            assert torch.all(lp[r, len(c):] == 0)


def test_pad_batch_layout():
    ids, att, cmask = pad_batch([[5, 6], [7]], [[8], [9, 10, 11]], pad_id=0)
    assert ids.tolist() == [[5, 6, 8, 0, 0], [0, 7, 9, 10, 11]]
    assert att.tolist() == [[1, 1, 1, 0, 0], [0, 1, 1, 1, 1]]
    assert cmask.tolist() == [[1, 0, 0], [1, 1, 1]]


def test_batched_ppo_loss_equals_plain_loop(tok):
    model = tiny_model(tok)
    rng = np.random.default_rng(1)
    prompts, comps = batch(rng, 6)
    with torch.no_grad():
        base, mask = sequence_logprobs(model, prompts, comps, tok.pad_token_id)
    old = base + torch.tensor(rng.normal(0, 0.3, size=base.shape), dtype=base.dtype) * mask
    adv = torch.tensor(rng.normal(size=6), dtype=torch.float32)
    loss, stats = ppo_loss(base, old, adv, mask, clip=0.2)
    new_list = [base[r, : len(c)].tolist() for r, c in enumerate(comps)]
    old_list = [old[r, : len(c)].tolist() for r, c in enumerate(comps)]
    assert float(loss) == pytest.approx(plain_ppo_loss(new_list, old_list, adv.tolist(), 0.2), rel=1e-5)
    assert 0 < stats.clip_fraction < 1 and stats.tokens == sum(len(c) for c in comps)
    # at ratio 1 (first epoch) the loss is minus the token-weighted mean advantage and nothing is clipped
    loss1, stats1 = ppo_loss(base, base.clone(), adv, mask)
    expected = -sum(a * len(c) for a, c in zip(adv.tolist(), comps)) / sum(len(c) for c in comps)
    assert float(loss1) == pytest.approx(expected, rel=1e-5) and stats1.clip_fraction == 0 and stats1.approx_kl == 0


def test_loss_aggregations_and_reference_kl():
    new = torch.tensor([[-1.0, -2.0, 0.0], [-0.5, 0.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    adv = torch.tensor([1.0, -1.0])
    tok_mean, _ = ppo_loss(new, new, adv, mask, aggregation="token_mean")
    seq_mean, _ = ppo_loss(new, new, adv, mask, aggregation="sequence_mean")
    assert float(tok_mean) == pytest.approx(-(1 + 1 - 1) / 3)
    assert float(seq_mean) == pytest.approx(0.0)
    ref = new - 0.5 * mask
    with_kl, stats = ppo_loss(new, new, adv, mask, ref_logp=ref, kl_coef=0.1)
    k3 = math.exp(-0.5) + 0.5 - 1
    assert stats.ref_kl == pytest.approx(k3) and float(with_kl) == pytest.approx(float(tok_mean) + 0.1 * k3, rel=1e-5)
    with pytest.raises(ValueError, match="unknown loss aggregation"):
        ppo_loss(new, new, adv, mask, aggregation="mean")


def args(**kw):
    base = dict(ppo_epochs=1, minibatch_size=None, micro_batch_size=8, temperature=1.0, clip_eps=0.2,
                clip_eps_high=None, max_grad_norm=1.0, loss_aggregation="token_mean", reference_kl_coef=0.0)
    base.update(kw)
    return SimpleNamespace(**base)


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_one_update_moves_the_message_log_prob_with_the_advantage(tok, sign):
    model = tiny_model(tok, seed=3)
    prompt, comp = [10, 11, 12, 13], [40, 41, 42, 1]
    with torch.no_grad():
        before = plain_logprobs(model, prompt, comp).sum().item()
    sample = PolicySample(prompt_ids=prompt, completion_ids=comp,
                          old_logprobs=plain_logprobs(model, prompt, comp).tolist(), advantage=sign)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    stats = ppo_update(model, opt, [sample], args(), np.random.default_rng(0), pad_id=tok.pad_token_id)
    with torch.no_grad():
        after = plain_logprobs(model, prompt, comp).sum().item()
    assert stats["optimizer_steps"] == 1
    assert (after - before) * sign > 0.05


def test_micro_batches_accumulate_to_the_full_batch_gradient(tok):
    rng = np.random.default_rng(4)
    prompts, comps = batch(rng, 6)
    grads = []
    for micro in (6, 2):
        model = tiny_model(tok, seed=5)
        with torch.no_grad():
            old, mask = sequence_logprobs(model, prompts, comps, tok.pad_token_id)
        samples = [PolicySample(p, c, old[r, : len(c)].tolist(), float(a))
                   for r, (p, c, a) in enumerate(zip(prompts, comps, rng.normal(size=6)))]
        seen = []

        class Recording(torch.optim.SGD):
            grads = seen

            def step(self, closure=None):
                params = [p for g in self.param_groups for p in g["params"]]  # the model's, in its order
                self.grads.append(torch.cat([p.grad.flatten().clone() for p in params if p.grad is not None]))
                return super().step(closure)

        opt = Recording(model.parameters(), lr=0.0)
        ppo_update(model, opt, samples, args(micro_batch_size=micro, max_grad_norm=0), np.random.default_rng(0),
                   pad_id=tok.pad_token_id)
        assert len(seen) == 1 and all(p.grad is None for p in model.parameters())  # freed after the step
        grads.append(seen[0])
        rng = np.random.default_rng(4)
        prompts, comps = batch(rng, 6)
    torch.testing.assert_close(grads[0], grads[1], atol=1e-6, rtol=1e-4)


def test_minibatches_and_epochs_count_optimizer_steps(tok):
    model = tiny_model(tok)
    samples = [PolicySample([10, 11], [20 + i, 1], [-5.5, -5.5], 1.0) for i in range(10)]
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    stats = ppo_update(model, opt, samples, args(ppo_epochs=2, minibatch_size=4), np.random.default_rng(0),
                       pad_id=tok.pad_token_id)
    assert stats["optimizer_steps"] == 2 * 3 and stats["samples"] == 10
