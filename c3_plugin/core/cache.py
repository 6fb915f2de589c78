"""The project's on-disk cache: what is slow to compute, the same on every run of one machine, and cheap to
keep (a GGUF header's model config, a code dataset's reference outputs and times). One JSON file per entry
under ``$C3_CACHE`` (default ``~/.cache/comlrl-c3``), named by a hash of everything the value depends on, so a
changed input is a new entry and a stale one is never read. Delete the folder to measure again."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any, Callable


def cache_dir() -> Path:
    """Where the cache lives: ``$C3_CACHE``, else ``~/.cache/comlrl-c3``."""
    return Path(os.environ.get("C3_CACHE", Path.home() / ".cache" / "comlrl-c3"))


def cache_path(kind: str, key: Any) -> Path:
    """The file of the entry ``kind`` for ``key`` (any JSON value: what the entry depends on)."""
    digest = hashlib.sha256(json.dumps([kind, key], sort_keys=True, default=str).encode()).hexdigest()[:16]
    return cache_dir() / f"{kind}-{digest}.json"


def cached_json(path: Path, compute: Callable[[], Any]) -> Any:
    """The value stored at ``path``, else ``compute()`` stored there (written whole, then renamed into place, so
    concurrent writers and readers never see half a file)."""
    if path.exists():
        try:
            return json.loads(path.read_text())
        except (OSError, ValueError):  # an unreadable entry is measured again
            pass
    value = compute()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(json.dumps(value))
        tmp.replace(path)
    except OSError:  # a read-only home still gets the value
        pass
    return value


def is_cached(path: Path) -> bool:
    """Whether ``path`` holds an entry (what :func:`cached_json` would read instead of computing)."""
    return path.is_file()
