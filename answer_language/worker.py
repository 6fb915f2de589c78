"""The math-verify worker process behind :class:`answer_language.client.Checker`.

Run as a plain script (``python worker.py``), never imported by the parent, so it never imports the caller's
``__main__`` and works under any script, notebook or REPL. Protocol, one JSON value per line:

* on start it imports math-verify, checks that ``1`` is equivalent to ``1``, and writes ``"READY"``; a worker
  that cannot do that exits non-zero with the reason on stderr;
* then, for each request ``[mode, answer, gold]`` read from stdin, it writes ``true`` or ``false``: ``"strict"``
  (the reward: :func:`answer_language.compare.strict`, the whole box must parse into one reading) or
  ``"lenient"`` (plain math-verify, published numbers' scoring). Model output never ends the worker: a parse or
  verify error is ``false``.

It exits when stdin closes (the parent went away). Anything else printed (library warnings) goes to stderr, never
onto the protocol channel.
"""

from __future__ import annotations

import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def _serve(channel, strict, lenient) -> None:
    for line in sys.stdin:
        try:
            mode, answer, gold = json.loads(line)
            ok = (lenient if mode == "lenient" else strict)(str(answer), str(gold))
        except (ValueError, TypeError):
            ok = False
        channel.write("true\n" if ok else "false\n")
        channel.flush()


def main() -> int:
    # this folder is no import root (its modules must not shadow anything): the package is imported from its parent
    sys.path[:] = [os.path.dirname(HERE)] + [p for p in sys.path if os.path.abspath(p or os.curdir) != HERE]
    channel = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)  # stray prints go to stderr
    sys.stdout = sys.stderr
    # imported here, after stdout is redirected: math-verify's import-time output must not reach the channel
    from answer_language.compare import equivalent, lenient, strict

    if not equivalent("1", "1"):
        print("math-verify does not find 1 equivalent to 1: the installation is broken", file=sys.stderr)
        return 3
    channel.write('"READY"\n')
    channel.flush()
    _serve(channel, strict, lenient)
    return 0


if __name__ == "__main__":
    sys.exit(main())
