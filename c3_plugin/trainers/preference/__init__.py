"""MAPL preference trainers on workflows: MADPO, MARLHF and their iterative forms over CoMLRL.

Each trainer is :class:`~c3_plugin.trainers.bridge.WorkflowBridge` plus CoMLRL's trainer (``MADPOTrainer``,
``MARLHFTrainer``, ``MADPOIterTrainer``, ``MARLHFIterTrainer``): CoMLRL keeps its collection
loop, pair selection, replay schedule, comparator policies, reward-model recipe and MAGRPO
online stage; the bridge makes every sample a role message of the workflow (forced JSON
skeletons, value-token loss masks) and evaluates with the workflow's greedy decoding on the
fixed task reward. What changes against CoMLRL:

* **labels**: preferences come only from the task reward (``reward_func``, never a target
  plan, never a learned score); ties give no pair; a run in which every candidate tied
  raises :class:`RuntimeError` instead of returning silently;
* **exact tokens**: every pair, including comparator candidates and replayed pairs, keeps
  the generated continuation ids (EOS kept) and their value-token loss masks
  (:class:`MaskedPreferenceTensors`); replay records carry prompt/winner/loser ids and masks
  and ``"joint": false`` (the centralized joint actor writes ``"joint": true``); a record of
  the other kind, or a text-only CoMLRL record, is rejected; with
  ``comparator_generation_mode=centralized`` (iterative trainers) one teacher, policy index 0's
  comparator model, writes the joint action, which is split into the role actions and encoded
  under each actor's own prompt and skeleton (:func:`~c3_plugin.core.structured.encode_values`); a
  projection that is not a valid role action is scored but forms no pair;
* **likelihood**: a sequence's log-prob covers exactly its stored continuation ids, the final
  selected token included, restricted to value tokens by the loss mask, summed
  (``loss_aggregation: token_sum``) or length-normalised (``sequence_mean``); the assistant
  prefill sits in the prompt ids and is never a target;
* **streamed joint DPO**: per agent and pair one winner/loser graph, backward at once (loss
  scaled by 1/batch), the other agents' deltas detached as in CoMLRL; a non-finite loss
  raises; zero dropout is required (checked at construction);
* **MARLHF**: the reward model is a backbone without LM vocabulary logits
  (:class:`BackboneRewardModel`) fitted while the actors sit on CPU; its optimizer is
  released after fitting and the fixed model scores (no grad) the online MAGRPO stage, whose policy
  loss uses the same masked log-probs (one live graph per sequence); evaluation always uses
  the task reward;
* **logging**: ``train/dpo_loss``, ``train/dpo_margin``, ``train/dpo_accuracy``,
  ``train/reward_gap``; ``train/reward_model_loss``, ``train/reward_model_accuracy``;
  ``turn_1/*`` once per joint step; ``iter/*`` per refresh (x-axis ``iter/current_iteration``);
  everything also in ``metrics.jsonl``; replay shards, reward-distribution JSON and policy
  checkpoints under the run directory.

Modules: :mod:`.fields` (the fields every preference config adds), :mod:`.likelihood` (pair tensors and the
masked sequence log-prob), :mod:`.bridge` (what the four trainers share: pair collection and streamed
joint DPO), :mod:`.madpo`, :mod:`.marlhf` (with :mod:`.reward_model`) and :mod:`.iterative` (a config and
its trainer each).
"""

from c3_plugin.trainers.preference.fields import PreferenceFields
from c3_plugin.trainers.preference.iterative import (
           WorkflowMADPOIterConfig,
           WorkflowMADPOIterTrainer,
           WorkflowMARLHFIterConfig,
           WorkflowMARLHFIterTrainer,
)
from c3_plugin.trainers.preference.likelihood import MaskedPreferenceTensors, dropout_fields
from c3_plugin.trainers.preference.madpo import WorkflowMADPOConfig, WorkflowMADPOTrainer
from c3_plugin.trainers.preference.marlhf import WorkflowMARLHFConfig, WorkflowMARLHFTrainer
from c3_plugin.trainers.preference.reward_model import BackboneRewardModel

__all__ = ["BackboneRewardModel", "MaskedPreferenceTensors", "PreferenceFields", "WorkflowMADPOConfig",
           "WorkflowMADPOIterConfig", "WorkflowMADPOIterTrainer", "WorkflowMADPOTrainer", "WorkflowMARLHFConfig",
           "WorkflowMARLHFIterConfig", "WorkflowMARLHFIterTrainer", "WorkflowMARLHFTrainer", "dropout_fields"]
