"""Run configuration: one YAML per run, ``extends:`` inheritance, ``--override a.b=value``,
and validation that binds every section to a dataclass (unknown keys name the nearest
valid one). Defaults live only in the dataclasses below and in the algorithm configs."""

from __future__ import annotations

import ast
import copy
import difflib
import json
import math
from dataclasses import asdict, dataclass, field, fields, is_dataclass
from pathlib import Path
from typing import Any, Mapping

import yaml

from c3_plugin.core.config_types import check_fields
from c3_plugin.core.domain import check_domain_name, domain_names, load_domain
from c3_plugin.core.errors import ConfigError
from c3_plugin.core.estimator_rules import check
from c3_plugin.core.hub import require_hub_data
from c3_plugin.core.llm_collab import hub_hint, markers, translate
from c3_plugin.core.model_paths import resolve_model_paths
from c3_plugin.core.plan import PlanError, default_plan, parse_plan
from c3_plugin.core.registry import algorithms, capabilities, resolve, section
from c3_plugin.core.sources import resolve_dataset_paths
from c3_plugin.core.workflow import Workflow, WorkflowError, builtin_workflows, load_workflow


@dataclass
class ModelSection:
    # HF name, local folder (relative: to the config file's folder), or "pkg:<python package>"
    name: str = "HuggingFaceTB/SmolLM2-135M-Instruct"
    gguf_file: str | None = None  # GGUF file inside that folder (needs the gguf package)
    # compute dtype: "float32" or "bfloat16" (trained weights stay fp32 masters); "float16" only for frozen models
    dtype: str = "float32"
    device: str = "auto"  # "auto" (cuda:0 when available), "cpu" or "cuda:N"
    # device memory the dry-run checks its estimate against: GiB, or a class ("h100", "h200", "a100-40", ...); None: the
    # H100-80 and H200-141 classes
    device_memory_gb: float | str | None = None
    # task-prompt length (tokens) the dry-run's memory estimate assumes before the earlier roles' messages
    prompt_tokens: int = 512
    revision: str | None = None  # pinned hub revision


@dataclass
class AgentsSection:
    # "per_agent" (one model per agent), "lora" (one base, one adapter per agent) or "shared" (one model plays every
    # role, trained on all roles' messages in one update with one optimizer, as the C3 reference launcher's single
    # actor)
    policy: str = "per_agent"
    # optional per-agent models, each like agent_model.name (per_agent only); default: agent_model.name
    models: list[str] | None = None
    lora_r: int = 16  # LoRA rank
    lora_alpha: int = 32  # LoRA scaling
    lora_dropout: float = 0.0  # LoRA dropout
    # modules to adapt
    lora_target_modules: list[str] = field(default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"])
    # per-role learning rate of the agent that plays it, e.g. {Actor: 1.0e-5} (default: the algorithm's
    # agent_learning_rate); the same for every algorithm of a comparison
    learning_rate: dict[str, float] = field(default_factory=dict)
    # per-role multiplier of the algorithm's agent_learning_rate, e.g. {Reasoner: 0.1} (not with learning_rate for the
    # same role)
    learning_rate_scale: dict[str, float] = field(default_factory=dict)
    # per-role; false freezes the agent that plays it: it samples, is credited and logged, but never updated (a fixed
    # teammate)
    trainable: dict[str, bool] = field(default_factory=dict)
    # true: an algorithm (an arm of the config's head-to-head) whose agents get 0 optimizer steps is a dry-run warning,
    # not an error (a run meant to train nothing, e.g. MAPPO's critic warm-up alone)
    zero_updates_ok: bool = False


@dataclass
class DatasetSection:
    # One source {name, source (HF name, JSONL path or "synthetic"), split, config, revision, limit, schema, ...},
    # or (math) a list of sources mixed into one train set, each with its own ``name`` (its rows' datasource and id
    # prefix) and optional ``weight``. Without weights the mix is every row of every source once. With a weight on
    # every source (finite, > 0) it has as many rows as the sources together, N = sum of n_i (each source's rows
    # after its limit and drop_overlap), and source i gives m_i = N w_i / sum(w) of them (largest-remainder
    # rounding): a sample without replacement when m_i <= n_i, else every row m_i // n_i times plus a sample of
    # the rest (a repeat's id gets "#<copy>"). Samples are seeded by (seed, source name): fixed per run seed,
    # unchanged by source order. So weights proportional to the n_i are plain concatenation.
    train: dict[str, Any] | list[dict[str, Any]] = field(default_factory=dict)
    # Eval suites, same keys; ``name`` is the id prefix and the datasource in metric keys unless ``suite`` names
    # another (specs with one ``suite`` are scored together, e.g. AIME 2024 + 2025 as "aime"). ``num_samples: k``
    # (default greedy) decodes each item k times with sampling at the suite's ``temperature``/``top_p`` (default:
    # the algorithm's) and logs avg@k and pass@k' for each k' in ``pass_k`` (default [k]); docs/metrics.md.
    eval: list[dict[str, Any]] = field(default_factory=list)
    # drop (instead of refusing) training rows that are evaluation problems, from every train source
    drop_overlap: bool = False
    # where relative paths resolve (set to the config file's folder when loaded; a source that a file of an extends:
    # chain names and that is there resolves against that file's folder)
    base_dir: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.train, (dict, list)) or (isinstance(self.train, list)
                                                        and not all(isinstance(s, dict) for s in self.train)):
            raise ValueError("train must be one source (a mapping) or a list of sources "
                             f"(mappings), got {self.train!r}")

    def train_sources(self) -> list[dict[str, Any]]:
        """The train source specs as a list (one for the single-mapping form, none when it is empty)."""
        return list(self.train) if isinstance(self.train, list) else ([self.train] if self.train else [])


