"""The workflow side of a CoMLRL trainer, as a mixin: :class:`WorkflowBridge`.

Mix it in *before* the CoMLRL base (``class T(WorkflowBridge, MADPOTrainer)``) and call
:meth:`WorkflowBridge._bridge_workflow` before and :meth:`WorkflowBridge._bridge_setup`
after the base constructor. It supplies:

* generation with the workflow's prompts through :class:`~c3_plugin.generation.hf.HFBackend`
  (forced JSON skeletons and value-token loss masks), both for the workflow rollouts
  (:meth:`collect`) and for CoMLRL's own ``_generate_completions`` contract, so CoMLRL's
  sampling loops (MAGRPO's tree, MADPO's candidate pools) play the workflow's roles;
* evaluation: greedy decoding of the workflow on the eval set, scored by the fixed task
  reward (never a learned one), with the fixed-anchor logic (``eval/*`` on the first
  ``eval_num_samples`` items, ``eval_full/*`` on all);
* logging: ``metrics.jsonl`` in the run directory plus W&B filtered by ``wandb_keys``, every
  panel against the hidden ``env_step`` x-axis.

Precision: :meth:`_bridge_setup` keeps every trainable parameter as an fp32 master and runs
the forward passes in the dtype the models were given (:func:`c3_plugin.scale.precision.keep_fp32_masters`),
so bf16 models train without their updates rounding away.

Attributes set here: ``workflow``, ``grammar``, ``backend``, ``run_dir``, ``totals``,
``update_step``, ``history``, ``compute_dtypes``. Config fields read (with defaults when a config lacks them):
``use_chat_template``, ``generation_batch_size``, ``json_stop``, ``wandb_keys``, ``generation_backend`` and the
``vllm_*`` options (:class:`~c3_plugin.generation.vllm.VLLMBackend`, which wraps the HF backend),
``temperature``/``top_p``/``top_k``/``max_new_tokens``, ``eval_num_samples``, ``eval_batch_size``.
"""

from __future__ import annotations

import functools
import inspect
import json
import math
from contextlib import contextmanager
from dataclasses import replace
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any, Callable, Collection, Iterator, Mapping, Sequence

import numpy as np
import torch
import wandb
from tqdm import tqdm

from c3_plugin.core.plan import parse_plan
from c3_plugin.core.protocol import Prompt, Sampling, encode_prompt, role_sampling
from c3_plugin.core.rewards import leaf_rewards
from c3_plugin.core.rollout import Leaf, Rollout, materialize
from c3_plugin.core.trace import path_to
from c3_plugin.core.workflow import Step, Workflow, load_workflow, parallel_workflow
from c3_plugin.generation.hf import HFBackend
from c3_plugin.generation.hook import active_call, backend_generate, rollout_backend
from c3_plugin.generation.server import ServerBackend
from c3_plugin.generation.vllm import VLLMBackend, VLLMOptions
from c3_plugin.scale.distributed import broadcast, context, gather, gathered
from c3_plugin.scale.precision import keep_fp32_masters
from c3_plugin.trainers.streamed_pg import train_mode_log_prob
from c3_plugin.trainers.turns import turn_metrics

# the bars of evaluation and of the analysis tools: the count moves in fractions of an item (decision steps), the
# remaining time is always on show
PROGRESS_FORMAT = ("{desc}: {percentage:3.0f}%|{bar}| {n:.1f}/{total_fmt} {unit} [{elapsed}<{remaining}, "
                   "{rate_fmt}{postfix}]")


def progress_bar(total: float, desc: str, unit: str, disable: bool = False, **kwargs: Any) -> tqdm:
    """A tqdm bar on stderr in :data:`PROGRESS_FORMAT`, drawn on every update (its updates are decision steps, far
    apart, moved by :func:`stepping`); ``disable`` hides it (so does ``TQDM_DISABLE=1``, which an explicit
    ``disable=False`` would override); ``kwargs`` go to tqdm (``initial``, ``leave``, ...)."""
    quiet = {"disable": True} if disable else {}
    return tqdm(total=total, desc=desc, unit=unit, bar_format=PROGRESS_FORMAT, mininterval=0, miniters=0, **quiet,
                **kwargs)


