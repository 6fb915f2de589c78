"""LLM_Collab's config layout, read as its train scripts read it and mapped onto this project's run config.

The YAMLs of OpenMLRL's LLM_Collab_* repositories (``configs/magrpo_tldr_config.yaml`` of LLM_Collab_Writing,
``native_parallel/configs/native_parallel_magrpo_config.yaml`` of LLM_Collab_BFCL-v4, ...) hold ``agent_model``
(the model and its sampling), ``agents``, ``critic_model``/``critics``, ``tokenizer``, ``dataset`` (one hub
``name`` with ``train_split``/``eval_split``), a trainer section (``magrpo``, ``iac``, ``maac``, ...: CoMLRL's
config fields), ``reward_processor``, ``output``, ``wandb``, ``seed`` and the repository's own sections. Their
scripts read each key with a default and hand it to CoMLRL. :func:`translate` does the same onto this project's
layout, so that ``algorithm: c3`` is the only line a user adds, and says which keys have no meaning here
(:class:`Translation`). The layout is told by its sections (:func:`markers`): a ``dataset`` section of LLM_Collab's
form, or a ``critic_model``, ``critics`` or ``tokenizer`` section, which this project's layout never has.

A trainer-section key the algorithm's config class has keeps its name (C3Config and the other workflow configs
keep CoMLRL's field names); a key the YAML leaves out gets the default the repository's script passes
(:data:`SCRIPT_DEFAULTS`, for the scripts read), else the class's default, which is CoMLRL's
(:func:`_trainer_section`). The task is the project's
``domain:``: a ``dataset.type`` that names a registered domain picks it, any other (``tldr``, ``arxiv``,
``bfcl``) has no domain, and so no reward, here, and :func:`translate` says so unless ``domain:`` is given.
"""

from __future__ import annotations

import copy
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path
from typing import Any, Mapping

from c3_plugin.core.errors import ConfigError

# the trainer sections of LLM_Collab's YAMLs (CoMLRL's trainers and the BFCL repository's preference trainers)
TRAINER_SECTIONS = ("magrpo", "iac", "maac", "grpo", "ac", "mappo", "madpo", "madpo_iter", "marlhf", "marlhf_iter")
# sections only LLM_Collab's layout has
LLM_COLLAB_ONLY = ("critic_model", "critics", "tokenizer")
# dataset keys only LLM_Collab's layout has (this project's dataset section holds train/eval source specs)
DATASET_KEYS = ("name", "type", "train_split", "eval_split")
# the top-level keys this project's layout shares with LLM_Collab's, taken over as they are (this project's own
# sections, e.g. an --override domain=math or cluster.gpu=h200, pass through too)
SHARED_TOP = ("seed", "algorithm", "domain", "workflow", "cluster", "deepspeed", "extends", "description")
# what a trainer-section key means to no trainer of this project, in words
TRAINER_NOTES = {
    "num_agents": "the workflow's roles give the number of agents",
}
# IAC's/MAAC's critic settings, which an algorithm that loads no critic_model accepts and never reads
CRITIC_FIELDS = ("critic_learning_rate", "value_loss_coef", "value_clip_range", "use_separate_critic", "critic_type",
                 "critic_value_head_hidden_dim", "value_head_hidden_dim", "critic_devices")
# the algorithm fields LLM_Collab's scripts set from agent_model (sampling is the model's there)
SAMPLING_KEYS = ("temperature", "top_p", "top_k")
# what each other agent_model key becomes, or why it has none
MODEL_NOTES = {
    "type": "the model family; comlrl-c3 reads the model's own config and chat template",
    "max_length": "LLM_Collab's scripts never pass it on either; message lengths are max_new_tokens",
    "special_tokens": "comlrl-c3 adds no tokens to the tokenizer",
    "attn_implementation": "comlrl-c3 loads the model's default attention",
}
# The defaults LLM_Collab's train scripts pass to CoMLRL for a trainer-section key the YAML leaves out, by (trainer
# section, dataset.type); read from LLM_Collab_Writing's train_magrpo.py (7e59995) and LLM_Collab_BFCL-v4's
# native_parallel/train/train_magrpo.py (178b9dc). Any other pair gets the algorithm class's default (CoMLRL's).
_WRITING_MAGRPO = {"num_train_epochs": 2, "agent_learning_rate": 5e-6, "logging_steps": 50, "num_generations": 4,
                   "max_new_tokens": 256, "parallel_training": "none", "agent_devices": ["cuda:0"],
                   "early_termination_threshold": -0.2, "rollout_buffer_size": 1, "train_batch_size": 1,
                   "advantage_normalization": True, "eval_interval": 20, "eval_num_samples": 4, "eval_batch_size": 1}