@dataclass
class WorkflowSection:
    # a workflow of the domain, a built-in name or a YAML path (None: the domain's default workflow)
    name: str | None = None
    # per-role response prefix (assistant prefill), e.g. {Actor: "\\boxed{"}
    prefix: dict[str, str] = field(default_factory=dict)
    max_new_tokens: dict[str, int] = field(default_factory=dict)  # per-role generation cap
    templates: dict[str, str] = field(default_factory=dict)  # per-role template overrides
    system: dict[str, str] = field(default_factory=dict)  # per-role system prompt overrides
    # per-role sampling temperature, e.g. {Reasoner: 1.3} (default: the algorithm's temperature; greedy evaluation is
    # unchanged)
    temperature: dict[str, float] = field(default_factory=dict)


@dataclass
class OutputSection:
    base_dir: str = "outputs"  # runs go to <base_dir>/<run name>/
    run_name: str | None = None  # default: <domain>-<algorithm>-<workflow>-s<seed>
    save_model: bool = True  # save final models/adapters under <run>/final/
    checkpoint_interval: int = 1  # checkpoint every N epochs (0: no checkpoints)
    resume: str | None = None  # "auto" (latest checkpoint of this run), a checkpoint path, or None
    # without resume, when the run folder holds a run: "new" (<name>-2, -3, ...), "overwrite" or "refuse"
    if_exists: str = "new"
    verbose: bool = True  # progress bars
    plot: bool = True  # write a PNG learning curve at the end

    def __post_init__(self) -> None:
        if self.if_exists not in ("new", "overwrite", "refuse"):
            raise ValueError(f"if_exists must be new, overwrite or refuse, got {self.if_exists!r}")


@dataclass
class WandbSection:
    enabled: bool = False  # log to Weights & Biases
    project: str = "comlrl-c3"  # W&B project
    entity: str | None = None  # W&B entity
    name: str | None = None  # run name (default: the output run name)
    mode: str = "offline"  # "offline" (no account needed), "online" or "disabled"
    dir: str | None = None  # default: the run folder
    tags: list[str] = field(default_factory=list)  # W&B tags
    # W&B run group: the runs of one comparison share it (c3 compare sets the comparison's name)
    group: str | None = None
    job_type: str | None = None  # W&B job type (None: the algorithm), so grouped panels split C3 from MAGRPO


