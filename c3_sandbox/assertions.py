"""Test assertions judged on the host, never inside the candidate's interpreter.

An ``assert`` statement is split into *probes*, the smallest sub-expressions that need the
candidate's code (a call of a function it defines, a name from the test setup), and a *check*:
the assertion with every probe replaced by a placeholder ``_p0``, ``_p1``, ... The sandbox
evaluates only the probes, in the candidate's module namespace, and returns each as plain
builtin data; the host evaluates the check over those values with a small evaluator of its
own (:func:`evaluate`), in an interpreter the candidate never touched. So a monkeypatched
``math.isclose``, replaced builtins or an object with rigged operators cannot pass a test:
rigged objects are not plain data and never leave the sandbox, and every comparison,
``isinstance``, ``abs`` or ``math.isclose`` runs here. The expected values stay here too:
sub-expressions that need no candidate code (``set((4, 5))``, ``4188.79``) are part of the check,
and the few that the host evaluator cannot compute (``sys.getsizeof((1, 2))``) are evaluated
once, at load time, in a sandbox that holds no candidate code, and enter the check as constants
``_c0``, ``_c1``, ...

A probe is reported in one of five modes, chosen by where it sits in the assertion (or by the
dataset): ``value`` (the value itself), ``truth`` (``bool`` of it: the operand of ``assert``,
``not``, ``and``/``or``), ``iter`` (the value, or ``list`` of it when it is an iterable that is
not plain data, such as a generator: the argument of ``set``, ``sorted``, ``len``...),
``callable`` (whether it is callable) and ``present`` (EvalPlus's oracle for tasks that return
a match object or None: a bool stays a bool, anything else becomes ``value is not None``). The
runner computes ``bool``, ``list`` and ``callable`` with references it took before the candidate's
code ran. Whatever the candidate does inside its process, each probe yields one plain value of
its choosing, no more than a plain ``return`` could give.

Forms the host cannot judge are refused when the test is compiled (:class:`AssertionFormError`),
never run inside: a comparison, ``and``/``or``/``not`` or a check function (``isinstance``,
``math.isclose``...) whose result would come back from the sandbox, as in
``all(f(i) == i for i in range(3))``.
"""

from __future__ import annotations

import ast
import builtins
import math
import operator
import re
import sys
import warnings
from collections import Counter
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Iterable, Sequence

from .values import MAX_SAME_HASH, equal

MODES = ("value", "truth", "iter", "callable", "present")

# Builtins the host evaluates itself (pure functions of plain data); a name the setup defines is
# not one of them.
HOST_FUNCS: dict[str, Any] = {f.__name__: f for f in (
    abs, all, any, bool, callable, complex, dict, divmod, float, frozenset, int, isinstance, len, list, max, min, round,
    set, sorted, str, sum, tuple, type)}
# usable in constants (evaluated without candidate code)
BUILTIN_NAMES = frozenset(n for n in dir(builtins) if not n.startswith("_"))
HOST_TYPES = (bool, int, float, complex, str, bytes, list, tuple, set, frozenset, dict, type(None))
MATH_NAMES = ("pi", "e", "tau", "inf", "nan", "isclose", "sqrt", "floor", "ceil", "trunc", "fabs", "isnan", "isinf",
              "isfinite", "log", "log2", "log10", "exp", "sin", "cos", "tan", "asin", "acos", "atan", "atan2", "hypot",
              "degrees", "radians", "copysign", "fmod", "gcd")
