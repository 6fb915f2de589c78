"""Math datasets by Hugging Face name or local JSONL path, a seeded synthetic set, the mixing of
several train sources by weight, and the train/eval overlap check. Every item has ``id``,
``prompt``/``question``, ``answer`` (the gold final answer) and ``datasource`` (the source or
suite name, kept in every logged metric)."""

from __future__ import annotations

import math
import re
import warnings
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from c3_plugin.core.errors import DatasetError
from c3_plugin.core.hub import offline_mode
from c3_plugin.core.sources import check_overlap, local_path, where

from .answer import last_boxed


@dataclass(frozen=True)
class Suite:
    hf: str  # Hugging Face dataset name
    config: str | None  # dataset config name
    split: str  # default split
    schema: str = "auto"  # row schema (SCHEMAS)


BUNDLED_DATA = ("data/gsm8k/train.jsonl (train), "
                # the repository's own copies, named when the Hub cannot be used
                "data/{math500,gsm8k,aime24,aime25,amc23,minerva_math,cmath}/test.jsonl (eval); data/README.md")
SUITES = {
    "math500": Suite("HuggingFaceH4/MATH-500", None, "test"),
    "gsm8k": Suite("openai/gsm8k", "main", "test"),
    "cmath": Suite("weitianwen/cmath", None, "test"),
    "aime24": Suite("HuggingFaceH4/aime_2024", None, "train"),
    "aime25": Suite("yentinglin/aime_2025", None, "train"),
    "amc23": Suite("math-ai/amc23", None, "test"),
    "minerva_math": Suite("math-ai/minervamath", None, "test"),
    # MATH (Hendrycks et al. 2021) train, 7,500 problems in one config; the same rows per subject are
    # EleutherAI/hendrycks_math with config: [algebra, counting_and_probability, ...] (MATH_SUBJECTS)
    "math_train": Suite("DigitalLearningGmbH/MATH-lighteval", "default", "train", "math"),
}
MATH_SUBJECTS = ("algebra", "counting_and_probability", "geometry", "intermediate_algebra", "number_theory",
                 "prealgebra", "precalculus")  # the configs of EleutherAI/hendrycks_math
QUESTION_FIELDS = ("problem", "question", "Problem", "Question", "prompt")
ANSWER_FIELDS = ("final", "answer", "golden", "Answer", "expected_answer")
# Keys a dataset spec may hold (dataset.train, each dataset.train[] source, each dataset.eval[] suite)
SOURCE_KEYS = {"name", "source", "config", "split", "revision", "limit", "schema", "task", "size", "seed", "low",
               "high"}
TRAIN_KEYS = SOURCE_KEYS | {"weight"}
EVAL_KEYS = SOURCE_KEYS | {"suite", "num_samples", "temperature", "top_p", "pass_k"}
# Eval-row columns that ask the trainer for sampled decoding (c3_plugin/trainers/bridge.py: evaluate)
SAMPLING_COLUMNS = ("eval_samples", "eval_temperature", "eval_top_p", "eval_pass_k")


def _row_id(row: Mapping[str, Any], name: str, index: int) -> str:
    rid = row.get("unique_id") or row.get("id") or row.get("idx") or index
    return f"{name}-{rid}"


_E_NOTATION = re.compile(r"(-?\d+(?:\.\d+)?)[eE]([+-]?\d+)")
_TRAILING_POINT = re.compile(r"(\d)\.(?=\s*/)")
_MATH_BREAK = re.compile(r"(?<!\\)\$\s*(?<!\\)\$")
_NUMPY = re.compile(r"\bnp\.(arcsin|arccos|arctan|sin|cos|tan|exp|log)\(")


def normalise_gold(answer: str) -> str:
    """A gold answer as LaTeX a right answer can match: programming-style e-notation (Minerva's ``4.5e33``,
    which math-verify reads as 4.5 * e * 33) becomes ``4.5 \\times 10^{33}``, and a trailing point before a
    slash (``-1./3``) goes, a NumPy call (``np.arcsin(10/13)``) is written in LaTeX (``\\arcsin(10/13)``) and a
    math-mode break inside the answer (``$ $``) goes.
    Everything else is kept as written."""
    text = answer.strip()
    if _E_NOTATION.fullmatch(text):
        text = _E_NOTATION.sub(lambda m: f"{m.group(1)} \\times 10^{{{int(m.group(2))}}}", text)
    text = _MATH_BREAK.sub(" ", text)  # Minerva's "... +$ $\\dot{x}_0 ...": a math-mode break inside the answer
    return _NUMPY.sub(lambda m: f"\\{m.group(1)}(", _TRAILING_POINT.sub(r"\1", text))


