"""What every domain's data loading shares: where a local data source is, and the train/eval overlap check."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Mapping, Sequence

from c3_plugin.core.errors import DatasetError


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
    places = ([f"the config folder {Path(base_dir).resolve()}"] if base_dir is not None
              else []) + [f"the working directory {Path.cwd()}"]
    return "looked in " + " and ".join(places)


def _key(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip().lower()


def check_overlap(train: Sequence[Mapping[str, Any]], evals: Sequence[Mapping[str, Any]],
                  drop: bool = False) -> list[dict]:
    """Refuse (or, with ``drop``, remove) training rows whose question is an evaluation question."""
    eval_keys = {_key(r["question"]): r["datasource"] for r in evals}
    clash = [r for r in train if _key(r["question"]) in eval_keys]
    if clash and not drop:
        suites = sorted({eval_keys[_key(r["question"])] for r in clash})
        raise DatasetError(f"training set contains {len(clash)} evaluation problem(s) from {', '.join(suites)} "
                           f"(e.g. {clash[0]['question'][:60]!r}); use disjoint data or set dataset.drop_overlap: true")
    return [r for r in train if _key(r["question"]) not in eval_keys]
