"""CoMLRL's IAC and MAAC scripts under C3: ``C3Config``/``C3Trainer`` take ``IACConfig``'s, ``MAACConfig``'s,
``IACTrainer``'s and ``MAACTrainer``'s fields and keywords, so an actor-critic script swaps with its class names::

    from c3_plugin.trainers import C3Config as IACConfig, C3Trainer as IACTrainer    # or as MAACConfig, MAACTrainer

C3 replaces the critic: each alternative is credited with the leave-one-out of its counterfactual continuations'
returns, from rewards alone, so nothing of IAC's or MAAC's critic is trained. Those fields live in
:class:`ActorCriticFields` (C3Config's mixin; defaults and types CoMLRL 1.4.3's) and those keywords in
:func:`actor_critic_keywords`; any of them set to something other than CoMLRL's default is named, with the
reason, in one warning when the trainer is built (:data:`CRITIC_FIELDS`). Every other field is MAGRPOConfig's
too and keeps its definition and its workflow meaning (:mod:`.comlrl_compat`). A config the script names
``IACConfig`` or ``MAACConfig`` (or ``comlrl_reference``) stands in for it: every field the script did not set
takes IAC's/MAAC's default (:func:`take_reference_defaults`). Field by field (CoMLRL's
``comlrl/trainers/actor_critic/{iac,maac}.py``):

=================================  ===========================================================================
IAC/MAAC field                     under C3
=================================  ===========================================================================
``critic_learning_rate``           ignored, warned: the critic's AdamW rate (C3's own optional critic, under
                                   ``credit='value_assisted'``, has ``q_critic_learning_rate``)
``value_loss_coef``                ignored, warned: the weight of the critic's value loss
``value_clip_range``               ignored, warned (IAC): the clip of the shared value head's update
``use_separate_critic``            ignored, warned (IAC): a critic model or value heads on the actors; neither
``critic_type``                    ignored, warned: V(h) or Q(h, a) critic
``critic_value_head_hidden_dim``   ignored, warned (IAC): the separate critic's value head
``value_head_hidden_dim``          ignored, warned (IAC): the actors' value heads
``critic_devices``                 ignored, warned: the critics' placement
``agent_learning_rate``            honoured: every policy's AdamW learning rate
``num_agents``                     honoured: the default team of N independent agents (``parallel`` workflow)
``num_train_epochs``               honoured: the epoch loop
``max_new_tokens``                 honoured: the generation cap
``temperature``                    honoured: sampling temperature (the PPO ratio is taken at it)
``top_p``                          honoured: nucleus sampling
``top_k``                          honoured: top-k sampling
``num_generations``                honoured as MAGRPO's: joint actions per prompt (IAC's and MAAC's are aligned
                                   joint samples too), the reference's budget; where no plan of it branches
                                   every trained agent (IAC's default 1), C3 runs the cheapest tree that does
                                   on the share of the prompts that keeps the reference's env steps
                                   (``setup.every_agent_plan``, printed)
``num_turns``                      honoured as MAGRPO's: > 1 runs CoMLRL's multi-turn team with its
                                   ``external_transition`` (IAC's multi-turn needs ``num_generations=1``)
``rollout_buffer_size``            mapped: standing in for IAC/MAAC, each agent's samples per update (a
                                   prompt gives one per joint action and turn), so a rollout batch holds the
                                   prompts that fit in one update's env steps (``setup.reference_batch``)
``train_batch_size``               honoured when >= ``rollout_buffer_size`` (one optimizer step per update, as
                                   IAC's default); refused below it: C3 steps on messages (``minibatch_size``)
``advantage_normalization``        mapped: C3 divides each agent's advantages in a batch by their std
                                   (``batch_scale``, keeping the leave-one-out; IAC z-scores its buffer)
``discount``                       honoured as MAGRPO's: discounted multi-turn returns (IAC discounts its
                                   critic's bootstrap, r_t + discount V(h_t+1)); accepted with one turn,
                                   where it has no effect (listed inert), as in IAC
``early_termination_threshold``    honoured as MAGRPO's: a multi-turn episode ends after a turn whose reward
                                   exceeds it; no effect with one turn, as in IAC
``external_prompt_passthrough``    honoured: multi-turn prompts are the transition's text as is; no effect
                                   with one turn, as in IAC
``parallel_training``              honoured: CoMLRL's agent placement (``'mp'``: agents on ``agent_devices``)
``agent_devices``                  honoured: CoMLRL's agent placement
``eval_interval``                  honoured: evaluate every eval_interval training items
``eval_num_samples``               honoured: eval items per evaluation
``eval_batch_size``                honoured: eval items per generate call
``logging_steps``                  honoured: W&B training rows at the env steps IAC/MAAC log at, one entry
                                   per drained buffer gated by the same env-step gap
                                   (``cadence.ActorCriticCadence``; ``wandb_cadence``)
``reference_kl_enabled``           honoured: a KL to a frozen reference copy (in C3's PPO loss per token; IAC
                                   subtracts it from the reward, which C3's ``kl_reward_coef`` does)
``reference_kl_coef``              honoured: that KL's coefficient
``reference_devices``              honoured: where the reference copies live
=================================  ===========================================================================

Constructor keywords of ``IACTrainer``/``MAACTrainer`` that ``WorkflowTrainer`` lacks: ``critic_model`` and
``critics`` are accepted and named in the warning (as is a value head on an ``agents`` entry, a
``CausalLMWithValueHead``, whose base model C3 trains, and a ``model_config`` critic key); ``metrics_callback``
is honoured on the training and eval rollouts (:func:`honour_metrics_callback`). The other keywords are MAGRPOTrainer's.
:func:`actor_critic_constructor` makes ``C3Trainer``'s constructor of ``WorkflowTrainer``'s with these keywords.
Positional arguments follow ``WorkflowTrainer``'s order (``IACTrainer``'s second is ``critic_model``), so a
swapped script passes them by name, as CoMLRL's examples do.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import sys
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import torch
from comlrl.models.actor_critic import CausalLMWithValueHead
from comlrl.trainers.actor_critic import IACConfig, MAACConfig

from c3_plugin.core.trace import path_to

# IAC/MAAC field -> what it sets in CoMLRL (all the critic's: no meaning under C3)
CRITIC_FIELDS: dict[str, str] = {
    "critic_learning_rate": "the critic's learning rate",
    "value_loss_coef": "the value loss weight",
    "value_clip_range": "the value head's clip range",
    "use_separate_critic": "a critic model or value heads on the actors",
    "critic_type": "the critic's V(h) or Q(h, a) target",
    "critic_value_head_hidden_dim": "the critic's value head",
    "value_head_hidden_dim": "the actors' value heads",
    "critic_devices": "the critics' devices",
}
# model_config keys IAC/MAAC read for their critics
CRITIC_MODEL_CONFIG_KEYS = ("critic_model_kwargs", "critic_value_head_hidden_dim")


@dataclass
class ActorCriticFields:
    """IACConfig's and MAACConfig's fields that MAGRPOConfig lacks, all the critic's: accepted, not used by C3
    (a warning names those set); defaults and types are CoMLRL 1.4.3's."""

    # critic AdamW learning rate (CoMLRL: 5e-6, Optional[float]; IAC's None: agent_learning_rate)
    critic_learning_rate: float | None = 5e-6
    value_loss_coef: float = 0.6  # weight of the critic's value loss (CoMLRL: 0.6, float)
    # IAC: clip range of the shared value head's update (CoMLRL: 0.2, Optional[float])
    value_clip_range: float | None = 0.2
    # IAC: a separate critic model (True) or value heads on the actors (CoMLRL: True, bool)
    use_separate_critic: bool = True
    critic_type: str = "v"  # "v" (V(h)) or "q" (Q(h, a)) critic (CoMLRL: "v", str)
    # IAC: hidden size of the separate critic's value head (CoMLRL: None, Optional[int])
    critic_value_head_hidden_dim: int | None = None
    # IAC: hidden size of the actors' value heads (CoMLRL: None, Optional[int])
    value_head_hidden_dim: int | None = None
    # the critics' devices (CoMLRL: None, Optional[Union[str, Sequence[str]]])
    critic_devices: str | Sequence[str] | None = None

    # the CoMLRL config this one stands in for: "iac" or "maac" (every field the script did not set takes that
    # config's default, and the rollout batch and W&B cadence follow its rollout buffer) or "magrpo" (None: "iac" or
    # "maac" where the script named this class IACConfig or MAACConfig, else "magrpo")
    comlrl_reference: str | None = None

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        """Note the fields the script set, and the names it calls this class by (:func:`stand_in_for`)."""
        obj = super().__new__(cls)
        names = [f.name for f in dataclasses.fields(cls) if f.init]
        obj.__dict__["_given"] = set(names[:len(args)]) | set(kwargs)
        obj.__dict__["_named"] = stand_in_for(cls, sys._getframe(1))
        return obj

    def __post_init__(self) -> None:
        reference = self.comlrl_reference or self.__dict__.get("_named") or "magrpo"
        if reference not in ("magrpo", *REFERENCE_CONFIGS):
            raise ValueError(f"comlrl_reference must be 'magrpo', 'iac' or 'maac' (the CoMLRL config this one stands "
                             f"in for), got {self.comlrl_reference!r}")
        self.comlrl_reference = reference
        if reference in REFERENCE_CONFIGS:
            take_reference_defaults(self, REFERENCE_CONFIGS[reference], self.__dict__.get("_given", set()))
        gens = self.num_generations if hasattr(self, "num_generations") else 2
        if reference in REFERENCE_CONFIGS and isinstance(gens, int) and not isinstance(gens, bool) and 1 <= gens < 2:
            # IAC's and MAAC's default, one joint action per prompt, which MAGRPOConfig refuses: checked at 2, kept at
            # 1 (the reference's budget; the trainer's plan gives every agent a group within it, setup.every_agent_plan)
            self.num_generations = 2
        parent = getattr(super(), "__post_init__", None)
        if parent is not None:
            parent()
        if hasattr(self, "num_generations"):
            self.num_generations = gens


    @property
    def rl_algorithm(self) -> str:
        """What CoMLRL's trainer checks ``num_generations`` against (>= 1 for IAC and MAAC, >= 2 for MAGRPO)."""
        return self.comlrl_reference or "magrpo"


