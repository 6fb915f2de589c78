"""The travel domain: catalogs, scaffold, contract, merger, reward and evaluator, split and dry run."""

import ast
import json
from pathlib import Path

import pytest

from domains.travel import all_dash, eval_aggregator, eval_logger, normalise, plan_to_actions, reward, task_of, terms
from domains.travel.actions import merge, parse_action, recover_assignments, render_action
from domains.travel.catalog import parse_reference, route_scaffold
from domains.travel.data import PANELS, split_rows
from domains.travel.evaluate import evaluate_joint, same_route
from domains.travel.prompts import budget_caps, experience_catalog, logistics_catalog, prompt_fields

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "fixtures" / "travel" / "train.jsonl"
RAW = [json.loads(line) for line in FIXTURE.read_text().splitlines()]
ROWS = [normalise(r, i, "train") for i, r in enumerate(RAW)]
PLANS = [[d for d in ast.literal_eval(r["annotated_plan"])[1] if d] for r in RAW]
# Human plans the evaluator does not accept, with the failing checks (explained in domains/travel/README.md).
FLAWED_HUMAN_PLANS = {41: {"city_consistency", "grounded", "budget"}}


def actions_of(i):
    return plan_to_actions(PLANS[i], ROWS[i]["days"])


def failing_checks(i, texts=None):
    j = evaluate_joint(task_of(ROWS[i]), texts or actions_of(i))
    return {k for k, ok in j.strict.commonsense.items() if not ok} | {k for k, v in j.strict.hard.items() if v < 1.0}


def test_every_reference_slice_parses_into_catalogs_and_a_scaffold():
    for row in ROWS:
        task = task_of(row)
        cat = task.catalog
        assert cat.restaurants and cat.attractions and cat.accommodations and cat.legs
        assert task.scaffold[0].leg is not None and task.scaffold[0].leg.origin == row["org"]
        assert task.scaffold[-1].leg is not None and task.scaffold[-1].leg.dest == row["org"]
        moves = {dp.leg.dest for dp in task.scaffold if dp.leg} - {row["org"]}
        assert len(moves) == row["visiting_city_number"]


def test_a_restaurant_name_with_a_comma_and_the_index_column_parse():
    task = task_of(ROWS[20])
    names = {r.name for r in task.catalog.restaurants["philadelphia"]}
    assert "Red Ginger Sushi, Grill & Bar" in names
    assert all(not n[:1].isdigit() or not n.split()[0].isdigit() for n in names if n.startswith("5"))  # no leaked index
    acc = task.catalog.find("accommodations", "Industrial Loft Living in NYC", "Philadelphia")
    assert (acc.price, acc.room_type, acc.min_nights, acc.max_occupancy) == (178.0, "Entire home/apt", 4, 3)


def test_unavailable_flights_still_preserve_the_route_scaffold():
    row = dict(ROWS[20])
    ref = ast.literal_eval(row["reference_information"])
    for block in ref:
        if block["Description"].startswith("Flight from"):
            o, rest = block["Description"][len("Flight from "):].split(" to ")
            d, date = rest.split(" on ")
            block["Content"] = f"There is no flight from {o} to {d} on {date}."
    cat = parse_reference(ref, ast.literal_eval(row["date"]))
    assert not cat.flights
    before = [dp.current_city for dp in task_of(ROWS[20]).scaffold]
    after = [dp.current_city for dp in route_scaffold(cat, row["days"], row["org"])]
    assert after == before == ["from Nashville to Pittsburgh", "Pittsburgh", "from Pittsburgh to Philadelphia",
                               "Philadelphia", "from Philadelphia to Nashville"]
    row["reference_information"] = repr(ref)
    row["id"] = "no-flights"
    assert ("Flight Number" not in logistics_catalog(task_of(row))
            and "Self-driving, from Nashville to Pittsburgh" in logistics_catalog(task_of(row)))


def test_annotated_human_plans_score_one_wherever_grounded_and_valid():
    """Every train row's human plan, split into the two role actions, scores 1.0 unless the evaluator
    finds a failing check; the exceptions are listed with their checks."""
    failures = {}
    for i in range(len(ROWS)):
        r = terms(task_of(ROWS[i]), list(actions_of(i)))["reward"]
        bad = failing_checks(i)
        if bad:
            failures[i] = bad
            assert r < 0.9
        else:
            assert r == pytest.approx(1.0), f"row {i}: grounded, valid human plan scored {r}"
    assert failures == FLAWED_HUMAN_PLANS


