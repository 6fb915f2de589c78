import pytest
import yaml

from c3_plugin import WorkflowError, builtin_workflows, load_workflow, workflow_from_dict


def two_roles(**actor):
    return {"name": "t", "roles": {"Reasoner": {"agent": 0, "template": "Q: {question}"},
                                   "Actor": {"agent": 1, "reads": ["Reasoner"], "template": "{question}|{context}",
                                             **actor}}}


def test_six_paper_topologies_ship_as_data():
    expected = {
        "reasoner_actor": ["Reasoner", "Actor"],
        "reasoner_actor_verifier": ["Reasoner", "Actor", "Verifier"],
        "four_turn": ["Reasoner", "Actor", "Reasoner", "Actor"],
        "chain5": ["Planner", "Solver", "Critic", "Reviser", "Verifier"],
        "chain10": ["Reader", "Planner", "Decomposer", "SolverA", "SolverB", "Integrator", "Critic", "Reviser",
                    "Checker", "Verifier"],
        "branching": ["Planner", "SolverA", "SolverB", "Integrator"],
    }
    assert set(builtin_workflows()) == set(expected)
    for name, points in expected.items():
        wf = load_workflow(name)
        assert wf.decision_points() == points
        assert wf.final == points[-1]
    assert load_workflow("branching").parallel_stages() == [["Planner"], ["SolverA", "SolverB"], ["Integrator"]]
    assert load_workflow("four_turn").num_agents == 2
    assert load_workflow("chain10").num_agents == 10


def test_context_assembly_substitutes_question_context_and_roles():
    wf = workflow_from_dict({"name": "t", "roles": {
        "A": {"agent": 0, "template": "{question}"},
        "B": {"agent": 1, "reads": ["A"], "template": "{question}"},
        "C": {"agent": 0, "reads": ["A", "B"], "template": "[{context}] latest A={A} \\boxed{{}} {unused_field}"},
    }, "inputs": ["unused_field"]})
    c = wf.steps[2]
    text = wf.assemble(c, {"question": "2+2"}, ["plan", "work"])
    assert text == "[plan\n\nwork] latest A=plan \\boxed{} "  # missing input is the empty string


def test_repeated_roles_read_latest_and_all_earlier_turns():
    wf = load_workflow("four_turn")
    assert [s.decision for s in wf.steps] == [0, 1, 2, 3]
    fourth = wf.steps[3]
    assert wf.assemble(fourth, {"question": "Q"}, ["r1", "a1", "r2"]) == "Q\n\nr1\n\na1\n\nr2"
    third = wf.steps[2]
    assert wf.assemble(third, {"question": "Q"}, ["r1", "a1"]) == "Q\n\nr1\n\na1"


def test_parallel_roles_read_nothing_of_each_other():
    wf = load_workflow("branching")
    solver_b = wf.steps[2]
    assert "SolverA" not in solver_b.reads
    assert wf.assemble(solver_b, {"question": "Q"}, ["plan", "workA"]) == "Q\n\nplan"
    assert wf.assemble(wf.steps[3], {"question": "Q"}, ["plan", "workA", "workB"]) == "Q\n\nworkA\n\nworkB"


def test_prefix_is_part_of_the_output_and_merger_joins_parallel_roles():
    spec = {"name": "m", "roles": {"P": {"agent": 0, "prefix": "{"}, "Q": {"agent": 1}},
            "merger": {"fn": "tests.core.test_workflow:join", "roles": ["P", "Q"]}}
    wf = workflow_from_dict(spec)
    assert wf.parallel_stages() == [["P", "Q"]]
    assert wf.final is None and wf.merge_roles == ("P", "Q")
    assert wf.final_action(["{a", "b"]) == "{a+b"


def join(outputs):
    return "+".join(outputs[r] for r in sorted(outputs))


