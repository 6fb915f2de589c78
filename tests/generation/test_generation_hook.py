"""CoMLRL's generation hook under the workflow trainers: a subclass's ``_generate_completions`` (a
structured-output trainer as OpenMLRL/LLM_Collab_Travel writes one) samples every rollout message under
C3 as it does under CoMLRL's MAGRPOTrainer, and the kwargs it passes to ``super()`` reach HF generate."""

import pytest
import torch
from datasets import Dataset
from transformers import StoppingCriteria, StoppingCriteriaList

from c3_plugin.core.loss import token_logprobs
from c3_plugin.core.protocol import Prompt, Sampling, encode_prompt
from c3_plugin.generation.hf import HFBackend
from c3_plugin.generation.hook import GenerationHook, backend_generate, overrides_hook
from c3_plugin.run.testing import tiny_model, tiny_tokenizer
from c3_plugin.trainers import C3Config, C3Trainer

# tree [2, 2]: 4 joint actions per prompt, by design
pytestmark = pytest.mark.filterwarnings("ignore:C3 plan .* spends")

JSON_ALPHABET = 'a":}'  # the tiny models write this small JSON vocabulary (the closing brace comes often)


def _closed_at(text: str) -> int | None:
    """Characters up to and including the brace that closes ``text``'s first top-level object (None: open)."""
    depth, in_string, escaped = 0, False, False
    for i, ch in enumerate(text):
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "{}":
            depth += 1 if ch == "{" else -1
            if depth == 0:
                return i + 1
    return None


class FirstObject(StoppingCriteria):
    """Stops a row at the first balanced ``}`` of ``"{" + generated text`` (Travel's CompleteJSONObjectCriteria);
    the prompt width is the length the first ``allowed`` call sees, whatever the trainer's prompt encoding."""

    def __init__(self, tokenizer):
        self.tokenizer, self.start, self.lengths = tokenizer, None, {}
        self.alphabet = [tokenizer.convert_tokens_to_ids(t) for t in tokenizer.tokenize(JSON_ALPHABET)]

    def allowed(self, batch_id, ids):  # prefix_allowed_tokens_fn
        self.start = ids.shape[-1] if self.start is None else self.start
        return self.alphabet

    def __call__(self, input_ids, scores, **kwargs):
        done = []
        for r in range(input_ids.shape[0]):
            if r not in self.lengths:
                text = "{" + self.tokenizer.decode(input_ids[r, self.start:], skip_special_tokens=True)
                if _closed_at(text) is not None:
                    self.lengths[r] = input_ids.shape[1] - self.start
            done.append(r in self.lengths)
        return torch.tensor(done, dtype=torch.bool, device=input_ids.device)


def structured_output(base):
    """A CoMLRL user's subclass of ``base``: the opening brace as prefill (Travel's ``prompt + "{"``), tokens
    from a JSON vocabulary and a stop at the first balanced ``}`` passed to ``super()._generate_completions``,
    responses cropped at the stop, ``"{"`` put back in front of the text the reward reads."""

    class StructuredOutputTrainer(base):
        def _generate_completions(self, agent, batch_items, agent_idx=0, num_return_sequences=1, max_new_tokens=128,
                                  prompts_override=None, external_prompts=None, **kwargs):
            prompts = (list(prompts_override) if prompts_override is not None
                       else [self.formatters[agent_idx](it) for it in batch_items])
            prompts = [p + "{" for p in prompts]
            tok = self.tokenizers[agent_idx]
            stop = FirstObject(tok)
            kwargs["stopping_criteria"] = StoppingCriteriaList([stop])
            kwargs["prefix_allowed_tokens_fn"] = stop.allowed
            result = super()._generate_completions(agent, batch_items, agent_idx=agent_idx,
                                                   num_return_sequences=num_return_sequences,
                                                   max_new_tokens=max_new_tokens, prompts_override=prompts,
                                                   external_prompts=None, **kwargs)
            tokens, lens, texts = [], [], []
            for s, (row, n) in enumerate(zip(result["completion_input_ids"][0], result["response_lens"])):
                n = min(int(n), stop.lengths.get(s, int(n)))
                tokens.append(row[:n])
                lens.append(n)
                texts.append("{" + tok.decode(row[:n], skip_special_tokens=True))
            result.update(prompts=prompts, completions=[texts], completion_input_ids=[tokens], response_lens=lens,
                          completion_attention_mask=[[t.new_ones(t.numel()) for t in tokens]])
            result.pop("completion_loss_masks", None)  # a CoMLRL dict has none
            self.hook_log.append((result["prompt_input_ids"][0].tolist(), [t.tolist() for t in tokens], texts))
            return result

    StructuredOutputTrainer.hook_log = []
    return StructuredOutputTrainer


def _items(n=3):
    return [{"id": f"p{i}", "prompt": f"Plan trip {i} as JSON:"} for i in range(n)]


def _reward(seen):
    def reward(completions1, completions2):
        seen.extend(completions1 + completions2)
        return [float(len(a) % 3 + len(b) % 2) for a, b in zip(completions1, completions2)]

    return reward


