"""What a copy of the prompt's example earns on the MBPP train split (issue 50), computed on the host from the tests
alone: the "example echo" returns, for every call, the answer the prompt's example shows. Before: the reward on every
hidden test; after: on the hidden tests the echo fails only (``domains/code/echo.py``: what the train split keeps,
a task left with none leaves the training set). ``--run N`` checks the offline figure against the real sandbox on the
first N tasks the echo earns anything on (an echo candidate ``def <entry>(*a, **k): return <answer>`` scored by the
real reward, before the filter).

Usage: python bench/example_echo.py [--data data] [--run 0]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo root

from domains.code.data import decode_tests, load_split
from domains.code.echo import drop_echoed, echo_answer, echo_reward
from domains.code.tasks import make_reward

ROOT = Path(__file__).resolve().parents[1]


def describe(name: str, rewards: list[float]) -> str:
    return (f"{name}: mean {statistics.fmean(rewards) if rewards else 0.0:.4f} over {len(rewards)} tasks, "
            f"{sum(r > 0 for r in rewards)} > 0, {sum(r == 1.0 for r in rewards)} at 1.0")


def run_check(rows: list[dict], offline: list[float], n: int) -> None:
    """The echo candidate of the first ``n`` rows it earns anything on, scored by the real reward (the sandbox)."""
    picked = [(row, r) for row, r in zip(rows, offline) if r > 0][:n]
    reward = make_reward()
    items, codes = [], []
    for row, _ in picked:
        found, value = echo_answer(decode_tests(row["visible_tests"])[0])
        codes.append(f"```python\ndef {row['entry_point']}(*a, **k):\n    return {value!r}\n```" if found else "")
        items.append(row)
    real = reward(["plan"] * len(codes), codes, batch_items=items)
    same = sum(abs(a - r) < 1e-9 for a, (_, r) in zip(real, picked))
    print(f"real sandbox on {len(picked)} echo candidates: {same} score as computed offline; "
          f"mean real {statistics.fmean(real) if real else 0.0:.4f} vs offline "
          f"{statistics.fmean([r for _, r in picked]) if picked else 0.0:.4f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=str(ROOT / "data"))
    ap.add_argument("--run", type=int, default=0, help="check the first N echo-earning tasks in the real sandbox")
    args = ap.parse_args()
    rows = load_split({"name": "mbpp_train", "kind": "mbpp", "source": f"{args.data}/mbpp/full.jsonl",
                       "id_range": [601, 974], "calibrate": False})
    before = echo_reward(rows)
    kept, figures = drop_echoed(rows)
    after = echo_reward(kept)
    hidden = sum(len(decode_tests(r["tests"])) for r in rows)
    print(f"MBPP train split: {len(rows)} tasks, {hidden} hidden tests")
    print(describe("example echo, before (every hidden test)", before))
    print(f"hidden tests the echo passes (dropped from training): {figures['dropped_tests']}; tasks left with none "
          f"(left out): {len(figures['left_out'])} {figures['left_out']}")
    print(f"hidden tests per kept task: {figures['hidden_tests_per_task']}")
    print(describe("example echo, after (the hidden tests it fails only)", after))
    if args.run:
        run_check(rows, before, args.run)


if __name__ == "__main__":
    main()
