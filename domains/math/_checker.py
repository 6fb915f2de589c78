"""The math-verify worker process behind :func:`domains.math.answer.score`.

Run as a plain script (``python _checker.py``), never imported by the parent, so it never
imports the caller's ``__main__`` and works under any script, notebook or REPL. Protocol,
one JSON value per line:

* on start it imports math-verify, checks that ``1`` is equivalent to ``1``, and writes
  ``"READY"``; a worker that cannot do that exits non-zero with the reason on stderr;
* then, for each request ``[mode, answer, gold]`` read from stdin, it writes ``true`` or ``false``:
  ``"strict"`` (the reward) runs the integrity screen (``integrity.py`` of this folder, loaded by path) and
  checks every claim it returns with math-verify's LaTeX extraction only (no fallback to a bare number read
  out of unparseable text); ``"lenient"`` is plain math-verify, default extraction, no screen (published
  numbers' scoring). Model output never ends the worker: a parse or verify error is ``false``.

A decimal answer to a gold written without decimals must be *exactly* equal to it (its decimals read as
exact fractions): math-verify alone accepts anything within 6 rounded digits, so ``3.14159265`` would
pass for ``\\pi`` and ``0.333333`` for ``\\frac13``; ``0.5`` for ``\\frac12`` and ``18.00`` for 18 still pass.
Any other numeric answer must agree with the gold to 1e-6 of the gold's size (math-verify's rounding to 6
decimal places would let any tiny number pass for a tiny gold such as ``1.325 \\times 10^{-27}``).

It exits when stdin closes (the parent went away). Anything else printed (library
warnings) goes to stderr, never onto the protocol channel.
"""

from __future__ import annotations

import json
import os
import re
import sys

DECIMAL = re.compile(r"\d*\.\d+")


def main() -> int:
    here = os.path.dirname(os.path.abspath(__file__))
    # this folder is not a package root: its modules (data.py, answer.py) must not shadow anything
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    channel = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)  # stray prints go to stderr
    sys.stdout = sys.stderr

    import importlib.util

    from math_verify import LatexExtractionConfig, parse, verify
    from sympy import Eq, Expr, Float, Rational, simplify

    spec = importlib.util.spec_from_file_location("c3_math_integrity", os.path.join(here, "integrity.py"))
    integrity = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = integrity  # its dataclasses look their module up
    spec.loader.exec_module(integrity)
    latex_only = [LatexExtractionConfig()]

    def exact(a, g) -> bool:
        """``a`` (its floats made exact fractions) equals ``g`` exactly."""
        a = a.xreplace({f: Rational(str(f)) for f in a.atoms(Float)})
        if isinstance(a, Expr) and isinstance(g, Expr):
            return simplify(a - g) == 0
        return bool(verify([g], [a]))

    def relatively_close(a, g) -> bool:
        """Two numbers agree to 1e-6 of the gold's size (a zero gold: exactly). math-verify rounds to 6 decimal
        places, so below 1e-6 every number equals every other: 10^{-20} would pass for 1.325 x 10^{-27}."""
        if not (isinstance(a, Expr) and isinstance(g, Expr) and a.is_number and g.is_number):
            return True
        try:
            av, gv = complex(a.evalf(30)), complex(g.evalf(30))
        except (TypeError, ValueError):
            return True
        return abs(av - gv) <= 1e-6 * abs(gv) if gv != 0 else av == 0

    def same_equation(a, g) -> bool:
        """Two equations agree when one's ``lhs - rhs`` is a nonzero constant times the other's (math-verify alone
        lets ``12345 I + x = T`` pass for ``I + x = T``); anything else: math-verify's verdict stands."""
        if not (isinstance(a, Eq) and isinstance(g, Eq)):
            return True
        try:
            ratio = simplify((a.lhs - a.rhs) / (g.lhs - g.rhs))
        except Exception:  # noqa: BLE001
            return True
        return bool(ratio.is_number and ratio != 0)

    def equivalent(answer: str, gold: str) -> bool:
        """One claim against the gold, LaTeX extraction only."""
        try:
            g = parse(f"${gold}$", extraction_config=latex_only)
            a = parse(f"${answer}$", extraction_config=latex_only)
            if not (g and a and verify(g, a)):
                return False
            if DECIMAL.search(answer) and not DECIMAL.search(gold):
                return exact(a[0], g[0])
            return relatively_close(a[0], g[0]) and same_equation(a[0], g[0])
        except Exception:  # noqa: BLE001 - model output must never end the worker
            return False

    def strict(answer: str, gold: str) -> bool:
        try:
            verdict = integrity.screen(answer, gold)
        except Exception:  # noqa: BLE001
            return False
        if verdict.reason is not None or not verdict.claims or not verdict.gold:
            return False
        return verdict.same or all(equivalent(c, verdict.gold) for c in verdict.claims)

    def lenient(answer: str, gold: str) -> bool:
        try:
            return bool(verify(parse(f"${gold}$"), parse(answer)))
        except Exception:  # noqa: BLE001
            return False

    if not equivalent("1", "1"):
        print("math-verify does not find 1 equivalent to 1: the installation is broken", file=sys.stderr)
        return 3
    channel.write('"READY"\n')
    channel.flush()
    for line in sys.stdin:
        try:
            mode, answer, gold = json.loads(line)
            ok = (lenient if mode == "lenient" else strict)(str(answer), str(gold))
        except (ValueError, TypeError):
            ok = False
        channel.write("true\n" if ok else "false\n")
        channel.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
