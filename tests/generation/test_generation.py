import numpy as np
import pytest
import torch

from c3_plugin import load_workflow, materialize
from c3_plugin.core.loss import sequence_logprobs
from c3_plugin.core.protocol import Prompt, Sampling, encode_prompt
from c3_plugin.generation.hf import HFBackend
from c3_plugin.run.testing import tiny_model, tiny_tokenizer, two_eos_team


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


def test_stops_on_every_declared_eos_and_records_exact_logprobs():
    from c3_plugin.trainers.update import PolicySample

    tok, model = two_eos_team()
    assert tok.pad_token_id == 1 and tok.eos_token_id == 0
    torch.manual_seed(0)
    backend = HFBackend(lambda a: model, [tok], use_chat_template=False, micro_batch_size=3)
    prompts = [Prompt("abc", "R", 0), Prompt("ponmlkjih", "R", 0)]
    gens = backend.generate(prompts, 16, Sampling(max_new_tokens=12, temperature=0.7))
    flat = [g for row in gens for g in row]
    ends = [g.token_ids[-1] for g in flat]
    assert 0 in ends and 1 in ends  # both declared EOS ids stop a message (1 is also the pad id)
    for g in flat:
        inner = g.token_ids[:-1]
        assert 0 not in inner and 1 not in inner  # cut right after the first stop, nothing after it
        assert len(g.token_ids) == len(g.logprobs) <= 12
    # nothing removed inside a message: a capped message keeps all its tokens
    assert any(len(g.token_ids) == 12 and g.token_ids[-1] not in (0, 1) for g in flat)
    # the recorded behaviour log-probs are what the update recomputes (same temperature, same context ids,
    # other micro-batch composition)
    samples = [PolicySample(encode_prompt(tok, p, False), g.token_ids, g.logprobs, 1.0)
               for p, row in zip(prompts, gens) for g in row]
    with torch.no_grad():
        lp, mask = sequence_logprobs(model, [s.prompt_ids for s in samples], [s.completion_ids for s in samples],
                                     tok.pad_token_id, temperature=0.7)
    gap = max(abs(lp[r, i].item() - v) for r, s in enumerate(samples) for i, v in enumerate(s.old_logprobs))
    assert gap < 1e-5, gap
    assert int(mask.sum()) == sum(len(s.completion_ids) for s in samples)


def test_sampling_ignores_the_checkpoints_own_generation_settings():
    tok, model = two_eos_team()
    model.generation_config.top_k = 1  # a shipped default that would make sampling greedy
    model.generation_config.repetition_penalty = 50.0
    model.generation_config.do_sample = False
    backend = HFBackend(lambda a: model, [tok], use_chat_template=False)
    torch.manual_seed(1)
    gens = backend.generate([Prompt("abc", "R", 0)], 12, Sampling(max_new_tokens=6, temperature=1.0))[0]
    assert len({tuple(g.token_ids) for g in gens}) > 3  # really sampled at temperature 1, no top-k
    assert model.generation_config.top_k == 1 and model.generation_config.repetition_penalty == 50.0  # restored
    from c3_plugin.generation.hf import sampling_config

    cfg = sampling_config(Sampling(temperature=0.6, top_p=0.9), 8, [0, 1], 1, 2)
    assert (cfg.do_sample, cfg.temperature, cfg.top_p, cfg.top_k, cfg.repetition_penalty, cfg.eos_token_id) == \
        (True, 0.6, 0.9, 0, 1.0, [0, 1])


def test_materialised_tokens_are_counted_exactly(setup):
    tok, m0, m1 = setup
    wf = load_workflow("reasoner_actor").with_templates({}, max_new_tokens={"Reasoner": 4, "Actor": 3})
    backend = HFBackend(lambda a: [m0, m1][a], [tok, tok])
    items = [{"id": "a", "question": "1+1"}, {"id": "b", "question": "2+2"}]
    ro = materialize(wf, "tree [2, 4]", items, backend, lambda leaves: [0.0] * len(leaves), Sampling(max_new_tokens=20))
    decisions = [e for e in ro.entries if e.kind == "decision"]
    assert ro.budget.totals()["tokens_generated"] == sum(len(e.token_ids) for e in decisions)
    assert (all(len(e.token_ids) <= 4 for e in ro.decision_entries(0))
            and all(len(e.token_ids) <= 3 for e in ro.decision_entries(1)))
    assert ro.budget.totals()["messages"] == 20