@contextmanager
def stepping(bars: Sequence[tqdm], amount: float, parts: int) -> Iterator[Callable[[], None]]:
    """A tick for :class:`TickingBackend`: each call moves every bar of ``bars`` on by ``amount / parts`` (one of a
    rollout's ``parts`` decision steps; never past ``amount``); when the block ends without error, every bar stands
    exactly ``amount`` past where it began (a rollout that generated fewer steps lands there too)."""
    starts = [bar.n for bar in bars]
    done = 0

    def move(share: float) -> None:
        for bar, start in zip(bars, starts):
            if start + share - bar.n > 1e-9:  # no redraw where nothing moved
                bar.update(start + share - bar.n)

    def tick() -> None:
        nonlocal done
        done = min(done + 1, max(1, int(parts)))
        move(amount * done / max(1, int(parts)))

    yield tick
    move(amount)


def item_means(rows: Sequence[Mapping[str, float]], prefix: str) -> dict[str, float]:
    """``prefix + key``: the mean of ``key`` over the rows that have it (IACTrainer's eval metrics of its callback)."""
    keys = dict.fromkeys(k for row in rows for k in row)
    return {f"{prefix}{k}": float(np.mean([row[k] for row in rows if k in row])) for k in keys}


def wandb_row_split(published: Mapping[str, Any], rows: Sequence[tuple[int, int]] | None,
                    step: int, per_prompt: Collection[str] = ()) -> list[tuple[int, dict[str, Any]]]:
    """``published`` as W&B rows ``(step, metrics)``: one at ``step`` when ``rows`` is None; else one per distinct
    step of ``rows`` (CoMLRL's (step, turn) log entries), holding the ``turn_<t+1>/*`` keys of the turns logged
    there, the keys of ``per_prompt`` where an entry's turn is -1 (IAC's and MAAC's metrics_callback keys, logged
    after every prompt), the last also every other key."""
    if rows is None:
        return [(step, dict(published))]
    steps = sorted({s for s, _ in rows})
    out = []
    for s in steps:
        prefixes = tuple(f"turn_{t + 1}/" for at, t in rows if at == s and t >= 0)
        row = {k: v for k, v in published.items() if k.startswith(prefixes)}
        if any(at == s and t < 0 for at, t in rows):
            row.update({k: v for k, v in published.items() if k in per_prompt})
        if s == steps[-1]:
            row = {**{k: v for k, v in published.items() if not k.startswith("turn_")}, **row}
        out.append((s, row))
    return out


class TickingBackend:
    """A generation backend that calls ``tick()`` after each ``generate`` (one decision step of a rollout: every prompt
    of the step at once), so a progress bar moves during a rollout; every other attribute reads through to
    ``backend``, which samples."""

    def __init__(self, backend: Any, tick: Callable[[], None]):
        self.backend = backend
        self.tick = tick

    def __getattr__(self, name: str) -> Any:
        if name in ("backend", "tick"):
            raise AttributeError(name)
        return getattr(self.backend, name)

    def generate(self, prompts: Sequence[Prompt], n: int, sampling: Sampling, **kwargs: Any) -> Any:
        out = self.backend.generate(prompts, n, sampling, **kwargs)
        self.tick()
        return out


COMLRL_ARGUMENTS = ("agent_model", "agents", "num_agents", "tokenizer", "model_config", "train_dataset", "eval_dataset",
                    "reward_func", "reward_processor", "formatters", "external_transition", "wandb_config",
                    "eval_logger", "eval_aggregator", "args")  # CoMLRL's trainer constructor, in its order


def comlrl_constructor(init: Any) -> Any:
    """Give ``init(self, comlrl, *, <own keywords>)`` CoMLRL's trainer constructor in front of its own keywords.

    The call binds :data:`COMLRL_ARGUMENTS` positionally or by keyword, as CoMLRL's ``MAGRPOTrainer`` does (each
    defaults to None), into the dict ``comlrl``; the rest goes to ``init``'s own keywords. ``inspect.signature``
    shows CoMLRL's arguments, then the trainer's."""
    own = inspect.signature(init)
    first, _, *rest = own.parameters.values()

    @functools.wraps(init)
    def wrapper(self: Any, *pos: Any, **kw: Any) -> Any:
        if len(pos) > len(COMLRL_ARGUMENTS):
            raise TypeError(f"{type(self).__name__}() takes at most {len(COMLRL_ARGUMENTS)} positional arguments "
                            f"{COMLRL_ARGUMENTS}, got {len(pos)}")
        comlrl = dict.fromkeys(COMLRL_ARGUMENTS)
        comlrl.update(zip(COMLRL_ARGUMENTS, pos))
        for i, name in enumerate(COMLRL_ARGUMENTS):
            if name in kw:
                if i < len(pos):
                    raise TypeError(f"{type(self).__name__}() got multiple values for argument '{name}'")
                comlrl[name] = kw.pop(name)
        return init(self, comlrl, **kw)

    positional = [inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=None) for n in COMLRL_ARGUMENTS]
    wrapper.__signature__ = own.replace(parameters=[first, *positional, *rest])
    return wrapper


