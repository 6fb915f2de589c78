"""The dry-run's cluster plan (c3_plugin.run.cluster): ranks, each rank's share of the budget, the divisibility
rules with their fixes, ZeRO's memory per GPU and its verdict, the generator and the weight-sync volume.
CPU only, nothing loaded: the paper's math config (two Qwen3-4B agents) planned from its known shape."""

from pathlib import Path

import pytest

from c3_plugin.core.config import ConfigError, build_workflow, load_config
from c3_plugin.core.domain import load_domain
from c3_plugin.run.cluster import cluster_plan, divisibility_errors, world_layout, zero_model_states
from c3_plugin.run.memory import GIB, model_shape

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
ROWS = 7473  # GSM8K's training rows, as configs/math/base.yaml reads them
P = model_shape("Qwen/Qwen3-4B-Instruct-2507").params  # about 4.02e9


@pytest.fixture(autouse=True)
def no_launcher(monkeypatch):
    for key in ("WORLD_SIZE", "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(key, raising=False)


@pytest.fixture(scope="module")
def workflow():
    cfg = load_config(CONFIGS / "math" / "c3.yaml")
    return build_workflow(cfg, load_domain(cfg.domain))


# from one process on the default GPU classes (the config plans 8 x h100)
PLAIN = ["cluster.nproc_per_node=1", "cluster.gpu=null"]


def plan(workflow, *overrides, config="math/c3.yaml"):
    return cluster_plan(load_config(CONFIGS / config, PLAIN + list(overrides)), workflow, ROWS)


def test_world_size_from_the_cluster_section_and_from_the_launcher(workflow, monkeypatch):
    one = plan(workflow)
    assert (one["world_size"], one["nodes"], one["launcher"], one["deepspeed"]["enabled"]) == (1, 1, "python", False)
    assert one["agent_devices"] == {"agent0": "cuda:0 (cpu without a GPU)", "agent1": "cuda:0 (cpu without a GPU)"}
    two_nodes = plan(workflow, "cluster.nnodes=2", "cluster.nproc_per_node=4")
    assert (two_nodes["world_size"], two_nodes["nodes"], two_nodes["ranks_per_node"]) == (8, 2, 4)
    assert two_nodes["launcher"] == "torchrun" and "--rdzv_backend c10d" in two_nodes["launcher_args"]
    assert two_nodes["data_parallel_size_per_agent"] == 8
    assert set(two_nodes["agent_devices"].values()) == {"cuda:LOCAL_RANK on every rank"}
    assert two_nodes["deepspeed"] | {"precision": None, "dist_backend": None} == {
        "enabled": True, "zero_stage": 2, "offload_optimizer": False, "offload_params": False, "precision": None,
        "dist_backend": None}
    monkeypatch.setenv("WORLD_SIZE", "6")  # the launcher wins over the cluster section
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "3")
    launched = plan(workflow, "cluster.nproc_per_node=8", "c3.instances_per_update=36", "c3.minibatch_size=null")
    assert (launched["world_size"], launched["nodes"], launched["ranks_per_node"],
            launched["world_size_from"]) == (6, 2, 3, "WORLD_SIZE")
    # the paper's node
    assert world_layout(load_config(CONFIGS / "math" / "c3.yaml").cluster, env={})["world_size"] == 8


def test_each_rank_takes_an_even_share_and_the_totals_do_not_depend_on_the_ranks(workflow):
    totals = None
    for n in (1, 2, 4, 8):
        p = plan(workflow, f"cluster.nproc_per_node={n}")
        rank, total = p["per_rank"], p["total"]
        assert total["instances_per_update"] == 32 and total["env_steps_per_update"] == 32 * 8  # tree [2, 4]: 8 leaves
        for key in ("instances_per_update", "env_steps_per_update", "messages_per_update"):
            assert rank[key] * n == total[key], (n, key)
        for key in ("instances_total", "env_steps_total", "messages_total"):  # every rank's share adds up to the total
            assert sum(rank["by_rank"][key]) == total[key] and rank[key] == max(rank["by_rank"][key]), (n, key)
        assert rank["instances_per_update"] == 32 // n and rank["env_steps_per_update"] == 32 // n * 8
        # the widest depth of a rank's share
        assert p["generator"]["sequences_per_generate_call_per_rank"] == 32 // n * 8
        totals = totals or total
        assert total == totals  # the global budget is the same for every N
    assert totals["env_steps_total"] == 2 * ROWS * 8