SCRIPT_DEFAULTS = {
    ("magrpo", "tldr"): _WRITING_MAGRPO, ("magrpo", "arxiv"): _WRITING_MAGRPO,
    ("magrpo", "bfcl"): {"num_agents": 2, "parallel_training": "mp", "agent_devices": ["cuda:0", "cuda:1"],
                         "num_train_epochs": 2, "agent_learning_rate": 2e-5, "logging_steps": 20, "num_generations": 4,
                         "max_new_tokens": 256, "discount": 1.0, "joint_mode": "cross",
                         "early_termination_threshold": None, "rollout_buffer_size": 4, "train_batch_size": 4,
                         "advantage_normalization": True, "advantage_mode": "mean", "eval_interval": 20,
                         "eval_num_samples": 16, "eval_batch_size": 1, "reference_kl_enabled": False,
                         "reference_kl_coef": 0.1, "reference_devices": None},
}
# keys of the sections both layouts share that only LLM_Collab's has
SECTION_MARKERS = {"agent_model": (*SAMPLING_KEYS, "torch_dtype", *MODEL_NOTES),
                   "reward_processor": ("enabled", "scale_factor"), "output": ("save_final_model", "save_path")}
# reward_processor.enabled when the YAML leaves it out: LLM_Collab_Writing's scripts' true, LLM_Collab_BFCL-v4's false
REWARD_PROCESSOR_ON = {"bfcl": False}
DTYPES = {"bfloat16": "bfloat16", "bf16": "bfloat16", "float32": "float32", "fp32": "float32"}


@dataclass
class Translation:
    """A config in this project's layout and the LLM_Collab keys it could not carry (``"key: why"`` each)."""

    data: dict[str, Any]
    unmapped: list[str] = field(default_factory=list)
    trainer_section: str | None = None  # the YAML's trainer section (magrpo, iac, ...)


def markers(raw: Mapping[str, Any]) -> list[str]:
    """The keys that make ``raw`` an LLM_Collab config (none: this project's layout, which has none of them)."""
    found = [k for k in LLM_COLLAB_ONLY if k in raw]
    dataset = raw.get("dataset")
    if isinstance(dataset, Mapping) and "train" not in dataset:
        found += [f"dataset.{k}" for k in DATASET_KEYS if k in dataset]
    for section, keys in SECTION_MARKERS.items():
        values = raw.get(section)
        found += [f"{section}.{k}" for k in keys if isinstance(values, Mapping) and k in values]
    return found


def _set(out: dict[str, Any], section: str, key: str, value: Any) -> None:
    out.setdefault(section, {})[key] = value


def _meaningful(value: Any) -> bool:
    """A value that sets something (a YAML null or an empty mapping or list means the default)."""
    return value is not None and value != {} and value != []


def _agent_model(src: Mapping[str, Any], out: dict[str, Any], algo: str, notes: list[str]) -> None:
    model = dict(src.get("agent_model") or {})
    for key, value in model.items():
        if key == "name":
            _set(out, "agent_model", "name", value)
        elif key in SAMPLING_KEYS:
            _set(out, algo, key, value)  # the scripts hand agent_model's sampling to the trainer's config
        elif key in ("torch_dtype", "dtype"):
            dtype = DTYPES.get(str(value).lower()) if value is not None else None
            if dtype:
                _set(out, "agent_model", "dtype", dtype)
            elif _meaningful(value):
                notes.append(f"agent_model.{key}: {value!r} is not a training dtype here; comlrl-c3 trains in "
                             "agent_model.dtype float32 (its default) or bfloat16")
        elif key in MODEL_NOTES:
            if _meaningful(value):
                notes.append(f"agent_model.{key}: {MODEL_NOTES[key]}")
        else:
            _set(out, "agent_model", key, value)  # this project's own keys (device, revision, ...); bind checks them


