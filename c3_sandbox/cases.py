"""What a test is and what it gets: ``Test`` (judged in the host; its payload is what the box sees), ``TestResult``,
the sandbox's ``Limits`` and ``SandboxError``."""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass, field
from typing import Any, Sequence

from .assertions import Assertion, CheckError, compile_assertion
from .runner import encode
from .values import equal

# what a test's payload may hold (the candidate's inputs): a test's time limit and value cap stay in the host
PAYLOAD_KEYS = ("index", "probes", "expr", "entry_point", "args")


class SandboxError(RuntimeError):
    """The sandbox machinery failed (not the candidate): an infrastructure error."""


@dataclass
class Limits:
    cpu_s: int = 5  # RLIMIT_CPU per test process
    memory_mb: int = 1024  # RLIMIT_AS per test process
    file_mb: int = 8  # RLIMIT_FSIZE: largest file (and captured output) a test may write
    open_files: int = 64  # RLIMIT_NOFILE
    processes: int = 32  # RLIMIT_NPROC for the sandbox's uid
    max_output_bytes: int = 2000  # captured test output kept for the report
    max_result_bytes: int = 4 << 20  # largest encoded return value accepted
    max_report_bytes: int = 16 << 20  # all of a candidate's encoded values together (what the host reads and decodes)
    box_memory_mb: int = 1536  # the whole sandbox's memory, its tmpfs included (cgroup memory.max, where available)
    box_processes: int = 128  # the whole sandbox's processes and threads (cgroup pids.max, where available)
    disk_mb: int = 64  # size of the tmpfs a test may write (/sandbox, /tmp)
    # a test's limit is CPU time (all its processes and threads); its wall clock may run this many times longer (a
    # test that sleeps ends there), so a busy machine or a hostile neighbour cannot time out an honest test
    wall_factor: float = 3.0


@dataclass
class TestResult:
    passed: bool
    status: str  # "passed", "failed" (wrong value), "error", "timeout", "infra"
    reason: str = ""
    seconds: float = 0.0
    output: str = ""

    def __post_init__(self) -> None:
        # candidate-derived text (an exception message, its output) goes into feedback prompts and logs: a lone
        # surrogate (raise ValueError(chr(0xD800))) would make the next tokenizer call raise, so it becomes '?'
        self.reason, self.output = printable(self.reason), printable(self.output)


def printable(text: Any) -> str:
    """``text`` as a string that encodes to UTF-8: lone surrogates and other unencodable code points replaced."""
    return str(text).encode("utf-8", "replace").decode("utf-8") if text else ""