class WorkflowBridge:
    """Workflow generation, evaluation and logging for a CoMLRL trainer subclass (a mixin)."""

    # ----- construction ---------------------------------------------------------------------------
    def _bridge_workflow(self, workflow: Workflow | str | Mapping | None, args: Any, num_agents: int | None = None,
                         agents: Sequence[Any] | None = None, formatters: Any = None) -> int:
        """Set ``self.workflow`` and ``args.num_agents`` (call before the CoMLRL constructor); returns
        the agent count, checked against ``num_agents`` and ``agents``. Without a workflow, CoMLRL's team:
        :func:`~c3_plugin.core.workflow.parallel_workflow` of ``len(agents)`` (else ``num_agents``, else
        ``args.num_agents``) independent agents, each reading the task through its formatter when
        ``formatters`` are given (CoMLRL's default: the item's ``prompt``)."""
        if workflow is None:
            n = len(agents) if agents is not None else int(num_agents or getattr(args, "num_agents", 2))
            # one callable: every agent
            fmts = formatters if formatters is None or not callable(formatters) else [formatters] * n
            self.workflow = parallel_workflow(n, fmts)
        else:
            self.workflow = workflow if isinstance(workflow, Workflow) else load_workflow(workflow)
        n = self.workflow.num_agents
        if num_agents is not None and num_agents != n:
            raise ValueError(f"num_agents={num_agents} but workflow '{self.workflow.name}' has {n} agents")
        if agents is not None and len(agents) != n:
            raise ValueError(f"{len(agents)} agent models given but workflow '{self.workflow.name}' has {n} agents")
        args.num_agents = n
        return n

    def _bridge_setup(self, args: Any, grammar: Any = None, run_dir: str | Path | None = None) -> None:
        """Generation backend, run directory and counters (call after the CoMLRL constructor)."""
        if grammar is not None and getattr(args, "reference_kl_enabled", False):
            raise ValueError("reference_kl_enabled must stay false with a forced JSON skeleton: schema tokens carry no "
                             "policy loss, so a token-level reference KL would be computed on a different distribution")
        self.grammar = grammar  # Prompt -> Skeleton | None: forced JSON skeletons (structured generation)
        self.backend = HFBackend(self.policy, self.tokenizers,
                                 use_chat_template=getattr(args, "use_chat_template", True),
                                 max_batch=getattr(args, "generation_batch_size", None),
                                 micro_batch_size=int(getattr(args, "micro_batch_size", 8)), grammar=grammar,
                                 json_stop=getattr(args, "json_stop", False))
        self.compute_dtypes = [keep_fp32_masters(self.agents[a], self._trainable_parameters(a))
                               for a in range(self.num_agents)]
        if getattr(args, "generation_backend", "hf") == "vllm":
            options = VLLMOptions(
                gpu_memory_utilization=args.vllm_gpu_memory_utilization, kv_cache_gb=args.vllm_kv_cache_gb,
                tensor_parallel_size=args.vllm_tensor_parallel_size,
                enable_sleep_mode=args.vllm_enable_sleep_mode, max_model_len=args.vllm_max_model_len,
                enforce_eager=args.vllm_enforce_eager, lora_adapters=args.vllm_lora_adapters,
                tree_prefill=getattr(args, "vllm_tree_prefill", None),
                                  measure_mismatch=args.logprob_mismatch, seed=int(args.seed))
            if getattr(args, "vllm_server_url", None):  # the separate-GPU layout: a running server
                self.backend = ServerBackend(self.backend, args.vllm_server_url, options, args.vllm_server_weights_dir)
            else:
                self.backend = VLLMBackend(self.backend, options)
        self.run_dir = Path(run_dir) if run_dir is not None else None
        self.update_step = 0
        self.totals = {"env_steps": 0, "messages": 0, "tokens_generated": 0}
        self.history: list[dict[str, float]] = []

    # ----- policies and sampling --------------------------------------------------------------------
    def _trainable_parameters(self, agent: int) -> list[torch.nn.Parameter]:
        """What agent ``agent``'s optimizer updates (kept as fp32 masters); the workflow trainers narrow it
        to the agent's LoRA adapter."""
        return [p for p in self.agents[agent].parameters() if p.requires_grad]

    def policy(self, agent: int) -> torch.nn.Module:
        """The module that plays ``agent`` (with its LoRA adapter active when adapters are shared)."""
        model = self.agents[agent]
        if getattr(self, "lora_adapters", False):
            model.set_adapter(f"agent{agent}")
        return model

    def _sequence_log_prob(self, agent_idx: int, prompt_input_ids: torch.Tensor, completion_ids: torch.Tensor,
                           loss_mask: Any = None) -> torch.Tensor:
        """Masked log-prob of exactly ``completion_ids`` (final token included) under agent ``agent_idx`` in train
        mode, aggregated per the config's ``loss_aggregation``: the likelihood the preference and streamed
        policy-gradient losses train."""
        return train_mode_log_prob(self.agents[agent_idx], prompt_input_ids, completion_ids, loss_mask,
                                   getattr(self.args, "loss_aggregation", "sequence_mean"))

    def sampling(self, greedy: bool = False) -> Sampling:
        a = self.args
        return Sampling(temperature=a.temperature, top_p=a.top_p, top_k=a.top_k, max_new_tokens=a.max_new_tokens,
                        greedy=greedy)

    # ----- workflow rollouts ------------------------------------------------------------------------
    def reward_leaves(self, leaves: Sequence[Leaf]) -> list[float]:
        """CoMLRL's reward contract (:mod:`c3_plugin.core.rewards`): each agent's latest message on the path,
        ``batch_items`` = the task item, ``prompts`` = the first decision point's context (CoMLRL's
        formatted prompt); once per joint action, or once per batch for a ``@batched`` reward."""
        per_agent: list[list[str]] = [[] for _ in range(self.num_agents)]
        first = self.workflow.decision_steps[0]
        prompts = []
        for leaf in leaves:
            latest = self.workflow.latest_outputs(leaf.outputs)
            for a in range(self.num_agents):
                roles = [s.name for s in self.workflow.decision_steps if self.workflow.roles[s.name].agent == a]
                per_agent[a].append(latest.get(roles[-1], "") if roles else "")
            prompts.append(self.workflow.assemble(first, leaf.item, list(leaf.outputs[:first.index])))
        raw = leaf_rewards(self.reward_func, per_agent, [dict(leaf.item) for leaf in leaves], prompts)
        return [float(self.reward_processor(x)) for x in raw]

    @property
    def share_identical_contexts(self) -> bool:
        """Whether training rollouts sample a parallel role once per distinct context (see
        :func:`c3_plugin.core.rollout.materialize`); off here, C3 turns it on."""
        return False

    def collect(self, items: Sequence[Mapping[str, Any]], plan: Any = None, greedy: bool = False,
                sampling: Sampling | None = None, tick: Callable[[], None] | None = None) -> Rollout:
        """Materialise ``plan`` (default: the training plan ``self.plan``, with context sharing when the
        algorithm shares; an explicit plan, such as evaluation's greedy one, never shares) under ``sampling``
        (default: :meth:`sampling`). The trace records the prompt token ids the policies condition on and
        their chat template hashes. A subclass's ``_generate_completions`` samples every message
        (:func:`~c3_plugin.generation.hook.rollout_backend`). ``tick`` is called after each decision step is
        generated (:class:`TickingBackend`: progress bars)."""
        backend = rollout_backend(self)
        return materialize(self.workflow, plan if plan is not None else self.plan, items,
                           backend if tick is None else TickingBackend(backend, tick),
                           self.reward_leaves, sampling if sampling is not None else self.sampling(greedy),
                           share_identical_contexts=plan is None and self.share_identical_contexts,
                           tokenizers=self.tokenizers, use_chat_template=getattr(self.args, "use_chat_template", True))

    # ----- CoMLRL's generation contract -------------------------------------------------------------
    def _agent_step(self, agent_idx: int) -> Step:
        """The decision step ``agent_idx`` plays in a single-stage parallel workflow (the only kind
        whose roles CoMLRL's per-agent sampling can play: every role reads only the task)."""
        steps = self.workflow.decision_steps
        mine = [s for s in steps if self.workflow.roles[s.name].agent == agent_idx]
        if (len(steps) != self.workflow.num_agents or len(mine) != 1 or len({s.stage for s in self.workflow.steps}) != 1
                or any(s.reads for s in steps)):
            raise ValueError(f"workflow '{self.workflow.name}': CoMLRL's per-agent sampling (preference trainers, "
                             "MARLHF's MAGRPO stage) needs one parallel stage with exactly one decision per agent and "
                             f"no role reading another; got decisions {[s.name for s in steps]} in stages "
                             f"{self.workflow.parallel_stages()}")
        return mine[0]

    def agent_prompt(self, agent_idx: int, item: Mapping[str, Any], text: str | None = None) -> Prompt:
        """The :class:`Prompt` agent ``agent_idx`` answers for ``item`` (``text`` overrides the context)."""
        step = self._agent_step(agent_idx)
        role = self.workflow.roles[step.name]
        # it reads no other step
        context = self.workflow.assemble(step, item, [""] * step.index) if text is None else text
        return Prompt(text=context, role=role.name, agent=agent_idx,
                      prefix=role.prefix, system=role.system, max_new_tokens=role.max_new_tokens)

    def _generate_completions(self, agent: Any, batch_items: Sequence[Mapping[str, Any]], agent_idx: int = 0,
                              num_return_sequences: int = 1, max_new_tokens: int = 128,
                              prompts_override: Sequence[str] | None = None, external_prompts: Any = None,
                              **kwargs: Any) -> dict[str, Any]:
        """CoMLRL's per-agent sampling, served by the workflow: ``num_return_sequences`` samples of
        the agent's role prompt (skeleton grammar applied). Returns CoMLRL's dict (CPU tensors):
        ``prompt_input_ids`` ``[1, P]`` are :func:`encode_prompt`'s ids (chat template plus the role's
        response prefix); ``completion_input_ids`` are exactly the generated ids (EOS kept);
        ``completions`` are prefix + text (the full action the reward sees); plus
        ``completion_loss_masks`` (1 on sampled value tokens, 0 on forced schema tokens).
        ``agent`` is the module that samples: the live ``policy(agent_idx)`` through ``self.backend``,
        or another one (a frozen comparator copy) through a backend of its own; ``kwargs`` are extra HF
        ``generate`` kwargs (logits processors, stopping criteria; HF backend only). Called as a subclass
        hook's ``super()`` inside a rollout, it samples the rollout's prompt (text: ``prompts_override``)
        under the rollout's sampling (:func:`~c3_plugin.generation.hook.active_call`)."""
        if len(batch_items) != 1:
            raise ValueError("_generate_completions serves one item at a time (CoMLRL's batch_size=1), "
                             f"got {len(batch_items)}")
        if external_prompts is not None:
            raise ValueError("external prompts (multi-turn transitions) are not supported by workflow generation")
        item = batch_items[0]
        call = active_call(self)  # inside a rollout, answering one of its prompts through a subclass's hook
        if call is not None:
            prompt = replace(call.prompt, text=prompts_override[0] if prompts_override is not None
                             else call.prompt.text,
                             max_new_tokens=int(max_new_tokens))
            sampling = call.sampling
        else:
            prompt = self.agent_prompt(agent_idx, item, text=prompts_override[0] if prompts_override is not None
                                       else None)
            if prompt.max_new_tokens is None:
                prompt = Prompt(prompt.text, prompt.role, prompt.agent, prompt.prefix, prompt.system,
                                int(max_new_tokens))
            sampling = role_sampling(self.sampling(), self.workflow.roles[prompt.role])
        n = int(num_return_sequences)
        backend = self.backend
        if agent is not None and agent is not self.agents[agent_idx]:
            backend = self.backend.for_policy(lambda _a: agent)
        gens = backend_generate(backend, [prompt], n, sampling, kwargs)[0]
        prompt_ids = encode_prompt(self.tokenizers[agent_idx], prompt, self.backend.use_chat_template)
        if call is not None:
            call.generated.append((prompt_ids, gens))  # the rollout's budget counts what the hook returns
        else:
            self.totals["messages"] += n
            self.totals["tokens_generated"] += sum(len(g.token_ids) for g in gens)
        return {
            "prompts": [prompt.text],
            "batch_items": list(batch_items),
            "prompt_input_ids": torch.tensor([prompt_ids], dtype=torch.long),
            "prompt_attention_mask": torch.ones((1, len(prompt_ids)), dtype=torch.long),
            "completions": [[prompt.prefix + g.text for g in gens]],
            "completion_input_ids": [[torch.tensor(g.token_ids, dtype=torch.long) for g in gens]],
            "completion_attention_mask": [[torch.ones(len(g.token_ids), dtype=torch.long) for g in gens]],
            "completion_loss_masks": [[list(g.loss_mask) if g.loss_mask is not None else [1] * len(g.token_ids)
                                       for g in gens]],
            "response_lens": [len(g.token_ids) for g in gens],
            "reference_kls": [],
        }


    # generation_hook.overrides_hook: the bridge's own, not a user's hook
    _generate_completions.workflow_generation = True

    # ----- evaluation -------------------------------------------------------------------------------
    def evaluate(self, num_eval_samples: int | None = None) -> dict[str, float]:
        """The workflow decoded on the first ``num_eval_samples`` eval items (default ``eval_num_samples``;
        0: all), scored by the fixed task reward, metrics from CoMLRL's eval logger/aggregator. Greedy,
        except for the items of a sampled suite (:meth:`eval_decoding`). When more items than
        ``eval_num_samples`` are evaluated, ``eval/*`` is logged for the first ``eval_num_samples`` (the fixed
        anchor, comparable across the run) and ``eval_full/*`` for all of them (JSONL only); the full-pool
        metrics are returned."""
        if self.eval_dataset is None:
            return {}
        limit = int(self.args.eval_num_samples if num_eval_samples is None else num_eval_samples)
        anchor = int(self.args.eval_num_samples)
        n_items = len(self.eval_dataset) if limit <= 0 else min(limit, len(self.eval_dataset))
        full = self._evaluate_items(n_items)
        if 0 < anchor < n_items:
            logged = self._evaluate_items(anchor, outputs=full.pop("_outputs"))
            logged.pop("_outputs")
            self.log_metrics({**logged, **{k.replace("eval/", "eval_full/", 1): v for k, v in full.items()
                                           if k.startswith("eval/")},
                              "env_step": float(self.env_step)})
            full.update({k.replace("eval/", "eval_anchor/", 1): v for k, v in logged.items() if k.startswith("eval/")})
        else:
            full.pop("_outputs")
            self.log_metrics({**full, "env_step": float(self.env_step)})
        return {**full, "env_step": float(self.env_step)}

    def eval_decoding(self, item: Mapping[str, Any]) -> tuple[int, Sampling | None]:
        """How an eval item is decoded: ``(0, None)`` greedy (the default), or ``(k, sampling)`` when the item
        carries ``eval_samples: k > 0`` (a domain sets it from its suite's ``num_samples``): k full runs of the
        workflow (plan ``independent k``) sampled at ``eval_temperature`` / ``eval_top_p`` when the item sets
        them, else the algorithm's ``temperature`` / ``top_p`` / ``top_k``. A role's own ``workflow.temperature``
        still applies to its messages, as in training."""
        k = int(item.get("eval_samples") or 0)
        if k <= 0:
            return 0, None
        base = self.sampling(greedy=False)
        temperature, top_p = item.get("eval_temperature"), item.get("eval_top_p")
        return k, replace(base, temperature=base.temperature if temperature is None else float(temperature),
                          top_p=base.top_p if top_p is None else float(top_p))

    def _evaluate_items(self, limit: int, outputs: tuple[list, list] | None = None) -> dict[str, Any]:
        """Metrics of the first ``limit`` eval items (reusing ``outputs`` = (rewards, path outputs) per item, a
        list of one per decode, when given). Under data parallelism each rank decodes its share of the items,
        rank 0 gathers and scores them, and every rank returns rank 0's metrics.

        Greedy items go in batches of ``eval_batch_size`` items, a sampled suite's in batches of
        ``eval_batch_size // k`` items (at least 1), so a batch holds about as many runs. Sampled decodes draw
        from a torch generator seeded by ``(seed, rank)`` and leave the training's random stream untouched
        (HF backend; vLLM samples with its engine's seed). ``eval/reward_mean`` is the mean over items of each
        item's mean reward; the eval logger gets one row per decode, a sampled decode's item tagged with its
        ``eval_index`` (position in the eval set) and ``eval_sample``."""
        dist = getattr(self, "dist", context())
        items = [dict(self.eval_dataset[i]) for i in range(limit)]
        items = [{**it, "id": str(it.get("id", f"eval{k}"))} for k, it in enumerate(items)]
        size = max(1, int(self.args.eval_batch_size))
        rewards, outputs, per_turn = ([], [], []) if outputs is None else tuple(o[:limit] for o in outputs)
        start = len(rewards)
        mine = list(range(start + dist.rank, len(items), dist.world))
        decoding = {i: self.eval_decoding(items[i]) for i in mine}
        batches: dict[tuple, list[int]] = {}  # one decoding per batch, items in eval order (all greedy: as before)
        for i in mine:
            k, sampling = decoding[i]
            batches.setdefault((k, sampling), []).append(i)
        # a bar over this rank's eval items on stderr, moving a share of a batch's items as each decision step of the
        # batch is generated; output.verbose: false (or TQDM_DISABLE=1) hides it
        quiet = not (getattr(self, "verbose", True) and mine and dist.is_main)
        done: list[tuple[int, list[float], list[list[str]], list[list[float]]]] = []
        extra: list[dict[str, float]] = []  # per decoded item, eval_rollout_metrics (an IAC script's metrics_callback)
        # items of a suite without num_samples: greedy, or CoMLRL's one sampled run
        greedy = bool(getattr(self.args, "eval_greedy", True))
        # ZeRO-3: whole weights for generate, gathered once (ranks decode different numbers of batches)
        with progress_bar(len(mine), f"eval @ env_step {self.env_step}", "item", disable=quiet) as bar, \
                gathered(getattr(self, "engines", None), getattr(self, "zero3", False)):
            for (k, sampling), idxs in batches.items():
                plan = parse_plan({"independent": k} if k else {"tree": [1] * self.workflow.num_decisions})
                step = max(1, size // k) if k else size
                with self._eval_rng(k or not greedy, dist.rank):
                    for s in range(0, len(idxs), step):
                        idx = idxs[s:s + step]
                        with stepping([bar], len(idx), self.workflow.num_decisions) as tick:
                            ro = (self.collect([items[i] for i in idx], plan=plan, sampling=sampling,
                                               **self._ticking(tick)) if k
                                  else self.collect([items[i] for i in idx], plan=plan, greedy=greedy,
                                                    **self._ticking(tick)))
                        extra.extend(self.eval_rollout_metrics(ro))
                        per_item = ro.rewards.reshape(len(idx), -1).tolist()
                        paths = self._path_outputs(ro)
                        runs = len(paths) // len(idx)
                        turn_rows = (ro.turn_rewards if ro.turn_rewards is not None
                                     else ro.rewards.reshape(-1, 1)).tolist()
                        done.extend((i, r, paths[j * runs:(j + 1) * runs], turn_rows[j * runs:(j + 1) * runs])
                                    for j, (i, r) in enumerate(zip(idx, per_item)))
        for _, reward, out, turn_row in sorted((x for part in gather(done) for x in part), key=lambda x: x[0]):
            rewards.append(reward)
            outputs.append(out)
            per_turn.append(turn_row)
        extra = [m for part in gather(extra) for m in part]
        if not dist.is_main:
            return {**broadcast(None), "_outputs": (rewards, outputs, per_turn)}
        metrics = {"eval/reward_mean": float(np.mean([np.mean(r) for r in rewards])) if rewards else float("nan"),
                   **item_means(extra, "eval/")}
        if self.eval_logger is not None and self.eval_aggregator is not None and items:
            rows = [(it if len(outs) == 1 and not it.get("eval_samples") else {**it, "eval_index": i, "eval_sample": j},
                     o)
                    for i, (it, outs) in enumerate(zip(items, outputs)) for j, o in enumerate(outs)]
            turns = [[[o[s.index] for s in self.workflow.decision_steps if self.workflow.roles[s.name].agent == a]
                      for _, o in rows]
                     for a in range(self.num_agents)]
            detailed = self.eval_logger(agent_completions_turns=turns, batch_items=[it for it, _ in rows],
                                        prompts=[str(it.get("prompt", it.get("question", ""))) for it, _ in rows])
            metrics.update({f"eval/{k}": float(v) for k, v in
                            self.eval_aggregator(detailed, num_turns=int(getattr(self.args, "num_turns", 1))).items()})
        # CoMLRL's eval/turn_<t>/* from each decode's per-turn rewards (one turn: its reward)
        metrics.update(turn_metrics(np.array([row for item in per_turn for row in item], dtype=float), "eval/"))
        broadcast(metrics)
        metrics["_outputs"] = (rewards, outputs, per_turn)
        return metrics

    def eval_rollout_metrics(self, rollout: Rollout) -> list[dict[str, float]]:
        """Metrics of each item of an eval rollout, logged as ``eval/<key>`` (mean over the items that give the
        key); none here: an IAC script's ``metrics_callback`` sets them
        (:func:`.actor_critic_fields.honour_metrics_callback`), as IACTrainer's evaluation calls it per item."""
        return []

    def _ticking(self, tick: Any) -> dict[str, Any]:
        """``{"tick": tick}`` when this trainer's :meth:`collect` takes it (a subclass may override ``collect`` with
        the signature it had before progress ticks), else nothing: the bar then moves once per batch."""
        params = inspect.signature(self.collect).parameters
        takes = "tick" in params or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
        return {"tick": tick} if takes and tick is not None else {}

    @contextmanager
    def _eval_rng(self, k: int, rank: int):
        """Sampled evaluation (``k > 0``) under a torch generator seeded by ``(seed, rank)``, restored afterwards;
        greedy evaluation draws nothing and runs as is."""
        if not k:
            yield
            return
        devices = [torch.cuda.current_device()] if torch.cuda.is_available() else []
        with torch.random.fork_rng(devices=devices):
            torch.manual_seed(int(getattr(self.args, "seed", 0)) * 1_000_003 + int(rank))
            yield

    @staticmethod
    def _path_outputs(rollout: Rollout) -> list[list[str]]:
        by_node = {(e.instance, e.node): e for e in rollout.entries}
        return [[e.output for e in path_to(rollout.entries[i], by_node)[1:]] for i in rollout.depth_nodes[-1]]

    # ----- logging ----------------------------------------------------------------------------------
    metric_prefixes: tuple[str, ...] = ("eval/*", "eval_full/*", "train/*", "budget/*", "credit/*", "turn_1/*")

    def _init_wandb(self) -> None:
        super()._init_wandb()
        if wandb.run is not None:
            wandb.define_metric("env_step", hidden=True, summary="none")  # the x-axis only: no plot, no summary value
            for prefix in self.metric_prefixes:
                wandb.define_metric(prefix, step_metric="env_step")

    def log_metrics(self, metrics: Mapping[str, Any], wandb_rows: Sequence[tuple[int, int]] | None = None,
                    record: bool = True) -> None:
        """Append ``metrics`` to ``history`` and ``<run_dir>/metrics.jsonl`` (unless ``record`` is False); publish
        the ``wandb_keys`` ones. Non-numeric values (W&B media such as distribution plots) go to W&B only.
        ``wandb_rows`` (CoMLRL's training log entries, (step, turn), :mod:`.cadence`): ``turn_<t+1>/*`` at each
        entry's step and every other key at the last one, nothing when empty; None: one row at ``env_step``."""
        # under data parallelism rank 0 logs (metrics already combined)
        if not getattr(self, "dist", context()).is_main:
            return
        media = {k: v for k, v in metrics.items() if v is not None and not isinstance(v, (int, float, np.number))}
        clean = {k: (float(v) if v is not None and math.isfinite(float(v)) else None) for k, v in metrics.items()
                 if k not in media}
        if record:
            self.history.append(dict(clean))
        if record and self.run_dir is not None:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            with (self.run_dir / "metrics.jsonl").open("a", encoding="utf-8") as fh:
                fh.write(json.dumps(clean) + "\n")
        if self.wandb_initialized and wandb.run is not None:
            published = {k: v for k, v in {**clean, **media}.items() if v is not None and self._published(k)}
            step = int(clean.get("env_step") or getattr(self, "env_step", 0))  # CoMLRL's W&B step
            for at, row in wandb_row_split(published, wandb_rows, step, getattr(self, "callback_keys", ())):
                if any(k != "env_step" for k in row):
                    wandb.log({**row, "env_step": float(at)}, step=at)

    def _published(self, key: str) -> bool:
        """Whether ``key`` goes to W&B (``wandb_keys`` globs; ``env_step`` always rides along as the x-axis)."""
        patterns = getattr(self.args, "wandb_keys", None)
        return patterns is None or key == "env_step" or any(fnmatchcase(key, p) for p in patterns)
