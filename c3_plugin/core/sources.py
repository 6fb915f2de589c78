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


def resolve_dataset_paths(data: Mapping[str, Any], folder: Path) -> dict[str, Any]:
    """One config file's mapping with the relative dataset ``source`` paths that exist in ``folder`` (that file's
    folder) made absolute, so a source resolves against the file that names it, as model paths do
    (:func:`c3_plugin.core.model_paths.resolve_model_paths`); other sources are kept as written."""
    def fix(spec: Any) -> Any:
        source = spec.get("source") if isinstance(spec, Mapping) else None
        if not isinstance(source, str) or not source or Path(source).expanduser().is_absolute():
            return spec
        path = Path(folder) / source
        return {**spec, "source": str(path.resolve())} if path.is_file() else spec

    section = data.get("dataset")
    if not isinstance(section, Mapping) or section.get("base_dir"):  # an explicit base_dir decides for that file
        return dict(data)
    out = dict(section)
    for key in ("train", "eval"):
        if isinstance(out.get(key), list):
            out[key] = [fix(s) for s in out[key]]
        elif key in out:
            out[key] = fix(out[key])
    return {**data, "dataset": out}


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