def _agents(src: Mapping[str, Any], out: dict[str, Any], notes: list[str]) -> None:
    agents = src.get("agents")
    if isinstance(agents, list):  # LLM_Collab: one model name per agent
        _set(out, "agents", "models", list(agents))
    elif isinstance(agents, Mapping):
        for key, value in agents.items():
            if key == "num_agents":
                notes.append("agents.num_agents: the workflow's roles give the number of agents")
            else:
                _set(out, "agents", key, value)
    elif agents is not None:
        raise ConfigError(f"agents: LLM_Collab's layout gives a list of model names, got {agents!r}")


def _critics(src: Mapping[str, Any], out: dict[str, Any], algo: str, algo_fields: set[str], notes: list[str]) -> None:
    critic = src.get("critic_model")
    if isinstance(critic, Mapping) and critic.get("name") and "critic_model" in algo_fields:
        _set(out, algo, "critic_model", critic["name"])
        notes += [f"critic_model.{k}: comlrl-c3 reads only critic_model.name" for k in critic
                  if k != "name" and _meaningful(critic[k])]
    elif _meaningful(critic):
        notes.append(f"critic_model: {algo} learns no critic")
    if _meaningful(src.get("critics")):
        notes.append(f"critics: {algo} learns no per-agent critics")
    for key, value in dict(src.get("tokenizer") or {}).items():
        if _meaningful(value):
            notes.append(f"tokenizer.{key}: comlrl-c3 pads as its generation backend needs (left for generation)")


def _local_split(name: Any, split: str) -> tuple[Any, str]:
    """``(source, split)`` of one split of ``dataset.name``: a local folder holding ``<split>.jsonl`` (any split
    name, e.g. BFCL's ``eval``) reads that file, with the split's slice (``test[:1100]``: the file's first 1100 rows);
    a hub name or any other path stays as it is."""
    base, bracket, rest = split.partition("[")
    folder = Path(str(name)).expanduser()
    if name is not None and folder.is_dir() and (folder / f"{base}.jsonl").is_file():
        return str((folder / f"{base}.jsonl").resolve()), "train" + bracket + rest
    return name, split


def _dataset(src: Mapping[str, Any], out: dict[str, Any], notes: list[str]) -> str | None:
    """``dataset.name`` with its splits as one train source and one eval suite; returns ``dataset.type``."""
    ds = dict(src.get("dataset") or {})
    kind = ds.get("type")
    name = ds.get("name")
    if name is None and "train" not in ds:
        raise ConfigError("dataset.name is not set: LLM_Collab's layout names one dataset (a hub name or a local "
                          "folder) with dataset.train_split and dataset.eval_split")
    source, split = _local_split(name, str(ds.get("train_split") or "train"))
    train: dict[str, Any] = {"name": str(kind or "train"), "source": source, "split": split}
    if ds.get("max_train_samples") is not None:
        train["limit"] = int(ds["max_train_samples"])
    section: dict[str, Any] = {"train": ds.pop("train", train)}
    if (name is not None and ds.get("eval_split") is not None) or "eval" in ds:
        source, split = _local_split(name, str(ds.get("eval_split")))
        suite = {"name": str(kind or "eval"), "source": source, "split": split}
        if ds.get("max_eval_samples") is not None:
            suite["limit"] = int(ds["max_eval_samples"])
        section["eval"] = ds.pop("eval", [suite])
    for key, value in ds.items():
        if key in ("drop_overlap", "base_dir"):
            section[key] = value
        elif key not in ("name", "type", "train_split", "eval_split", "max_train_samples", "max_eval_samples") \
                and _meaningful(value):
            notes.append(f"dataset.{key}: a filter of the repository's own data loader; comlrl-c3's domain loaders "
                         "read every row of the split")
    out["dataset"] = section
    return kind