def test_feedback_steps_enter_the_context():
    spec = {"name": "fb", "roles": {"Actor": {"agent": 0, "template": "{question}"}},
            "schedule": ["Actor", {"feedback": "run", "reads": ["Actor"]},
                         {"role": "Actor", "reads": ["Actor", "run"], "template": "{question}\n{run}"}]}
    wf = workflow_from_dict(spec, feedback={"run": lambda item, outs: f"ran {outs['Actor']}"})
    assert [s.kind for s in wf.steps] == ["decision", "feedback", "decision"]
    assert wf.num_decisions == 2
    assert wf.assemble(wf.steps[2], {"question": "Q"}, ["code", "ran code"]) == "Q\nran code"


@pytest.mark.parametrize("spec, fragment", [
    ({"name": "c", "roles": {"A": {"agent": 0, "reads": ["B"]}, "B": {"agent": 1, "reads": ["A"]}}},
     "A: cycle in reads: A -> B -> A"),
    ({"name": "r", "roles": {"A": {"agent": 0}, "B": {"agent": 1, "reads": ["A"]}}, "schedule": ["B", "A"]},
     "B: reads 'A', which has not acted"),
    (two_roles(template="{question} {plan}"), "Actor: unknown template key '{plan}'"),
    (two_roles(agent=5) | {"agents": 2}, "Actor: unknown agent index 5"),
    ({"name": "p", "roles": {"A": {"agent": 0}, "B": {"agent": 1}}}, "A, B: no final role"),
    ({"name": "e", "roles": {"A": {"agent": 0}}, "schedule": [{"feedback": "x"}]}, "x: feedback step has no function"),
    ({"name": "u", "roles": {"A": {"agent": 0}}, "schedule": ["A", "Z"]}, "Z: unknown role"),
    ({"name": "n", "roles": {"A": {"agent": 0}, "B": {"agent": 0}}, "schedule": ["A"]},
     "B: role is declared but never scheduled"),
    ({"name": "k", "roles": {"A": {"agent": 0, "temp": 1}}}, "A: unknown role field"),
    ({"name": "f", "roles": {"A": {"agent": 0}}, "final": "Z"}, "Z: final role"),
    ({"name": "b", "roles": {"A": {"agent": 0, "template": "\\boxed{}"}}}, "A: template key"),
    ({"name": "s", "roles": {"A": {"agent": 0, "reads": ["A"]}}}, "A: cycle in reads: A -> A"),
])
def test_invalid_workflows_name_role_and_problem(spec, fragment):
    with pytest.raises(WorkflowError) as err:
        workflow_from_dict(spec)
    assert fragment in str(err.value)


def test_yaml_file_and_dict_round_trip(tmp_path):
    path = tmp_path / "wf.yaml"
    path.write_text(yaml.safe_dump(two_roles(prefix="\\boxed{")))
    wf = load_workflow(path)
    assert wf.roles["Actor"].prefix == "\\boxed{"
    again = workflow_from_dict(wf.to_dict())
    assert again.decision_points() == wf.decision_points()
    assert [s.template for s in again.steps] == [s.template for s in wf.steps]
    for name in builtin_workflows():
        b = load_workflow(name)
        assert workflow_from_dict(b.to_dict()).steps == b.steps
    with pytest.raises(WorkflowError, match="neither a built-in"):
        load_workflow("no_such_workflow")


def test_with_templates_swaps_prompts_and_keeps_structure():
    wf = load_workflow("reasoner_actor").with_templates(
        {"Reasoner": "Plan: {question}", "Actor": "{question}\nPlan: {Reasoner}"}, prefix={"Actor": "\\boxed{"})
    assert wf.assemble(wf.steps[1], {"question": "1+1"}, ["add"]) == "1+1\nPlan: add"
    assert wf.roles["Actor"].prefix == "\\boxed{"
    with pytest.raises(WorkflowError, match="Critic: no such role"):
        wf.with_templates({"Critic": "x"})
