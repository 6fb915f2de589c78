"""Workflows of the code domain: plan -> code, plan -> code -> review, and the multi-turn
team that reads execution feedback from the trace."""

from __future__ import annotations

from functools import partial

from c3_plugin.core.workflow import Workflow, workflow_from_dict

PLAN = "You are the Reasoner. Read the task and write a short numbered plan for the function. Do not write code."
CODE = "You are the Actor. Implement the function in Python following the plan. Reply with one ```python code block."
CODER = "You are the Coder. Implement the function in Python following the plan. Reply with one ```python code block."
REVIEW = ("You are the Reviewer. Check the Coder's function against the task, fix any bug, and reply with the final "
          "function in one ```python code block.")
REVISE_PLAN = "Explain what to fix, or confirm that the code is right. Do not write code."
REVISE_CODE = "Revise the code using the feedback and the Reasoner's advice. Reply with one ```python code block."


def _role(agent: int, system: str) -> dict:
    return {"agent": agent, "system": system}


def reasoner_actor() -> Workflow:
    return workflow_from_dict({"name": "reasoner_actor", "agents": 2, "roles": {
        "Reasoner": {**_role(0, PLAN), "template": "Task:\n{question}"},
        "Actor": {**_role(1, CODE), "reads": ["Reasoner"], "template": "Task:\n{question}\n\nPlan:\n{Reasoner}"}}})


def reasoner_coder_reviewer() -> Workflow:
    return workflow_from_dict({"name": "reasoner_coder_reviewer", "agents": 3, "roles": {
        "Reasoner": {**_role(0, PLAN), "template": "Task:\n{question}"},
        "Coder": {**_role(1, CODER), "reads": ["Reasoner"], "template": "Task:\n{question}\n\nPlan:\n{Reasoner}"},
        "Reviewer": {**_role(2, REVIEW), "reads": ["Reasoner", "Coder"],
                     "template": "Task:\n{question}\n\nPlan:\n{Reasoner}\n\nCoder's function:\n{Coder}"}}})


def multi_turn(rounds: int = 2, sandbox=None) -> Workflow:
    """Reasoner and Actor write; the environment runs the visible example test and records the
    result; both revise, ``rounds`` rounds in all."""
    from .tasks import run_visible_tests

    schedule = [{"role": "Reasoner", "reads": []}, {"role": "Actor", "reads": ["Reasoner"]}]
    for _ in range(rounds - 1):
        schedule += [{"feedback": "execution", "reads": ["Actor"]},
                     {"role": "Reasoner", "reads": ["Actor", "execution"], "template":
                      "Task:\n{question}\n\nCurrent code:\n{Actor}\n\n{execution}\n\n" + REVISE_PLAN},
                     {"role": "Actor", "reads": ["Actor", "execution", "Reasoner"], "template":
                      "Task:\n{question}\n\nCurrent code:\n{Actor}\n\n{execution}\n\nReasoner:\n{Reasoner}\n\n"
                      + REVISE_CODE}]
    spec = {"name": "multi_turn", "agents": 2, "roles": {
        "Reasoner": {**_role(0, PLAN), "template": "Task:\n{question}"},
        "Actor": {**_role(1, CODE), "template": "Task:\n{question}\n\nPlan:\n{Reasoner}"}}, "schedule": schedule}
    wf = workflow_from_dict(spec, feedback={"execution": partial(run_visible_tests, sandbox=sandbox)})
    return wf


def workflows() -> dict[str, Workflow]:
    return {"reasoner_actor": reasoner_actor(), "reasoner_coder_reviewer": reasoner_coder_reviewer(),
            "multi_turn": multi_turn()}