def _swap_restaurant(i):
    """A second valid itinerary: one meal replaced by an unused, cheaper restaurant of the same city."""
    task = task_of(ROWS[i])
    plan = [dict(d) for d in PLANS[i]]
    used = {d[m].rsplit(",", 1)[0].strip() for d in plan for m in ("breakfast", "lunch", "dinner") if d[m] != "-"}
    for day in plan:
        if day["lunch"] != "-":
            name, city = day["lunch"].rsplit(",", 1)
            current = task.catalog.find("restaurants", name, city)
            options = [r for r in task.catalog.restaurants[current.city.casefold()] if r.name not in used
                       and r.cost <= current.cost]
            if options:
                day["lunch"] = options[0].value
                return plan
    raise AssertionError("no swap found")


def test_two_different_valid_itineraries_both_reach_the_maximum_reward():
    i = 15
    other = _swap_restaurant(i)
    a, b = actions_of(i), plan_to_actions(other, ROWS[i]["days"])
    assert a[1] != b[1]
    assert reward([a[0], b[0]], [a[1], b[1]],
                  batch_items=[ROWS[i], ROWS[i]]) == [pytest.approx(1.0), pytest.approx(1.0)]


def test_target_plan_fields_cannot_change_the_score():
    i = 3
    a, b = actions_of(i)
    clean = reward([a], [b], batch_items=[ROWS[i]])[0]
    poisoned = dict(ROWS[i], annotated_plan=RAW[4]["annotated_plan"], gold_plan="[]", example_plan="x")
    assert reward([a], [b], batch_items=[poisoned]) == [clean]
    assert "annotated_plan" not in normalise(RAW[i], i, "train")
    dash = all_dash(ROWS[i]["days"])
    assert reward([dash[0]], [dash[1]], batch_items=[poisoned]) == reward([dash[0]], [dash[1]], batch_items=[ROWS[i]])


def test_ungrounded_and_all_dash_plans_are_penalised():
    i = 0
    good = actions_of(i)
    fake = [dict(d) for d in PLANS[i]]
    for d in fake:
        for m in ("breakfast", "lunch", "dinner", "accommodation"):
            if d[m] != "-":
                d[m] = "Imaginary Place, " + d[m].rsplit(",", 1)[1].strip()
    ungrounded = plan_to_actions(fake, ROWS[i]["days"])
    dash = all_dash(ROWS[i]["days"])
    r_good, r_fake, r_dash = reward([good[0], ungrounded[0], dash[0]], [good[1], ungrounded[1], dash[1]],
                                    batch_items=[ROWS[i]] * 3)
    assert r_good == pytest.approx(1.0)
    assert r_dash == pytest.approx(0.08, abs=1e-12)
    assert r_fake < 0.7 and r_dash < r_fake < r_good
    assert "grounded" in failing_checks(i, list(ungrounded))


def test_a_malformed_one_agent_shortcut_cannot_score_high():
    for i in (0, 5, 20):
        good = actions_of(i)
        task = task_of(ROWS[i])
        for broken in ("", good[1][:-2], "no json here"):
            t = terms(task, [good[0], broken])
            before_penalties = 0.02 * t["P"] + 0.03 * t["E"] + 0.04 * t["V"]
            assert t["J"] == 0.0 and before_penalties <= 0.07 + 1e-12 and t["reward"] <= 0.07
        both = terms(task, [good[0][:-3], good[1][:-3]])
        assert both["V"] == 0.0 and 0.02 * both["P"] + 0.03 * both["E"] <= 0.05 + 1e-12 and both["reward"] <= 0.05
        assert both["E"] > 0.0  # recovery still ranks the truncated actions above nothing