# the names a script imports C3Config as, and the CoMLRL config each stands in for
REFERENCE_NAMES = {"IACConfig": "iac", "MAACConfig": "maac"}
REFERENCE_CONFIGS = {"iac": IACConfig, "maac": MAACConfig}


def stand_in_for(cls: type, frame: Any) -> str | None:
    """``"iac"``/``"maac"`` where the calling script binds ``cls`` to the name ``IACConfig``/``MAACConfig`` (``from
    c3_plugin.trainers import C3Config as IACConfig``), in its locals, else its globals, and to no other name of
    :data:`REFERENCE_NAMES` nor to its own; else None (then ``comlrl_reference`` says it)."""
    for scope in (frame.f_locals, frame.f_globals) if frame is not None else ():
        bound = {REFERENCE_NAMES.get(name, name) for name in (*REFERENCE_NAMES, cls.__name__) if scope.get(name) is cls}
        if bound:
            return bound.pop() if len(bound) == 1 and bound <= set(REFERENCE_CONFIGS) else None
    return None


def take_reference_defaults(cfg: Any, reference: type, given: set[str]) -> list[str]:
    """Give every field of ``cfg`` that the script did not set (``given``) and that ``reference`` (IACConfig,
    MAACConfig) also has the reference's default, where the two differ (CoMLRL 1.4.3: rollout_buffer_size 8,
    top_k None, num_train_epochs 40, num_generations 1, logging_steps 1); the names changed."""
    own = {f.name for f in dataclasses.fields(cfg)}
    changed = []
    for f in dataclasses.fields(reference):
        if f.name in given or f.name not in own or f.default is dataclasses.MISSING:
            continue
        if getattr(cfg, f.name) != f.default:
            setattr(cfg, f.name, f.default)
            changed.append(f.name)
    return changed