# consume their first argument
_ITER_FUNCS = {"all", "any", "frozenset", "len", "list", "set", "sorted", "sum", "tuple"}
_ITER_UNLESS_MORE = {"max", "min"}  # max(xs) iterates; max(a, b) compares values
_CHECK_FUNCS = {"isinstance", "callable", "bool", "isclose", "all", "any"}  # verdicts: never computed in the sandbox
# library functions whose result is a verdict (a comparison, a predicate, a match): computed inside the sandbox, by a
# module or a type name the candidate's code can replace, they would be its to decide, so a probe may not hold one
VERDICT_LIBRARY = {
    "operator": {"eq", "ne", "lt", "le", "gt", "ge", "not_", "truth", "is_", "is_not", "contains", "__eq__", "__ne__",
                 "__lt__", "__le__", "__gt__", "__ge__", "__not__", "__contains__", "countOf", "indexOf"},
    "cmath": {"isclose", "isnan", "isinf", "isfinite"},
    "re": {"match", "fullmatch", "search"},
}
VERDICT_METHODS = {"startswith", "endswith", "isdigit", "isalpha", "isalnum", "isnumeric", "isdecimal", "isspace",
                   "islower", "isupper", "istitle", "isidentifier", "isprintable", "isascii", "issubset", "issuperset",
                   "isdisjoint", "__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__", "__contains__", "__bool__"}
TYPE_NAMES = {"str", "bytes", "int", "float", "complex", "list", "tuple", "set", "frozenset", "dict", "bool", "object"}
STDLIB_MODULES = frozenset(getattr(sys, "stdlib_module_names", ())) - {"__future__", "builtins", "this", "antigravity"}
MAX_BITS = 1 << 20  # largest integer (in bits) the check may build with ** or <<
MAX_ITEMS = 1 << 22  # longest sequence the check may build with *


class AssertionFormError(ValueError):
    """An assertion the host cannot judge (refused when the test is compiled, never run inside)."""


class CheckError(ValueError):
    """The check itself failed on the candidate's values (as the assert would have raised): the test fails."""


@dataclass(frozen=True)
class Probe:
    source: str  # Python expression evaluated in the candidate's namespace
    mode: str = "value"


@dataclass
class Assertion:
    """A compiled ``assert``: ``check`` (host expression over ``_p<i>`` and ``_c<j>``), its probes, and
    the constants ``_c<j>`` (plain values; ``pending`` holds their source until they are evaluated)."""

    source: str
    check: str
    probes: list[Probe]
    consts: list[Any] = field(default_factory=list)
    # sources of the constants still to evaluate (in a sandbox, no candidate code)
    pending: list[str] = field(default_factory=list)
    modules: list[str] = field(default_factory=list)  # standard-library modules those constants use
    # the test setup, run before the constants when one of them uses a name it defines (a comparand such as
    # ``expected``: evaluated without candidate code, so the candidate cannot rebind it; issue 39)
    setup: str = ""

    def to_json(self, encode) -> dict:
        if self.pending:
            raise ValueError(f"assertion {self.source!r} has unevaluated constants {self.pending}")
        return {"assert": self.source, "check": self.check, "probes": [[p.source, p.mode] for p in self.probes],
                "consts": [encode(c) for c in self.consts]}

    @classmethod
    def from_json(cls, spec: dict, decode) -> "Assertion":
        return cls(str(spec["assert"]), str(spec["check"]), [Probe(str(s), str(m)) for s, m in spec["probes"]],
                   [decode(c) for c in spec.get("consts") or []])

    def judge(self, values: Sequence[Any]) -> bool:
        """Whether the assertion holds for these probe values (raises CheckError when it cannot be evaluated)."""
        if len(values) != len(self.probes):
            raise CheckError(f"expected {len(self.probes)} probe values, got {len(values)}")
        env = {f"_p{i}": v for i, v in enumerate(values)}
        env.update((f"_c{j}", c) for j, c in enumerate(self.consts))
        return truth(evaluate(self.check, env))


# ---------------------------------------------------------------- compiling an assertion


def parse_assert(source: str) -> ast.expr:
    """The test expression of one ``assert`` statement."""
    try:
        body = parse_module(str(source).strip()).body
    except (SyntaxError, ValueError) as exc:
        raise AssertionFormError(f"not valid Python: {source!r} ({getattr(exc, 'msg', exc)})") from None
    if len(body) != 1 or not isinstance(body[0], ast.Assert):
        raise AssertionFormError(f"not a single assert statement: {source!r}")
    return body[0].test