@dataclass
class RewardProcessorSection:
    scale: float = 1.0  # reward' = scale * reward + shift
    shift: float = 0.0  # added after the scale


@dataclass
class DeepSpeedSection:
    # DeepSpeed ZeRO for the policy updates: "auto" (when torchrun launches more than one process), true (also on one
    # process, e.g. for CPU offload) or false (refuses more than one process)
    enabled: str | bool = "auto"
    # ZeRO stage: 1 (optimizer states sharded), 2 (+ gradients), 3 (+ parameters, gathered whole for generation)
    zero_stage: int = 2
    # keep Adam states (and the step) in CPU memory (DeepSpeedCPUAdam; compiles a C++ op on first use)
    offload_optimizer: bool = False
    offload_params: bool = False  # ZeRO-3 only: keep the parameter shards in CPU memory between uses
    reduce_bucket_size: int = 200_000_000  # elements per gradient reduce bucket
    dist_backend: str | None = None  # torch.distributed backend: None picks nccl with GPUs and gloo on CPU
    timeout_minutes: int = 60  # collective timeout (a rank stuck longer than this fails the job instead of hanging)

    def __post_init__(self) -> None:
        if self.enabled not in ("auto", True, False):
            raise ValueError(f"enabled must be 'auto', true or false, got {self.enabled!r}")
        if self.zero_stage not in (1, 2, 3):
            raise ValueError(f"zero_stage must be 1, 2 or 3, got {self.zero_stage!r}")
        if self.offload_params and self.zero_stage != 3:
            raise ValueError("offload_params needs zero_stage: 3 (only ZeRO-3 shards the parameters)")
        if self.dist_backend not in (None, "nccl", "gloo", "ccl"):
            raise ValueError(f"dist_backend must be nccl, gloo, ccl or None, got {self.dist_backend!r}")


@dataclass
class ClusterSection:
    nnodes: int = 1  # nodes the dry-run plans for (at run time the launcher's WORLD_SIZE decides)
    nproc_per_node: int = 1  # processes (GPUs) per node the dry-run plans for; WORLD_SIZE, when set, wins
    # the GPU class (h100, h200, a800, ...) or GiB per GPU of the fits verdict (None: agent_model.device_memory_gb)
    gpu: str | float | None = None

    def __post_init__(self) -> None:
        if int(self.nnodes) < 1 or int(self.nproc_per_node) < 1:
            raise ValueError(f"nnodes and nproc_per_node must be >= 1, got {self.nnodes} and {self.nproc_per_node}")


SECTIONS = {"agent_model": ModelSection, "agents": AgentsSection, "dataset": DatasetSection,
            "workflow": WorkflowSection, "output": OutputSection, "wandb": WandbSection,
            "reward_processor": RewardProcessorSection, "deepspeed": DeepSpeedSection, "cluster": ClusterSection}
MAX_SEED = 2 ** 32 - 1 - 1000 * 1024  # the largest seed every rank of up to 1024 can add its 1000 * rank to
SCALARS = {"algorithm": "c3", "domain": "math", "seed": 0, "extends": None, "description": ""}