def critic_settings(args: Any) -> list[str]:
    """The critic fields of ``args`` set to something other than CoMLRL's default, as ``name=value``."""
    defaults = {f.name: f.default for f in dataclasses.fields(ActorCriticFields)}
    return [f"{name}={getattr(args, name)!r}" for name in CRITIC_FIELDS
            if hasattr(args, name) and getattr(args, name) != defaults[name]]


def _describe(models: Any) -> str:
    if isinstance(models, str):
        return repr(models)
    return f"{len(models)} model(s)" if isinstance(models, Sequence) else "a model"


def actor_critic_keywords(trainer: Any, kwargs: dict[str, Any], *, critic_model: Any = None,
                          critics: Any = None) -> dict[str, Any]:
    """Before ``WorkflowTrainer.__init__``: warn once about every critic setting (config fields, ``critic_model``,
    ``critics``, value heads on ``agents``, ``model_config`` critic keys) and return ``kwargs`` with each
    ``CausalLMWithValueHead`` agent replaced by its base model (the one C3 trains)."""
    args = kwargs.get("args")
    named = critic_settings(args) if args is not None else []
    named += [f"{key} ({_describe(value)})" for key, value in (("critic_model", critic_model), ("critics", critics))
              if value is not None]
    agents = kwargs.get("agents")
    if agents is not None and any(isinstance(a, CausalLMWithValueHead) for a in agents):
        heads = [i for i, a in enumerate(agents) if isinstance(a, CausalLMWithValueHead) and a.value_head is not None]
        named += [f"agents[{i}].value_head" for i in heads]
        kwargs = {**kwargs, "agents": [a.model if isinstance(a, CausalLMWithValueHead) else a for a in agents]}
    model_config = kwargs.get("model_config") or {}
    named += [f"model_config[{key!r}]" for key in CRITIC_MODEL_CONFIG_KEYS if key in model_config]
    if named:
        warnings.warn(f"{type(trainer).__name__}: {', '.join(named)} have no meaning under C3 and are ignored: they "
                      "configure IAC's/MAAC's critic, and C3 trains none, crediting each alternative with the "
                      "leave-one-out of its counterfactual continuations' returns (from rewards alone; "
                      "credit='value_assisted' adds C3's own Q critic, set by the q_critic_* fields). Drop them to "
                      "silence this warning", UserWarning, stacklevel=3)
    return kwargs