def _item(row: Mapping[str, Any], name: str, index: int, question: str, answer: str) -> dict[str, Any]:
    return {"id": _row_id(row, name, index), "prompt": question, "question": question, "answer": normalise_gold(answer),
            "datasource": name}


def normalise_row(row: Mapping[str, Any], name: str, index: int) -> dict[str, Any]:
    """``schema: auto``: the question and answer found by column name (QUESTION_FIELDS, ANSWER_FIELDS;
    GSM8K's ``#### N``; else the last boxed answer of a ``solution``); other columns are dropped."""
    question = next((str(row[k]) for k in QUESTION_FIELDS if row.get(k) not in (None, "")), None)
    answer = next((str(row[k]) for k in ANSWER_FIELDS if row.get(k) not in (None, "")), None)
    if answer is not None and "####" in answer:  # GSM8K: the final answer follows ####
        answer = answer.split("####")[-1].strip().replace(",", "")
    if answer is None and row.get("solution"):
        answer = last_boxed(str(row["solution"]))
    if question is None or answer is None:  # rows counted from 1 (the line of a JSONL file)
        missing = (f"no question field (one of {', '.join(QUESTION_FIELDS)})" if question is None else
                   f"no answer field (one of {', '.join(ANSWER_FIELDS)}, or a boxed 'solution')")
        given = ", ".join(sorted(k for k, v in row.items() if v not in (None, ""))) or "none"
        raise DatasetError(f"{name}: row {index + 1} has {missing}; its non-empty fields: {given} (name the field as "
                           "one of those, or drop the row)")
    return _item(row, name, index, question, answer)


def _int_or_none(value: Any) -> int | None:
    match = re.search(r"-?\d+", str(value)) if value is not None else None
    return int(match.group()) if match else None


def math_row(row: Mapping[str, Any], name: str, index: int) -> dict[str, Any] | None:
    """``schema: math``, Hendrycks MATH (EleutherAI/hendrycks_math, DigitalLearningGmbH/MATH-lighteval,
    MATH-500 copies): ``problem``; the answer is an ``answer`` column where one is given, else the content
    of the last balanced ``\\boxed{}`` in ``solution``; keeps ``level`` (``"Level 3"`` -> 3; None for
    ``"Level ?"``) and ``subject`` (the ``type`` column, or ``subject``). None for a row with no answer."""
    if not row.get("problem") or ("solution" not in row and "answer" not in row):
        raise DatasetError(f"{name}: schema 'math' needs columns 'problem' and 'solution' (Hendrycks MATH); "
                           f"row {index + 1} has {sorted(row)}")
    answer = row.get("answer") or last_boxed(str(row.get("solution") or ""))
    if answer in (None, ""):
        return None
    subject = row.get("type") or row.get("subject")
    return {**_item(row, name, index, str(row["problem"]), str(answer)), "level": _int_or_none(row.get("level")),
            "subject": None if subject is None else str(subject)}


def cmath_row(row: Mapping[str, Any], name: str, index: int) -> dict[str, Any] | None:
    """``schema: cmath``, CMATH (Wei et al. 2023; HF weitianwen/cmath): ``question`` (``input`` in the
    GitHub release XiaoMi/cmath, ``problem`` in the Qwen2.5-Math copy), the answer ``golden`` (or
    ``answer``); keeps ``grade``, ``reasoning_step`` and ``num_digits``."""
    question = next((row[k] for k in ("question", "input", "problem") if row.get(k) not in (None, "")), None)
    answer = next((row[k] for k in ("golden", "answer") if row.get(k) not in (None, "")), None)
    if question is None or answer is None:
        raise DatasetError(f"{name}: schema 'cmath' needs a 'question' (or 'input') and a 'golden' (or 'answer') "
                           f"column; row {index + 1} has {sorted(row)}")
    return {**_item(row, name, index, str(question), str(answer)),
            **{k: _int_or_none(row.get(k)) for k in ("grade", "reasoning_step", "num_digits")}}


SCHEMAS: dict[str, Callable[[Mapping[str, Any], str, int], dict[str, Any] | None]] = {
    "auto": normalise_row, "math": math_row, "cmath": cmath_row}


