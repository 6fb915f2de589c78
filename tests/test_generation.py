import numpy as np
import pytest
import torch

from c3_plugin import load_workflow, materialize
from c3_plugin.generation import HFBackend, encode_prompt
from c3_plugin.loss import sequence_logprobs
from c3_plugin.rollout import Prompt, Sampling
from c3_plugin.testing import tiny_model, tiny_tokenizer


@pytest.fixture(scope="module")
def setup():
    tok = tiny_tokenizer()
    return tok, tiny_model(tok, seed=0), tiny_model(tok, seed=1)


def test_encode_prompt_uses_chat_template_and_prefix(setup):
    tok, _, _ = setup
    ids = encode_prompt(tok, Prompt("2+2?", "Actor", 1, prefix="\\boxed{", system="Be brief."))
    text = tok.decode(ids)
    assert text == "<|system|>Be brief.<|end|><|user|>2+2?<|end|><|assistant|>\\boxed{"
    plain = encode_prompt(tiny_tokenizer(chat_template=False), Prompt("2+2?", "Actor", 1, prefix="\\boxed{"))
    assert tok.decode(plain) == "2+2?\\boxed{"


def test_batched_sampling_shapes_eos_caps_and_logprobs(setup):
    tok, m0, m1 = setup
    torch.manual_seed(0)
    backend = HFBackend(lambda a: [m0, m1][a], [tok, tok])
    prompts = [Prompt("short", "R", 0, max_new_tokens=3), Prompt("a much longer prompt here", "R", 0, max_new_tokens=3),
               Prompt("other agent", "A", 1, max_new_tokens=7)]
    gens = backend.generate(prompts, 4, Sampling(max_new_tokens=50, temperature=0.8))
    assert [len(g) for g in gens] == [4, 4, 4]
    for p, g in zip(prompts, gens):
        for x in g:
            assert 1 <= len(x.token_ids) <= p.max_new_tokens
            assert len(x.logprobs) == len(x.token_ids) and all(v <= 0 for v in x.logprobs)
            if tok.eos_token_id in x.token_ids:
                assert x.token_ids[-1] == tok.eos_token_id and x.token_ids.count(tok.eos_token_id) == 1
            assert x.text == tok.decode(x.token_ids, skip_special_tokens=True)
    # the recorded behaviour log-probs are the policy's, recomputed by one padded forward pass
    model = [m0, m0, m1]
    for p, g, m in zip(prompts, gens, model):
        pid = encode_prompt(tok, p)
        with torch.no_grad():
            lp, mask = sequence_logprobs(m, [pid] * 4, [x.token_ids for x in g], tok.pad_token_id, temperature=0.8)
        for r, x in enumerate(g):
            np.testing.assert_allclose(lp[r, : len(x.token_ids)].numpy(), x.logprobs, atol=2e-4)


def test_greedy_is_deterministic_and_replicated(setup):
    tok, m0, _ = setup
    backend = HFBackend(lambda a: m0, [tok])
    a = backend.generate([Prompt("hello", "R", 0)], 3, Sampling(max_new_tokens=6, greedy=True))
    b = backend.generate([Prompt("hello", "R", 0)], 1, Sampling(max_new_tokens=6, greedy=True))
    assert len({tuple(x.token_ids) for x in a[0]}) == 1 and a[0][0].token_ids == b[0][0].token_ids


def test_recompute_path_when_logits_do_not_fit(setup):
    tok, m0, _ = setup
    torch.manual_seed(3)
    fast = HFBackend(lambda a: m0, [tok]).generate([Prompt("x", "R", 0)], 2, Sampling(max_new_tokens=5))
    torch.manual_seed(3)
    slow = HFBackend(lambda a: m0, [tok], logits_budget=0).generate([Prompt("x", "R", 0)], 2, Sampling(max_new_tokens=5))
    for f, s in zip(fast[0], slow[0]):
        assert f.token_ids == s.token_ids
        np.testing.assert_allclose(f.logprobs, s.logprobs, atol=2e-4)


def test_materialised_tokens_are_counted_exactly(setup):
    tok, m0, m1 = setup
    wf = load_workflow("reasoner_actor").with_templates({}, max_new_tokens={"Reasoner": 4, "Actor": 3})
    backend = HFBackend(lambda a: [m0, m1][a], [tok, tok])
    items = [{"id": "a", "question": "1+1"}, {"id": "b", "question": "2+2"}]
    ro = materialize(wf, "tree [2, 4]", items, backend, lambda leaves: [0.0] * len(leaves), Sampling(max_new_tokens=20))
    decisions = [e for e in ro.entries if e.kind == "decision"]
    assert ro.budget.totals()["tokens_generated"] == sum(len(e.token_ids) for e in decisions)
    assert all(len(e.token_ids) <= 4 for e in ro.decision_entries(0)) and all(len(e.token_ids) <= 3 for e in ro.decision_entries(1))
    assert ro.budget.totals()["messages"] == 20