def parse_module(source: str) -> ast.Module:
    """``ast.parse`` without the warnings old code raises (``"\\d"`` in MBPP's references). Raises SyntaxError."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return ast.parse(source or "")


def defined_names(source: str) -> set[str]:
    """Names a piece of trusted code (reference solution, test setup) binds at its top level."""
    try:
        tree = parse_module(source)
    except (SyntaxError, ValueError):
        return set()
    out: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(node.name)
        elif isinstance(node, ast.ImportFrom):
            out.update(a.asname or a.name for a in node.names)
        elif isinstance(node, ast.Import):  # `import sys` binds the module itself: still the module, not a definition
            out.update(a.asname for a in node.names if a.asname and a.asname != a.name)
        else:
            for sub in ast.walk(node):
                if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Store):
                    out.add(sub.id)
    return out


def compile_assertion(source: str, defined: Iterable[str] = (), setup: str = "",
                      setup_names: Iterable[str] = ()) -> Assertion:
    """Split ``assert <test>`` into host check and sandbox probes. ``defined``: names the reference
    solution or the setup defines (they belong to the sandbox even where they shadow a builtin or a
    standard-library module). ``setup_names``: those the test ``setup`` defines and the candidate's code is not
    meant to: a sub-expression of them only (``expected`` in ``assert f(1) == expected``) is a constant,
    evaluated with the setup and without candidate code when the test is loaded. Raises AssertionFormError for
    forms the host cannot judge."""
    test = parse_assert(source)
    splitter = _Splitter(set(defined), str(source).strip(), set(setup_names))
    assertion = splitter.run(test)
    if splitter.uses_setup:
        assertion.setup = setup
    return assertion


class _Splitter:
    def __init__(self, defined: set[str], source: str, setup_names: set[str] = frozenset()):
        self.defined, self.source, self.setup_names = defined, source, setup_names
        self.uses_setup = False
        self.probes: list[Probe] = []
        self.pending: list[str] = []
        self.modules: set[str] = set()

    def run(self, test: ast.expr) -> Assertion:
        check = self.split(test, "truth")
        return Assertion(self.source, ast.unparse(check), self.probes, [None] * len(self.pending), self.pending,
                         sorted(self.modules))

    # names ------------------------------------------------------------
    def _host_name(self, name: str) -> bool:
        return name in HOST_FUNCS and name not in self.defined

    def _module(self, name: str) -> bool:
        return name in STDLIB_MODULES and name not in self.defined

    def candidate_free(self, node: ast.AST, allowed: set[str] = frozenset()) -> bool:
        """No name in ``node`` refers to the candidate's namespace (only host builtins, standard-library
        modules used as ``module.attr``, names the expression binds itself and ``allowed``)."""
        bound = {a.arg for n in ast.walk(node) if isinstance(n, ast.Lambda) for a in _all_args(n.args)}
        bound |= {t.id for n in ast.walk(node) if isinstance(n, ast.comprehension) for t in ast.walk(n.target)
                  if isinstance(t, ast.Name)}
        bound |= {n.target.id for n in ast.walk(node) if isinstance(n, ast.NamedExpr)
                  and isinstance(n.target, ast.Name)}
        module_bases = {id(n.value) for n in ast.walk(node) if isinstance(n, ast.Attribute)
                        and isinstance(n.value, ast.Name)}
        for n in ast.walk(node):
            if (isinstance(n, ast.Name) and n.id not in bound and n.id not in allowed
                and not (n.id in BUILTIN_NAMES and n.id not in self.defined)):
                if not (id(n) in module_bases and self._module(n.id)):
                    return False
        return True

    # splitting --------------------------------------------------------
    def split(self, node: ast.expr, ctx: str) -> ast.expr:
        if self.candidate_free(node):
            return self.constant(node)
        if (self.setup_names and any(isinstance(n, ast.Name) and n.id in self.setup_names for n in ast.walk(node))
                and self.candidate_free(node, self.setup_names)):
            return self.setup_constant(node)
        if isinstance(node, ast.Compare):
            return ast.Compare(self.split(node.left, "value"), node.ops,
                               [self.split(c, "value") for c in node.comparators])
        if isinstance(node, ast.BoolOp):
            return ast.BoolOp(node.op, [self.split(v, "truth" if ctx == "truth" else "value") for v in node.values])
        if isinstance(node, ast.UnaryOp):
            return ast.UnaryOp(node.op, self.split(node.operand, "truth" if isinstance(node.op, ast.Not) else "value"))
        if isinstance(node, ast.BinOp) and not isinstance(node.op, ast.MatMult):
            return ast.BinOp(self.split(node.left, "value"), node.op, self.split(node.right, "value"))
        if isinstance(node, ast.IfExp):
            return ast.IfExp(self.split(node.test, "truth"), self.split(node.body, ctx), self.split(node.orelse, ctx))
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)) and not any(isinstance(e, ast.Starred) for e in node.elts):
            return type(node)([self.split(e, "value") for e in node.elts],
                              *([ast.Load()] if not isinstance(node, ast.Set) else []))
        if isinstance(node, ast.Dict) and None not in node.keys:
            return ast.Dict([self.split(k, "value") for k in node.keys], [self.split(v, "value") for v in node.values])
        if isinstance(node, ast.Subscript):
            return ast.Subscript(self.split(node.value, "value"), self.split_slice(node.slice), ast.Load())
        if isinstance(node, ast.Call) and self.host_call(node):
            name = _call_name(node)
            if name == "callable" and len(node.args) == 1 and not node.keywords:
                return self.probe(node.args[0], "callable")  # the runner answers callable() itself
            args = []
            for i, a in enumerate(node.args):
                sub = "value"
                if i == 0 and (name in _ITER_FUNCS or (name in _ITER_UNLESS_MORE and len(node.args) == 1)):
                    sub = "iter"
                elif name == "bool":
                    sub = "truth"
                args.append(self.split(a, sub))
            kws = [ast.keyword(k.arg, self.split(k.value, "value")) for k in node.keywords]
            return ast.Call(node.func, args, kws)
        return self.probe(node, ctx)

    def split_slice(self, node: ast.expr) -> ast.expr:
        if isinstance(node, ast.Slice):
            part = lambda x: None if x is None else self.split(x, "value")  # noqa: E731
            return ast.Slice(part(node.lower), part(node.upper), part(node.step))
        return self.split(node, "value")

    def host_call(self, node: ast.Call) -> bool:
        if any(isinstance(a, ast.Starred) for a in node.args) or any(k.arg is None for k in node.keywords):
            return False
        if any(isinstance(a, ast.Lambda) for a in [*node.args, *(k.value for k in node.keywords)]):
            return False  # sorted(xs, key=lambda ...): the whole call runs in the sandbox and returns a value
        f = node.func
        if isinstance(f, ast.Name):
            return self._host_name(f.id)
        return (isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == "math"
                and self._module("math")
                and f.attr in MATH_NAMES)

    def constant(self, node: ast.expr) -> ast.expr:
        """A sub-expression that needs no candidate code: kept in the check when the host evaluator
        computes it, else evaluated once in a sandbox without candidate code (a constant ``_c<j>``)."""
        try:
            evaluate(ast.unparse(node), {})
            return node
        except CheckError as exc:
            if not isinstance(exc, _Unsupported):
                raise AssertionFormError(f"{self.source!r}: the constant {ast.unparse(node)!r} "
                                         f"cannot be evaluated: {exc}") from exc
        self.modules |= {n.value.id for n in ast.walk(node) if isinstance(n, ast.Attribute)
                         and isinstance(n.value, ast.Name)
                         and self._module(n.value.id)}
        self.pending.append(ast.unparse(node))
        return ast.Name(f"_c{len(self.pending) - 1}", ast.Load())

    def setup_constant(self, node: ast.expr) -> ast.expr:
        """A sub-expression of the setup's names only (a comparand the setup defines): evaluated once, with the
        setup and without candidate code, as a constant ``_c<j>``."""
        self.uses_setup = True
        self.modules |= {n.value.id for n in ast.walk(node) if isinstance(n, ast.Attribute)
                         and isinstance(n.value, ast.Name) and self._module(n.value.id)}
        self.pending.append(ast.unparse(node))
        return ast.Name(f"_c{len(self.pending) - 1}", ast.Load())

    def probe(self, node: ast.expr, mode: str) -> ast.expr:
        verdict = _verdict_inside(node, self)
        if verdict is not None:
            raise AssertionFormError(f"{self.source!r}: the check {ast.unparse(verdict)!r} would run inside the "
                                     "sandbox (its result would come from candidate code); write the assertion so that "
                                     "the candidate's code only computes values")
        self.probes.append(Probe(ast.unparse(node), mode))
        return ast.Name(f"_p{len(self.probes) - 1}", ast.Load())


def _all_args(a: ast.arguments) -> list[ast.arg]:
    return [*a.posonlyargs, *a.args, *a.kwonlyargs, *([a.vararg] if a.vararg else []), *([a.kwarg] if a.kwarg else [])]


def _call_name(node: ast.Call) -> str:
    f = node.func
    return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""


def _check_call(node: ast.Call, splitter: _Splitter) -> bool:
    """A call whose result is a verdict: a check function, a library comparison or predicate
    (:data:`VERDICT_LIBRARY`: ``operator.eq``, ``cmath.isclose``, ``re.fullmatch``...) or a predicate method
    (:data:`VERDICT_METHODS`) of a type name (``str.startswith(f(), "a")``, which a shadowed ``str`` would decide) or of
    a value the candidate's code returns (``f(1).__eq__(2)``)."""
    f = node.func
    if isinstance(f, ast.Name):
        return f.id in _CHECK_FUNCS and splitter._host_name(f.id)
    if (isinstance(f, ast.Attribute) and f.attr in VERDICT_METHODS
        and not (isinstance(f.value, ast.Name) and splitter._module(f.value.id))):
        return True  # f(1).__eq__(2), f(x).startswith("a"): the candidate's object decides
    if not (isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name)):
        return False
    if f.value.id == "math" and f.attr in _CHECK_FUNCS:
        return True
    if f.attr in VERDICT_LIBRARY.get(f.value.id, ()):
        return True
    return f.value.id in TYPE_NAMES and f.attr in VERDICT_METHODS