def synthetic_rows(name: str, task: str = "compare", size: int = 200, seed: int = 0, low: int = 10,
                   high: int = 99) -> list[dict]:
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
    return [{"id": f"{name}-{i}", "prompt": q, "question": q, "answer": s, "datasource": name}
            for i, (q, s) in enumerate(zip(qs, ans))]


def _load_rows(name: str, source: str, config: Any, split: str, revision: Any, base_dir: str | Path | None):
    """``(label, rows)`` per loaded table: one for a local file or a single config, one per config of a list."""
    import datasets

    path = local_path(source, base_dir)
    offline = offline_mode() if path is None else None  # offline: the cache only, failing at once instead of retrying
    try:
        if path is not None:
            if not path.exists():
                raise DatasetError(f"{name}: local file {source} does not exist ({where(source, base_dir)})")
            if not path.read_text().strip():
                raise DatasetError(f"{name}: {source} is empty (no rows); a JSONL file holds one JSON row per line "
                                   f"({where(source, base_dir)})")
            part = split if "[" in split else "train"
            return [(None, datasets.load_dataset("json", data_files=str(path), split=part))]
        # one config per subject (EleutherAI/hendrycks_math): ids carry the config
        if isinstance(config, (list, tuple)):
            return [(str(c), datasets.load_dataset(source, c, split=split, revision=revision)) for c in config]
        return [(None, datasets.load_dataset(source, config, split=split, revision=revision))]
    except DatasetError:
        raise
    except Exception as exc:  # noqa: BLE001 - network, hub or format errors become one clear message
        why = f"offline ({offline}) and not in the local datasets cache" if offline else f"{type(exc).__name__}: {exc}"
        raise DatasetError(f"{name}: cannot load '{source}' (split {split}): {why}. Point 'source' at a local JSONL "
                           f"file; bundled: {BUNDLED_DATA}") from exc


def load_split(spec: Mapping[str, Any], base_dir: str | Path | None = None) -> list[dict]:
    """Rows of one dataset spec: ``{name, source, config, split, revision, limit, schema}`` or
    ``{name, source: synthetic, task, size, seed}``. ``config`` may be a list (one table per config,
    concatenated; ids ``<name>-<config>-<row>``); ``schema`` is ``auto`` (default: columns found by name),
    ``math`` or ``cmath`` (:data:`SCHEMAS`; both keep their metadata columns)."""
    spec = dict(spec)
    name = spec.get("name") or "train"
    suite = SUITES.get(name)
    source = spec.get("source") or (suite.hf if suite else None)
    if source is None:
        raise DatasetError(f"{name}: no 'source' and no built-in suite of that name ({', '.join(SUITES)})")
    limit = spec.get("limit")
    if source == "synthetic":
        rows = synthetic_rows(name, spec.get("task", "compare"), int(spec.get("size", 200)), int(spec.get("seed", 0)),
                              int(spec.get("low", 10)), int(spec.get("high", 99)))
        return rows[:limit] if limit else rows
    schema = spec.get("schema") or (suite.schema if suite and not spec.get("source") else "auto")
    if schema not in SCHEMAS:
        raise DatasetError(f"{name}: unknown schema {schema!r}; use one of {', '.join(SCHEMAS)}")
    split = spec.get("split") or (suite.split if suite else "train")
    config = spec.get("config", suite.config if suite else None)
    rows: list[dict] = []
    skipped: list[int] = []
    for label, table in _load_rows(name, source, config, split, spec.get("revision"), base_dir):
        prefix = name if label is None else f"{name}-{label}"
        for i, r in enumerate(table):
            row = SCHEMAS[schema](r, prefix, i)
            if row is None:
                skipped.append(i)
                continue
            rows.append({**row, "datasource": name})
    if skipped:
        warnings.warn(f"{name}: {len(skipped)} row(s) without an answer were left out (schema {schema}; "
                      f"first: row {skipped[0] + 1})", stacklevel=2)
    return rows[:limit] if limit else rows


def mix_counts(sizes: Sequence[int], weights: Sequence[float], total: int) -> list[int]:
    """Rows each source gives a mix of ``total`` rows: ``total * w_i / sum(w)``, rounded by largest
    remainder (ties to the earlier source) so that the counts sum to ``total``."""
    share = [total * float(w) / float(sum(weights)) for w in weights]
    counts = [math.floor(s) for s in share]
    for i in sorted(range(len(share)), key=lambda i: (counts[i] - share[i], i))[: total - sum(counts)]:
        counts[i] += 1
    return counts