def _is_object_prefix(text):
    """Starts with ``{`` and stops at its first balanced ``}`` when it has one (else it hit the token cap)."""
    end = _closed_at(text)
    return text.startswith("{") and (end is None or end == len(text))


def _train(base, config, tmp_path, monkeypatch, **extra):
    tmp_path.mkdir()
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    tok = tiny_tokenizer()
    agents = [tiny_model(tok, seed=i) for i in range(2)]
    before = [[p.detach().clone() for p in a.parameters()] for a in agents]
    seen = []
    cls = structured_output(base)
    trainer = cls(agents=agents, tokenizer=tok, reward_func=_reward(seen), args=config,
                  train_dataset=Dataset.from_list(_items()), **extra)
    trainer.verbose = False
    trainer.train()
    changed = any(not torch.equal(b, p) for bs, a in zip(before, agents) for b, p in zip(bs, a.parameters()))
    return trainer, seen, changed


def test_the_hook_shapes_every_completion_under_comlrl_and_under_c3(tmp_path, monkeypatch):
    from comlrl.trainers.reinforce import MAGRPOConfig, MAGRPOTrainer

    comlrl_args = MAGRPOConfig(num_train_epochs=1, num_turns=1, num_generations=2, max_new_tokens=8, eval_interval=0,
                               agent_devices="cpu", rollout_buffer_size=1)
    _, seen, _ = _train(MAGRPOTrainer, comlrl_args, tmp_path / "comlrl", monkeypatch)
    assert seen and all(_is_object_prefix(c) for c in seen)  # CoMLRL: every completion the reward sees is the hook's
    assert any(_closed_at(c) for c in seen)  # the stop at the closing brace was exercised

    c3_args = C3Config(num_train_epochs=1, num_turns=1, num_generations=2, plan="tree [2, 2]", max_new_tokens=8,
                       agent_devices="cpu", instances_per_update=3, save_traces=False)
    trainer, seen, changed = _train(C3Trainer, c3_args, tmp_path / "c3", monkeypatch)
    assert overrides_hook(trainer) and trainer.update_step >= 1 and changed
    assert len(seen) == 2 * 3 * 4 and all(_is_object_prefix(c) for c in seen)  # 4 joint actions per item, both agents
    assert any(_closed_at(c) for c in seen)
    trainer.eval_dataset = Dataset.from_list(_items(2))
    seen.clear()
    trainer.evaluate()  # greedy evaluation decodes through the hook as well
    assert len(seen) == 2 * 2 and all(_is_object_prefix(c) for c in seen)