def test_per_rank_counts_are_each_ranks_integers_where_a_batch_splits_unevenly(workflow):
    """7473 rows in batches of 32: each epoch ends with a batch of 17, which 8 ranks split 3, 2, ..., 2 (shard's
    positions r, r + 8, ...). The plan gives every rank's integer counts, not the fractional mean (18682.5 messages)."""
    from c3_plugin.run.budget import instances_by_rank
    from c3_plugin.scale.distributed import DistContext, shard

    p = plan(workflow, "cluster.nproc_per_node=8")
    rank = p["per_rank"]
    full = 2 * (ROWS // 32) * 4  # 466 full batches, 4 instances each per rank
    last = [len(shard(list(range(ROWS % 32)), DistContext(rank=r, world=8))) for r in range(8)]
    assert last == [3, 2, 2, 2, 2, 2, 2, 2]
    instances = [full + 2 * n for n in last]
    assert rank["by_rank"]["instances_total"] == instances == [1870] + [1868] * 7
    assert rank["by_rank"]["env_steps_total"] == [8 * n for n in instances]  # tree [2, 4]: 8 leaves
    assert rank["by_rank"]["messages_total"] == [10 * n for n in instances]  # and 2 + 8 messages per instance
    assert (rank["instances_total"], rank["env_steps_total"], rank["messages_total"]) == (1870, 14960, 18700)
    counts = [rank[k] for k in ("instances_per_update", "env_steps_per_update", "messages_per_update",
                                "instances_total", "env_steps_total", "messages_total")]
    counts += [v for values in rank["by_rank"].values() for v in values]
    assert all(type(v) is int for v in counts)
    assert "2 of the 468 rollout batches (17 instances) do not split evenly over the 8 ranks" in rank["note"]
    small = plan(workflow, "cluster.nproc_per_node=8", "c3.instances_per_update=8", "c3.minibatch_size=64")[
        "per_rank"]  # 7473 = 934 x 8 + 1: one instance left over per epoch, run by rank 0
    assert small["by_rank"]["instances_total"] == [2 * 935] + [2 * 934] * 7
    # one process: its share is the whole run, and nothing is uneven
    one = plan(workflow, "cluster.nproc_per_node=1", "cluster.nnodes=1")["per_rank"]
    assert one["by_rank"]["messages_total"] == [one["messages_total"]] == [2 * ROWS * 10] and "note" not in one
    assert instances_by_rank([17, 32, 1], 8) == [4 + 3 + 1, 4 + 2, 4 + 2, 4 + 2, 4 + 2, 4 + 2, 4 + 2, 4 + 2]


def test_divisibility_errors_name_the_fix(workflow):
    with pytest.raises(ConfigError) as err:
        plan(workflow, "cluster.nproc_per_node=3", "c3.instances_per_update=4", "c3.minibatch_size=100",
             "c3.micro_batch_size=8")
    msg = str(err.value)
    assert "set instances_per_update to a multiple of 3, e.g. 3 or 6" in msg
    assert "minibatch_size=100 is not a multiple of ranks x micro_batch_size = 3 x 8 = 24" in msg
    assert "set minibatch_size to a multiple of 24, e.g. 96 or 120" in msg  # both rules, one message
    cfg = load_config(CONFIGS / "math" / "c3.yaml", PLAIN + ["c3.minibatch_size=96", "c3.micro_batch_size=8"])
    assert divisibility_errors(cfg.algo, 8) == [
        "minibatch_size=96 is not a multiple of ranks x micro_batch_size = 8 x 8 = 64 (each rank takes minibatch_size "
        "/ 8 messages per optimizer step in micro-batches of 8): set minibatch_size to a multiple of 64, e.g. 64 or "
        "128, or micro_batch_size to a divisor of 12, e.g. 6"]
    assert divisibility_errors(cfg.algo, 1) == [] and divisibility_errors(cfg.algo, 4) == []  # 96 = 4 x 8 x 3


def test_zero2_model_states_shrink_with_the_ranks_as_4p_plus_16p_over_n(workflow):
    # fp32 weights 4P on every rank; DeepSpeed's fp32 master partition 4P/N, gradients 4P/N, Adam 8P/N
    assert P == pytest.approx(4.02e9, rel=0.01)
    seen = []
    for n in (1, 2, 4, 8):
        states = plan(workflow, f"cluster.nproc_per_node={n}",
                      "deepspeed.enabled=true")["memory_per_gpu"]["model_states_per_agent_gib"]
        assert states["total"] == pytest.approx((4 * P + 16 * P / n) / GIB, abs=0.01), n
        assert states["optimizer_states"] == pytest.approx(8 * P / n / GIB, abs=0.01)
        seen.append(states["total"])
    # about 75 GiB on one GPU
    assert seen == sorted(seen, reverse=True) and seen[0] == pytest.approx(20 * P / GIB, abs=0.01)
    z1, z2 = zero_model_states(P, 1, 4), zero_model_states(P, 2, 4)
    # stage 1 keeps whole gradients
    assert z1["update"]["gradients_fp32"] == 4 * P and z2["update"]["gradients_fp32"] == P


def test_zero3_holds_less_than_zero2_but_gathers_every_agent_for_a_rollout(workflow):
    z2 = plan(workflow, "cluster.nproc_per_node=8", "cluster.gpu=h100")["memory_per_gpu"]
    z3 = plan(workflow, "cluster.nproc_per_node=8", "cluster.gpu=h100", "deepspeed.zero_stage=3")["memory_per_gpu"]
    assert z3["model_states_per_agent_gib"]["total"] == pytest.approx(16 * P / 8 / GIB, abs=0.01)
    assert z3["model_states_per_agent_gib"]["total"] < z2["model_states_per_agent_gib"]["total"]
    assert z3["transient_gib"]["gathered_params_fp32"] == pytest.approx(2 * 4 * P / GIB, abs=0.01)  # both agents, whole
    assert "gathered_params_fp32" not in z2["transient_gib"]
    assert z3["total_gib"]["h100-80"] < z2["total_gib"]["h100-80"]


def test_optimizer_offload_takes_adam_off_the_gpu_into_host_memory(workflow):
    on = plan(workflow, "cluster.nproc_per_node=8")["memory_per_gpu"]
    off = plan(workflow, "cluster.nproc_per_node=8", "deepspeed.offload_optimizer=true")["memory_per_gpu"]
    assert on["held_per_agent_gib"]["optimizer_states"] == pytest.approx(P / GIB, abs=0.01)  # 8P / 8
    assert (off["held_per_agent_gib"]["optimizer_states"] == 0 and off["held_per_agent_gib"]["master_partition_fp32"]
            == 0)
    host = off["cpu_ram_gib"]
    assert host["per_agent_per_rank"]["optimizer_states"] == pytest.approx(P / GIB, abs=0.01)
    assert host["per_rank"] == pytest.approx(2 * 20 * P / 8 / GIB, abs=0.02)  # Adam, master, gradients, staging
    assert host["per_node"] == pytest.approx(8 * host["per_rank"], abs=0.1)
    assert off["total_gib"]["h100-80"] == pytest.approx(on["total_gib"]["h100-80"] - 2 * 12 * P / 8 / GIB, abs=0.05)
    assert "cpu_ram_gib" not in on


def test_the_paper_setting_does_not_fit_one_80gb_gpu_without_deepspeed(workflow):
    mem = plan(workflow, "cluster.gpu=a800")["memory_per_gpu"]
    assert mem["model_states_per_agent_gib"]["total"] == pytest.approx(16 * P / GIB, abs=0.01)  # plain fp32 AdamW
    held = 2 * 12 * P / GIB  # two agents' fp32 weights and Adam moments
    phase = max(mem["phase_gib"].values())
    assert mem["total_gib"]["a800-80"] == pytest.approx(held + phase, abs=0.02)
    assert held > 80 and mem["verdict"] == {"a800-80": "does not fit"}  # the two agents' model states alone exceed it
    # on 8 GPUs under ZeRO-2 the verdict follows the same sum: 2 x (4P + 12P/8) held + the larger phase
    eight = plan(workflow, "cluster.nproc_per_node=8", "cluster.gpu=80", "c3.micro_batch_size=8")["memory_per_gpu"]
    total = 2 * (4 * P + 12 * P / 8) / GIB + max(eight["phase_gib"].values())
    assert eight["total_gib"]["80"] == pytest.approx(total, abs=0.02)
    assert eight["verdict"] == {"80": "fits" if total <= 80 else "does not fit"}
    shipped = plan(workflow, "cluster.nproc_per_node=8", "cluster.gpu=80")["memory_per_gpu"]  # micro-batches of 2
    assert shipped["total_gib"]["80"] < eight["total_gib"]["80"] and shipped["verdict"] == {"80": "fits"}


def test_only_the_workflow_trainers_run_data_parallel_and_comlrl_placement_is_refused(workflow):
    madpo = load_config(CONFIGS / "travel" / "madpo.yaml", ["cluster.nproc_per_node=2"])
    with pytest.raises(ConfigError, match="data parallelism covers the workflow trainers \\(c3, magrpo and mappo\\)"):
        cluster_plan(madpo, workflow, ROWS)
    with pytest.raises(ConfigError, match="agent_devices=.*remove agent_devices"):
        plan(workflow, "cluster.nproc_per_node=2", "c3.agent_devices=['cuda:0', 'cuda:1']")
    with pytest.raises(ConfigError, match="deepspeed.enabled: false with 2 ranks"):
        plan(workflow, "cluster.nproc_per_node=2", "deepspeed.enabled=false")
    # one process: CoMLRL's meaning
    one = plan(workflow, "c3.agent_devices=['cuda:0', 'cuda:1']", "c3.parallel_training=mp")
    assert one["agent_devices"] == {"agent0": "cuda:0", "agent1": "cuda:1"} and "mp" in one["placement"]


def test_generator_and_weight_sync_volume(workflow):
    hf = plan(workflow, "cluster.nproc_per_node=4")
    assert hf["generator"]["backend"] == "hf" and hf["generator"]["engines"] == 0
    assert hf["weight_sync"]["engine_push_per_update_per_rank_gib"] == 0
    zero = hf["weight_sync"]["zero"]
    assert zero["param_allgather_per_step_per_agent_gib"] == pytest.approx(4 * P * 3 / 4 / GIB, abs=0.01)
    assert zero["optimizer_steps_per_update_per_agent"] == [1, 1]  # 64 and 256 messages, minibatch 256
    v = plan(workflow, "c3.generation_backend=vllm", "c3.vllm_enable_sleep_mode=true")  # one process: one engine
    g = v["generator"]
    assert (g["engines_per_rank"], g["engines_total"], g["tensor_parallel_size"], g["sleep_mode"]) == (1, 1, 1, True)
    # bf16, both agents
    assert v["weight_sync"]["engine_push_per_update_per_rank_gib"] == pytest.approx(2 * 2 * P / GIB, abs=0.01)
    lora = plan(workflow, "c3.generation_backend=vllm", "agents.policy=lora")
    adapters = lora["memory_per_gpu"]["trainable_params_per_agent"]
    assert lora["weight_sync"]["engine_push_per_update_per_rank_gib"] == pytest.approx(2 * 4 * adapters / GIB, abs=0.01)
    assert lora["memory_per_gpu"]["model_states_per_agent_gib"]["total"] < 1  # the adapters only; the base is shared
    # one engine per rank, on its own GPU
    ranks = plan(workflow, "cluster.nproc_per_node=4", "c3.generation_backend=vllm")
    assert (ranks["generator"]["engines_per_rank"], ranks["generator"]["engines_total"]) == (1, 4)
    assert (ranks["weight_sync"]["engine_push_per_update_per_rank_gib"]
            == v["weight_sync"]["engine_push_per_update_per_rank_gib"])
    with pytest.raises(ConfigError, match="vllm_tensor_parallel_size=2 with 4 ranks"):  # refused at run time too
        plan(workflow, "cluster.nproc_per_node=4", "c3.generation_backend=vllm", "c3.vllm_tensor_parallel_size=2")
    # the separate-GPU layout
    server = plan(workflow, "c3.generation_backend=vllm", "c3.vllm_server_url=http://gen-node:8000")
    assert (server["generator"]["colocated"], server["generator"]["engines_per_rank"]) == (False, 0)
    assert "engine_gib" not in server["memory_per_gpu"] or not any(server["memory_per_gpu"]["engine_gib"].values())
    with pytest.raises(ConfigError, match="vllm_server_url with 4 ranks"):
        plan(workflow, "cluster.nproc_per_node=4", "c3.generation_backend=vllm",
             "c3.vllm_server_url=http://gen-node:8000")
    with pytest.raises((ConfigError, ValueError), match="vllm_server_url needs generation_backend: vllm"):
        plan(workflow, "c3.vllm_server_url=http://gen-node:8000")
    with pytest.raises(ConfigError, match="agents.policy: lora .* per_agent under DeepSpeed"):
        plan(workflow, "cluster.nproc_per_node=4", "agents.policy=lora")


def test_dry_run_report_carries_the_cluster_plan():
    from c3_plugin.run.dry_run import dry_run_report

    report = dry_run_report(load_config(CONFIGS / "math" / "c3.yaml", ["cluster.nproc_per_node=8"]))
    assert report["cluster"]["world_size"] == 8 and report["cluster"]["per_rank"]["instances_per_update"] == 4
    assert report["cluster"]["memory_per_gpu"]["status"] == "ok"


def hours(workflow, *overrides, rows=8, config="math/c3.yaml"):
    from c3_plugin.run.cluster import gpu_hours

    return gpu_hours(load_config(CONFIGS / config, PLAIN + list(overrides)), workflow, rows)


def test_gpu_hours_arithmetic_by_hand(workflow):
    from c3_plugin.run.cluster import MFU, PEAK_BF16_TFLOPS

    est = hours(workflow, "c3.num_train_epochs=1", "cluster.gpu=h100")
    # 8 instances, tree [2, 4]: 2 Reasoner messages (context <= 512 prompt tokens) and 8 Actor messages
    # (context <= 512 + the Reasoner's 512), every message at its 512-token cap; both decisions trained
    gen, prefill, seq = 8 * (2 * 512 + 8 * 512), 8 * (2 * 512 + 8 * 1024), 8 * (2 * (512 + 512) + 8 * (1024 + 512))
    assert est["tokens"] == {"generated_upper_bound": gen, "prefill": prefill, "logprob_recompute": seq,
                             "reference_forward": 0, "trained": seq}
    peak = PEAK_BF16_TFLOPS["h100"] * 1e12
    expect = {"decode": 2 * P * gen / (peak * MFU["decode_hf"]),
              "forward": 2 * P * (prefill + seq) / (peak * MFU["forward"]),
              "train": 6 * P * seq / (peak * MFU["train"])}
    for k, v in expect.items():
        assert est["gpu_hours"][k] == pytest.approx(v / 3600, rel=1e-3), k
    assert est["gpu_hours"]["total"] == pytest.approx(sum(expect.values()) / 3600, rel=1e-3)
    assert est["assumptions"]["peak_bf16_tflops"] == 989.0 and "gpu_class_note" not in est["assumptions"]
    a800 = hours(workflow, "c3.num_train_epochs=1", "cluster.gpu=a800")  # a third of the peak: about 3.2x the hours
    assert a800["gpu_hours"]["total"] == pytest.approx(est["gpu_hours"]["total"] * 989 / 312, rel=0.01)
    vllm = hours(workflow, "c3.num_train_epochs=1", "cluster.gpu=h100", "c3.generation_backend=vllm")
    assert vllm["gpu_hours"]["decode"] == pytest.approx(est["gpu_hours"]["decode"] * MFU["decode_hf"]
                                                        / MFU["decode_vllm"], rel=1e-3)
    # the experiment: every workflow algorithm the config holds, once per seed
    exp = est["experiment"]
    assert set(exp["gpu_hours_per_run"]) == {"c3", "magrpo",
                                             "mappo"} and exp["gpu_hours_per_run"]["c3"] == est["gpu_hours"]["total"]
    assert exp["gpu_hours_per_seed"] == pytest.approx(sum(exp["gpu_hours_per_run"].values()), rel=1e-3)
    assert exp["gpu_hours_5_seeds"] == pytest.approx(5 * exp["gpu_hours_per_seed"], rel=1e-3)
    # MAGRPO's independent 8 writes 16 messages per instance where C3's tree writes 10
    assert exp["gpu_hours_per_run"]["magrpo"] > exp["gpu_hours_per_run"]["c3"]


def test_gpu_hours_scale_with_epochs_and_split_over_gpus(workflow):
    one, three = hours(workflow, "c3.num_train_epochs=1"), hours(workflow, "c3.num_train_epochs=3")
    assert all(three["tokens"][k] == 3 * one["tokens"][k] for k in one["tokens"])
    assert three["flops"]["train"] == pytest.approx(3 * one["flops"]["train"], rel=1e-3)
    assert three["gpu_hours"]["total"] == pytest.approx(3 * one["gpu_hours"]["total"], rel=1e-3)
    twice = hours(workflow, "c3.ppo_epochs=2")  # training tokens only
    base = hours(workflow)
    assert (twice["tokens"]["trained"] == 2 * base["tokens"]["trained"]
            and twice["tokens"]["prefill"] == base["tokens"]["prefill"])
    four, eight = hours(workflow, "cluster.nproc_per_node=4"), hours(workflow, "cluster.nproc_per_node=8")
    for k, v in four["tokens_per_gpu"].items():
        assert eight["tokens_per_gpu"][k] == pytest.approx(v / 2), k
    assert (eight["gpu_hours"] == four["gpu_hours"] and eight["wall_clock_hours"]
            == pytest.approx(four["wall_clock_hours"] / 2, rel=1e-3))


def test_gpu_hours_count_the_value_assisted_critic(workflow):
    loo = hours(workflow, "c3.num_train_epochs=1")
    va = hours(workflow, "c3.num_train_epochs=1", "c3.credit=value_assisted", "c3.allow_estimator_change=true",
               "c3.q_critic_model=jhu-clsp/mmBERT-base", "c3.q_critic_max_tokens=1024")
    alts = 8 * (2 * 1024 + 8 * 1024)  # every credited alternative, context + message cut to 1024 tokens
    assert va["tokens"]["critic_read"] == va["tokens"]["critic_trained"] == alts and "critic_read" not in loo["tokens"]
    pc = model_shape("jhu-clsp/mmBERT-base").params
    assert va["flops"]["train"] == pytest.approx(loo["flops"]["train"] + 6 * pc * alts, rel=1e-3)