def _verdict_inside(node: ast.expr, splitter: _Splitter) -> ast.expr | None:
    """A comparison, boolean operator or check function in ``node`` whose result the sandbox would
    compute: anywhere except in the arguments of candidate code (its inputs) and in lambda bodies."""
    if isinstance(node, (ast.Compare, ast.BoolOp)) or (isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not)):
        return node
    if isinstance(node, ast.Lambda):
        return None
    if isinstance(node, ast.Call):
        if _check_call(node, splitter):
            return node
        f = node.func
        library = (isinstance(f, ast.Name) and f.id in BUILTIN_NAMES and f.id not in splitter.defined) or (
            isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and splitter._module(f.value.id))
        if not library:
            return _verdict_inside(f, splitter)  # candidate code: its arguments are its inputs
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.comprehension):
            if child.ifs:
                return child.ifs[0]
            child = child.iter
        if isinstance(child, ast.expr):
            found = _verdict_inside(child, splitter)
            if found is not None:
                return found
    return None


# ---------------------------------------------------------------- evaluating a check


class _Unsupported(CheckError):
    """A construct outside the host evaluator's language."""


def truth(value: Any) -> bool:
    """``bool`` of a plain value (host data only: its truth cannot be rigged)."""
    if type(value) not in HOST_TYPES and not isinstance(value, type):
        raise CheckError(f"truth of a {type(value).__name__}")
    return bool(value)


