"""The fields every workflow preference config adds to CoMLRL's, and the checks on them."""

from __future__ import annotations

from dataclasses import dataclass

from c3_plugin.core.loss import SEQUENCE_AGGREGATIONS as AGGREGATIONS


@dataclass
class PreferenceFields:
    """Fields every workflow preference config adds to CoMLRL's."""

    # "sequence_mean": length-normalised value-token log-probs; "token_sum": summed
    loss_aggregation: str = "sequence_mean"
    use_chat_template: bool = True  # wrap role contexts in the tokenizer's chat template when it has one
    # cap on sequences per generate call (None: all candidates of a prompt at once)
    generation_batch_size: int | None = None
    json_stop: bool = False  # stop free-text generation once the message is one complete JSON object
    # glob patterns of the metric keys published to W&B (None: all); metrics.jsonl keeps everything
    wandb_keys: list[str] | None = None
    final_eval_num_samples: int | None = None  # items of the before/after evaluations (None: eval_num_samples; 0: all)
    # during one actor's DPO update, keep the other actors and their optimizer states on the CPU (accelerators only)
    offload_inactive_actor: bool = True

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.loss_aggregation not in AGGREGATIONS:
            raise ValueError(f"loss_aggregation must be one of {AGGREGATIONS}, got {self.loss_aggregation!r}")
        if getattr(self, "collaboration_mode", "decentralized") != "decentralized":
            raise ValueError("workflow preference trainers train one actor per role "
                             "(collaboration_mode=decentralized); use a centralized_* algorithm for the joint actor")
        rl = getattr(self, "rl_algorithm", None)
        if rl is not None and rl in ("maac", "iac"):
            raise ValueError(f"rl_algorithm={rl!r}: the workflow MARLHF trainers run CoMLRL's MAGRPO family online "
                             "(magrpo, mareinforce, maremax, marloo); actor-critic children bypass workflow generation")
        if hasattr(self, "comparator_policy"):
            if self.comparator_policy == "api":
                raise ValueError("comparator_policy=api is disabled: API comparators return text, not the exact token "
                                 "ids and value masks the preference records keep")
            if self.comparator_generation_mode not in ("decentralized", "centralized"):
                raise ValueError(f"comparator_generation_mode must be decentralized or centralized, "
                                 f"got {self.comparator_generation_mode!r}")
            if self.comparator_generation_mode == "centralized" and int(self.comparator_centralized_agent_index) != 0:
                raise ValueError("comparator_generation_mode=centralized: the teacher is policy index 0 "
                                 "(comparator_centralized_agent_index=0), got "
                                 f"{self.comparator_centralized_agent_index}")
            if getattr(self, "preference_scoring_reward", "task") != "task":
                raise ValueError("preference_scoring_reward must be 'task': preferences come only from the task reward")
