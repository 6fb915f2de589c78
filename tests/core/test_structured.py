import json
import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from c3_plugin.core.loss import sequence_logprobs
from c3_plugin.core.protocol import Prompt, Sampling, encode_prompt
from c3_plugin.core.structured import (
    JsonStop,
    Skeleton,
    SkeletonLogitsProcessor,
    SkeletonRowMask,
    encode_values,
    json_complete,
    loss_mask_for,
    max_completion_tokens,
    parse_assignments,
    value_vocabulary,
)
from c3_plugin.generation.hf import HFBackend
from c3_plugin.run.testing import tiny_model, tiny_tokenizer
from c3_plugin.trainers.update import PolicySample, ppo_update

SK_A = Skeleton([(1, "current_city"), (1, "transportation"), (2, "current_city")], max_value_tokens=4)
SK_B = Skeleton([(2, "accommodation")], max_value_tokens=6)
SK_C = Skeleton([(1, "current_city"), (3, "attraction")], max_value_tokens=3)


@pytest.fixture(scope="module")
def tok():
    return tiny_tokenizer()


@pytest.fixture(scope="module")
def close_loving_model(tok):
    """A random tiny model with the close token boosted, so values end both by choice and at the cap."""
    model = tiny_model(tok, seed=7)
    bias = torch.zeros(len(tok))
    bias[tok('"', add_special_tokens=False)["input_ids"][0]] = 4.0
    model.lm_head.register_forward_hook(lambda m, i, o: o + bias)
    return model


def enc(tok, text):
    return tok(text, add_special_tokens=False)["input_ids"]


def check_against_skeleton(tok, sk, ids, mask):
    """Oracle walk: value tokens are mask 1 up to the close; every mask-0 run is a forced close, a schema segment or
    EOS."""
    close = enc(tok, '"')[0]
    i, hit_cap, chose_close = 0, 0, 0
    for k in range(len(sk.slots)):
        j = ids.index(close, i)
        assert all(m == 1 for m in mask[i:j]) and j - i <= sk.max_value_tokens
        assert mask[j] == (0 if j - i == sk.max_value_tokens else 1)
        hit_cap += j - i == sk.max_value_tokens
        chose_close += j - i < sk.max_value_tokens
        seg = enc(tok, sk.between(k)) if k < len(sk.slots) - 1 else enc(tok, sk.closing()) + [tok.eos_token_id]
        assert ids[j + 1:j + 1 + len(seg)] == seg and mask[j + 1:j + 1 + len(seg)] == [0] * len(seg)
        i = j + 1 + len(seg)
    assert i == len(ids) == len(mask)
    return hit_cap, chose_close


# ---------------------------------------------------------------- skeleton text

def test_skeleton_text_is_json_dumps_of_the_assignments():
    values = ["Rome", 'say "hi" {x}', "a\\b\nc"]
    obj = {"assignments": [{"day": d, "field": f, "value": v} for (d, f), v in zip(SK_A.slots, values)]}
    assert SK_A.render(values) == json.dumps(obj)
    assert SK_A.prefill() == '{"assignments": [{"day": 1, "field": "current_city", "value": "'
    assert SK_A.between(1) == '}, {"day": 2, "field": "current_city", "value": "'
    assert SK_A.closing() == "}]}"
    assert SK_B.render(["x"]) == SK_B.prefill() + 'x"' + SK_B.closing()
    with pytest.raises(IndexError):
        SK_A.between(2)
    with pytest.raises(ValueError, match="at least one"):
        Skeleton([])


def test_value_vocabulary_excludes_quotes_escapes_controls_and_specials(tok):
    ok = value_vocabulary(tok)
    close = enc(tok, '"')[0]
    assert ok[close]
    for i, allowed in enumerate(ok):
        text = tok.decode([i])
        bad = i in tok.all_special_ids or any(c in text
                                              for c in '"\\') or any(ord(c) < 0x20 or c == "\x7f" for c in text)
        assert allowed == (not bad or i == close), (i, text)
    assert not ok[tok.eos_token_id] and not ok[enc(tok, "\n")[0]] and ok[enc(tok, "a")[0]]


