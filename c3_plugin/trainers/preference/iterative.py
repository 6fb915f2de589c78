"""Iterative MADPO and MARLHF on a workflow: per refresh, current vs comparator candidates (the comparator
optionally one central teacher projected onto the actors), replay records with exact ids and masks, and
``iter/*`` logging."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import torch
from comlrl.trainers.preference.iterative import MADPOIterConfig, MADPOIterTrainer, MARLHFIterConfig, MARLHFIterTrainer
from comlrl.trainers.preference.madpo import PreferencePair

from c3_plugin.core.protocol import Prompt, encode_prompt
from c3_plugin.core.registry import Capabilities
from c3_plugin.core.structured import encode_values
from c3_plugin.trainers.preference.fields import PreferenceFields
from c3_plugin.trainers.preference.likelihood import MaskedPreferenceTensors
from c3_plugin.trainers.preference.marlhf import MARLHFBridge
from c3_plugin.trainers.preference.shared import PreferenceBridge, all_tied_message

RECORD_KIND = False  # the "joint" marker of this trainer family's replay records (decentralized actors)


@dataclass
class WorkflowMADPOIterConfig(PreferenceFields, MADPOIterConfig):
    """Iterative MADPO: per refresh, current vs current-copy comparator candidates, lambda-decay replay, joint DPO."""

    capabilities = Capabilities(budget="preference", iterative=True)  # registry.Capabilities

    num_iterations: int = 6  # preference refreshes
    num_train_epochs: int = 1  # joint DPO passes per refresh
    preference_num_candidates: int = 20  # current-policy joint candidates per prompt
    comparator_num_candidates: int | None = 20  # comparator joint candidates per prompt
    preference_pairs_per_sample: int | None = 6  # at most this many non-tied pairs per prompt
    environment_steps_per_pair: int = 2  # env steps a trained pair counts
    comparator_policy: str = "current_copy"  # pre-update weights of the current actors, an independent RNG stream
    preference_replay_mode: str = "lambda_decay"  # replay over all refreshes, newer ones weighted more
    preference_replay_lambda: float | None = 0.8  # lambda of the decay
    log_reward_distribution: bool = True  # iter/*reward_distribution panels and reward_distributions/*.json


@dataclass
class WorkflowMARLHFIterConfig(PreferenceFields, MARLHFIterConfig):
    """Iterative MARLHF: per refresh, new comparisons, a refitted joint reward model, then MAGRPO epochs."""

    capabilities = Capabilities(budget="preference", learned_reward=True, iterative=True)  # registry.Capabilities

    num_iterations: int = 6  # preference and reward-model refreshes
    num_train_epochs: int = 3  # online MAGRPO epochs per refresh
    num_generations: int = 4  # online joint rollouts per prompt
    preference_num_candidates: int = 20  # current-policy joint candidates per prompt
    comparator_num_candidates: int | None = 20  # comparator joint candidates per prompt
    preference_pairs_per_sample: int | None = 6  # at most this many non-tied pairs per prompt
    comparator_policy: str = "current_copy"  # pre-update weights of the current actors, an independent RNG stream
    preference_replay_mode: str = "lambda_decay"  # replay over all refreshes, newer ones weighted more
    preference_replay_lambda: float | None = 0.8  # lambda of the decay
    log_reward_distribution: bool = True  # iter/*reward_distribution panels and reward_distributions/*.json
    reward_model_device: str | None = None  # reward-model device (None: the actors' device)
    reward_model_name: str | None = None  # reward backbone source (None: a snapshot of agent 0's initial backbone)


class IterativeBridge:
    """Refresh-loop overrides of the iterative trainers (mix in before :class:`PreferenceBridge`)."""

    def _generate_preference_pairs_for_item(self, batch_item: dict, **kwargs: Any) -> list[PreferencePair]:
        """CoMLRL's current-vs-comparator comparison (same index, ties dropped, ``pair_selection``), with
        both sides' exact generated ids and masks (CoMLRL re-tokenizes comparator text)."""
        iteration_idx = int(kwargs.pop("iteration_idx", 0))
        n_cur = int(self.args.preference_num_candidates)
        n_cmp = int(self.args.comparator_num_candidates or n_cur)
        cur = self._generate_policy_outputs_for_item(self.agents, batch_item, num_candidates=n_cur)
        cmp = self._generate_comparator_outputs_for_item(batch_item, iteration_idx=iteration_idx, num_candidates=n_cmp)
        prompts = [cur[a]["prompts"][0] for a in range(self.num_agents)]
        cur_raw, cur_r = self._compute_raw_and_processed_rewards([prompts[0]], [list(o["completions"][0]) for o in cur],
                                                                 batch_items=[batch_item])
        cmp_raw, cmp_r = self._compute_raw_and_processed_rewards([prompts[0]], [list(o["completions"][0]) for o in cmp],
                                                                 batch_items=[batch_item])
        self._record_iteration_reward_distribution(target_rewards=cur_raw, comparator_rewards=cmp_raw)
        everything = list(cur_r) + list(cmp_r)
        mean = float(np.mean(everything)) if everything else 0.0
        pools = {"current": (cur, cur_r, cur_raw), "comparator": (cmp, cmp_r, cmp_raw)}
        # central-teacher projections that are not valid role actions keep their reward (distribution)
        # but form no pair: they have no token ids under the actors' skeletons
        valid = [all(o.get("completion_valid", [[True] * len(cmp_r)])[0][j] for o in cmp) for j in range(len(cmp_r))]
        keep = [j for j in range(min(len(cur_r), len(cmp_r))) if valid[j]]
        selected = self._select_policy_comparison_pairs([cur_r[j] for j in keep], [cmp_r[j] for j in keep])
        pairs = []
        for (w_src, w), (l_src, lo) in [((ws, keep[w]), (ls, keep[lo])) for (ws, w), (ls, lo) in selected]:
            t_idx = w if w_src == "current" else lo
            c_idx = w if w_src == "comparator" else lo
            pairs.append(self._make_pair(prompts, pools[w_src][0], w, pools[l_src][0], lo,
                                         winner_reward=float(pools[w_src][1][w]),
                                         loser_reward=float(pools[l_src][1][lo]), candidate_reward_mean=mean,
                                         raw_rewards=[float(pools[w_src][2][w]), float(pools[l_src][2][lo])],
                                         target_raw_reward=float(cur_raw[t_idx]),
                                         comparator_raw_reward=float(cmp_raw[c_idx])))
        return pairs

    # ----- centralized comparator (one teacher, projected onto the actors) --------------------------
    def _generate_centralized_policy_output_for_agent(self, policy_agent: Any, batch_item: dict, *, prompt: str,
                                                      num_candidates: int, **kwargs: Any) -> list[dict[str, Any]]:
        """``comparator_generation_mode=centralized``: ``policy_agent`` (policy index 0's comparator
        weights, chosen by CoMLRL's comparator policy: live, current copy, history or model) samples
        ``num_candidates`` joint actions for the joint prompt (``prompt``, the adapter's
        ``build_prompt``) under the joint workflow role's system prompt, prefill and grammar, with
        the aggregate output budget of the role calls, on the comparator RNG stream. Each joint
        text is split by the adapter into the role actions, which the unchanged task reward scores.

        Per role the result is a workflow generation dict whose prompt ids are the actor's own
        prompt (as for a native generation) and whose completion ids/masks are
        :func:`~c3_plugin.core.structured.encode_values` of the projected values under the role's
        skeleton. A projection that is not a strictly valid role action (failed split, missing or
        duplicated slots, a value the role grammar could not produce) keeps its text and reward
        but has no ids: ``completion_valid[0][j]`` is False and the pair builder excludes it
        from pairs."""
        adapter = self.centralized_comparator_adapter
        wf = adapter.workflow
        role = wf.roles[wf.decision_steps[0].name]
        teacher = self._centralized_comparator_agent_index()
        n = self.num_agents
        role_prompts = [self.agent_prompt(a, batch_item) for a in range(n)]
        budget = sum(int(p.max_new_tokens or self.args.max_new_tokens) for p in role_prompts)
        joint = Prompt(text=prompt, role=role.name, agent=teacher, prefix=role.prefix, system=role.system,
                       max_new_tokens=budget)
        if self.grammar is None or self.grammar(joint) is None:
            raise ValueError(f"centralized comparator: the grammar gives no skeleton for the joint role {role.name!r}")
        backend = self._centralized_comparator_backend(policy_agent)
        rng_kwargs = {"agent_idx": teacher} if getattr(self, "_comparator_rng_streams", None) is not None else {}
        with self._comparator_rng(policy_agent, **rng_kwargs):
            gens = backend.generate([joint], int(num_candidates), self.sampling())[0]
        self.totals["messages"] += len(gens)
        self.totals["tokens_generated"] += sum(len(g.token_ids) for g in gens)
        joint_texts = [joint.prefix + g.text for g in gens]
        splits = [list(adapter.parse_completion(t, batch_item, n)) for t in joint_texts]
        outs = []
        for a, rp in enumerate(role_prompts):
            tok = self.tokenizers[a]
            skeleton = self.grammar(rp)
            texts, ids, masks, valid = [], [], [], []
            for split in splits:
                text = str(split[a])
                encoded = _project(tok, skeleton, text)
                texts.append(text)
                valid.append(encoded is not None)
                ids.append(torch.tensor(encoded[0] if encoded else [], dtype=torch.long))
                masks.append(list(encoded[1]) if encoded else [])
            prompt_ids = encode_prompt(tok, rp, self.backend.use_chat_template)
            outs.append({"prompts": [rp.text], "batch_items": [batch_item],
                         "prompt_input_ids": torch.tensor([prompt_ids], dtype=torch.long),
                         "prompt_attention_mask": torch.ones((1, len(prompt_ids)), dtype=torch.long),
                         "completions": [texts], "completion_input_ids": [ids],
                         "completion_attention_mask": [[torch.ones(len(i), dtype=torch.long) for i in ids]],
                         "completion_loss_masks": [masks], "completion_valid": [valid],
                         "response_lens": [len(i) for i in ids], "reference_kls": [],
                         "joint_completions": [joint_texts]})
        return outs

    def _centralized_comparator_backend(self, policy_agent: Any) -> Any:
        """The generation backend of the central teacher: ``policy_agent`` plays the joint role (agent 0's
        tokenizer)."""
        return self.backend.for_policy(lambda _a: policy_agent)

    # ----- replay records -----------------------------------------------------------------------
    def _preference_pair_to_record(self, pair: PreferencePair) -> dict[str, Any]:
        """CoMLRL's text record plus ``"joint": false`` and per agent the exact prompt ids and winner/loser ids and
        masks."""
        record = MADPOIterTrainer._preference_pair_to_record(pair)
        record["joint"] = RECORD_KIND
        record["agent_tokens"] = [{"prompt_ids": t.prompt_input_ids.tolist(),
                                   "winner_ids": t.winner_completion_ids.tolist(),
                                   "winner_mask": t.winner_loss_mask.tolist(),
                                   "loser_ids": t.loser_completion_ids.tolist(),
                                   "loser_mask": t.loser_loss_mask.tolist()} for t in pair.agent_tensors]
        return record

    def _preference_pair_from_record(self, record: dict[str, Any]) -> PreferencePair:
        """The pair of a record written by :meth:`_preference_pair_to_record`; other kinds are rejected."""
        kind = record.get("joint", None)
        if kind is not RECORD_KIND:
            what = ("a joint-actor record (\"joint\": true)" if kind is True
                    else "a record without token ids (CoMLRL's text-only replay)")
            raise ValueError("preference replay: this decentralized trainer reads only its own records (\"joint\": "
                             f"false, exact ids and masks per agent), got {what}; give each trainer "
                             "kind its own replay dir")
        tokens = record.get("agent_tokens")
        if not isinstance(tokens, list) or len(tokens) != self.num_agents:
            raise ValueError(f"preference replay record has {len(tokens) if isinstance(tokens, list) else 'no'} agent "
                             f"token entries; the trainer has {self.num_agents} agents")
        tensors = []
        for a, t in enumerate(tokens):
            parts = {k: torch.tensor(t[k], dtype=torch.long)
                     for k in ("prompt_ids", "winner_ids", "winner_mask", "loser_ids", "loser_mask")}
            if (parts["winner_ids"].numel() != parts["winner_mask"].numel()
                or parts["loser_ids"].numel() != parts["loser_mask"].numel()):
                raise ValueError(f"preference replay record, agent {a}: ids and loss mask lengths differ")
            tensors.append(MaskedPreferenceTensors(prompt_input_ids=parts["prompt_ids"],
                                                   winner_completion_ids=parts["winner_ids"],
                                                   loser_completion_ids=parts["loser_ids"],
                                                   winner_loss_mask=parts["winner_mask"],
                                                   loser_loss_mask=parts["loser_mask"]))
        text_pair = PreferencePair(prompts=list(record["prompts"]),
                                   winner_completions=list(record["winner_completions"]),
                                   loser_completions=list(record["loser_completions"]), agent_tensors=tensors,
                                   winner_reward=float(record["winner_reward"]),
                                   loser_reward=float(record["loser_reward"]),
                                   candidate_reward_mean=float(record["candidate_reward_mean"]),
                                   raw_rewards=[float(v) for v in record.get("raw_rewards") or []],
                                   target_raw_reward=_maybe_float(record.get("target_raw_reward")),
                                   comparator_raw_reward=_maybe_float(record.get("comparator_raw_reward")))
        return text_pair

    def _resolve_output_dir(self, directory: str, *, cache_attribute: str, config_attribute: str | None = None) -> str:
        """Replay shards, reward distributions and policy checkpoints live in the run directory unless configured."""
        configured = getattr(self.args, config_attribute, None) if config_attribute else None
        if not configured and not getattr(self, cache_attribute, None) and self.run_dir is not None:
            path = self.run_dir / directory
            path.mkdir(parents=True, exist_ok=True)
            setattr(self, cache_attribute, str(path))
        return super()._resolve_output_dir(directory, cache_attribute=cache_attribute,
                                           config_attribute=config_attribute)

    # ----- logging and the run ------------------------------------------------------------------
    def _log_iteration_replay(self, iteration_idx: int, *, train_pairs: Sequence[PreferencePair],
                              current_pair_count: int, train_pair_count: int) -> None:
        """``iter/*`` through :meth:`log_metrics` (distribution JSON written beside the replay first)."""
        self._iterative_pairs_trained += int(train_pair_count)
        self._iterations_run += 1
        distribution = self._log_reward_distribution_enabled()
        if distribution:
            self._write_iteration_reward_distribution(iteration_idx, train_pairs)
        shards = getattr(self, "_preference_replay_shards_state", [])
        metrics: dict[str, Any] = {"iter/current_iteration": float(iteration_idx + 1),
                                   "iter/current_preference_pairs": float(current_pair_count),
                                   "iter/total_preference_pairs": float(sum(int(s.num_pairs) for s in shards)),
                                   "iter/train_preference_pairs": float(train_pair_count),
                                   "env_step": float(self.env_step)}
        if distribution:
            metrics.update(self._iteration_reward_distribution_metrics(iteration_idx))
            metrics.update(self._selected_reward_distribution_metrics(iteration_idx, train_pairs))
        self.log_metrics(metrics)

    def train(self, *args: Any, **kwargs: Any) -> Any:
        self._iterative_pairs_trained = 0
        self._iterations_run = 0
        out = super().train(*args, **kwargs)
        if self._iterations_run and not self._iterative_pairs_trained:
            raise RuntimeError(all_tied_message(self.algorithm_name, self).replace(
                "on all", f"in all {self._iterations_run} refreshes, on all"))
        return out


