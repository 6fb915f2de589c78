"""Every shipped config (configs/**.yaml) dry-runs without the untrained-decision warning: a config either trains
every decision point or names the ones it leaves untrained (``untrained_decisions``, with its reason in the YAML's
comments). And README's travel paragraph gives the numbers its offline command's dry-run reports."""

import re
import shlex
import warnings
from pathlib import Path

import pytest
import yaml

from c3_plugin.core.config import load_config
from c3_plugin.run.dry_run import dry_run_report

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = sorted((ROOT / "configs").rglob("*.yaml"))
FIX = ROOT / "tests" / "fixtures" / "math"
CODE = ROOT / "tests" / "fixtures" / "code"
# The Hub's datasets, offline: the paper configs on the fixtures of tests/run/test_paper_configs.py, the travel
# configs on the bundled train split (as README's offline command). The code configs read the MBPP fixtures: the
# bundled MBPP+ set takes seconds to load, and tests/domains/test_math.py dry-runs them on it. The math configs
# read their bundled data. The data changes neither the plan nor the workflow, which decide what is trained.
OFFLINE = {
    "code": ["dataset.train=" + repr({"name": "mbpp_train", "kind": "mbpp", "source": str(CODE / "mbpp_train.jsonl"),
                                      "id_range": [601, 974]}),
             "dataset.eval=" + repr([{"name": "mbpp", "kind": "mbpp", "source": str(CODE / "mbpp.jsonl")}]),
             "dataset.drop_overlap=false"],
    "paper": ["dataset.train=" + repr([
        {"name": "math_train", "source": str(FIX / "math_train_original.jsonl"), "schema": "math", "weight": 7500},
        {"name": "cmath_train", "source": str(FIX / "cmath_train_original.jsonl"), "schema": "cmath",
         "weight": 1098}])],
    "travel": [f"dataset.train.source={ROOT / 'data' / 'travelplanner' / 'train.jsonl'}", "dataset.train.split=train",
               "dataset.train.eval_panels=null"],
}


@pytest.fixture(autouse=True)
def no_launcher(monkeypatch):
    for key in ("WORLD_SIZE", "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(key, raising=False)


def test_every_config_folder_is_covered():
    assert len(CONFIGS) >= 30 and {p.parent.name for p in CONFIGS} == {"code", "math", "paper", "travel"}


@pytest.mark.parametrize("path", CONFIGS, ids=[str(p.relative_to(ROOT / "configs")) for p in CONFIGS])
def test_shipped_config_dry_runs_without_an_untrained_decision_warning(path):
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        report = dry_run_report(load_config(path, OFFLINE.get(path.parent.name, [])))
    # the run's other checks (status, memory, hub models) are tests/domains/test_math.py's and the domains' own
    assert [str(w.message) for w in seen if "no gradient" in str(w.message)] == []
    assert not [line for line in report.get("warnings", []) if "no gradient" in line]
    untrained = report.get("untrained_decisions", [])  # only the workflow trainers report decisions
    assert untrained == report.get("untrained_acknowledged", [])  # each one named by the config itself
    if untrained:  # and the YAML files that make it up say why, in a comment
        text = "\n".join(p.read_text() for p in extends_chain(path))
        assert all(re.search(r"#.*" + re.escape(name), text) for name in untrained), path


def extends_chain(path: Path) -> list[Path]:
    """The config file and the files it extends, in order."""
    chain = [path]
    while parent := yaml.safe_load(chain[-1].read_text()).get("extends"):
        chain.append((chain[-1].parent / parent).resolve())
    return chain


def travel_paragraph() -> tuple[str, list[str]]:
    """README's travel paragraph and the offline command right below it (its arguments)."""
    text = (ROOT / "README.md").read_text()
    start = text.index("TravelPlanner with two simultaneous planners")
    paragraph, _, rest = text[start:].partition("```bash\n")
    command = rest.partition("```")[0].replace("\\\n", " ")
    return " ".join(paragraph.split()), shlex.split(command)


def number(pattern: str, text: str) -> int:
    found = re.findall(pattern, text)
    assert len(found) == 1, (pattern, text)
    return int(found[0].replace(",", ""))


@pytest.mark.parametrize("algorithm", ["c3", "magrpo"])
def test_readme_travel_paragraph_gives_what_its_offline_command_runs(algorithm, monkeypatch):
    """The offline command's dry-run (from the repository root, as README says) has the rows, env steps and updates
    README's offline sentence gives; MAGRPO on the same curriculum spends the same."""
    monkeypatch.chdir(ROOT)
    paragraph, argv = travel_paragraph()
    assert argv[:2] == ["python", "single_turn/train_c3.py"] and "--dry-run" in argv
    config = argv[argv.index("--config") + 1]
    overrides = [argv[k + 1] for k, a in enumerate(argv) if a == "--override"]
    assert "dataset.train.source=data/travelplanner/train.jsonl" in overrides
    report = dry_run_report(load_config(ROOT / config, overrides + [f"algorithm={algorithm}"]))
    hub, _, offline = paragraph.partition("Offline,")
    assert offline, "the paragraph's offline sentence starts with 'Offline,'"
    assert report["train_rows"] == number(r"(\d+) train rows", offline) == 16
    assert sum(report["eval_rows"].values()) == number(r"(\d+) eval rows", offline) == 4
    assert report["expected_env_steps"] == number(r"= ([\d,]+) joint env steps", offline) == 1344
    assert (report["expected_optimizer_updates_per_agent"] == [number(r"= (\d+) updates per agent", offline)] * 2
            == [42, 42])
    three_day = [p["rows"] for p in report["curriculum"]][0]
    assert three_day == number(r"\((\d+) of them three-day\)", offline)
    # the Hub sentence: 60 train rows, 30 of them three-day (the split of tests/domains/test_travel.py), on the same
    # plan
    import datasets

    from c3_plugin.core.config import build_workflow
    from c3_plugin.core.domain import load_domain
    from c3_plugin.run.budget import expected_budget

    cfg = load_config(ROOT / config, [f"algorithm={algorithm}"])
    rows = number(r"(\d+) train rows", hub)
    hub_three_day = number(r"\((\d+) of them three-day\)", hub)
    train = datasets.Dataset.from_list([{"days": 3 if k < hub_three_day else 5} for k in range(rows)])
    budget = expected_budget(cfg, build_workflow(cfg, load_domain("travel")), train)
    assert budget["expected_env_steps"] == number(r"= ([\d,]+) joint env steps", hub) == 5040
    assert budget["expected_optimizer_updates_per_agent"] == [number(r"(\d+) updates per agent", hub)] * 2 == [126, 126]
