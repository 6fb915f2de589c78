"""The trace is the whole state: the root records what shapes a context besides the messages (system
prompts, response prefixes, chat template hashes), decisions record their prompt token ids, and
replay_check compares token ids as well as text."""

import hashlib

import pytest

from c3_plugin import TraceEntry, load_workflow, materialize, read_jsonl, replay_check, write_jsonl
from c3_plugin.core.protocol import Prompt, Sampling, encode_prompt
from c3_plugin.core.synthetic import SyntheticBackend, SyntheticEnv
from c3_plugin.core.trace import chat_template_hash
from c3_plugin.generation.hf import HFBackend
from c3_plugin.run.testing import CHAT_TEMPLATE, tiny_model, tiny_tokenizer

ITEMS = [{"id": "a", "question": "1+1"}, {"id": "b", "question": "2+2"}]
SYSTEMS = {"Reasoner": "Plan briefly.", "Actor": "Answer in a box."}


def workflow(**systems):
    return load_workflow("reasoner_actor").with_templates({}, system={**SYSTEMS, **systems}, prefix={"Actor": "A:"},
                                                          max_new_tokens={"Reasoner": 4, "Actor": 3})


@pytest.fixture(scope="module")
def team():
    tok = tiny_tokenizer()
    return tok, tiny_model(tok, seed=0), tiny_model(tok, seed=1)


@pytest.fixture(scope="module")
def rollout(team):
    tok, m0, m1 = team
    wf = workflow()
    ro = materialize(wf, "tree [2, 2]", ITEMS, HFBackend(lambda a: [m0, m1][a], [tok, tok]),
                     lambda leaves: [0.0] * len(leaves), Sampling(max_new_tokens=6), tokenizers=[tok, tok],
                     use_chat_template=True)
    return wf, ro


def fresh(ro):
    return [TraceEntry.from_dict(e.to_dict()) for e in ro.entries]


def test_the_root_records_system_prompts_prefixes_and_chat_templates(rollout, team):
    tok = team[0]
    wf, ro = rollout
    root = ro.entries[0]
    assert root.kind == "instance" and root.systems == SYSTEMS and root.prefixes == {"Reasoner": "", "Actor": "A:"}
    assert root.use_chat_template is True
    assert (root.chat_templates == [hashlib.sha256(CHAT_TEMPLATE.encode()).hexdigest()] * 2
            == [chat_template_hash(tok)] * 2)
    assert chat_template_hash(tiny_tokenizer(chat_template=False)) is None
    for e in ro.entries:
        if e.kind == "decision":
            assert e.prompt_ids == encode_prompt(tok, Prompt(e.context, e.role, e.agent, e.prefix, SYSTEMS[e.role]))
    assert replay_check(ro.entries, wf, tokenizers=[tok, tok]) == []


def test_jsonl_round_trip_and_older_traces_still_load(rollout, team, tmp_path):
    wf, ro = rollout
    back = read_jsonl(write_jsonl(ro.entries, tmp_path / "t.jsonl"))
    assert back == ro.entries and replay_check(back, wf, tokenizers=[team[0]] * 2) == []
    new = ("prompt_ids", "systems", "prefixes", "use_chat_template", "chat_templates")
    old = [TraceEntry.from_dict({k: v for k, v in e.to_dict().items() if k not in new}) for e in ro.entries]
    assert all(getattr(e, f) is None for e in old for f in new)
    assert replay_check(old, wf) == [] and replay_check(old, wf, tokenizers=[team[0]] * 2) == []  # nothing to compare


def test_synthetic_rollouts_record_the_workflow_settings_without_tokenizers():
    wf = workflow()
    ro = materialize(wf, "tree [2, 2]", ITEMS, SyntheticBackend(SyntheticEnv(wf)), lambda leaves: [0.0] * len(leaves))
    root = ro.entries[0]
    assert root.systems == SYSTEMS and root.use_chat_template is None and root.chat_templates is None
    assert all(e.prompt_ids is None for e in ro.entries)
    problems = replay_check(ro.entries, workflow(Actor="Answer in words."))
    assert len(problems) == 2 and all("node 0 (root)" in p and "role Actor's system prompt" in p for p in problems)


