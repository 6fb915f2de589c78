"""Memory of the log-prob pass is bounded by the micro-batch, not by the rollout size; the dry-run
memory estimate follows the documented arithmetic."""

import pytest

from c3_plugin.run.testing import logprob_peaks


def test_logprob_peak_memory_grows_with_micro_batch_not_with_sequences():
    mb = 2**20
    cases = [(16, 4), (64, 4), (64, 16)]
    peaks = logprob_peaks(cases * 2)  # each case twice in one process, the least kept: allocator noise only ever adds
    few, many, wide = (min(peaks[i], peaks[i + len(cases)]) for i in range(len(cases)))
    one_seq = 33 * 50000 * 4  # one sequence's fp32 logits
    assert many < few + 4 * one_seq, (few / mb, many / mb)  # 4x the sequences, about the same peak
    assert many < 12 * 4 * one_seq  # a few copies of one micro-batch's logits, never all 64 sequences'
    assert wide > 2.5 * many, (many / mb, wide / mb)  # 4x the micro-batch, several times the peak


def test_dry_run_memory_estimate_arithmetic():
    from c3_plugin.run.memory import ModelShape, estimate_memory

    shape = ModelShape(params=4.02e9, layers=36, hidden=2560, kv_heads=8, head_dim=128, vocab=151936)
    est = estimate_memory(shape, compute_dtype="bfloat16", policy="per_agent", agents=2, micro_batch_size=8,
                          completion_tokens=1024, seq_tokens=1024, generation_sequences=256, device_memory_gb=80)
    gib = 2**30
    # fp32 masters + fp32 grads + two fp32 Adam moments: 16 bytes per parameter and agent
    assert est["per_agent_gib"]["weights_fp32_master"] == pytest.approx(4.02e9 * 4 / gib)
    assert est["per_agent_gib"]["optimizer_states"] == pytest.approx(4.02e9 * 8 / gib)
    # the logits chunk of one micro-batch: 8 x 1024 x 151936 elements, bf16 + fp32 copy + fp32 softmax
    assert est["transient_gib"]["logits_micro_batch"] == pytest.approx(8 * 1025 * 151936 * 10 / gib)
    # the KV cache of the largest generation call: 2 (K, V) x layers x kv heads x head dim x bf16 bytes x tokens
    assert est["transient_gib"]["kv_cache_generation"] == pytest.approx(2 * 36 * 8 * 128 * 2 * 256 * 1024 / gib)
    held = 2 * 12 * 4.02e9 / gib  # two agents' masters and Adam moments (gradients are transient)
    update = ((4 + 2) * 4.02e9 / gib + est["transient_gib"]["logits_micro_batch"]
              + est["transient_gib"]["activations_micro_batch"])
    assert est["total_gib"] == pytest.approx(held + max(update, 2 * 4.02e9 / gib
                                                        + est["transient_gib"]["kv_cache_generation"]))
    assert est["fits"] == {"80": False} and est["total_gib"] > 80
    lora = estimate_memory(shape, compute_dtype="bfloat16", policy="lora", agents=2, micro_batch_size=8,
                           completion_tokens=1024, seq_tokens=1024, generation_sequences=64, lora_params=2e7,
                           device_memory_gb="h200")
    assert lora["total_gib"] < est["total_gib"] and lora["fits"] == {"h200-141": True}
    assert set(estimate_memory(shape, "bfloat16", "per_agent", 1, 1, 8, 8, 1)["fits"]) == {"h100-80", "h200-141"}
    with pytest.raises(ValueError, match="device class"):
        estimate_memory(shape, "bfloat16", "per_agent", 1, 1, 8, 8, 1, device_memory_gb="tpu")


def test_known_shapes_count_qwen3_4b_parameters():
    from c3_plugin.run.memory import model_shape

    assert model_shape("Qwen/Qwen3-4B-Instruct-2507").params == pytest.approx(4.02e9, rel=0.01)
    assert model_shape("Qwen/Qwen3-8B").params == pytest.approx(8.19e9, rel=0.01)
    with pytest.raises(LookupError, match="not available locally"):
        model_shape("no-such-org/no-such-model")


def test_the_vllm_engine_takes_its_share_of_each_device():
    from c3_plugin.run.memory import ModelShape, estimate_memory

    shape = ModelShape(params=4.02e9, layers=36, hidden=2560, kv_heads=8, head_dim=128, vocab=151936)
    kw = dict(compute_dtype="bfloat16", policy="lora", agents=2, micro_batch_size=8, completion_tokens=512,
              seq_tokens=1536, generation_sequences=256, lora_params=2e7, device_memory_gb="h200")
    hf = estimate_memory(shape, **kw)
    awake = estimate_memory(shape, **kw, engine={"fraction": 0.4, "kv_cache_gib": None, "sleeps": False})
    asleep = estimate_memory(shape, **kw, engine={"fraction": 0.4, "kv_cache_gib": None, "sleeps": True})
    held = 2 * 12 * 2e7 / 2**30 + 2 * 4.02e9 / 2**30  # adapters' masters and Adam, the shared bf16 base
    update = hf["phase_gib"]["update"]
    assert awake["engine_gib"] == {"h200-141": pytest.approx(0.4 * 141)}
    # the engine stays resident through the update
    assert awake["total_gib"] == pytest.approx(held + update + 0.4 * 141)
    assert asleep["total_gib"] == pytest.approx(held + max(0.4 * 141, update))
    sized = estimate_memory(shape, **kw, engine={"fraction": 0.4, "kv_cache_gib": 10.0, "sleeps": False})
    # bf16 weights + the given KV cache
    assert sized["engine_gib"]["h200-141"] == pytest.approx(2 * 4.02e9 / 2**30 + 10.0)


def test_dry_run_memory_counts_the_engine_when_vllm_generates():
    from pathlib import Path

    from c3_plugin.core.config import load_config
    from c3_plugin.run.dry_run import dry_run_report

    cfg = Path(__file__).resolve().parents[2] / "configs" / "math" / "c3.yaml"
    hf = dry_run_report(load_config(cfg))["memory"]
    vllm = dry_run_report(load_config(cfg, overrides=["c3.generation_backend=vllm",
                                                      "c3.vllm_gpu_memory_utilization=0.3"]))["memory"]
    assert ("engine_gib" not in hf and vllm["engine_gib"]
            == {"h100-80": pytest.approx(24.0), "h200-141": pytest.approx(42.3)})
    assert vllm["total_gib_by_device"]["h200-141"] > vllm["total_gib_by_device"]["h100-80"]
