"""The math reward's cost per answer against plain math-verify's, measured interleaved (issue 49).

Answers: for each bundled gold (every ``--every``-th of the seven test suites), the gold itself, ``x = g``,
``\\text{Answer: } g``, a wrong value and ``g dogs``, each in a box. Two arms score the same answers:

* ``reward``: ``domains.math.answer.score`` (the box read, the answer language, the judge, math-verify on clean
  values, numbers exact), through the checker worker;
* ``math-verify``: ``domains.math.answer.score_lenient`` (plain math-verify, default extraction, no grammar), through
  the same worker, so the pipe costs the same in both arms.

With ``--in-process`` the arms are ``answer_language.compare.strict`` and ``compare.lenient`` called directly (no
box, no worker): the grammar's cost beside math-verify's alone; with ``--cold`` as well, the reward's per-gold caches
(readings and math-verify parses) and math-verify's own parse caches are emptied before every timed run of either
arm, so each gold is read and parsed once per run (5 answers a gold, as a small group of completions would).

Each pair times both arms over all answers back to back, the order alternating pair by pair
(``bench/paired_timing.py``); the figure is the median per-pair ratio (reward / math-verify) with its interquartile
range. The issue's bound: 1.2. Without ``--cold`` the reward's gold caches are warm after the untimed first run
(each gold met again), as in training, where a gold is scored for every completion of its prompt at every step.

With ``--same`` nothing is timed: every answer above, and every answer of ``bench/reward_hunt.py``'s math families
(hacks and right forms) on the same golds, is checked by ``compare.strict`` twice, on the cost path and on the
reference path (``strict(..., reference=True)``: both values parsed and every test run in turn, as first written);
any answer whose verdicts differ is printed, and the exit status is 1.

Usage: python bench/answer_cost.py [--every 5] [--pairs 6] [--in-process [--cold]] [--same]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.paired_timing import describe, paired_ratio  # noqa: E402
from bench.reward_hunt import MATH_HACKS, MATH_RIGHT, _wrong, math_golds  # noqa: E402

BOUND = 1.2


def answers(every: int) -> list[tuple[str, str]]:
    """(boxed content, gold) pairs: right, right in other forms, wrong, and a hack, for each gold."""
    out = []
    for _, gold in math_golds(every):
        for content in (gold, f"x = {gold}", f"\\text{{Answer: }} {gold}", _wrong(gold), f"{gold} dogs"):
            out.append((content, gold))
    return out


def hunt_answers(every: int) -> list[tuple[str, str]]:
    """(boxed content, gold) pairs of every math hack family and right-form variant of ``bench/reward_hunt.py``."""
    from answer_language import last_box

    out = []
    for _, gold in math_golds(every):
        for _, make in MATH_HACKS.values():
            content = make(gold, _wrong(gold))
            if isinstance(content, tuple):  # a whole completion: the box a reader reads
                content = last_box(content[1])
            if content is not None:
                out.append((content, gold))
        out += [(content, gold) for _, make in MATH_RIGHT.values() if (content := make(gold)) is not None]
    return out


def same(every: int) -> int:
    """How many answers the cost path and the reference path judge differently (printed, with the first few)."""
    from answer_language.compare import strict

    cases = answers(every) + hunt_answers(every)
    start = time.perf_counter()
    differ = [(a, g, new) for a, g in cases if (new := strict(a, g)) != strict(a, g, reference=True)]
    took = time.perf_counter() - start
    print(f"== {len(cases)} answers ({len(answers(every))} of the timed set, {len(cases) - len(answers(every))} "
          f"of reward_hunt's math families), cost path against reference path, {took:.0f} s ==")
    print(f"verdicts that differ: {len(differ)}")
    for a, g, new in differ[:20]:
        print(f"  cost path {new}, reference {not new}: {a!r} for gold {g!r}")
    return len(differ)


def forget() -> None:
    """Empty the per-gold caches of the reward (in this process) and math-verify's parse caches."""
    from math_verify import parser

    from answer_language import compare

    compare._GOLDS.clear()
    compare._GOLD_VALUES.clear()
    parser.parse_latex_cached.cache_clear()
    parser.parse_expr_cached.cache_clear()
    parser.extract_latex.cache_clear()


def arms(pairs: list[tuple[str, str]], in_process: bool):
    if in_process:
        from answer_language.compare import lenient, strict

        return (lambda: [strict(a, g) for a, g in pairs]), (lambda: [lenient(a, g) for a, g in pairs])
    from domains.math.answer import score, score_lenient

    boxed = [(f"so the answer is \\boxed{{{a}}}", g) for a, g in pairs]
    return (lambda: [score(c, g) for c, g in boxed]), (lambda: [score_lenient(c, g) for c, g in boxed])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--every", type=int, default=5, help="every K-th gold of each suite")
    ap.add_argument("--pairs", type=int, default=6, help="alternated (reward, math-verify) pairs")
    ap.add_argument("--in-process", action="store_true", help="the checks themselves, without box or worker")
    ap.add_argument("--cold", action="store_true", help="with --in-process: no gold cached from an earlier run")
    ap.add_argument("--same", action="store_true", help="check that the cost path's verdicts are the reference's")
    args = ap.parse_args()
    if args.same:
        sys.exit(1 if same(args.every) else 0)
    pairs = answers(args.every)
    reward, plain = arms(pairs, args.in_process)
    start = time.perf_counter()
    if args.cold and not args.in_process:
        ap.error("--cold needs --in-process (the worker keeps its caches)")
    result = paired_ratio(reward, plain, pairs=args.pairs, before=forget if args.cold else None)
    where = "in process" + (", caches emptied before each run" if args.cold else "") if args.in_process \
        else "through the checker worker"
    took = time.perf_counter() - start
    print(f"== {len(pairs)} answers ({len(pairs) // 5} golds x 5 forms), {where}, {took:.0f} s ==")
    print(f"reward per answer: {1e3 * result['first_median_s'] / len(pairs):.2f} ms; "
          f"plain math-verify per answer: {1e3 * result['second_median_s'] / len(pairs):.2f} ms")
    print(describe(result, "reward / math-verify"))
    print(f"within {BOUND}x: {'yes' if result['median'] <= BOUND else 'NO'}")


if __name__ == "__main__":
    main()
