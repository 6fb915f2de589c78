"""Math datasets by Hugging Face name or local JSONL path, a seeded synthetic set, and the
train/eval overlap check. Every item has ``id``, ``prompt``/``question``, ``answer`` (the
gold final answer) and ``datasource`` (the suite name, kept in every logged metric)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from .answer import last_boxed


@dataclass(frozen=True)
class Suite:
    hf: str  # Hugging Face dataset name
    config: str | None  # dataset config name
    split: str  # default split


SUITES = {
    "math500": Suite("HuggingFaceH4/MATH-500", None, "test"),
    "gsm8k": Suite("openai/gsm8k", "main", "test"),
    "cmath": Suite("weitianwen/cmath", None, "test"),
    "aime24": Suite("HuggingFaceH4/aime_2024", None, "train"),
    "aime25": Suite("yentinglin/aime_2025", None, "train"),
    "amc23": Suite("math-ai/amc23", None, "test"),
    "minerva_math": Suite("math-ai/minervamath", None, "test"),
}
QUESTION_FIELDS = ("problem", "question", "Problem", "Question", "prompt")
ANSWER_FIELDS = ("final", "answer", "golden", "Answer", "expected_answer")


class DatasetError(ValueError):
    """A dataset that cannot be loaded or used; the message says which and how to fix it."""


def normalise_row(row: Mapping[str, Any], name: str, index: int) -> dict[str, Any]:
    question = next((str(row[k]) for k in QUESTION_FIELDS if row.get(k) not in (None, "")), None)
    answer = next((str(row[k]) for k in ANSWER_FIELDS if row.get(k) not in (None, "")), None)
    if answer is not None and "####" in answer:  # GSM8K: the final answer follows ####
        answer = answer.split("####")[-1].strip().replace(",", "")
    if answer is None and row.get("solution"):
        answer = last_boxed(str(row["solution"]))
    if question is None or answer is None:
        raise DatasetError(f"{name}: row {index} has no question field ({', '.join(QUESTION_FIELDS)}) "
                           f"or no answer field ({', '.join(ANSWER_FIELDS)}, or a boxed 'solution')")
    rid = row.get("unique_id") or row.get("id") or row.get("idx") or index
    return {"id": f"{name}-{rid}", "prompt": question, "question": question, "answer": answer.strip(), "datasource": name}


def synthetic_rows(name: str, task: str = "compare", size: int = 200, seed: int = 0, low: int = 10, high: int = 99) -> list[dict]:
    """Seeded arithmetic: ``compare`` ("Which number is larger, a or b?") or ``add`` ("What is a + b?")."""
    rng = np.random.default_rng(seed)
    a = rng.integers(low, high + 1, size=size)
    b = rng.integers(low, high, size=size)
    b = np.where(b >= a, b + 1, b)  # distinct pairs
    if task == "compare":
        qs = [f"Which number is larger, {x} or {y}?" for x, y in zip(a, b)]
        ans = [str(max(x, y)) for x, y in zip(a, b)]
    elif task == "add":
        qs = [f"What is {x} + {y}?" for x, y in zip(a, b)]
        ans = [str(x + y) for x, y in zip(a, b)]
    else:
        raise DatasetError(f"{name}: unknown synthetic task '{task}'; use 'compare' or 'add'")
    return [{"id": f"{name}-{i}", "prompt": q, "question": q, "answer": s, "datasource": name} for i, (q, s) in enumerate(zip(qs, ans))]


def local_path(source: str, base_dir: str | Path | None = None) -> Path | None:
    """The file a local ``source`` (a ``.jsonl``/``.json`` path) names, None for a Hugging Face name.

    A relative path resolves against ``base_dir`` (the config file's folder) when the file is
    there, else against the working directory; so a config's paths work from any directory and
    an ``--override`` path from the directory it was typed in."""
    path = Path(str(source))
    if path.suffix not in (".jsonl", ".json"):
        return None
    if not path.is_absolute() and base_dir is not None and (Path(base_dir) / path).exists():
        return Path(base_dir) / path
    return path


def where(source: str, base_dir: str | Path | None = None) -> str:
    """Where :func:`local_path` looked for ``source``, for error messages."""
    if Path(str(source)).is_absolute():
        return "an absolute path"
    places = ([f"the config folder {Path(base_dir).resolve()}"] if base_dir is not None else []) + [f"the working directory {Path.cwd()}"]
    return "looked in " + " and ".join(places)


def load_split(spec: Mapping[str, Any], base_dir: str | Path | None = None) -> list[dict]:
    """Rows of one dataset spec: ``{name, source, config, split, revision, limit}`` or
    ``{name, source: synthetic, task, size, seed}``."""
    spec = dict(spec)
    name = spec.get("name") or "train"
    source = spec.get("source") or (SUITES[name].hf if name in SUITES else None)
    if source is None:
        raise DatasetError(f"{name}: no 'source' and no built-in suite of that name ({', '.join(SUITES)})")
    limit = spec.get("limit")
    if source == "synthetic":
        rows = synthetic_rows(name, spec.get("task", "compare"), int(spec.get("size", 200)), int(spec.get("seed", 0)),
                              int(spec.get("low", 10)), int(spec.get("high", 99)))
        return rows[:limit] if limit else rows
    split = spec.get("split") or (SUITES[name].split if name in SUITES else "train")
    path = local_path(source, base_dir)
    import datasets

    try:
        if path is not None:
            if not path.exists():
                raise DatasetError(f"{name}: local file {source} does not exist ({where(source, base_dir)})")
            ds = datasets.load_dataset("json", data_files=str(path), split=split if "[" in split else "train")
        else:
            config = spec.get("config", SUITES[name].config if name in SUITES else None)
            ds = datasets.load_dataset(source, config, split=split, revision=spec.get("revision"))
    except DatasetError:
        raise
    except Exception as exc:  # noqa: BLE001 - network, hub or format errors become one clear message
        raise DatasetError(f"{name}: cannot load '{source}' (split {split}): {type(exc).__name__}: {exc}. "
                           "Offline? Point 'source' at a local JSONL file.") from exc
    rows = [normalise_row(r, name, i) for i, r in enumerate(ds)]
    return rows[:limit] if limit else rows


def _key(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip().lower()


def check_overlap(train: Sequence[Mapping[str, Any]], evals: Sequence[Mapping[str, Any]], drop: bool = False) -> list[dict]:
    """Refuse (or, with ``drop``, remove) training rows whose question is an evaluation question."""
    eval_keys = {_key(r["question"]): r["datasource"] for r in evals}
    clash = [r for r in train if _key(r["question"]) in eval_keys]
    if clash and not drop:
        suites = sorted({eval_keys[_key(r["question"])] for r in clash})
        raise DatasetError(f"training set contains {len(clash)} evaluation problem(s) from {', '.join(suites)} "
                           f"(e.g. {clash[0]['question'][:60]!r}); use disjoint data or set dataset.drop_overlap: true")
    return [r for r in train if _key(r["question"]) not in eval_keys]


def load_datasets(section: Mapping[str, Any], seed: int = 0, config: Any = None):
    """``(train, eval)`` as ``datasets.Dataset`` from the config's dataset section."""
    import datasets

    base = section.get("base_dir")
    train_spec = dict(section.get("train") or {})
    train = load_split({"name": "train", **train_spec}, base) if train_spec else []
    evals: list[dict] = []
    for spec in section.get("eval") or []:
        evals.extend(load_split(spec, base))
    train = check_overlap(train, evals, drop=bool(section.get("drop_overlap", False)))
    return (datasets.Dataset.from_list(train) if train else None, datasets.Dataset.from_list(evals) if evals else None)