def _output(src: Mapping[str, Any], out: dict[str, Any], notes: list[str]) -> None:
    # LLM_Collab's scripts print no progress unless output.verbose is set (their default: false)
    section: dict[str, Any] = {"verbose": False}
    for key, value in dict(src.get("output") or {}).items():
        if key == "save_final_model":
            section["save_model"] = bool(value)
        elif key == "save_path":
            if _meaningful(value):
                notes.append("output.save_path: comlrl-c3 saves the final models under <output.base_dir>/<run>/final/")
        else:
            section[key] = value
    out["output"] = section


def _wandb(src: Mapping[str, Any], out: dict[str, Any], notes: list[str]) -> None:
    """LLM_Collab's scripts log to W&B unless ``wandb.enabled`` is false (``run_name`` is a name there too);
    comlrl-c3 logs offline unless ``wandb.mode`` says otherwise, and says so."""
    section: dict[str, Any] = {"enabled": True}
    for key, value in dict(src.get("wandb") or {}).items():
        section["name" if key == "run_name" else key] = value
    if section["enabled"] and "mode" not in section:
        notes.append("wandb.enabled: logged offline, comlrl-c3's wandb.mode default (LLM_Collab's scripts log "
                     "online): add wandb.mode: online to log online")
    out["wandb"] = section


def _reward_processor(src: Mapping[str, Any], out: dict[str, Any], notes: list[str]) -> None:
    """CoMLRL's ``RewardProcessors.scale`` then ``shift`` when enabled (a null shift: none); off: the reward as is."""
    rp = dict(src.get("reward_processor") or {})
    section = {"scale": 1.0, "shift": 0.0}
    kind = str((src.get("dataset") or {}).get("type") or "").lower() if isinstance(src.get("dataset"), Mapping) else ""
    if rp.get("enabled", REWARD_PROCESSOR_ON.get(kind, True)):
        section["scale"] = float(rp.get("scale_factor") if rp.get("scale_factor") is not None else 1.0)
        section["shift"] = float(rp.get("shift") if rp.get("shift") is not None else 0.0)
    notes += [f"reward_processor.{k}: not one of LLM_Collab's reward processor keys (enabled, scale_factor, shift)"
              for k in rp if k not in ("enabled", "scale_factor", "shift")]
    out["reward_processor"] = section


def _trainer_section(src: Mapping[str, Any], algo: str, algo_cls: type, notes: list[str]) -> tuple[str | None, dict]:
    """The YAML's trainer section as the algorithm's: the fields the class has, over the script's defaults
    (:data:`SCRIPT_DEFAULTS`), with the class's defaults written out for the rest of the fields a workflow
    experiment's YAML would set otherwise (``WORKFLOW_EXPERIMENT_DEFAULTS``), so CoMLRL's stand."""
    present = [s for s in TRAINER_SECTIONS if isinstance(src.get(s), Mapping)]
    if algo in src and algo not in present and isinstance(src.get(algo), Mapping):
        present.insert(0, algo)
    if len(present) > 1:
        raise ConfigError(f"the config has {len(present)} trainer sections ({', '.join(present)}); LLM_Collab's "
                          "scripts read one: keep the one to train")
    own = present[0] if present else None
    kind = (src.get("dataset") or {}).get("type") if isinstance(src.get("dataset"), Mapping) else None
    section = {**SCRIPT_DEFAULTS.get((own, str(kind).lower()), {}), **(src.get(own) or {})} if own else {}
    valid = {f.name: f for f in fields(algo_cls) if not f.name.startswith("_")}
    values: dict[str, Any] = {}
    for key, value in section.items():
        if key in CRITIC_FIELDS and "critic_model" not in valid:
            if key in (src.get(own) or {}):
                notes.append(f"{own}.{key}: an actor-critic's critic setting; {algo} learns no critic")
        elif key in valid:
            values[key] = value
        elif key in TRAINER_NOTES:
            notes.append(f"{own}.{key}: {TRAINER_NOTES[key]}")
        elif key in (src.get(own) or {}):  # a key of the YAML's (not one of the script's defaults)
            notes.append(f"{own}.{key}: {algo} has no such setting")
    for name in ("num_turns", "temperature", "top_p", "top_k", "use_chat_template", "eval_greedy", "eval_interval",
                 "eval_num_samples", "num_generations"):
        spec = valid.get(name)
        if spec is not None and name not in values:
            default = spec.default if spec.default is not MISSING else (
                spec.default_factory() if spec.default_factory is not MISSING else None)  # type: ignore[misc]
            values[name] = 1 if name == "num_turns" else default  # both scripts' num_turns default: one turn
    return own, values


