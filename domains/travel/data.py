"""TravelPlanner rows: loading (Hugging Face name at a pinned revision, or local JSONL),
normalisation with every human target plan removed, the curriculum filter, the stratified
train/eval split and the interleaved eval panels.

Default (the specification's research split over the 180-row validation source):
days in {3, 5}, level in {easy, medium}, visiting_city_number in {1, 2} gives 80 candidate
rows; the 20 eval rows are pinned as five four-row panels (one 3/easy, 3/medium, 5/easy,
5/medium row each), P1 first, and the other 60 train. Without pinned panels (another
source, e.g. the offline train split) the same rule runs seeded: per (days, level) cell a
shuffled quarter goes to eval, and panel ``p`` takes the ``p``-th eval row of every cell.
"""

from __future__ import annotations

import ast
import json
import random
from pathlib import Path
from typing import Any, Mapping, Sequence

from c3_plugin.core.hub import offline_mode

HF_NAME = "osunlp/TravelPlanner"
HF_REVISION = "8736504ecfc31b7f8b7e40122873c337e83fff7c"
PANELS = ([19, 74, 29, 90], [5, 68, 20, 80], [14, 63, 39, 94], [4, 71, 22, 88], [9, 70, 33, 92])
FILTERS = {"days": [3, 5], "level": ["easy", "medium"], "visiting_city_number": [1, 2]}
TARGET_FIELDS = ("annotated_plan", "gold_plan", "example_plan", "plan", "target_plan")
INT_FIELDS = ("days", "visiting_city_number", "people_number", "budget")
SOURCE_KEYS = {"source", "config", "split", "revision", "filters", "eval_panels", "split_seed", "eval_fraction",
               "limit", "name"}


def read_source(spec: Mapping[str, Any], base_dir: str | None = None) -> list[dict[str, Any]]:
    """Raw rows of ``spec['source']``: a local JSONL path, or a Hugging Face dataset name."""
    unknown = set(spec) - SOURCE_KEYS
    if unknown:
        raise ValueError(f"dataset.train: unknown key(s) {sorted(unknown)}; valid: {sorted(SOURCE_KEYS)}")
    source = str(spec.get("source") or HF_NAME)
    path = (Path(source) if Path(source).is_absolute() or base_dir is None
            or Path(source).exists() else Path(base_dir) / source)
    if source.endswith((".jsonl", ".json")) or path.exists():
        if not path.exists():
            raise FileNotFoundError(f"dataset.train.source: {path} does not exist")
        return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    import datasets

    config = spec.get("config", "validation")
    split = spec.get("split", "validation")
    revision = spec.get("revision", HF_REVISION)
    offline = offline_mode()  # offline: the cache only, failing at once instead of retrying
    try:
        ds = datasets.load_dataset(source, config, split=split, revision=revision)
    except Exception as exc:  # offline, unknown name, bad revision: all need the same fix
        why = (f"offline ({offline}) and not in the local datasets cache" if offline
               else f"{type(exc).__name__}: {str(exc)[:200]}")
        raise ValueError(f"could not load {source} ({config}/{split} @ {revision}): {why}. "
                         "Offline? Point dataset.train.source at a local JSONL of the same split "
                         "(with reference_information), and set dataset.train.eval_panels=null unless it is the "
                         "180-row validation source") from exc
    return [dict(r) for r in ds]


def normalise(row: Mapping[str, Any], index: int, split: str) -> dict[str, Any]:
    """A row with typed fields, a stable ``id`` and every human target plan removed."""
    missing = [k for k in ("org", "dest", "days", "date", "query", "reference_information", "budget")
               if row.get(k) in (None, "")]
    if missing:
        raise ValueError(f"TravelPlanner row {index}: missing field(s) {missing}; the source needs the full rows "
                         "(sole-planning reference_information included)")
    out = {k: v for k, v in row.items() if k not in TARGET_FIELDS}
    for k in INT_FIELDS:
        out[k] = int(float(out.get(k, 1) or 1))
    dates = out["date"]
    out["date"] = repr(list(ast.literal_eval(dates) if isinstance(dates, str) else dates))
    lc = out.get("local_constraint")
    out["local_constraint"] = repr(ast.literal_eval(lc) if isinstance(lc, str) and lc else (lc or {}))
    out["level"] = str(out.get("level", "")).lower()
    out["source_index"] = index
    out["id"] = f"{split}-{index}"
    out["question"] = str(out["query"])
    out.pop("idx", None)
    return out


def matches(row: Mapping[str, Any], where: Mapping[str, Sequence[Any]] | None) -> bool:
    return all(row.get(k) in list(v) for k, v in (where or {}).items())


def split_rows(rows: Sequence[Mapping[str, Any]], filters: Mapping[str, Sequence[Any]] | None,
               panels: Sequence[Sequence[int]] | None, seed: int = 42,
               eval_fraction: float = 0.25) -> tuple[list[int], list[list[int]]]:
    """``(train source indices, eval panels)``; panels are lists of source indices, P1 first."""
    candidates = [r["source_index"] for r in rows if matches(r, filters)]
    if not candidates:
        raise ValueError(f"no rows match dataset.train.filters={dict(filters or {})}")
    cell_of = {r["source_index"]: (r["days"], r["level"]) for r in rows}
    cells = sorted({cell_of[i] for i in candidates})
    if panels:
        flat = [i for p in panels for i in p]
        bad = [i for i in flat if i not in set(candidates)]
        if bad or len(set(flat)) != len(flat):
            raise ValueError("dataset.train.eval_panels: "
                             f"{'indices ' + str(bad) + ' are not candidate rows' if bad else 'repeated indices'}; the "
                             "pinned panels fit only the 180-row validation source: set dataset.train.eval_panels=null "
                             "to compute a seeded stratified split")
        for p in panels:
            if sorted(cell_of[i] for i in p) != cells:
                raise ValueError(f"dataset.train.eval_panels: panel {list(p)} does not hold one row of every "
                                 f"(days, level) cell {cells}")
        eval_panels = [list(p) for p in panels]
    else:
        rng = random.Random(seed)
        per_cell = {}
        for cell in cells:
            members = sorted(i for i in candidates if cell_of[i] == cell)
            rng.shuffle(members)
            per_cell[cell] = members[: max(1, round(len(members) * eval_fraction))]
        count = min(len(v) for v in per_cell.values())
        eval_panels = [[per_cell[c][p] for c in cells] for p in range(count)]
    held = {i for p in eval_panels for i in p}
    return sorted(i for i in candidates if i not in held), eval_panels


def load_rows(spec: Mapping[str, Any], base_dir: str | None = None) -> tuple[list[dict], list[dict], list[list[int]]]:
    """``(train rows, eval rows in panel order, panels)`` for a ``dataset.train`` spec."""
    split = str(spec.get("split", "validation"))
    raw = read_source(spec, base_dir)
    rows = [normalise(r, i, split) for i, r in enumerate(raw)]
    panels = spec.get("eval_panels", PANELS)
    filters = spec.get("filters", FILTERS)
    train_idx, eval_panels = split_rows(rows, filters, panels, int(spec.get("split_seed", 42)),
                                        float(spec.get("eval_fraction", 0.25)))
    by_index = {r["source_index"]: r for r in rows}
    train = [by_index[i] for i in train_idx]
    evals = [by_index[i] for p in eval_panels for i in p]
    if spec.get("limit"):
        train = train[: int(spec["limit"])]
    return train, evals, eval_panels