def draw(rows: Sequence[dict], count: int, seed: int, name: str) -> list[dict]:
    """``count`` rows of one source, seeded by ``(seed, name)``: a sample without replacement (in the
    source's order) when ``count <= len(rows)``; else every row ``count // len(rows)`` times and a sample of
    the rest. A repeat keeps its row's fields; its id gets ``#<copy>`` (copy 1, 2, ...) so ids stay unique."""
    n = len(rows)
    if n == 0:
        raise DatasetError(f"dataset.train: source '{name}' has no rows (after limit and drop_overlap) to mix")
    rng = np.random.default_rng([int(seed), zlib.crc32(name.encode())])
    full, rest = divmod(int(count), n)
    picked = [(c, i) for c in range(full)
              for i in range(n)] + [(full, int(i)) for i in sorted(rng.choice(n, rest, replace=False))]
    return [dict(rows[i]) if c == 0 else {**rows[i], "id": f"{rows[i]['id']}#{c}"} for c, i in picked]


def check_sources(specs: Any) -> None:
    """Refuse a malformed list of train sources: each a mapping with its own ``name``; ``weight`` on every
    source or on none, each a finite number > 0."""
    if not isinstance(specs, Sequence) or isinstance(specs, str) or not specs:
        raise DatasetError("dataset.train: give one source (a mapping) or a non-empty list of sources")
    names = []
    for i, spec in enumerate(specs):
        if not isinstance(spec, Mapping) or not spec.get("name"):
            raise DatasetError(f"dataset.train[{i}]: each source of a list is a mapping with its own 'name' "
                               f"(the datasource and id prefix of its rows), got {spec!r}")
        names.append(str(spec["name"]))
    if len(set(names)) < len(names):
        raise DatasetError(f"dataset.train: source names must differ (they prefix the row ids), got {names}")
    weights = [spec.get("weight") for spec in specs]
    if any(w is None for w in weights) and any(w is not None for w in weights):
        missing = [n for n, w in zip(names, weights) if w is None]
        raise DatasetError(f"dataset.train: give a weight to every source or to none; {', '.join(missing)} has none")
    for name, w in zip(names, weights):
        if w is not None and (isinstance(w, bool) or not isinstance(w, (int, float)) or not math.isfinite(w) or w <= 0):
            raise DatasetError(f"dataset.train: source '{name}' has weight {w!r}; a weight is a finite number > 0 "
                               "(its share of the mixed train set; leave a source out instead of weighting it 0)")


def mix_sources(sources: Sequence[tuple[Mapping[str, Any], list[dict]]], seed: int) -> list[dict]:
    """The train set of several sources (``dataset.train`` as a list; the definition is documented at
    ``c3_plugin/core/config.py:DatasetSection.train``): without weights every row of every source once, in
    source order; with weights, as many rows as the sources hold together, split by :func:`mix_counts`
    and drawn from each source by :func:`draw`."""
    weights = [spec.get("weight") for spec, _ in sources]
    if all(w is None for w in weights):
        return [dict(r) for _, rows in sources for r in rows]
    counts = mix_counts([len(rows) for _, rows in sources], weights, sum(len(rows) for _, rows in sources))
    return [r for (spec, rows), m in zip(sources, counts) for r in draw(rows, m, seed, str(spec["name"]))]


def sampling_columns(spec: Mapping[str, Any]) -> dict[str, Any]:
    """The eval-row columns of a suite's decoding: ``eval_samples`` (k; 0 = greedy), ``eval_temperature``,
    ``eval_top_p`` (None: the algorithm's) and ``eval_pass_k`` (the k' of ``pass@k'``; default ``[k]``)."""
    name = spec.get("suite") or spec.get("name")
    k = spec.get("num_samples")
    if k is None or k == 0:
        extra = [key for key in ("temperature", "top_p", "pass_k") if spec.get(key) is not None]
        if extra:
            raise DatasetError(f"dataset.eval '{name}': {', '.join(extra)} set without num_samples (greedy decoding "
                               "has no temperature); add num_samples: k for sampled evaluation")
        return {"eval_samples": 0, "eval_temperature": None, "eval_top_p": None, "eval_pass_k": []}
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise DatasetError(f"dataset.eval '{name}': num_samples must be a positive integer (decodes "
                           f"per item), got {k!r}")
    temperature, top_p, pass_k = spec.get("temperature"), spec.get("top_p"), spec.get("pass_k") or [k]
    if temperature is not None and not float(temperature) > 0:
        raise DatasetError(f"dataset.eval '{name}': temperature must be > 0, got {temperature!r}")
    if top_p is not None and not 0 < float(top_p) <= 1:
        raise DatasetError(f"dataset.eval '{name}': top_p must be in (0, 1], got {top_p!r}")
    if not isinstance(pass_k, (list, tuple)) or any(isinstance(x, bool) or not isinstance(x, int)
                                                    or not 1 <= x <= k for x in pass_k):
        raise DatasetError(f"dataset.eval '{name}': pass_k is a list of integers in [1, "
                           f"num_samples={k}], got {pass_k!r}")
    return {"eval_samples": k, "eval_temperature": None if temperature is None else float(temperature),
            "eval_top_p": None if top_p is None else float(top_p), "eval_pass_k": sorted({int(x) for x in pass_k})}