def test_reward_only_repair_cannot_weaken_ultimate_metrics():
    """Recovered triples move only the learning channel E, never a strict or end metric."""
    i = 20
    task = task_of(ROWS[i])
    good = actions_of(i)
    truncated = [good[0][:-2], good[1][:-2]]  # every triple complete, the array never closed
    garbage = ["x", "y"]
    t_trunc, t_garbage = terms(task, truncated), terms(task, garbage)
    assert t_trunc["E"] > 0.5 and t_garbage["E"] == 0.0
    m_trunc, m_garbage = evaluate_joint(task, truncated).metrics, evaluate_joint(task, garbage).metrics
    assert m_trunc == m_garbage
    assert (m_trunc["collaboration_success"] == m_trunc["reference_plan_success"]
            == m_trunc["required_grounded_recall"] == 0.0)
    # recovery rejects wrong-role, overflow and route-changing triples
    text = (good[0][:-2] + ', {"day": 1, "field": "lunch", "value": "x"}, {"day": 1, "field": '
                           '"current_city", "value": "Mars"}')
    rec = recover_assignments(text, 0, task.days, task.scaffold_cities, same_route)
    assert (1, "lunch") not in rec and same_route(rec[(1, "current_city")], task.scaffold[0].current_city)
    assert recover_assignments('{"day": 1, "field": "current_city", "value": "Mars"}', 0, task.days,
                               task.scaffold_cities, same_route) == {}


def test_structured_action_must_close_the_assignments_array():
    days = 3
    ok = render_action({}, 0, days)
    assert parse_action(ok, 0, days).valid
    unclosed = ok[:-2] + "}"  # the final } arrives before the ] that closes assignments
    assert not parse_action(unclosed, 0, days).parsed
    assert not parse_action(ok[:-1], 0, days).parsed


def test_merger_counts_overlap_conflict_and_overflow():
    days = 3
    logistics = json.loads(render_action({}, 0, days))
    logistics["assignments"].append({"day": 2, "field": "lunch", "value": "Somewhere, X"})  # teammate's slot
    logistics["assignments"].append({"day": 1, "field": "transportation", "value": "Taxi, other"})  # duplicate, differs
    experience = render_action({(2, "lunch"): "Elsewhere, X"}, 1, days)
    texts = [json.dumps(logistics), experience]
    acts = [parse_action(t, a, days) for a, t in enumerate(texts)]
    m = merge(acts, days, raw=texts)
    assert acts[0].rejected == 1 and acts[0].duplicates == 1 and not acts[0].valid and acts[1].valid
    assert m.overlaps == 1 and m.conflicts == 2 and m.overflow == 2
    assert m.plan[1]["lunch"] == "Elsewhere, X"  # ownership: the writer of another role's slot is ignored


def test_compact_role_catalogs_expose_every_owned_choice_and_nothing_else():
    for i in (0, 20, 33):
        task = task_of(ROWS[i])
        lo, ex = logistics_catalog(task), experience_catalog(task)
        for dp in task.scaffold:
            if dp.leg:
                for f in task.catalog.flights_for(dp.leg.origin, dp.leg.dest, dp.leg.date):
                    assert f'"{f.value}"' in lo
                for mode in ("self-driving", "taxi"):
                    g = task.catalog.ground_for(mode, dp.leg.origin, dp.leg.dest)
                    assert g is None or f'"{g.value}"' in lo
        for dp in task.scaffold:
            if not dp.last:
                for acc in task.catalog.accommodations[dp.city.casefold()]:
                    assert f'"{acc.value}"' in lo and f'"{acc.value}"' not in ex
            for city in dp.cities:
                for r in task.catalog.restaurants.get(city.casefold(), []):
                    assert f'"{r.value}"' in ex and f'"{r.value}"' not in lo
                for a in task.catalog.attractions.get(city.casefold(), []):
                    assert f'"{a.value}"' in ex
        assert "Latitude" not in lo + ex and "http" not in lo + ex and "(8" not in ex


def test_hard_constraint_eligibility_and_budget_contract():
    i = 33  # pets house rule, private room, four cuisines, $1,400 for two
    task = task_of(ROWS[i])
    lo, ex = logistics_catalog(task), experience_catalog(task)
    assert "ineligible: house rule" in lo and "ineligible: room type" in lo and "requested cuisine: " in ex
    for row in ROWS:
        caps = budget_caps(task_of(row))
        assert sum(caps) == row["budget"]
    fields = prompt_fields(ROWS[i])
    assert "$1400" in fields["logistics_budget"] and f"${budget_caps(task)[0]}" in fields["logistics_budget"]
    assert ("Trip length: 3 days" in fields["experience_checklist"]
            and '"-" (intentionally empty)' in fields["logistics_checklist"])


def validation_shaped_rows():
    """Metadata of the 180-row validation source in its order: 20 rows per (level, days) cell."""
    rows = []
    for level in ("easy", "medium", "hard"):
        for days, cities in ((3, 1), (5, 2), (7, 3)):
            for _ in range(20):
                rows.append({"source_index": len(rows), "days": days, "level": level, "visiting_city_number": cities})
    return rows