def _domain(src: Mapping[str, Any], kind: str | None, known: list[str], notes: list[str]) -> str | None:
    if src.get("domain"):
        if kind and kind != src["domain"]:
            notes.append(f"dataset.type: {kind!r} is LLM_Collab's task; domain: {src['domain']} gives the prompts "
                         "and the reward here")
        return str(src["domain"])
    if kind in known:
        return str(kind)
    if kind:
        raise ConfigError(f"dataset.type: {kind!r} is an LLM_Collab task that comlrl-c3 has no domain for, so its "
                          "reward (in that LLM_Collab repository's rewards/) cannot run here; add domain: <one of "
                          f"{', '.join(known)}> with a dataset of that domain (dataset.name), or register a domain "
                          "for it (domains/template/README.md)")
    return None


def translate(raw: Mapping[str, Any], algorithm: str, algo_cls: type, domains: list[str]) -> Translation:
    """``raw`` (an LLM_Collab config, :func:`markers`) in this project's layout for ``algorithm`` (its config class
    ``algo_cls``), with the keys that have no meaning here. ``domains``: the registered domain names."""
    src = copy.deepcopy(dict(raw))
    notes: list[str] = []
    out: dict[str, Any] = {k: src[k] for k in SHARED_TOP if k in src}
    own, out[algorithm] = _trainer_section(src, algorithm, algo_cls, notes)
    _agent_model(src, out, algorithm, notes)
    _agents(src, out, notes)
    _critics(src, out, algorithm, {f.name for f in fields(algo_cls)}, notes)
    kind = _dataset(src, out, notes)
    _output(src, out, notes)
    _wandb(src, out, notes)
    _reward_processor(src, out, notes)
    domain = _domain(src, kind, domains, notes)
    if domain:
        out["domain"] = domain
    handled = set(SHARED_TOP) | set(LLM_COLLAB_ONLY) | {"agent_model", "agents", "dataset", "output", "wandb",
                                                         "reward_processor", own, algorithm}
    for key, value in src.items():
        if key in handled:
            continue
        if key == domain or key in ("agents", "workflow"):  # this project's own sections
            out[key] = value
        elif _meaningful(value):
            notes.append(f"{key}: the repository's own section, read by its train script; comlrl-c3's "
                         f"{domain or 'domain'} reward and prompts do not read it")
    return Translation(data=out, unmapped=notes, trainer_section=own)


def hub_hint(dataset: Mapping[str, Any] | None) -> str:
    """What to override in LLM_Collab's layout when its hub dataset cannot be had."""
    dataset = dataset if isinstance(dataset, Mapping) else {}
    train = dataset.get("train") if isinstance(dataset.get("train"), Mapping) else {}
    specs = [train] + [s for s in dataset.get("eval") or [] if isinstance(s, Mapping)]
    folder = Path(str(train.get("source") or "data")).name
    files = " and ".join(f"{folder}/{str(s.get('split') or 'train').partition('[')[0]}.jsonl" for s in specs)
    return (f"; in LLM_Collab's layout override dataset.name with a local copy: a folder holding one JSONL file per "
            f"split ({files} for dataset.train_split and dataset.eval_split)")
