"""The C3 paper's recipe as configs (configs/math/paper/): every value set, sourced, and dry-run offline on
fixtures that stand in for MATH train and CMATH train (tests/fixtures/math/README.md)."""

from pathlib import Path

import pytest

from c3_plugin.core.config import ConfigError, load_config
from c3_plugin.run.dry_run import dry_run_report
from c3_plugin.tools.compare import controlled, plan

ROOT = Path(__file__).resolve().parents[2]
PAPER = ROOT / "configs" / "math" / "paper"
FIX = ROOT / "tests" / "fixtures" / "math"
OFFLINE = ["dataset.train=" + repr([
    {"name": "math_train", "source": str(FIX / "math_train_original.jsonl"), "schema": "math", "weight": 7500},
    {"name": "cmath_train", "source": str(FIX / "cmath_train_original.jsonl"), "schema": "cmath", "weight": 1098}])]


def test_every_recipe_value_is_set_and_sourced():
    cfg = load_config(PAPER / "c3.yaml", OFFLINE)
    a = cfg.algo
    assert (a.ppo_epochs, a.instances_per_update, a.minibatch_size) == (5, 128, 256)
    assert (a.lr_scheduler, a.lr_warmup_ratio, a.lr_min_ratio) == ("cosine", 0.03, 0.1)
    assert (a.adam_beta1, a.adam_beta2, a.weight_decay, a.max_grad_norm) == (0.9, 0.95, 0.0, 1.0)
    assert (a.temperature, a.top_p, a.top_k, a.max_new_tokens) == (0.7, 0.8, 20, 512)
    assert a.plan == "tree [2, 4]" and a.credit == "loo" and a.advantage_scaling == "none"
    raw = load_config(PAPER / "c3.yaml").raw
    assert [s["name"] for s in raw["dataset"]["train"]] == ["math_train", "cmath_train"]
    assert [s["name"] for s in raw["dataset"]["eval"]] == ["math500", "aime25", "cmath", "gsm8k"]
    # every value line of the recipe files names its source
    for path in PAPER.glob("*.yaml"):
        for n, line in enumerate(path.read_text().splitlines(), 1):
            body = line.split("#")[0].strip()
            value = body.partition(":")[2].strip()
            if ":" in body and value and not value.startswith(("&", "*")) \
                    and not body.startswith(("-", "<<", "extends", "algorithm")) \
                    and "eval_batch_size" not in body and "base_dir" not in body and "enabled" not in body \
                    and "answer_timeout_s" not in body and "domain:" not in body and "seed:" not in body:
                assert "#" in line, f"{path.name}:{n} sets a value without naming its source: {line.strip()}"


def test_the_reference_variants_are_one_override_away():
    ref = load_config(PAPER / "c3.yaml", OFFLINE + ["c3.credit=value_assisted", "c3.allow_estimator_change=true",
                                                    "agents.policy=shared"])
    assert ref.algo.credit == "value_assisted" and ref.agents.policy == "shared"
    kl = load_config(PAPER / "reference_kl.yaml", OFFLINE + ["algorithm=magrpo"])
    assert (kl.algo.kl_reward_coef, kl.algo.kl_reward_target, kl.algo.kl_reward_estimator) == (0.01, 0.1, "k3")
    long = load_config(PAPER / "long_generation.yaml", OFFLINE)
    suites = {s["name"]: s.get("num_samples") for s in long.raw["dataset"]["eval"]}
    assert suites["amc23"] == suites["aime24"] == suites["aime25"] == 16 and suites["math500"] == 4
    assert long.algo.max_new_tokens == 2048


@pytest.mark.parametrize("name", ["c3", "magrpo", "mappo", "reference_kl", "long_generation"])
def test_paper_configs_dry_run_with_the_gpu_hours_of_the_experiment(name):
    report = dry_run_report(load_config(PAPER / f"{name}.yaml", OFFLINE))
    # fits its 8 GPUs; the hub models cannot be verified offline
    assert report["status"] == "unverified" and not report["errors"]
    hours = report["gpu_hours"]
    assert hours["status"] == "ok" and hours["gpu_hours"]["total"] > 0
    assert set(hours["experiment"]["gpu_hours_per_run"]) == {"c3", "magrpo", "mappo"}
    assert (hours["experiment"]["gpu_hours_5_seeds"]
            == pytest.approx(5 * hours["experiment"]["gpu_hours_per_seed"], rel=1e-3))


def test_the_paper_config_on_vllm_plans_8_ranks_with_an_engine_each():
    # README
    colocated = ["c3.generation_backend=vllm", "c3.vllm_enable_sleep_mode=true", "c3.vllm_gpu_memory_utilization=0.4"]
    assert all(f"--override {o}" in (ROOT / "README.md").read_text() for o in colocated)
    report = dry_run_report(load_config(PAPER / "c3.yaml", OFFLINE + colocated))
    # half of each GPU to an awake engine would not
    assert report["cluster"]["memory_per_gpu"]["verdict"] == {"a800-80": "fits"}
    # from .venv (no vllm) the dry-run fails and names the environment that has it, instead of the run failing
    # at its first evaluation; from .venv-vllm it passes (the hub models unverified offline)
    from c3_plugin.run.needs import installed

    if installed("vllm"):
        assert report["status"] == "unverified" and not report["errors"]
    else:
        assert report["status"] == "error" and len(report["errors"]) == 1, report["errors"]
        assert ("generation_backend: vllm needs the vllm package" in report["errors"][0]
                and ".venv-vllm/bin/python" in report["errors"][0])
    cluster = report["cluster"]
    assert cluster["world_size"] == 8 and cluster["launcher"] == "torchrun"
    gen = cluster["generator"]
    assert (gen["backend"], gen["engines_per_rank"], gen["engines_total"],
            gen["tensor_parallel_size"]) == ("vllm", 1, 8, 1)
    assert cluster["weight_sync"]["engine_push_per_update_per_rank_gib"] > 0  # every rank's engine gets the update
    per_gpu = cluster["memory_per_gpu"]  # each rank's GPU holds its own engine beside its share of the training
    assert all(v > 0 for v in per_gpu["engine_gib"].values())
    assert all(per_gpu["total_gib"][d] > per_gpu["engine_gib"][d] for d in per_gpu["engine_gib"])


