"""Prompt texts for the six built-in workflows on math (structure comes from c3_plugin).

Each role gets a system prompt saying what it does; its user template carries the problem
and the messages it reads. Only the final role answers, within \\boxed{}.
"""

from __future__ import annotations

from c3_plugin.core.workflow import Workflow, load_workflow, workflow_from_dict

TEAM = {
    "reasoner_actor": "Two agents (Reasoner -> Actor) solve a math problem together.",
    "reasoner_actor_verifier": "Three agents (Reasoner -> Actor -> Verifier) solve a math problem together.",
    "four_turn": "Two agents (Reasoner and Actor) take turns twice to solve a math problem.",
    "chain5": "Five agents (Planner -> Solver -> Critic -> Reviser -> Verifier) solve a math problem together.",
    "chain10": ("Ten agents (Reader -> Planner -> Decomposer -> SolverA -> SolverB -> Integrator -> Critic -> "
                "Reviser -> Checker -> Verifier) solve a math problem together."),
    "branching": "Four agents solve a math problem: a Planner, two Solvers working in parallel, and an Integrator.",
}

ANSWER = "Put the final answer within \\boxed{}."
NO_ANSWER = "Do not state a final answer."

ROLE_JOB = {
    "Reasoner": "You are the Reasoner. Work out the key steps and guide the Actor with short, precise "
                f"reasoning. {NO_ANSWER}",
    "Actor": f"You are the Actor. Follow the Reasoner's guidance and solve the problem. {ANSWER}",
    "Planner": "You are the Planner. Write a numbered plan for solving the problem without "
               f"carrying it out. {NO_ANSWER}",
    "Solver": f"You are the Solver. Carry out the plan step by step. {NO_ANSWER}",
    "Critic": "You are the Critic. List concrete mistakes or gaps in the working; do not rewrite it.",
    "Reviser": f"You are the Reviser. Correct the working so that every listed defect is fixed. {NO_ANSWER}",
    "Verifier": "You are the Verifier. Check the working by an independent route and give the "
                f"checked answer. {ANSWER}",
    "Reader": "You are the Reader. Restate the problem: what is given and what is asked.",
    "Decomposer": "You are the Decomposer. Split the plan into package A (the opening steps) and package B (the rest).",
    "SolverA": f"You are Solver A. Carry out work package A only. {NO_ANSWER}",
    "SolverB": f"You are Solver B. Continue from Solver A's working and carry out work package B. {NO_ANSWER}",
    "Integrator": f"You are the Integrator. Merge the partial workings into one complete solution. {ANSWER}",
    "Checker": "You are the Checker. Cross-check the revised solution by another route and say "
               "whether the check passes.",
}

# Roles whose job changes with the workflow they are in.
OVERRIDES = {
    ("reasoner_actor_verifier", "Actor"): "You are the Actor. Follow the Reasoner's guidance and write a full "
                                          "candidate solution; leave the checked final answer to the "
                                          f"Verifier. {NO_ANSWER}",
    ("reasoner_actor_verifier", "Verifier"): "You are the Verifier. Review the Actor's candidate solution, check it "
                                             "by another method or by substituting the result back, then give the "
                                             f"final answer. {ANSWER}",
    ("chain10", "Integrator"): "You are the Integrator. Merge the two partial workings into one coherent candidate "
                               f"solution. {NO_ANSWER}",
    ("chain10", "Verifier"): "You are the Verifier. Resolve any remaining discrepancy and give the "
                             f"final answer. {ANSWER}",
    ("branching", "SolverA"): f"You are Solver A. Solve the problem from the plan on your own. {NO_ANSWER}",
    ("branching", "SolverB"): f"You are Solver B. Solve the problem from the plan on your own. {NO_ANSWER}",
    ("branching", "Integrator"): "You are the Integrator. Compare both solvers' workings, resolve any disagreement "
                                 f"and give the final answer. {ANSWER}",
}


def _template(reads: tuple[str, ...], repeated: bool) -> str:
    """Labelled messages of the roles read; the plain ``{context}`` when a read role spoke more than once."""
    if repeated:
        return "Problem:\n{question}\n\nMessages so far, oldest first:\n{context}"
    return "\n\n".join(["Problem:\n{question}"] + [f"{role}:\n{{{role}}}" for role in reads])


def math_workflow(name: str) -> Workflow:
    """A built-in workflow with this domain's system prompts and templates."""
    wf = load_workflow(name)
    spec = wf.to_dict()
    for role, rspec in spec["roles"].items():
        rspec["system"] = f"{TEAM[name]} {OVERRIDES.get((name, role), ROLE_JOB[role])}"
    seen: dict[str, int] = {}
    for item in spec["schedule"]:
        reads = tuple(item.get("reads", ()))
        item["template"] = _template(reads, any(seen.get(r, 0) > 1 for r in reads))
        seen[item["role"]] = seen.get(item["role"], 0) + 1
    return workflow_from_dict(spec)


def workflows() -> dict[str, Workflow]:
    return {name: math_workflow(name) for name in TEAM}