@dataclass
class CallbackSample:
    """What IAC's and MAAC's ``metrics_callback`` reads of a ``RolloutSample``: one agent's message on one joint
    action (a path of the rollout), with that path's reward."""

    agent_idx: int
    prompt: str  # the message's context
    completion: str
    reward: torch.Tensor  # [1], the path's (task) reward
    returns: torch.Tensor  # [1], the same
    # turn_idx (the agent's message index on the path), generation_idx (the path), batch_item
    metadata: dict[str, Any] = dataclasses.field(default_factory=dict)


def callback_samples(rollout: Any) -> list[CallbackSample]:
    """IAC's rollout list for a C3 rollout: for every path (joint action), one sample per agent message on it."""
    by_node = {(e.instance, e.node): e for e in rollout.entries}
    items = {str(it["id"]): it for it in rollout.items}
    flat = np.asarray(rollout.rewards).reshape(-1)
    out: list[CallbackSample] = []
    for j, leaf in enumerate(rollout.depth_nodes[-1]):
        entry = rollout.entries[int(leaf)]
        reward = float(entry.reward if entry.reward is not None else flat[j])
        turns: dict[int, int] = {}
        for e in path_to(entry, by_node):
            if e.kind != "decision":
                continue
            turns[int(e.agent)] = turns.get(int(e.agent), -1) + 1
            out.append(CallbackSample(int(e.agent), e.context, e.output, torch.tensor([reward]), torch.tensor([reward]),
                                      {"turn_idx": turns[int(e.agent)], "generation_idx": j,
                                       "batch_item": items.get(e.instance)}))
    return out