# ---------------------------------------------------------------- constrained generation

@pytest.mark.parametrize("greedy", [False, True])
def test_generated_messages_follow_their_skeletons(tok, close_loving_model, greedy):
    torch.manual_seed(0)
    grammar = {"A": SK_A, "B": SK_B, "C": SK_C}
    backend = HFBackend(lambda a: close_loving_model, [tok], grammar=lambda p: grammar[p.role])
    prompts = [Prompt(f"plan for {r}", r, 0, prefix=grammar[r].prefill(), max_new_tokens=5)
               for r in ("A", "B", "C", "A")]
    gens = backend.generate(prompts, 3, Sampling(max_new_tokens=5, temperature=1.3, greedy=greedy))
    hit_cap = chose_close = 0
    for p, group in zip(prompts, gens):
        sk = grammar[p.role]
        assert len(group) == 3
        for g in group:  # the cap of 5 was raised to the skeleton's worst case
            assert len(g.token_ids) <= max_completion_tokens(tok, sk)
            obj = json.loads(p.prefix + g.text)
            assert [(a["day"], a["field"]) for a in obj["assignments"]] == list(sk.slots)
            assert all(set(a) == {"day", "field", "value"} and '"' not in a["value"] for a in obj["assignments"])
            assert parse_assignments(p.prefix + g.text) == obj["assignments"]
            h, c = check_against_skeleton(tok, sk, g.token_ids, g.loss_mask)
            hit_cap, chose_close = hit_cap + h, chose_close + c
            assert g.loss_mask == loss_mask_for(tok, sk, g.token_ids)
        if greedy:
            assert len({tuple(g.token_ids) for g in group}) == 1
    assert chose_close and (hit_cap or greedy)  # sampling exercised both ways of ending a value
    # behaviour log-probs are the raw policy's (forced tokens included), as a padded forward pass gives them
    temperature = 1.0 if greedy else 1.3
    for p, group in zip(prompts[:2], gens[:2]):
        with torch.no_grad():
            lp, _ = sequence_logprobs(close_loving_model, [encode_prompt(tok, p)] * 3, [g.token_ids for g in group],
                                      tok.pad_token_id, temperature)
        for r, g in enumerate(group):
            np.testing.assert_allclose(lp[r, : len(g.token_ids)].numpy(), g.logprobs, atol=2e-4)