def test_the_pinned_split_and_panels_over_the_validation_source():
    rows = validation_shaped_rows()
    train, panels = split_rows(rows, {"days": [3, 5], "level": ["easy", "medium"], "visiting_city_number": [1, 2]},
                               PANELS)
    assert len(train) == 60 and sum(map(len, panels)) == 20 and panels[0] == [19, 74, 29, 90]
    cell = {r["source_index"]: (r["days"], r["level"]) for r in rows}
    for p in panels:
        assert [cell[i] for i in p] == [(3, "easy"), (3, "medium"), (5, "easy"), (5, "medium")]
    assert sum(cell[i][0] == 3 for i in train) == 30
    for c in {(3, "easy"), (3, "medium"), (5, "easy"), (5, "medium")}:
        assert sum(cell[i] == c for i in train) == 15
    with pytest.raises(ValueError, match="eval_panels=null"):
        split_rows(rows[:60], None, PANELS)  # pinned panels on another source: a clear error


def test_the_seeded_split_on_another_source_is_stratified_and_reproducible():
    a = split_rows(ROWS, {"days": [3, 5], "level": ["easy", "medium"]}, None, seed=42)
    assert a == split_rows(ROWS, {"days": [3, 5], "level": ["easy", "medium"]}, None, seed=42)
    train, panels = a
    assert len(panels) == 1 and len(panels[0]) == 4 and len(train) == 16
    assert ([(ROWS[i]["days"], ROWS[i]["level"]) for i in panels[0]]
            == [(3, "easy"), (3, "medium"), (5, "easy"), (5, "medium")])


def test_curriculum_budget_is_5040_env_steps_and_126_updates_per_agent():
    import datasets

    from c3_plugin.core.config import build_workflow, load_config
    from c3_plugin.core.domain import load_domain
    from c3_plugin.run.budget import expected_budget

    rows = validation_shaped_rows()
    train_idx, _ = split_rows(rows, {"days": [3, 5], "level": ["easy", "medium"], "visiting_city_number": [1, 2]},
                              PANELS)
    train = datasets.Dataset.from_list([rows[i] for i in train_idx])
    for algo in ("magrpo", "c3"):
        cfg = load_config(ROOT / "configs" / "travel" / f"{algo}.yaml")
        wf = build_workflow(cfg, load_domain("travel"))
        b = expected_budget(cfg, wf, train)
        assert b["expected_env_steps"] == 8 * 30 * 4 + 17 * 60 * 4 == 5040
        assert b["expected_optimizer_updates_per_agent"] == [126, 126]
        assert [p["rows"] for p in b["curriculum"]] == [30, 60]
    # tree [2, 2] with sharing: 2 + 2 (6 without)
    assert b["messages_per_instance"] == 4 and cfg.algo.share_parallel_samples


def test_eval_logger_and_aggregator_publish_the_specified_names():
    i = 0
    good, dash = actions_of(i), all_dash(ROWS[i]["days"])
    rows = eval_logger([[[good[0]], [dash[0]]], [[good[1]], [dash[1]]]], [ROWS[i], ROWS[i]])
    agg = eval_aggregator(rows)
    assert agg["reward"] == pytest.approx((1.0 + 0.08) / 2)
    assert (agg["collaboration_success"] == 0.5 and agg["action_validity"] == 1.0
            and agg["reference_plan_delivery"] == 0.5)
    from domains.travel import METRICS

    assert set(agg) == set(METRICS) and len(METRICS) == 17
    doc = (ROOT / "docs" / "metrics.md").read_text()
    assert all(f"eval/{m}" in doc for m in METRICS)


def _dry_run(entry_point, config, *overrides):
    return entry_point(f"single_turn/train_{config}.py", "--config",
                       str(ROOT / "configs" / "travel" / f"{config}.yaml"), "--dry-run", "--json",
                       *[x for o in overrides for x in ("--override", o)])