def honour_metrics_callback(trainer: Any, callback: Callable[[list[Any]], Mapping[str, Any]] | None) -> None:
    """After ``WorkflowTrainer.__init__``: IAC's ``metrics_callback(rollouts) -> {name: value}`` is called on every
    training rollout batch (:func:`callback_samples`) and its numeric values are logged under their own names
    with the batch's ``train/*`` metrics, as IAC logs them; in evaluation it is called on each eval item's samples
    and the means over the items are logged as ``eval/<key>``, as IAC's ``evaluate`` logs them."""
    trainer.metrics_callback = callback
    trainer.callback_keys = set()  # the callback's keys among the training metrics
    if callback is None:
        return
    if not callable(callback):
        raise ValueError("metrics_callback must be callable (rollouts -> dict of metrics), got "
                         f"{type(callback).__name__}")
    inner = trainer.rollout_metrics

    def rollout_metrics(rollout: Any) -> dict[str, float]:
        metrics = dict(inner(rollout))
        for key, value in numeric(callback(callback_samples(rollout))).items():
            if key not in metrics:  # W&B: after every prompt, as IAC logs them (bridge.wandb_row_split)
                metrics[key] = value
                trainer.callback_keys.add(key)
        return metrics

    trainer.rollout_metrics = rollout_metrics

    def eval_rollout_metrics(rollout: Any) -> list[dict[str, float]]:
        """IAC's evaluation: the callback on each eval item's samples, its numbers kept (logged as ``eval/<key>``)."""
        by_item: dict[Any, list[CallbackSample]] = {}
        for sample in callback_samples(rollout):
            by_item.setdefault(str((sample.metadata.get("batch_item") or {}).get("id")), []).append(sample)
        return [numeric(callback(samples)) for samples in by_item.values()]

    trainer.eval_rollout_metrics = eval_rollout_metrics


def numeric(extra: Any) -> dict[str, float]:
    """The numbers of a metrics_callback's answer, by name (IAC skips what is not a number too)."""
    out: dict[str, float] = {}
    for key, value in (extra.items() if isinstance(extra, Mapping) else ()):
        try:
            out[str(key)] = float(value)
        except (TypeError, ValueError):
            continue
    return out


ACTOR_CRITIC_KEYWORDS = ("critic_model", "critics", "metrics_callback")  # IACTrainer's/MAACTrainer's, not MAGRPO's


def actor_critic_constructor(init: Callable[..., None]) -> Callable[..., None]:
    """``init`` (``WorkflowTrainer.__init__``) that also takes :data:`ACTOR_CRITIC_KEYWORDS`: every critic setting
    warned about once and value-head agents unwrapped before it (:func:`actor_critic_keywords`),
    ``metrics_callback`` honoured after it (:func:`honour_metrics_callback`). ``inspect.signature`` shows
    ``init``'s parameters, then these keywords."""

    @functools.wraps(init)
    def constructor(self: Any, *args: Any, critic_model: Any = None, critics: Any = None, metrics_callback: Any = None,
                    **kwargs: Any) -> None:
        kwargs = actor_critic_keywords(self, kwargs, critic_model=critic_model, critics=critics)
        init(self, *args, **kwargs)
        honour_metrics_callback(self, metrics_callback)

    base = inspect.signature(init)
    extra = [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=Any)
             for name in ACTOR_CRITIC_KEYWORDS]
    constructor.__signature__ = base.replace(parameters=[*base.parameters.values(), *extra])
    constructor.__doc__ = "WorkflowTrainer's keywords, and IACTrainer's/MAACTrainer's (actor_critic_fields.py)."
    return constructor