def test_processor_forces_the_schema_under_uniform_random_scores(tok):
    """Without a model: sample from arbitrary scores through the processor, n=2 rows per prompt, and a
    model vocabulary wider than the tokenizer's (padded embedding rows are never allowed)."""
    g = torch.Generator().manual_seed(1)
    skeletons, n, width = [SK_C, SK_B], 2, 7
    proc = SkeletonLogitsProcessor(tok, skeletons, width, num_return_sequences=n)
    ids = torch.zeros((4, width), dtype=torch.long)
    for _ in range(max(max_completion_tokens(tok, s) for s in skeletons) + 3):
        scores = proc(ids, torch.randn((4, len(tok) + 5), generator=g) * 5)
        assert torch.isfinite(scores).any(-1).all() and not torch.isfinite(scores[:, len(tok):]).any()
        ids = torch.cat([ids, torch.multinomial(torch.softmax(scores, -1), 1, generator=g)], 1)
    for r in range(4):
        out = ids[r, width:].tolist()
        out = out[: out.index(tok.eos_token_id) + 1]
        assert check_against_skeleton(tok, skeletons[r // n], out, loss_mask_for(tok, skeletons[r // n], out))
        assert set(ids[r, width + len(out):].tolist()) == {tok.pad_token_id}  # pad after EOS
    with pytest.raises(ValueError, match="rows"):
        SkeletonLogitsProcessor(tok, skeletons, width)(ids[:, :width], torch.zeros((4, len(tok))))


def test_loss_mask_for_hand_built_sequences(tok):
    sk = Skeleton([(1, "a"), (2, "b")], max_value_tokens=2)
    q, eos = enc(tok, '"'), [tok.eos_token_id]
    chosen = enc(tok, "x") + q + enc(tok, sk.between(0)) + enc(tok, "yz") + q + enc(tok, sk.closing()) + eos
    mid, last = len(enc(tok, sk.between(0))), len(enc(tok, sk.closing())) + 1
    # second close forced at the cap
    assert loss_mask_for(tok, sk, chosen) == [1, 1] + [0] * mid + [1, 1, 0] + [0] * last
    with pytest.raises(ValueError, match="breaks the skeleton"):
        loss_mask_for(tok, sk, enc(tok, "xyz"))  # a third value token where the close is forced
    with pytest.raises(ValueError, match="not allowed"):
        loss_mask_for(tok, sk, enc(tok, "\\"))


def test_prefix_must_be_the_prefill(tok, close_loving_model):
    backend = HFBackend(lambda a: close_loving_model, [tok], grammar=lambda p: SK_B)
    with pytest.raises(ValueError, match="prefill"):
        backend.generate([Prompt("x", "B", 0, prefix='{"assignments": [')], 1, Sampling(max_new_tokens=4))


# ---------------------------------------------------------------- free-text JSON

@pytest.mark.parametrize("text,complete", [
    ('{"assignments": [{"day": 1, "field": "x", "value": "y"}]}', True),
    ('  {"a": "}]{[\\"\\\\"}\n', True),  # brackets and escaped quotes inside strings
    ('{"assignments": [{"day": 1, "field": "x", "value": "y"}}', False),  # } while [ open
    ('{"assignments": [{"day": 1, "field": "x", "value": "y"}]', False),
    ('{"a": [}]}', False), ('{"a": [1}, 2]}', False),  # mismatched closers never complete, even when counts balance
    ('{"a": "}', False), ('[1]', False), ('Sure: {}', False), ('{} x', False),
])
def test_json_complete_and_strict_parse(text, complete):
    assert json_complete(text) is complete
    if not complete:
        assert parse_assignments(text) is None


def test_parse_assignments_shape():
    assert parse_assignments('{"assignments": [{"day": 1}]}') == [{"day": 1}]
    assert parse_assignments('{"assignments": [{"day": 1, "field": "x", "value": "y"}}') is None
    assert parse_assignments('{"assignments": [1]}') is None and parse_assignments('{"plan": []}') is None


def test_json_stop_stops_exactly_when_the_object_closes(tok):
    prefill = '{"assignments": ['
    texts = ['{"day": 1, "value": "}]"}]} trailing', '{"day": 1}} ]} more', '{"v": "\\"]}"}]}']
    rows = [enc(tok, t) for t in texts]
    width, T = 3, max(len(r) for r in rows)
    ids = torch.full((3, width + T), tok.pad_token_id)
    for r, row in enumerate(rows):
        ids[r, width:width + len(row)] = torch.tensor(row)
    stop = JsonStop(tok, width, prefill)
    done = [stop(ids[:, : width + t + 1], None).tolist() for t in range(T)]
    first = [texts[0].index("]} ") + 2, None, len(texts[2])]
    assert stop.stop_lengths == first
    assert [d[0] for d in done] == [t + 1 >= first[0] for t in range(T)] and not any(d[1] for d in done)
    assert json_complete(prefill + texts[0][: first[0]]) and json_complete(prefill + texts[2])


def test_backend_json_stop_cuts_free_text_at_the_close(tok):
    model = tiny_model(tok, seed=2)
    bias = torch.zeros(len(tok))
    bias[enc(tok, "}")[0]] = 30.0
    model.lm_head.register_forward_hook(lambda m, i, o: o + bias)
    prompts = [Prompt("x", "R", 0, prefix='{"a": 1'), Prompt("y", "R", 0, prefix='{"a": {"b": 2')]
    gens = HFBackend(lambda a: model, [tok], json_stop=True).generate(prompts, 2, Sampling(max_new_tokens=12))
    assert [[g.text for g in group] for group in gens] == [["}", "}"], ["}}", "}}"]]
    assert all(g.loss_mask is None for group in gens for g in group)
    free = HFBackend(lambda a: model, [tok]).generate(prompts[:1], 1, Sampling(max_new_tokens=12))
    assert len(free[0][0].token_ids) == 12  # without json_stop the row runs to the cap


# ---------------------------------------------------------------- masked PPO update

def args(**kw):
    base = dict(ppo_epochs=1, minibatch_size=None, micro_batch_size=8, temperature=1.0, clip_eps=0.2,
                clip_eps_high=None, max_grad_norm=0, loss_aggregation="token_mean", reference_kl_coef=0.0)
    base.update(kw)
    return SimpleNamespace(**base)


def masked_batch(tok, seed, n=6):
    rng = np.random.default_rng(seed)
    prompts = [list(rng.integers(6, 200, size=int(rng.integers(2, 7)))) for _ in range(n)]
    comps = [list(rng.integers(6, 200, size=int(rng.integers(2, 8)))) for _ in range(n)]
    masks = [[int(x) for x in rng.integers(0, 2, size=len(c))] for c in comps]
    for m in masks:
        m[0] = 1
    return prompts, comps, masks, rng


def samples_for(model, tok, prompts, comps, masks, rng):
    with torch.no_grad():
        base, _ = sequence_logprobs(model, prompts, comps, tok.pad_token_id)
    out = []
    for r, (p, c, m) in enumerate(zip(prompts, comps, masks)):
        old = base[r, : len(c)] + torch.tensor(rng.normal(0, 0.3, size=len(c)), dtype=base.dtype)
        old = torch.where(torch.tensor(m) == 1, old, torch.full_like(old, -50.0))  # forced tokens: absurd old log-probs
        out.append(PolicySample(p, c, old.tolist(), float(rng.normal()), loss_mask=m))
    return out, base


def oracle(samples, base, aggregation, clip=0.2):
    """Plain loops over mask-1 tokens only."""
    per_seq, total, count, clipped = [], 0.0, 0, 0
    for r, s in enumerate(samples):
        terms = []
        for t, m in enumerate(s.loss_mask):
            if m:
                ratio = math.exp(float(base[r, t]) - s.old_logprobs[t])
                terms.append(-min(ratio * s.advantage, min(max(ratio, 1 - clip), 1 + clip) * s.advantage))
                clipped += (ratio > 1 + clip and s.advantage > 0) or (ratio < 1 - clip and s.advantage < 0)
        per_seq.append(sum(terms) / len(terms))
        total, count = total + sum(terms), count + len(terms)
    return (total / count if aggregation == "token_mean" else sum(per_seq) / len(per_seq)), clipped / count


@pytest.mark.parametrize("aggregation", ["token_mean", "sequence_mean"])
def test_masked_ppo_loss_equals_plain_loop_over_policy_tokens(tok, aggregation):
    model = tiny_model(tok, seed=5)
    prompts, comps, masks, rng = masked_batch(tok, 0)
    samples, base = samples_for(model, tok, prompts, comps, masks, rng)
    expected_loss, expected_clip = oracle(samples, base, aggregation)
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    stats = ppo_update(model, opt, samples, args(loss_aggregation=aggregation), np.random.default_rng(0),
                       pad_id=tok.pad_token_id)
    assert stats["loss"] == pytest.approx(expected_loss, rel=1e-5)
    assert stats["clip_fraction"] == pytest.approx(expected_clip, rel=1e-6) and 0 < expected_clip < 1


def grad_of(tok, samples, **kw):
    model = tiny_model(tok, seed=5)
    seen = []

    class Recording(torch.optim.SGD):
        def step(self, closure=None):
            seen.append(torch.cat([p.grad.flatten().clone() for p in model.parameters() if p.grad is not None]))
            return super().step(closure)

    stats = ppo_update(model, Recording(model.parameters(), lr=0.0), samples, args(**kw), np.random.default_rng(0),
                       pad_id=tok.pad_token_id)
    return (seen[0] if seen else None), stats


@pytest.mark.parametrize("aggregation", ["token_mean", "sequence_mean"])
def test_masked_micro_batches_accumulate_to_one_big_batch_and_zero_masks_drop_out(tok, aggregation):
    prompts, comps, masks, rng = masked_batch(tok, 1)
    samples, _ = samples_for(tiny_model(tok, seed=5), tok, prompts, comps, masks, rng)
    full, _ = grad_of(tok, samples, micro_batch_size=6, loss_aggregation=aggregation)
    accumulated, _ = grad_of(tok, samples, micro_batch_size=2, loss_aggregation=aggregation)
    torch.testing.assert_close(full, accumulated, atol=1e-6, rtol=1e-4)
    # an all-forced sample changes nothing, whatever its advantage, even as the only sample of a micro-batch
    dead = PolicySample(prompts[0], comps[0], samples[0].old_logprobs, 5.0, loss_mask=[0] * len(comps[0]))
    with_dead, stats = grad_of(tok, [dead] + samples, micro_batch_size=1, loss_aggregation=aggregation)
    torch.testing.assert_close(full, with_dead, atol=1e-6, rtol=1e-4)
    assert stats["samples"] == len(samples)
    # forced tokens carry no gradient: masking more tokens changes it
    fewer = [PolicySample(s.prompt_ids, s.completion_ids, s.old_logprobs, s.advantage,
                          loss_mask=[1] + [0] * (len(s.loss_mask) - 1))
             for s in samples]
    assert not torch.allclose(full, grad_of(tok, fewer, loss_aggregation=aggregation)[0])


def test_all_zero_mask_update_is_a_no_op(tok):
    model = tiny_model(tok, seed=5)
    before = [p.detach().clone() for p in model.parameters()]
    samples = [PolicySample([10, 11], [20, 21, 1], [-5.0] * 3, 1.0, loss_mask=[0, 0, 0])]
    stats = ppo_update(model, torch.optim.AdamW(model.parameters(), lr=1e-2), samples, args(), np.random.default_rng(0),
                       pad_id=tok.pad_token_id)
    assert stats == {} and all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
    with pytest.raises(ValueError, match="loss_mask has 2 entries"):
        ppo_update(model, torch.optim.SGD(model.parameters(), lr=0.0),
                   [PolicySample([10], [20, 21, 1], [-5.0] * 3, 1.0, loss_mask=[1, 0])], args(),
                   np.random.default_rng(0), pad_id=tok.pad_token_id)


def test_the_row_mask_of_another_engine_masks_as_the_batch_processor(tok):
    """SkeletonRowMask (the vLLM backend's per-request logits processor) allows, step by step, exactly the tokens
    SkeletonLogitsProcessor allows its row, and every token of a valid action."""
    ids, _ = encode_values(tok, SK_A, ["Rome", "car", "Oslo"])
    row, batch = SkeletonRowMask(tok, SK_A), SkeletonLogitsProcessor(tok, [SK_A], prompt_len=0)
    for t in range(len(ids)):
        logits = torch.zeros(len(tok))
        one = row(ids[:t], logits.clone())
        rows = batch(torch.tensor([ids[:t]], dtype=torch.long).reshape(1, -1), logits.clone().unsqueeze(0))[0]
        assert torch.equal(torch.isinf(one), torch.isinf(rows)) and not torch.isinf(one[ids[t]]), t
    inside_a_value = SkeletonRowMask(tok, SK_A)(ids[:1], torch.zeros(len(tok)))
    # the value vocabulary: more than one token, not all
    assert 1 < int((~torch.isinf(inside_a_value)).sum()) < len(tok)