def _contains(item: Any, container: Any) -> bool:
    if type(container) in (list, tuple):
        return any(equal(item, x) for x in container)
    if type(container) in (set, frozenset, dict, str, bytes):
        return item in container
    raise CheckError(f"'in' needs a container, got {type(container).__name__}")


def _guard_mult(a: Any, b: Any) -> Any:
    for seq, n in ((a, b), (b, a)):
        if isinstance(seq, (str, bytes, list, tuple)) and isinstance(n, int) and len(seq) * max(n, 0) > MAX_ITEMS:
            raise CheckError("sequence repetition too large")
    return operator.mul(a, b)


def _guard_pow(a: Any, b: Any) -> Any:
    if isinstance(a, int) and isinstance(b,
                                         int) and b > 0 and max(abs(a).bit_length(), 1) * b > MAX_BITS and abs(a) > 1:
        raise CheckError("power too large")
    return operator.pow(a, b)


def _guard_lshift(a: Any, b: Any) -> Any:
    if isinstance(b, int) and b > MAX_BITS:
        raise CheckError("shift too large")
    return operator.lshift(a, b)


_FORMAT_SPEC = re.compile(rb"%(?:\([^)]*\))?[-#0 +]*(\*|\d+)?(?:\.(\*|\d+))?")


def _guard_mod(a: Any, b: Any) -> Any:
    """``a % b``; a format string (the candidate's, or the check's with the candidate's arguments) may not ask for a
    field wider or more precise than :data:`MAX_ITEMS` (``'%300000000d' % 2`` would cost 300 MB)."""
    if isinstance(a, (str, bytes)):
        text = a.encode("utf-8", "surrogatepass") if isinstance(a, str) else a
        args = b if isinstance(b, tuple) else (b,)
        for spec in _FORMAT_SPEC.finditer(text):
            for part in spec.groups():
                if part == b"*":
                    if any(isinstance(x, int) and abs(x) > MAX_ITEMS for x in args):
                        raise CheckError("format width too large")
                elif part is not None and int(part) > MAX_ITEMS:
                    raise CheckError("format width too large")
    return operator.mod(a, b)