def test_the_reference_kl_recipe_is_a_difference_that_needs_consent(tmp_path):
    configs = plan(PAPER / "reference_kl.yaml", ["c3", "magrpo"], [0], tmp_path / "cmp", OFFLINE)
    with pytest.raises(ConfigError, match="kl_reward_coef"):
        controlled(configs)
    record = controlled(configs, ["kl_reward_coef", "kl_reward_target"])
    assert record  # allowed by name, and recorded
    controlled(plan(PAPER / "c3.yaml", ["c3", "magrpo", "mappo"], [0], tmp_path / "cmp2", OFFLINE))  # credit only


def test_at_paper_scale_the_optimizer_steps_differ_four_fold_and_the_equal_steps_setting_levels_them():
    """configs/math/paper on the full MATH + CMATH train set (8,598 rows, 137,568 env steps each arm): at 256
    messages per step C3's Reasoner (2 messages per instance) steps 680 times, MAGRPO's (8) 2,690; the dry-run
    shows both and says c3 compare needs consent. minibatches_per_ppo_epoch: 4 in both arms gives 2,720 each."""
    from c3_plugin.core.config import build_workflow
    from c3_plugin.core.domain import load_domain
    from c3_plugin.run.budget import expected_budget

    rows = 7500 + 1098
    counts = {}
    for extra in ([], ["c3.minibatch_size=null", "magrpo.minibatch_size=null", "c3.minibatches_per_ppo_epoch=4",
                       "magrpo.minibatches_per_ppo_epoch=4"]):
        for name in ("c3", "magrpo"):
            cfg = load_config(PAPER / f"{name}.yaml", OFFLINE + extra)
            budget = expected_budget(cfg, build_workflow(cfg, load_domain("math")), rows)
            assert budget["expected_env_steps"] == 137568
            counts[name, bool(extra)] = budget["expected_optimizer_updates_per_agent"]
    assert counts["c3", False] == [680, 2690] and counts["magrpo", False] == [2690, 2690]
    assert counts["c3", True] == counts["magrpo", True] == [2720, 2720]
    shared = load_config(PAPER / "reference.yaml", OFFLINE + ["algorithm=c3"])
    budget = expected_budget(shared, build_workflow(shared, load_domain("math")), rows)
    (policy,) = budget["optimizer_updates_per_policy"]  # one model, one count: both roles' 10 messages per instance
    assert policy["roles"] == ["Reasoner", "Actor"] and policy["updates"] == 2 * (67 * 5 * 5 + 5 * 1)


def test_the_reference_setting_ships_as_its_own_config_and_compares_as_a_controlled_pair(tmp_path):
    """reference.yaml: the reference code's setting (one shared policy, value_assisted credit acknowledged, a
    per-group z-score for C3 and MAGRPO, the KL penalty on every method); c3 compare runs it as a credit-only pair
    once the unequal optimizer steps are consented to, as it runs the paper-text files."""
    import warnings

    cfgs = {a: load_config(PAPER / "reference.yaml", OFFLINE + [f"algorithm={a}"]) for a in ("c3", "magrpo", "mappo")}
    assert cfgs["c3"].agents.policy == "shared" and cfgs["c3"].algo.credit == "value_assisted"
    assert cfgs["c3"].algo.allow_estimator_change and cfgs["c3"].algo.advantage_scaling == "group_zscore"
    assert cfgs["magrpo"].algo.advantage_scaling == "group_zscore"
    for a in cfgs.values():
        assert a.algo.max_new_tokens == 2048  # the reference launcher's --generate_max_len 2048
        assert (a.algo.kl_reward_coef, a.algo.kl_reward_target, a.algo.kl_reward_estimator) == (0.01, 0.1, "k3")
    with pytest.raises(ConfigError, match="value_assisted_changes_estimator"):  # unacknowledged, it is refused
        load_config(PAPER / "reference.yaml", OFFLINE + ["c3.allow_estimator_change=false"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        record = controlled(plan(PAPER / "reference.yaml", ["c3", "magrpo"], [0], tmp_path / "ref", OFFLINE),
                            ["optimizer_updates_per_agent"])
    assert set(record["kind"].values()) <= {"credit", "derived", "allowed"}
    assert "kl_reward_coef" not in record["differences"] and "advantage_scaling" not in record["differences"]
    report = dry_run_report(cfgs["c3"])
    assert report["status"] == "unverified" and not report["errors"]
    from c3_plugin.run.dry_run import summary

    line = next(x for x in summary(report).splitlines() if x.startswith("optimizer steps per agent:"))
    # every arm's steps, shown
    assert "c3 [" in line and "magrpo [" in line and "unequal: c3 compare refuses it" in line