@pytest.mark.parametrize("algo", ["magrpo", "c3"])
def test_dry_run_on_the_offline_train_split(algo, entry_point):
    code, out, err = _dry_run(entry_point, algo, f"dataset.train.source={FIXTURE}", "dataset.train.split=train",
                              "dataset.train.eval_panels=null")
    assert code == 0, out + err
    report = json.loads(out[out.index("{"):])
    assert (report["status"] == "unverified" and not report["errors"] and report["domain"] == "travel"
            and report["algorithm"] == algo)
    assert report["all_dash_probe_reward"] == 0.08 and report["probe_ok"]
    assert report["catalog_parse"] == {"rows": 45, "parsed": 45, "failed": []}
    assert (report["split"]["train_rows"] == 16 and report["split"]["eval_panels"]["P1"]
            == report["split"]["eval_panels"]["P1"])
    assert report["expected_env_steps"] == (8 * 8 + 17 * 16) * 4
    assert (report["reward_backend"] == "reference_constraint_learnable_budget_dense"
            and report["reward_range"] == [-0.25, 1.0])


def test_dry_run_without_the_hub_names_the_offline_fix(entry_point):
    code, out, _ = _dry_run(entry_point, "magrpo")  # offline: conftest sets HF_HUB_OFFLINE and HF_DATASETS_OFFLINE
    assert code == 2
    err = json.loads(out[out.index("{"):])
    assert (err["status"] == "error" and "dataset.train.source" in err["error"]
            and "osunlp/TravelPlanner" in err["error"])


@pytest.mark.parametrize("algo, collected, key, steps, refreshes", [
    ("madpo", 1200, "pair_counted_env_steps_upper_bound", 5040, 1),
    ("marlhf", 1200, "online_joint_rollouts", 5040, 1),
    ("madpo_iter", 14400, "pair_counted_env_steps_upper_bound", 4320, 6),
    ("marlhf_iter", 14400, "online_joint_rollouts", 4320, 6)])
def test_preference_budgets_match_the_specification(algo, collected, key, steps, refreshes):
    from c3_plugin.core.config import load_config
    from c3_plugin.run.budget import preference_budget

    cfg = load_config(ROOT / "configs" / "travel" / f"{algo}.yaml")
    b = preference_budget(cfg, 60)
    assert b["preference_joint_rollouts"] == collected and b[key] == steps and b["refreshes"] == refreshes
    if algo.endswith("_iter"):
        assert b["comparator"]["policy"] == "current_copy" and b["replay"] == {"mode": "lambda_decay", "lambda": 0.8}


@pytest.mark.parametrize("script, extra", [("train_madpo_iter.py", []),
                                           ("train_centralized.py", ["--algorithm", "marlhf_iter"])])
def test_preference_and_centralized_entry_points_dry_run_with_their_default_configs(script, extra, entry_point):
    code, out, err = entry_point(f"single_turn/{script}", *extra, "--dry-run", "--json",
                                 *[x for o in (f"dataset.train.source={FIXTURE}", "dataset.train.split=train",
                                               "dataset.train.eval_panels=null") for x in ("--override", o)])
    assert code == 0, out + err
    report = json.loads(out[out.index("{"):])
    assert (report["status"] == "unverified" and not report["errors"] and report["refreshes"] == 6
            and report["preference_joint_rollouts"] == 6 * 16 * 40)
    assert report["all_dash_probe_reward"] == 0.08 and report["reward_range"] == [-0.25, 1.0]
    if "centralized" in script:
        assert report["algorithm"] == "centralized_marlhf_iter" and report["centralized_api"] == "ok"
        assert report["joint_probe"]["joint_all_dash_reward"] == 0.08 and "not defined" in report["c3"]
        assert report["comparator"]["generation_mode"] == "centralized"


# ----- reward integrity (bench/reward_hunt.py runs the full catalogue) ---------------------------------


def _respelled_duplicates(i, field_names, spell):
    """Row ``i``'s human plan with one entity per city written into every slot of ``field_names``, the k-th
    written as ``spell(name, city, k)``."""
    k = 0
    first = {}
    plan = [dict(d) for d in PLANS[i]]
    for day in plan:
        for f in field_names:
            v = day[f].split(";")[0] if day[f] != "-" else "-"
            if v == "-":
                continue
            name, city = v.rsplit(",", 1)
            name, city = first.setdefault(city.strip(), (name.strip(), city.strip()))
            k += 1
            day[f] = spell(name, city, k) + (";" if f == "attraction" else "")
    return plan_to_actions(plan, ROWS[i]["days"])


@pytest.mark.parametrize("field_names, check", [(("attraction",), "attraction_diversity"),
                                                (("breakfast", "lunch", "dinner"), "restaurant_diversity")])