@dataclass
class Test:
    """One hidden test, judged in the host. Either an assertion (``assertion``: its probes run in the
    sandbox, its check here) or a value test: evaluate ``expr`` (or call ``entry_point(*args)``) in the
    sandbox, report it in ``mode`` and compare it with ``expected`` type-strictly (floats within
    ``atol + rtol * |expected|``). ``expected`` never enters the sandbox."""

    __test__ = False  # not a pytest class
    expected: Any = None  # decoded builtin data
    expr: str | None = None
    entry_point: str | None = None
    args: list = field(default_factory=list)
    atol: float = 0.0  # absolute tolerance for floats (MBPP+); 0: exact
    rtol: float = 0.0  # relative tolerance for floats (MBPP+, as EvalPlus)
    mode: str = "value"  # how the sandbox reports a value test's value (see assertions.MODES)
    assertion: Assertion | None = None
    timeout_s: float | None = None  # this test's CPU-time limit (wall: wall_factor x); None: the run's
    _cap: int | None = field(default=None, repr=False, compare=False)  # value_cap(), computed once

    @classmethod
    def from_assert(cls, source: str, defined: Sequence[str] = (), timeout_s: float | None = None) -> "Test":
        """A test from an ``assert`` statement whose constants the host evaluates itself (raises
        AssertionFormError otherwise; see ``domains.code.execute`` for the general case)."""
        assertion = compile_assertion(source, defined)
        if assertion.pending:
            raise ValueError(f"{source!r}: constants {assertion.pending} need a sandbox to evaluate")
        return cls(assertion=assertion, timeout_s=timeout_s)

    @property
    def source(self) -> str:
        """The test as a line of Python (for feedback and reports)."""
        if self.assertion is not None:
            return self.assertion.source
        return self.expr or f"{self.entry_point}(*{self.args!r})"

    def probes(self) -> list[dict]:
        if self.assertion is not None:
            return [{"expr": p.source, "mode": p.mode} for p in self.assertion.probes]
        if self.expr is not None:
            return [{"expr": self.expr, "mode": self.mode}]
        return [{"call": self.entry_point, "args": encode(list(self.args), 0, [1 << 22]), "mode": self.mode}]

    def payload(self, index: int, timeout_s: float = 5.0, judged: bool = True) -> dict:
        """The probes (the candidate's inputs, all the sandbox gets: :data:`PAYLOAD_KEYS`) and this test's time limit
        (``timeout_s``, kept and enforced by the host; a value test's cap, :meth:`value_cap`, is checked by the host
        too). ``judged``: kept for callers; a reference run has no cap, since only :meth:`Sandbox.run` judges."""
        out = {"index": index, "probes": self.probes(), "timeout_s": float(self.timeout_s or timeout_s)}
        if judged and self.value_cap():
            out["max_bytes"] = self.value_cap()  # the host's, like the time limit (not in PAYLOAD_KEYS)
        return out

    def value_cap(self) -> int | None:
        """A test's cap on the candidate's encoded value: 8 x its expected value's encoding + 4 KiB (a value equal to
        it, floats within tolerance included, encodes to at most about twice as many bytes), so a wrong answer of
        any size is never decoded or judged. The expected value is a value test's, or the comparand of an assertion
        whose check is exactly ``probe == comparand`` (MBPP's ``assert f(x) == y``: issue 50); other assertions have
        none (their probes' honest sizes are not known here: the report's whole cap bounds them). Checked by the host
        (:meth:`Sandbox._judge`, and before parsing: ``Sandbox._run``): the sandbox never learns it."""
        if self._cap is None:
            found, expected = (True, self.expected) if self.assertion is None else _comparand(self.assertion)
            try:
                self._cap = 8 * len(json.dumps(encode(expected))) + 4096 if found else 0
            except Exception:  # noqa: BLE001 - not plain data (no candidate can equal it): no cap of its own
                self._cap = 0
        return self._cap or None

    def judge(self, values: Sequence[Any]) -> bool:
        """Whether the probe values the sandbox returned pass this test (host-side, plain data only)."""
        if self.assertion is not None:
            return self.assertion.judge(values)
        if len(values) != 1:
            raise CheckError(f"expected one value, got {len(values)}")
        return equal(values[0], self.expected, self.atol, self.rtol)


def _comparand(assertion: Assertion) -> tuple[bool, Any]:
    """(found, value): the value an assertion's one probe must equal, when its check is exactly ``_p0 == X`` or
    ``X == _p0`` with ``X`` a literal or one of its constants."""
    if len(assertion.probes) != 1:
        return False, None
    try:
        node = ast.parse(assertion.check, mode="eval").body
    except SyntaxError:
        return False, None
    if not (isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], ast.Eq)):
        return False, None
    sides = [node.left, node.comparators[0]]
    probe = [isinstance(x, ast.Name) and x.id == "_p0" for x in sides]
    if probe.count(True) != 1:
        return False, None
    other = sides[probe.index(False)]
    if isinstance(other, ast.Name) and re.fullmatch(r"_c\d+", other.id):
        j = int(other.id[2:])
        return (True, assertion.consts[j]) if j < len(assertion.consts) else (False, None)
    try:
        return True, ast.literal_eval(other)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False, None
