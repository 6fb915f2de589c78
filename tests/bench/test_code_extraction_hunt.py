"""The code-extraction hunt (``bench/code_extraction_hunt.py``) on every 50th bundled reference solution: every
right presentation reads the solution, no hidden redefinition runs, and ``--before`` loads another checkout's
extractor (here this one's). The full run: ``python bench/code_extraction_hunt.py --before ROOT``."""

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("code_extraction_hunt", ROOT / "bench" / "code_extraction_hunt.py")
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)


def test_every_right_presentation_reads_the_solution_and_no_hidden_code_runs():
    rows = bench.golds(every=50)
    assert len(rows) >= 25 and any(r[0].startswith("mbppplus") for r in rows)
    tables = bench.hunt(rows, {"after": bench.extract_code, "before": bench.load_before(str(ROOT))})
    assert set(tables["right"]) == set(bench.RIGHT) and set(tables["hidden"]) == set(bench.HIDDEN)
    for counts in tables["right"].values():
        assert counts["after"][0] == counts["before"][0] == len(rows)
    for counts in tables["hidden"].values():
        assert counts["after"] == counts["before"] == [len(rows), 0]
    assert tables["messages"] == len(rows) * (len(bench.RIGHT) + len(bench.HIDDEN))
