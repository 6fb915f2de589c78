"""Code extraction over every bundled MBPP and MBPP+ reference solution (issue 49, point 3): each solution shown
in the ways a right answer is written (the reader reads the solution) and beside a redefinition hidden where a
reader does not see it (the reader must not read the redefinition), extracted by this checkout and, with
``--before ROOT``, by the checkout at ROOT (e.g. a worktree of the commit before the change), interleaved, with
the cost per message of each.

    python bench/code_extraction_hunt.py [--every K] [--before ROOT] [--json out.json]

Extraction only (no sandbox): a message whose extracted code is the reference solution scores what the solution
scores (1), one whose extracted code is the hidden redefinition runs it. Prints a table of rates per family.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import importlib.util
import inspect
import json
import sys
import time
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from domains.code.extract import extract_code  # noqa: E402 - after the checkout's root is on the path


def fence(code: str, info: str = "python") -> str:
    return f"```{info}\n{code}```"


def _indent(code: str, prefix: str) -> str:
    return "".join(prefix + line + "\n" for line in code.split("\n"))


# a right answer shown as a reader writes it: (name, message from solution g, entry point e, usage assert a)
RIGHT: dict[str, Callable[[str, str, str], str]] = {
    "plain_fence": lambda g, e, a: fence(g),
    "plain_code": lambda g, e, a: g,
    "bare_code_in_prose": lambda g, e, a: "Here is the function.\n" + g + "\nHope this helps!",
    "info_text_after_tag": lambda g, e, a: fence(g, "python  # solution"),
    "unclosed_final_fence": lambda g, e, a: "Answer:\n```python\n" + g,
    "last_version_wins": lambda g, e, a: fence(f"def {e}(*args):\n    return None\n") + "\nFixed:\n" + fence(g),
    "usage_print_after": lambda g, e, a: fence(g) + "\n\nUsage:\n" + fence(f"print({a.split('==')[0][7:].strip()})\n"),
    "assert_after": lambda g, e, a: fence(g) + "\n" + fence(a + "\n"),
    "doctest_after": lambda g, e, a: fence(g) + "\n\nExample:\n" + fence(f">>> {a.split('==')[0][7:].strip()}\n"),
    "test_function_after": lambda g, e, a: fence(g) + "\n" + fence(f"def test_{e}():\n    {a}\n"),
    "text_explanation_after": lambda g, e, a: fence(g) + "\n" + fence(f"{e} returns the result.\n", "text"),
    "output_block_after": lambda g, e, a: fence(g) + "\nOutput:\n" + fence("True\n", "text"),
    "indented_after_prose": lambda g, e, a: "Here is the function:\n\n" + _indent(g, "    ") + "\nDone.",
    "bom": lambda g, e, a: "\ufeff" + fence(g),
    "fence_in_list_item": lambda g, e, a: "1. The function:\n   ```python\n" + _indent(g, "   ") + "   ```\n2. Done.",
    "stray_fence_after": lambda g, e, a: fence(g) + "\n```\n",
    "markdown_wrapped_reply": lambda g, e, a: "```markdown\nHere is the code:\n```python\n" + g + "```\n```",
    "crlf": lambda g, e, a: ("Sure.\n" + fence(g) + "\n").replace("\n", "\r\n"),
}
# a redefinition w of the entry point hidden after the solution, where a reader does not see it as the answer
HIDDEN: dict[str, Callable[[str, str], str]] = {
    "html_comment": lambda g, w: fence(g) + "\n<!--\n" + fence(w) + "\n-->\n",
    "details": lambda g, w: fence(g) + "\n\n<details>\n<summary>older</summary>\n\n" + fence(w) + "\n\n</details>\n",
    "hidden_div": lambda g, w: fence(g) + "\n<div hidden>\n\n" + fence(w) + "\n\n</div>\n",
    "display_none": lambda g, w: fence(g) + '\n<div style="display: none">\n\n' + fence(w) + "\n\n</div>\n",
    "text_scratch_block": lambda g, w: fence(g) + "\n" + fence(w, "text"),
    "labelled_not_used": lambda g, w: fence(g) + "\n\nA slower version (not used):\n" + fence(w),
    "not_used_on_the_fence": lambda g, w: fence(g) + "\n" + fence(w, "python  # not used"),
    "backtick_in_info_string": lambda g, w: fence(g) + "\n```py`\n" + w + "```",
}


def golds(every: int = 1) -> list[tuple[str, str, str, str]]:
    """(id, solution, entry point, first test assert) of every K-th bundled MBPP and MBPP+ solution."""
    out = []
    for line in (ROOT / "data" / "mbpp" / "full.jsonl").read_text().splitlines():
        row = json.loads(line)
        code = row["code"].replace("\r\n", "\n").strip("\n") + "\n"
        test = row["test_list"][0]
        try:
            call = ast.parse(test).body[0].test
            name = next(n.func.id for n in ast.walk(call) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
                        and f"def {n.func.id}" in code)
        except (SyntaxError, StopIteration, AttributeError, IndexError):
            continue
        out.append((f"mbpp-{row['task_id']}", code, name, test))
    for line in (ROOT / "data" / "mbppplus" / "test.jsonl").read_text().splitlines():
        row = json.loads(line)
        asserts = [s.strip() for s in row["prompt"].splitlines() if s.strip().startswith("assert ")]
        out.append((f"mbppplus-{row['task_id']}", row["canonical_solution"].strip("\n") + "\n", row["entry_point"],
                    asserts[0] if asserts else f"assert {row['entry_point']}() is not None"))
    return out[::every]


def load_before(root: str) -> Callable[[str, str], str]:
    """``domains.code.extract_code`` of the checkout at ``root``, loaded as a package of another name."""
    spec = importlib.util.spec_from_file_location("before_domains", Path(root) / "domains" / "__init__.py",
                                                  submodule_search_locations=[str(Path(root) / "domains")])
    module = importlib.util.module_from_spec(spec)
    sys.modules["before_domains"] = module
    spec.loader.exec_module(module)
    fn = importlib.import_module("before_domains.code").extract_code
    takes_entry = len(inspect.signature(fn).parameters) > 1
    return (lambda text, e: fn(text, e)) if takes_entry else (lambda text, e: fn(text))


def hunt(rows, extractors: dict[str, Callable[[str, str], str]]) -> dict:
    """Per family and extractor: how many messages read the solution, and (hidden families) how many run the
    hidden redefinition; the seconds spent extracting (the extractors alternate message by message)."""
    same = lambda a, b: a.replace("\r\n", "\n").strip() == b.strip()  # noqa: E731
    tables: dict = {"right": {}, "hidden": {}, "seconds": dict.fromkeys(extractors, 0.0), "messages": 0}
    cases = [("right", k, lambda g, e, a, f=f: f(g, e, a)) for k, f in RIGHT.items()]
    cases += [("hidden", k, lambda g, e, a, f=f: f(g, f"def {e}(*args, **kwargs):\n    return None\n"))
              for k, f in HIDDEN.items()]
    for kind, family, make in cases:
        counts = {name: [0, 0] for name in extractors}  # reads the solution, runs the hidden one
        for _, gold, entry, test in rows:
            text = make(gold, entry, test)
            for name, fn in extractors.items():
                t = time.perf_counter()
                got = fn(text, entry)
                tables["seconds"][name] += time.perf_counter() - t
                counts[name][0] += same(got, gold)
                counts[name][1] += same(got, f"def {entry}(*args, **kwargs):\n    return None\n")
            tables["messages"] += 1
        tables[kind][family] = counts
    return tables


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--every", type=int, default=1, help="every K-th solution")
    ap.add_argument("--before", default=None, help="the root of a checkout to compare with (its extract_code)")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    rows = golds(args.every)
    extractors = {"after": extract_code}
    if args.before:
        extractors = {"before": load_before(args.before), **extractors}
    tables = hunt(rows, extractors)
    names = list(extractors)
    print(f"== code extraction: {len(rows)} reference solutions (MBPP full, MBPP+ test), every {args.every} ==")
    print("| right presentation | " + " | ".join(f"reads the solution, {n}" for n in names) + " |")
    print("| --- |" + " ---: |" * len(names))
    rate = lambda k: f"{k / len(rows):.3f} ({k})"  # noqa: E731
    for family, counts in tables["right"].items():
        print(f"| {family} | " + " | ".join(rate(counts[n][0]) for n in names) + " |")
    print("\n| hidden redefinition | " + " | ".join(f"runs it, {n} | reads the solution, {n}" for n in names) + " |")
    print("| --- |" + " ---: | ---: |" * len(names))
    for family, counts in tables["hidden"].items():
        print(f"| {family} | " + " | ".join(f"{rate(counts[n][1])} | {rate(counts[n][0])}" for n in names) + " |")
    per = {n: 1e6 * tables["seconds"][n] / tables["messages"] for n in names}
    print("\nextraction cost per message (interleaved): " + ", ".join(f"{n} {per[n]:.0f} us" for n in names))
    if args.json:
        Path(args.json).write_text(json.dumps({**tables, "solutions": len(rows), "us_per_message": per}, indent=1))


if __name__ == "__main__":
    main()