def _guard_hashed(fn: Any, args: list) -> None:
    """``set``, ``frozenset`` and ``dict`` of a sequence whose members flood one hash (a set of 40,000 colliding
    ints costs the host a minute of hashing): refused, as ``values.decode`` refuses such a set."""
    if fn not in (set, frozenset, dict) or len(args) != 1 or type(args[0]) not in (list, tuple, set, frozenset, dict):
        return
    items = args[0]
    if fn is dict and type(items) in (list, tuple):
        items = [x[0] for x in items if type(x) in (list, tuple) and len(x) == 2]
    if len(items) > MAX_SAME_HASH:
        try:
            counts = Counter(map(hash, items))
        except TypeError:
            return  # unhashable members: the call itself raises
        if max(counts.values()) > MAX_SAME_HASH:
            raise CheckError("its members collide on one hash")


_BINOPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: _guard_mult, ast.Div: operator.truediv,
           ast.FloorDiv: operator.floordiv, ast.Mod: _guard_mod, ast.Pow: _guard_pow, ast.LShift: _guard_lshift,
           ast.RShift: operator.rshift, ast.BitAnd: operator.and_, ast.BitOr: operator.or_, ast.BitXor: operator.xor}
_UNARY = {ast.USub: operator.neg, ast.UAdd: operator.pos, ast.Invert: operator.invert}
_COMPARE = {ast.Eq: lambda a, b: equal(a, b), ast.NotEq: lambda a, b: not equal(a, b), ast.Lt: operator.lt,
            ast.LtE: operator.le, ast.Gt: operator.gt, ast.GtE: operator.ge, ast.Is: operator.is_,
            ast.IsNot: operator.is_not, ast.In: _contains, ast.NotIn: lambda a, b: not _contains(a, b)}


@lru_cache(maxsize=4096)
def _parse_check(source: str) -> ast.expr:
    return ast.parse(source, mode="eval").body