def _check_keys(spec: Mapping[str, Any], valid: set[str], where_: str) -> None:
    import difflib

    for key in spec:
        if key not in valid:
            near = difflib.get_close_matches(key, sorted(valid), n=1, cutoff=0.5)
            raise DatasetError(f"unknown key '{where_}.{key}'" + (f"; did you mean '{near[0]}'?" if near else
                                                                  f"; valid keys: {', '.join(sorted(valid))}"))


def _unique_ids(rows: Sequence[Mapping[str, Any]], where_: str) -> None:
    seen: dict[str, int] = {}
    for r in rows:
        seen[r["id"]] = seen.get(r["id"], 0) + 1
    dup = [k for k, v in seen.items() if v > 1]
    if dup:
        raise DatasetError(f"{where_}: {len(dup)} row id(s) occur more than once (e.g. {dup[0]!r}); give every "
                           "source its own 'name' (ids are '<name>-<row id>')")


def table(rows: Sequence[Mapping[str, Any]]):
    """``datasets.Dataset`` of ``rows`` with the union of their columns (None where a row lacks one):
    ``Dataset.from_list`` alone keeps only the first row's columns."""
    import datasets

    columns = list(dict.fromkeys(k for r in rows for k in r))
    return datasets.Dataset.from_list([{k: r.get(k) for k in columns} for r in rows])


def load_datasets(section: Mapping[str, Any], seed: int = 0, config: Any = None):
    """``(train, eval)`` as ``datasets.Dataset`` from the config's dataset section. ``train`` is one
    source (a mapping) or several (a list, mixed by :func:`mix_sources` with the run's ``seed``);
    ``drop_overlap`` applies to every source before mixing."""
    base = section.get("base_dir")
    evals: list[dict] = []
    decoding: dict[str, dict[str, Any]] = {}
    for i, spec in enumerate(section.get("eval") or []):
        _check_keys(spec, EVAL_KEYS, f"dataset.eval[{i}]")
        suite = str(spec.get("suite") or spec.get("name") or "train")
        cols = sampling_columns(spec)
        if decoding.setdefault(suite, cols) != cols:
            raise DatasetError(f"dataset.eval: the specs of suite '{suite}' decode differently ({decoding[suite]} vs "
                               f"{cols}); give them the same num_samples, temperature, top_p and pass_k")
        rows = load_split({k: v for k, v in spec.items() if k in SOURCE_KEYS}, base)
        evals.extend({**r, "datasource": suite} for r in rows)
    if any(c["eval_samples"] for c in decoding.values()):
        evals = [{**r, **decoding[r["datasource"]]} for r in evals]
    _unique_ids(evals, "dataset.eval")
    drop = bool(section.get("drop_overlap", False))
    train_spec = section.get("train") or {}
    if isinstance(train_spec, Mapping):
        _check_keys(train_spec, TRAIN_KEYS, "dataset.train")
        train = load_split({"name": "train", **{k: v for k, v in train_spec.items() if k != "weight"}},
                           base) if train_spec else []
        train = check_overlap(train, evals, drop=drop)
    else:
        check_sources(train_spec)
        sources = []
        for i, spec in enumerate(train_spec):
            _check_keys(spec, TRAIN_KEYS, f"dataset.train[{i}]")
            rows = load_split({k: v for k, v in spec.items() if k != "weight"}, base)
            sources.append((spec, check_overlap(rows, evals, drop=drop)))
        train = mix_sources(sources, seed)
    _unique_ids(train, "dataset.train")
    return (table(train) if train else None, table(evals) if evals else None)