def test_c3_traces_and_trains_exactly_the_hooks_tokens(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("WANDB_MODE", "offline")
    tok = tiny_tokenizer()
    seen = []
    cls = structured_output(C3Trainer)
    args = C3Config(num_train_epochs=1, num_turns=1, num_generations=2, plan="tree [2, 2]", max_new_tokens=8,
                    agent_devices="cpu", instances_per_update=3, save_traces=False)
    tr = cls(agents=[tiny_model(tok, seed=0), tiny_model(tok, seed=1)], tokenizer=tok, reward_func=_reward(seen),
             args=args, train_dataset=Dataset.from_list(_items()))
    tr.verbose = False
    ro = tr.collect(_items())
    returned = {(tuple(p), tuple(ids), text) for p, rows, texts in cls.hook_log for ids, text in zip(rows, texts)}
    decisions = [e for e in ro.entries if e.kind == "decision"]
    assert len(cls.hook_log) == 3 * 2  # per item: Agent0 once (2 samples), Agent1 once (its context is shared by both)
    for e in decisions:
        assert (tuple(e.prompt_ids), tuple(e.token_ids), e.message) in returned  # the trace records the hook's sample
        # ... its prompt ("{" prefilled)
        assert e.prompt_ids != encode_prompt(tok, Prompt(e.context, e.role, e.agent), True)
        assert tok.decode(e.prompt_ids, skip_special_tokens=True).endswith("{") and e.message.startswith("{")
        ref = token_logprobs(tr.agents[e.agent], [e.prompt_ids], [e.token_ids], tok.pad_token_id, args.temperature)[0]
        assert e.logprobs == pytest.approx(ref, abs=1e-5)  # behaviour log-probs conditioned on the hook's prompt
    assert {e.output for e in decisions} == {t for _, _, texts in cls.hook_log for t in texts}
    assert ro.budget.totals()["tokens_generated"] == sum(len(e.token_ids) for e in decisions if e.shared is None)

    trained = []
    update = tr.update_policies
    tr.update_policies = (lambda samples: trained.extend(s for group in samples.values() for s in group)
                          or update(samples))
    tr.train()
    returned = {(tuple(p), tuple(ids)) for p, rows, _ in cls.hook_log for ids in rows}
    assert trained and all((tuple(s.prompt_ids), tuple(s.completion_ids)) in returned
                           for s in trained)  # the update trains the hook's tokens on the hook's prompt


class ForcedToken(C3Trainer):
    """A subclass that passes HF generate kwargs through ``super()._generate_completions``."""

    forced = "x"

    def _generate_completions(self, agent, batch_items, agent_idx=0, num_return_sequences=1, max_new_tokens=128,
                              prompts_override=None, external_prompts=None, **kwargs):
        tid = self.tokenizers[agent_idx].convert_tokens_to_ids(self.forced)
        return super()._generate_completions(agent, batch_items, agent_idx=agent_idx,
                                             num_return_sequences=num_return_sequences, max_new_tokens=max_new_tokens,
                                             prompts_override=prompts_override, external_prompts=external_prompts,
                                             prefix_allowed_tokens_fn=lambda b, ids: [tid], **kwargs)


def _forced_trainer(tmp_path, monkeypatch, cls=ForcedToken, **config):
    monkeypatch.chdir(tmp_path)
    tok = tiny_tokenizer()
    args = C3Config(num_train_epochs=1, num_turns=1, num_generations=2, plan="tree [2, 2]", max_new_tokens=4,
                    agent_devices="cpu", save_traces=False, **config)
    return cls(agents=[tiny_model(tok, seed=0), tiny_model(tok, seed=1)], tokenizer=tok, reward_func=lambda a, b: [1.0],
               args=args, train_dataset=Dataset.from_list(_items()))


def test_kwargs_passed_to_super_reach_hf_generate(tmp_path, monkeypatch):
    tr = _forced_trainer(tmp_path, monkeypatch)
    ro = tr.collect(_items(2))
    assert {e.message for e in ro.entries if e.kind == "decision"} == {"xxxx"}  # the rollouts, through the hook
    out = tr._generate_completions(tr.agents[1], [_items(1)[0]], agent_idx=1, num_return_sequences=2, max_new_tokens=3)
    assert out["completions"] == [["xxx", "xxx"]]  # CoMLRL's own call (outside a rollout) honours them too
    assert ([t.tolist() for t in out["completion_input_ids"][0]]
            == [[tr.tokenizers[1].convert_tokens_to_ids("x")] * 3] * 2)


def test_hf_backend_honours_and_trims_at_a_hooks_stopping_criteria():
    tok = tiny_tokenizer()
    model = tiny_model(tok, seed=3)
    backend = HFBackend(lambda a: model, [tok])
    prompts = [Prompt("hello", "r", 0), Prompt("a longer prompt", "r", 0)]

    class OneOrTwo(StoppingCriteria):  # even rows stop after 1 token, odd rows after 2
        def __init__(self):
            self.width = None

        def __call__(self, input_ids, scores, **kwargs):
            self.width = input_ids.shape[1] - 1 if self.width is None else self.width
            rows = torch.arange(input_ids.shape[0])
            return input_ids.shape[1] - self.width >= rows % 2 + 1

    gens = backend.generate(prompts, 2, Sampling(max_new_tokens=6), generate_kwargs={"stopping_criteria": [OneOrTwo()]})
    for p, row in zip(prompts, gens):
        for j, g in enumerate(row):
            # cut where it stopped, no padding kept
            assert 1 <= len(g.token_ids) <= j + 1 and len(g.logprobs) == len(g.token_ids)
            ref = token_logprobs(model, [encode_prompt(tok, p)], [g.token_ids], tok.pad_token_id, 1.0)[0]
            assert g.logprobs == pytest.approx(ref, abs=1e-5)
    with pytest.raises(ValueError, match=r"generate kwargs \['temperature'\].*trainer config"):
        backend.generate(prompts, 1, Sampling(), generate_kwargs={"temperature": 0.1})


def test_what_the_hook_cannot_do_is_refused_by_name(tmp_path, monkeypatch):
    class Engine:  # a non-HF backend (vLLM's) cannot run transformers objects
        def generate(self, prompts, n, sampling):
            raise AssertionError("not reached")

    with pytest.raises(ValueError, match=r"Engine cannot run the HF generate kwargs "
                                         r"\['prefix_allowed_tokens_fn'\].*generation_backend: hf"):
        backend_generate(Engine(), [Prompt("x", "r", 0)], 1, Sampling(), {"prefix_allowed_tokens_fn": lambda b, i: [0]})
    tr = _forced_trainer(tmp_path, monkeypatch)
    tr.grammar = lambda prompt: object()
    with pytest.raises(ValueError, match="forced JSON skeleton.*overrides _generate_completions"):
        tr.collect(_items(1))
    tr.grammar = None
    hook = GenerationHook(tr, tr.backend)
    prompt = Prompt("ctx", "Agent0", 0, prefix="ANSWER:", item=_items(1)[0])
    out = {"completions": [["no prefix"]], "completion_input_ids": [[torch.tensor([5, 6])]],
           "prompt_input_ids": torch.tensor([[7, 8]]), "response_lens": [2]}
    with pytest.raises(ValueError, match="response prefix 'ANSWER:'.*does not start with it"):
        hook.generations(out, prompt, 1, Sampling())
    with pytest.raises(ValueError, match="returned 1 completions.*num_return_sequences=2"):
        hook.generations(out, prompt, 2, Sampling())
    assert not overrides_hook(C3Trainer.__new__(C3Trainer))