def evaluate(check: str, env: dict[str, Any]) -> Any:
    """Evaluate a check expression over plain values ``env`` (``_p<i>``, ``_c<j>``) with the host's own
    small evaluator. Raises CheckError (the test fails) when the check cannot be evaluated."""
    try:
        return _eval(_parse_check(check), env)
    except CheckError:
        raise
    except (SyntaxError, TypeError, ValueError, ArithmeticError, LookupError, AttributeError, RecursionError,
            MemoryError) as exc:
        raise CheckError(f"{type(exc).__name__}: {str(exc)[:200]}") from None


def _eval(node: ast.expr, env: dict[str, Any]) -> Any:
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        if node.id in env:
            return env[node.id]
        if node.id in HOST_FUNCS:
            return HOST_FUNCS[node.id]
        raise _Unsupported(f"unknown name {node.id!r}")
    if isinstance(node, ast.Attribute):
        if isinstance(node.value, ast.Name) and node.value.id == "math" and node.attr in MATH_NAMES:
            return getattr(math, node.attr)
        raise _Unsupported(f"attribute {ast.unparse(node)!r}")
    if isinstance(node, ast.Compare):
        left = _eval(node.left, env)
        for op, comp in zip(node.ops, node.comparators):
            right = _eval(comp, env)
            if not _COMPARE[type(op)](left, right):
                return False
            left = right
        return True
    if isinstance(node, ast.BoolOp):
        value = None
        for v in node.values:
            value = _eval(v, env)
            if truth(value) == isinstance(node.op, ast.Or):
                return value
        return value
    if isinstance(node, ast.UnaryOp):
        operand = _eval(node.operand, env)
        return (not truth(operand)) if isinstance(node.op, ast.Not) else _UNARY[type(node.op)](operand)
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        return _BINOPS[type(node.op)](_eval(node.left, env), _eval(node.right, env))
    if isinstance(node, ast.IfExp):
        return _eval(node.body, env) if truth(_eval(node.test, env)) else _eval(node.orelse, env)
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)) and not any(isinstance(e, ast.Starred) for e in node.elts):
        return {ast.Tuple: tuple, ast.List: list, ast.Set: set}[type(node)](_eval(e, env) for e in node.elts)
    if isinstance(node, ast.Dict) and None not in node.keys:
        return {_eval(k, env): _eval(v, env) for k, v in zip(node.keys, node.values)}
    if isinstance(node, ast.Subscript):
        value = _eval(node.value, env)
        if type(value) not in (list, tuple, str, bytes, dict):
            raise CheckError(f"cannot index a {type(value).__name__}")
        s = node.slice
        if isinstance(s, ast.Slice):
            part = lambda x: None if x is None else _eval(x, env)  # noqa: E731
            return value[slice(part(s.lower), part(s.upper), part(s.step))]
        return value[_eval(s, env)]
    if (isinstance(node, ast.Call) and not any(isinstance(a, ast.Starred) for a in node.args)
        and all(k.arg for k in node.keywords)):
        fn = _eval(node.func, env)
        if any(fn is f for f in HOST_FUNCS.values()) or getattr(fn, "__module__", None) == "math":
            args = [_eval(a, env) for a in node.args]
            kwargs = {k.arg: _eval(k.value, env) for k in node.keywords}
            if fn is isinstance:
                _check_types(args[1] if len(args) > 1 else None)
            if fn is type and (len(args) != 1 or kwargs):
                raise CheckError("type() takes one argument on the host")
            if fn is round and len(args) > 1 and isinstance(args[1], int) and abs(args[1]) > 10000:
                raise CheckError("round to too many digits")
            _guard_hashed(fn, args)
            return fn(*args, **kwargs)
    raise _Unsupported(f"{type(node).__name__} is not evaluated on the host")


def _check_types(spec: Any) -> None:
    specs = spec if isinstance(spec, tuple) else (spec,)
    if not specs or not all(isinstance(t, type) and t in HOST_TYPES for t in specs):
        raise CheckError("isinstance on the host takes builtin types only")