def _project(tokenizer: Any, skeleton: Any, text: str) -> tuple[list[int], list[int]] | None:
    """Exact ids and mask of a role action text under ``skeleton``, or None when the text is not
    exactly ``skeleton.render(values)`` for values the role grammar can produce."""
    try:
        data = json.loads(text)
        entries = data["assignments"]
        if [(e["day"], e["field"]) for e in entries] != [tuple(s) for s in skeleton.slots]:
            return None
        values = [e["value"] for e in entries]
        if not all(isinstance(v, str) for v in values):
            return None
        rendered = json.dumps({"assignments": [{"day": d, "field": f, "value": v}
                                               for (d, f), v in zip(skeleton.slots, values)]}, ensure_ascii=False)
        if rendered != text:
            return None
        return encode_values(tokenizer, skeleton, values)
    except (ValueError, TypeError, KeyError):
        return None


def _maybe_float(v: Any) -> float | None:
    return None if v is None else float(v)


class WorkflowMADPOIterTrainer(IterativeBridge, PreferenceBridge, MADPOIterTrainer):
    """Iterative MADPO on a workflow's parallel roles."""

    default_config_cls = WorkflowMADPOIterConfig
    algorithm_name = "MADPOIter"


class WorkflowMARLHFIterTrainer(IterativeBridge, MARLHFBridge, MARLHFIterTrainer):
    """Iterative MARLHF on a workflow's parallel roles."""

    default_config_cls = WorkflowMARLHFIterConfig
    algorithm_name = "MARLHFIter"
