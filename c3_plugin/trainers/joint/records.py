"""Replay-record kinds: records of a centralized (joint-actor) run carry ``"joint": true``; a run accepts
only records of its own kind."""

from __future__ import annotations

from typing import Any, Iterable, Mapping, MutableMapping

JOINT_KEY = "joint"


def mark_joint(record: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """Mark a replay record as written by a centralized (joint-actor) run; returns it."""
    record[JOINT_KEY] = True
    return record


def is_joint_record(record: Mapping[str, Any]) -> bool:
    return record.get(JOINT_KEY) is True


def check_records(records: Iterable[Mapping[str, Any]], joint: bool, source: str = "replay") -> list[Mapping[str, Any]]:
    """The records, if every one matches the run's kind; otherwise a ValueError naming the first mismatch.

    A joint run accepts only records marked ``"joint": true`` (one joint prompt and one joint
    completion per side); a decentralized run only unmarked ones (one prompt and completion per role)."""
    out = list(records)
    for k, rec in enumerate(out):
        if not isinstance(rec, Mapping):
            raise ValueError(f"{source}: record {k} is a {type(rec).__name__}, not a mapping")
        if is_joint_record(rec) != bool(joint):
            kind, run = (("a decentralized (per-role)", "a centralized joint-actor") if joint
                         else ("a centralized joint-actor", "a decentralized (per-role)"))
            raise ValueError(f"{source}: record {k} is {kind} preference record but this is {run} run; joint and "
                             "per-role replay cannot be mixed: point the replay directory at records of the same kind "
                             "(each run writes its own under its run directory)")
    return out


def check_replay_dir(directory: str | Any, joint: bool) -> int:
    """Check every record of the replay shards (``iteration_*.json``) under ``directory`` before training
    (no model needed); returns the number of records checked (0 when the directory is absent or empty)."""
    import json
    from pathlib import Path

    path = Path(directory)
    count = 0
    for shard in sorted(path.glob("iteration_*.json")) if path.is_dir() else []:
        records = json.loads(shard.read_text(encoding="utf-8")).get("pairs", [])
        count += len(check_records(records, joint, source=str(shard)))
    return count