@dataclass
class RunConfig:
    algorithm: str
    domain: str
    seed: int
    sections: dict[str, Any]  # section name -> dataclass instance
    algo: Any  # the algorithm's config dataclass
    domain_cfg: Any  # the domain's config dataclass (or a dict)
    raw: dict[str, Any]  # the merged YAML after overrides (an LLM_Collab config: in this project's layout)
    source: Path | None = None
    # an LLM_Collab config (core/llm_collab.py): the keys it has that mean nothing here, "key: why" each
    unmapped: list[str] = field(default_factory=list)
    layout: str = "comlrl-c3"  # the layout the config was written in: "comlrl-c3" or "llm_collab"

    def __getattr__(self, name: str) -> Any:
        sections = self.__dict__.get("sections", {})
        if name in sections:
            return sections[name]
        raise AttributeError(name)

    def resolved(self) -> dict[str, Any]:
        out: dict[str, Any] = {"algorithm": self.algorithm, "domain": self.domain, "seed": self.seed}
        out.update({k: asdict(v) for k, v in self.sections.items()})
        out[section(self.algorithm)] = asdict(self.algo)
        out[self.domain] = asdict(self.domain_cfg) if is_dataclass(self.domain_cfg) else dict(self.domain_cfg)
        return out


def deep_merge(base: Mapping[str, Any], child: Mapping[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(dict(base))
    for k, v in child.items():
        out[k] = deep_merge(out[k], v) if isinstance(v,
                                                     Mapping) and isinstance(out.get(k), Mapping) else copy.deepcopy(v)
    return out


def read_yaml(path: str | Path, _seen: tuple[Path, ...] = ()) -> dict[str, Any]:
    """A YAML file with its ``extends:`` chain merged in (child over parent, relative paths, no cycles)."""
    path = Path(path).resolve()
    if path in _seen:
        raise ConfigError(f"extends: cycle {' -> '.join(str(p.name) for p in _seen + (path,))}")
    if not path.exists():
        raise ConfigError(f"config file {path} does not exist")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: invalid YAML: {exc}") from exc
    if data is None:
        raise ConfigError(f"config file {path} is empty; a config names at least its algorithm and domain (copy "
                          "configs/math/demo_cpu.yaml or domains/template/example.yaml)")
    if not isinstance(data, Mapping):
        raise ConfigError(f"{path}: a config must be a mapping at the top level")
    data = resolve_model_paths(data, path.parent)  # in the file that names them, so extends: chains keep their folders
    data = resolve_dataset_paths(data, path.parent)  # the same for dataset sources
    parent = data.get("extends")
    if parent:
        base = read_yaml(path.parent / parent, _seen + (path,))
        data = deep_merge(base, {k: v for k, v in data.items() if k != "extends"})
    if not _seen and isinstance(data.get("dataset"), Mapping) and not data["dataset"].get("base_dir"):
        data["dataset"] = {**data["dataset"], "base_dir": str(path.parent)}
    return data


def parse_value(text: str) -> Any:
    """``true/false/none/null``, else a Python literal, else a YAML mapping or list (``{A: 4}``, ``[a, b]``), else
    the string itself."""
    low = text.strip().lower()
    if low in ("true", "false"):
        return low == "true"
    if low in ("none", "null"):
        return None
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        pass
    if text.strip()[:1] in ("{", "["):  # YAML flow style, as the config file would spell it
        try:
            value = yaml.safe_load(text)
        except yaml.YAMLError:
            return text
        if isinstance(value, (dict, list)):
            return value
    return text


def apply_overrides(data: Mapping[str, Any], overrides: list[str] | None) -> dict[str, Any]:
    out = copy.deepcopy(dict(data))
    for item in overrides or []:
        if "=" not in item:
            raise ConfigError(f"override '{item}' must look like a.b=value")
        key, _, value = item.partition("=")
        node = out
        parts = key.strip().split(".")
        for p in parts[:-1]:
            if not isinstance(node.setdefault(p, {}), dict):
                raise ConfigError(f"override '{key}': '{p}' is not a section")
            node = node[p]
        node[parts[-1]] = parse_value(value)
    return out


def _nearest(key: str, valid: list[str], prefix: str = "") -> str:
    near = difflib.get_close_matches(key, valid, n=1, cutoff=0.4)
    return f"; did you mean '{prefix}{near[0]}'?" if near else f"; valid keys: {', '.join(sorted(valid))}"


def bind(cls: type, values: Mapping[str, Any] | None, where: str) -> Any:
    """Instantiate ``cls`` from a mapping, rejecting unknown keys by name and values that do not fit their field's
    type or range (:func:`c3_plugin.core.config_types.check_fields`)."""
    values = dict(values or {})
    valid = [f.name for f in fields(cls) if not f.name.startswith("_")]
    for key in values:
        if key not in valid:
            raise ConfigError(f"unknown key '{where}.{key}'{_nearest(key, valid, where + '.')}")
    try:
        return cls(**check_fields(cls, values, where))
    except (TypeError, ValueError) as exc:
        message = str(exc)
        raise ConfigError(message if message.startswith(f"{where}.") else f"{where}: {message}") from exc


def check_keys(raw: Mapping[str, Any], names: list[str], domain_name: str) -> None:
    """Every key of the merged config is a known section or field, checked before any trainer, domain or data is
    imported (a typo fails in well under a second, naming the nearest valid key): top-level keys, the sections of
    :data:`SECTIONS`, and the algorithm and domain sections listed in ``config_keys.json`` (generated with
    ``docs/config.md``; another package's sections are checked when their class binds)."""
    valid_top = set(SCALARS) | set(SECTIONS) | {section(n) for n in names} | {domain_name}
    for key in raw:
        if key not in valid_top:
            raise ConfigError(f"unknown key '{key}'{_nearest(key, sorted(valid_top))}")
    index = {name: [f.name for f in fields(cls) if not f.name.startswith("_")] for name, cls in SECTIONS.items()}
    keys_file = Path(__file__).with_name("config_keys.json")
    if keys_file.exists():
        index = {**json.loads(keys_file.read_text()), **index}
    for where, valid in index.items():
        values = raw.get(where)
        for key in (values if isinstance(values, Mapping) else {}):
            if key not in valid:
                raise ConfigError(f"unknown key '{where}.{key}'{_nearest(key, valid, where + '.')}")


def load_config(path: str | Path | None = None, overrides: list[str] | None = None,
                data: Mapping[str, Any] | None = None, default_algorithm: str | None = None,
                hub_preflight: bool = False) -> RunConfig:
    """Read, merge, override and validate a run config. Keys are checked first, before any trainer or domain is
    imported; ``hub_preflight`` (the entry points) then fails at once when the Hub cannot be used and a dataset
    source on it is not cached (:func:`c3_plugin.core.hub.require_hub_data`)."""
    raw = read_yaml(path) if path is not None else dict(data or {})
    raw = apply_overrides(raw, overrides)
    algorithm = raw.get("algorithm") or default_algorithm or SCALARS["algorithm"]
    overridden = any(o.partition("=")[0].strip() == "algorithm" for o in overrides or [])
    if default_algorithm and raw.get("algorithm") and raw["algorithm"] != default_algorithm and not overridden:
        # an entry point's algorithm is a default: --override algorithm=X always wins, a config's own key must agree
        raise ConfigError(f"the config says algorithm: {raw['algorithm']} but this entry point trains "
                          f"{default_algorithm} by default; add --override algorithm={raw['algorithm']} to train it "
                          "(or use c3 train, which trains the config's algorithm), or --override "
                          f"algorithm={default_algorithm}")
    names = algorithms()
    if algorithm not in names:
        raise ConfigError(f"unknown algorithm '{algorithm}'{_nearest(algorithm, names)}")
    translation = translate(raw, algorithm, resolve(algorithm)[0], domain_names()) if markers(raw) else None
    if translation is not None:  # LLM_Collab's layout, read as its train scripts read it
        raw = translation.data
    domain_name = raw.get("domain", SCALARS["domain"])
    try:
        check_domain_name(domain_name)  # before the keys: a mistyped domain is named as such, not as its section
    except KeyError as exc:
        raise ConfigError(str(exc.args[0])) from exc
    check_keys(raw, names, domain_name)
    if hub_preflight:
        try:
            require_hub_data(raw.get("dataset"))
        except ConfigError as exc:
            raise ConfigError(f"{exc}{hub_hint(raw.get('dataset')) if translation else ''}") from exc
    try:
        domain = load_domain(domain_name)
    except KeyError as exc:
        raise ConfigError(str(exc.args[0])) from exc
    sections = {name: bind(cls, raw.get(name), name) for name, cls in SECTIONS.items()}
    seed = raw.get("seed", SCALARS["seed"])
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= MAX_SEED:
        raise ConfigError(f"seed must be an integer from 0 to {MAX_SEED} (NumPy's seeds are 32-bit, and each "
                          f"data-parallel rank seeds seed + 1000 * rank), got {seed!r}; e.g. seed: 0")
    own = section(algorithm)
    for other in names:  # every algorithm section present must be valid for its own class
        if other in raw and section(other) == other and other != own:
            other_values = dict(raw[other] or {})
            _workflow_experiment_defaults(resolve(other)[0], other_values)
            bind(resolve(other)[0], other_values, other)
    algo_cls, _ = resolve(algorithm)
    algo_values = dict(raw.get(own) or {})
    if "seed" in {f.name for f in fields(algo_cls)}:
        algo_values.setdefault("seed", seed)
    _workflow_experiment_defaults(algo_cls, algo_values)
    algo = bind(algo_cls, algo_values, own)
    domain_cfg = bind(domain.config_cls, raw.get(domain_name),
                      domain_name) if domain.config_cls else dict(raw.get(domain_name) or {})
    if sections["agents"].policy not in ("per_agent", "lora", "shared"):
        raise ConfigError(f"agents.policy must be 'per_agent', 'lora' or 'shared', got {sections['agents'].policy!r}")
    if sections["agents"].policy == "shared":
        _check_shared_policy(sections["agents"], getattr(algo, "agent_learning_rate", None))
    if sections["wandb"].mode not in ("offline", "online", "disabled"):
        raise ConfigError(f"wandb.mode must be offline, online or disabled, got {sections['wandb'].mode!r}")
    rc = RunConfig(algorithm=algorithm, domain=domain_name, seed=seed, sections=sections, algo=algo,
                   domain_cfg=domain_cfg, raw=raw, source=Path(path) if path else None,
                   unmapped=translation.unmapped if translation else [],
                   layout="llm_collab" if translation else "comlrl-c3")
    _default_plan(rc, domain, own)
    return rc


def _default_plan(rc: "RunConfig", domain: Any, section_name: str) -> None:
    """A workflow trainer section without ``plan`` gets the algorithm's default plan over the config's workflow
    (:func:`c3_plugin.trainers.comlrl_compat.default_plan`), written into the section, then checked."""
    # not a workflow trainer's config, or a plan given
    if capabilities(rc.algo).budget != "plan" or rc.algo.plan is not None:
        return
    workflow = build_workflow(rc, domain)
    rc.algo.plan = default_plan(rc.algo, [workflow.num_decisions], workflow.num_agents)
    try:
        check(rc.algo, section_name)
    except ValueError as exc:
        raise ConfigError(f"{section_name}: {exc}") from exc


# A YAML config describes a workflow experiment, so its workflow trainer section starts from these values where
# the config class has CoMLRL's script defaults (a CoMLRL script that swaps in C3Config keeps CoMLRL's):
WORKFLOW_EXPERIMENT_DEFAULTS = {
    "num_turns": 1,  # the workflow's schedule holds the turns (CoMLRL's 2 needs an external_transition from a script)
    "use_chat_template": True,  # instruct models read their chat template
    "eval_greedy": True,  # greedy evaluation, comparable across runs (the paper's); suites may sample (num_samples)
    "temperature": 1.0, "top_p": 1.0, "top_k": None,  # the full softmax: exact behaviour log-probs
    "eval_interval": 0, "eval_num_samples": 0,  # evaluate before and after training, on the whole eval set
}


def _workflow_experiment_defaults(algo_cls: type, values: dict[str, Any]) -> None:
    """Fill a workflow trainer section's unset fields from :data:`WORKFLOW_EXPERIMENT_DEFAULTS`, and
    ``num_generations`` (the default plan's budget) from an explicit plan's leaves, so that an explicit plan
    is its own budget."""
    if capabilities(algo_cls).budget != "plan":  # not a workflow trainer's config
        return
    for key, value in WORKFLOW_EXPERIMENT_DEFAULTS.items():
        values.setdefault(key, value)
    if values.get("advantage_scaling") is not None:
        values.setdefault("advantage_normalization", False)  # an explicit scaling is the section's choice
    if values.get("plan") is None:
        # the default plan's budget: the paper's B = 8 reward calls per instance
        values.setdefault("num_generations", 8)
    if values.get("plan") is not None and "num_generations" not in values:
        try:
            plan = parse_plan(values["plan"])
        except PlanError:
            return  # the config class reports it
        leaves = {"tree": math.prod(plan.tree), "independent": plan.runs, "diagnostic": plan.n * plan.c}[plan.kind]
        values["num_generations"] = max(2, leaves)


def _check_shared_policy(ag: AgentsSection, base_lr: float | None) -> None:
    """``agents.policy: shared`` is one model: no per-agent models, no frozen role, one learning rate."""
    if ag.models:
        raise ConfigError("agents.models lists one model per agent, but agents.policy: shared trains one model for "
                          "every role (agent_model.name); remove agents.models or use agents.policy: per_agent")
    frozen = sorted(r for r, v in ag.trainable.items() if v is False)
    if frozen:
        raise ConfigError(f"agents.trainable: false for {frozen} under agents.policy: shared would freeze the one "
                          "model every role plays; use agents.policy: per_agent to freeze a role")
    rates = {float(v) for v in ag.learning_rate.values() if isinstance(v, (int, float))}
    if base_lr is not None:
        rates |= {float(base_lr) * float(v) for v in ag.learning_rate_scale.values() if isinstance(v, (int, float))}
    if len(rates) > 1:
        raise ConfigError("agents.learning_rate / learning_rate_scale give the roles different learning rates "
                          f"{sorted(rates)} under agents.policy: shared, one model with one optimizer; give one rate "
                          "(the algorithm's agent_learning_rate) or use agents.policy: per_agent")


def build_workflow(cfg: RunConfig, domain: Any) -> Workflow:
    """The config's workflow: ``workflow.name`` among the domain's workflows, the built-ins or a YAML path;
    without a name, the domain's ``default_workflow`` (or its only workflow); then the per-role overrides."""
    sec = cfg.workflow
    flows = domain.workflows()
    if sec.name is None:
        if domain.default_workflow is None and len(flows) != 1:
            raise ConfigError(f"workflow.name is not set and domain '{domain.name}' declares no default workflow; "
                              f"set workflow.name to one of its workflows ({', '.join(sorted(flows)) or 'none'}), a "
                              f"built-in ({', '.join(builtin_workflows())}) or a YAML path")
        wf = domain.workflow(domain.default_workflow or next(iter(flows)))
    elif sec.name in flows:
        wf = flows[sec.name]
    else:
        try:
            wf = load_workflow(sec.name)
        except WorkflowError as exc:
            if Path(str(sec.name)).suffix or Path(str(sec.name)).exists():
                raise
            raise ConfigError(f"workflow.name '{sec.name}' is not a workflow of domain '{domain.name}' "
                              f"({', '.join(sorted(flows)) or 'none'}), a built-in "
                              f"({', '.join(builtin_workflows())}) or a YAML file") from exc
    fields = {k: v for k, v in (("prefix", sec.prefix), ("max_new_tokens", sec.max_new_tokens), ("system", sec.system),
                                                  ("temperature", sec.temperature)) if v}
    if sec.templates or fields:
        wf = wf.with_templates(sec.templates, **fields)
    return wf
