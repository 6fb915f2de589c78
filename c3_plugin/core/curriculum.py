"""Training curricula: phases that each train on a filtered subset of the training rows for a
number of epochs, with their own evaluation interval.

A phase is ``{epochs: N, where: {field: [values]} | None, eval_every: env_steps | 0}``; the
run's epochs are the phases' epochs in order, so ``num_train_epochs`` must equal their sum.
A curriculum changes only the order and frequency of training rows, never the eval set.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

PHASE_KEYS = {"epochs", "where", "eval_every", "name"}


@dataclass(frozen=True)
class Phase:
    epochs: int
    where: Mapping[str, tuple[Any, ...]] | None = None  # row filter (None: every training row)
    eval_every: int = 0  # evaluate every this many env steps during the phase (0: never)
    name: str = ""

    def rows(self, dataset: Any) -> list[int]:
        """Indices of the rows of ``dataset`` this phase trains on."""
        if not self.where:
            return list(range(len(dataset)))
        columns = {k: dataset[k] for k in self.where}
        return [i for i in range(len(dataset)) if all(columns[k][i] in v for k, v in self.where.items())]


def parse_curriculum(spec: Sequence[Mapping[str, Any]] | None, num_train_epochs: int) -> list[Phase] | None:
    """Validated phases (None when ``spec`` is empty)."""
    if not spec:
        return None
    phases = []
    for k, raw in enumerate(spec):
        if not isinstance(raw, Mapping) or set(raw) - PHASE_KEYS or "epochs" not in raw:
            raise ValueError(f"curriculum[{k}] must be a mapping with 'epochs' and optional "
                             f"{sorted(PHASE_KEYS - {'epochs'})}, got {raw!r}")
        where = raw.get("where")
        if where is not None and not isinstance(where, Mapping):
            raise ValueError(f"curriculum[{k}].where must map row fields to lists of values, got {where!r}")
        if int(raw["epochs"]) < 1:
            raise ValueError(f"curriculum[{k}].epochs must be >= 1")
        phases.append(Phase(epochs=int(raw["epochs"]), eval_every=int(raw.get("eval_every", 0) or 0),
                            name=str(raw.get("name", f"phase{k + 1}")),
                            where={f: tuple(v if isinstance(v, (list, tuple)) else [v]) for f, v in where.items()}
                            if where else None))
    total = sum(p.epochs for p in phases)
    if total != int(num_train_epochs):
        raise ValueError(f"curriculum epochs sum to {total} but num_train_epochs is "
                         f"{num_train_epochs}; make them equal")
    return phases


def phase_at(phases: Sequence[Phase], epoch: int) -> Phase:
    """The phase that epoch ``epoch`` (0-based) belongs to."""
    end = 0
    for p in phases:
        end += p.epochs
        if epoch < end:
            return p
    return phases[-1]


def check_rows(phases: Sequence[Phase], dataset: Any) -> None:
    for k, p in enumerate(phases):
        missing = [f for f in (p.where or {}) if f not in dataset.column_names]
        if missing:
            raise ValueError(f"curriculum[{k}].where names field(s) {missing} that the training rows lack")
        if not p.rows(dataset):
            raise ValueError(f"curriculum[{k}] ({p.name}) selects no training rows with where={dict(p.where or {})}")


def epoch_rows(spec: Sequence[Mapping[str, Any]] | None, num_train_epochs: int,
               train: Any) -> tuple[list[Phase] | None, list[int]]:
    """``(phases, training rows per epoch)``; ``train`` is the dataset, or its row count without a curriculum."""
    phases = parse_curriculum(spec, num_train_epochs)
    if phases and isinstance(train, int):
        raise ValueError("a curriculum needs the training rows, not only their count")
    if phases:
        return phases, [len(p.rows(train)) for p in phases for _ in range(p.epochs)]
    return None, [train if isinstance(train, int) else len(train)] * int(num_train_epochs)