def test_a_changed_system_prompt_is_reported_naming_the_entries(rollout, team):
    tok = team[0]
    wf, ro = rollout
    changed = workflow(Reasoner="Plan at length.")
    problems = replay_check(ro.entries, changed)
    assert len(problems) == 2 and all("(root)" in p
                                      and "role Reasoner's system prompt is recorded as 'Plan briefly.'" in p
                                      for p in problems)
    assert {p.split(":")[0] for p in problems} == {"instance a node 0 (root)", "instance b node 0 (root)"}
    with_tokens = replay_check(ro.entries, changed, tokenizers=[tok, tok])
    reasoners = [e for e in ro.entries if e.role == "Reasoner"]
    for e in reasoners:  # the re-encoded prompts now carry the other system prompt
        assert any(p.startswith(f"instance {e.instance} node {e.node} (Reasoner") and "prompt token ids differ" in p
                   for p in with_tokens)
    assert not any("(Actor" in p for p in with_tokens)
    entries = fresh(ro)
    entries[0].prefixes = {"Reasoner": "", "Actor": "B:"}  # a tampered record of the prefix
    assert replay_check(entries, wf) == ["instance a node 0 (root): hidden state: role Actor's response prefix is "
                                         "recorded as 'B:', the workflow has 'A:'"]


def test_a_changed_chat_template_is_reported(rollout, team):
    tok = team[0]
    wf, ro = rollout
    other = tiny_tokenizer()
    other.chat_template = CHAT_TEMPLATE.replace("<|assistant|>", "<|assistant|>\n")
    problems = replay_check(ro.entries, wf, tokenizers=[tok, other])
    roots = [p for p in problems if "(root)" in p]
    assert len(roots) == 2 and all("agent 1's chat template" in p for p in roots)
    actors = [e for e in ro.entries if e.role == "Actor"]
    assert len([p for p in problems if "prompt token ids differ" in p]) == len(actors)
    assert replay_check(ro.entries, wf, tokenizers=[tok, tok], use_chat_template=False)[0] == \
        "instance a node 0 (root): hidden state: recorded use_chat_template=True, replayed with False"


def test_tampered_token_ids_are_reported(rollout, team):
    tok = team[0]
    wf, ro = rollout
    entries = fresh(ro)
    target = next(e for e in entries if e.role == "Actor" and e.alternative == 1)
    target.prompt_ids = target.prompt_ids[:-1] + [target.prompt_ids[-1] + 1]
    problems = replay_check(entries, wf, tokenizers=[tok, tok])
    assert (len(problems) == 1 and problems[0].startswith(f"instance {target.instance} node "
                                                          f"{target.node} (Actor, step 1)"))
    assert f"at token {len(target.prompt_ids) - 1}" in problems[0]
    entries = fresh(ro)
    target = next(e for e in entries if e.role == "Reasoner")
    target.token_ids = target.token_ids + [tok.convert_tokens_to_ids("Z")]  # a token the message text does not have
    problems = replay_check(entries, wf, tokenizers=[tok, tok])
    assert (len(problems) == 1 and problems[0].startswith(f"instance {target.instance} node "
                                                          f"{target.node} (Reasoner, step 0)"))
    assert "message token ids decode to a different text" in problems[0]
    assert replay_check(entries, wf) == []  # text alone cannot see it


def test_the_trainers_rollouts_record_token_ids(tmp_path):
    from tests.trainers.test_trainers import template_trainer

    trainer, wf, train = template_trainer(tmp_path, "magrpo", "independent 2", 2)
    ro = trainer.collect([dict(train[i]) for i in range(2)])
    assert ro.entries[0].chat_templates == [chat_template_hash(t) for t in trainer.tokenizers]
    assert all(e.prompt_ids for e in ro.entries if e.kind == "decision")
    assert replay_check(ro.entries, wf, tokenizers=trainer.tokenizers,
                        use_chat_template=trainer.args.use_chat_template) == []