@pytest.mark.parametrize("spell", [lambda n, c, k: f"{n}, {c}({k})",
                                   lambda n, c, k: [f"{n},{c}", f"{n} ,{c}", n, f"{n}, {c}"][k % 4]],
                         ids=["numbered-suffix", "respelled"])
def test_duplicates_are_found_on_catalogue_entries_however_spelled(field_names, check, spell):
    """One attraction every day as ``Name, City(5)``, ``Name, City(6)``... (or ``Name,City``, bare names): before,
    raw strings differed, so it passed the evaluator on 44 of 45 rows and scored 0.995."""
    for i in (10, 20, 25):  # trips with several days in one city
        texts = _respelled_duplicates(i, field_names, spell)
        j = evaluate_joint(task_of(ROWS[i]), list(texts))
        assert not j.strict.commonsense[check] and j.metrics["reference_plan_success"] == 0.0
        assert reward([texts[0]], [texts[1]], batch_items=[ROWS[i]])[0] < 0.9


def test_grounding_takes_only_the_catalogue_spelling():
    from domains.travel.evaluate import slot_of

    task = task_of(ROWS[0])
    dp = task.scaffold[1]
    entry = task.catalog.restaurants[dp.city.casefold()][0]
    name, city = entry.name, entry.city
    assert task.catalog.resolve("restaurants", f"{name}, {city}") is entry
    assert task.catalog.resolve("restaurants", f"{name}, {city}(Illinois)") is entry  # TravelPlanner's City(State)
    for wrong in (f"{name}, {city}(5)", f"{name},{city}", f"{name} ,{city}", name, f"{name.upper()}, {city}",
                  f"{name},  {city}"):
        assert task.catalog.resolve("restaurants", wrong) is None, wrong
        assert not slot_of(task, 2, "lunch", wrong).grounded, wrong
        assert task.catalog.identify("restaurants", wrong) is entry, wrong  # still the same place for duplicates
    assert slot_of(task, 2, "lunch", f"{name}, {city}").grounded


def test_plan_success_needs_a_valid_joint_action():
    """A duplicated assignment or a wrong-role write makes the action invalid: the merged plan of its first
    accepted assignments is not a delivered plan (before, reference_plan_success said 1)."""
    i = 0
    a, b = actions_of(i)
    dup = json.loads(a)
    dup["assignments"].append(dict(dup["assignments"][0]))
    wrong_role = json.loads(a)
    wrong_role["assignments"].append(next(x for x in json.loads(b)["assignments"] if x["value"] != "-"))
    assert evaluate_joint(task_of(ROWS[i]), [a, b]).metrics["reference_plan_success"] == 1.0
    for texts in ([json.dumps(dup), b], [json.dumps(wrong_role), b]):
        j = evaluate_joint(task_of(ROWS[i]), texts)
        assert j.strict.metrics["reference_plan_success"] == 1.0  # the merged plan alone would pass
        assert j.metrics["reference_plan_success"] == 0.0 and j.metrics["collaboration_success"] == 0.0


def test_reward_variants_specified_by_default_and_strict_on_request():
    from domains.travel.reward import NAME, STRICT_NAME, make_reward
    from domains.travel.reward import reward as module_reward

    strict, specified = make_reward("strict"), make_reward()
    assert module_reward.backend == specified.backend == NAME and strict.backend == STRICT_NAME
    assert strict.reward_range == specified.reward_range == (-0.25, 1.0)
    with pytest.raises(ValueError, match="specified, strict"):
        make_reward("lenient")
    i = 15
    good, dash = actions_of(i), all_dash(ROWS[i]["days"])
    other = plan_to_actions(_swap_restaurant(i), ROWS[i]["days"])
    for fn in (strict, specified):
        assert fn([good[0], dash[0], other[0]], [good[1], dash[1], other[1]], batch_items=[ROWS[i]] * 3) == \
            [pytest.approx(1.0), pytest.approx(0.08, abs=1e-12), pytest.approx(1.0)]
    # a fully grounded plan that breaks the diversity rules, with one restaurant for every meal of a city
    texts = _respelled_duplicates(i, ("breakfast", "lunch", "dinner"), lambda n, c, k: f"{n}, {c}")
    t_spec, t_strict = terms(task_of(ROWS[i]), list(texts)), terms(task_of(ROWS[i]), list(texts), variant="strict")
    assert t_strict["K"] < 1.0 and t_strict["reward"] < t_spec["reward"] - 0.05
