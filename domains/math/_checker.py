"""The math-verify worker process behind :func:`domains.math.answer.score`.

Run as a plain script (``python _checker.py``), never imported by the parent, so it never
imports the caller's ``__main__`` and works under any script, notebook or REPL. Protocol,
one JSON value per line:

* on start it imports math-verify, checks that ``1`` is equivalent to ``1``, and writes
  ``"READY"``; a worker that cannot do that exits non-zero with the reason on stderr;
* then, for each request ``[answer, gold]`` read from stdin, it writes ``true`` or ``false``.
  Model output never ends the worker: a parse or verify error is ``false``.

A decimal answer to a gold written without decimals must be *exactly* equal to it (its decimals read as
exact fractions): math-verify alone accepts anything within 6 rounded digits, so ``3.14159265`` would
pass for ``\\pi`` and ``0.333333`` for ``\\frac13``; ``0.5`` for ``\\frac12`` and ``18.00`` for 18 still pass.

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

    from math_verify import parse, verify
    from sympy import Expr, Float, Rational, simplify

    def exact(a, g) -> bool:
        """``a`` (its floats made exact fractions) equals ``g`` exactly."""
        a = a.xreplace({f: Rational(str(f)) for f in a.atoms(Float)})
        if isinstance(a, Expr) and isinstance(g, Expr):
            return simplify(a - g) == 0
        return bool(verify([g], [a]))

    def equivalent(answer: str, gold: str) -> bool:
        try:
            g = parse(f"${gold}$")
            a = parse(f"${answer}$")
            if not (g and a and verify(g, a)):
                return False
            if DECIMAL.search(answer) and not DECIMAL.search(gold):
                return exact(a[0], g[0])
            return True
        except Exception:  # noqa: BLE001 - model output must never end the worker
            return False

    if not equivalent("1", "1"):
        print("math-verify does not find 1 equivalent to 1: the installation is broken", file=sys.stderr)
        return 3
    channel.write('"READY"\n')
    channel.flush()
    for line in sys.stdin:
        try:
            answer, gold = json.loads(line)
            ok = equivalent(str(answer), str(gold))
        except (ValueError, TypeError):
            ok = False
        channel.write("true\n" if ok else "false\n")
        channel.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
