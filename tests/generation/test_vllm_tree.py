"""The wave plan of the vLLM tree prefill (``c3_plugin.generation.vllm_tree``): pure, no engine (the engine-side
adoption of partial blocks is tested on a real engine in ``test_vllm_backend.py``)."""

from __future__ import annotations

from c3_plugin.generation.vllm_tree import wave_plan


def test_a_prompt_waits_for_the_earlier_prompt_it_shares_a_partial_block_with():
    block = 4
    prompts = [[1, 2, 3, 4, 5, 6],  # wave 0
               [1, 2, 3, 4, 5, 7, 8],  # shares 5 tokens with prompt 0, part-way through its second block: wave 1
               [9, 9, 9],  # shares nothing: wave 0
               [1, 2, 3, 4, 8, 8],  # shares one whole block with prompt 0: found in the same wave
               [1, 2, 3, 4, 5, 7, 8, 9]]  # shares most with prompt 1 (7 tokens): after it
    assert wave_plan(prompts, [2, 3, 1, 1, 2], block) == [[0, 1], [1, 2, 2], [0], [0], [2, 3]]


def test_a_prompts_samples_follow_its_first_and_a_repeat_follows_its_twin():
    # a repeated prompt shares all but its last token with its twin (the last is computed for the logits)
    assert wave_plan([[5, 6, 7], [5, 6, 7]], [3, 1], 32) == [[0, 1, 1], [1]]
    assert wave_plan([[5]], [1], 32) == [[0]]
