"""Plain builtin data crossing the sandbox boundary: decoding and type-strict equality."""

from __future__ import annotations

import base64
import binascii
import cmath
import math
from collections import Counter
from typing import Any

from .runner import MAX_CHARS, MAX_DEPTH, MAX_ITEMS

_NUMBERS = (bool, int, float)

MAX_SAME_HASH = 32  # distinct set elements or dict keys sharing one hash (more: a hash-flooding attempt)
_CONTAINERS = {"list": list, "tuple": tuple, "set": set, "frozenset": frozenset}


class ResultError(ValueError):
    """An encoded value that is malformed or over a cap: the test that produced it fails."""


def decode(node: Any, max_depth: int = MAX_DEPTH, max_items: int = MAX_ITEMS, max_chars: int = MAX_CHARS) -> Any:
    """Inverse of the runner's ``encode``: a tagged tree -> builtin values. Iterative (no recursion),
    bounded (at most ``max_depth`` levels below the top, ``max_items`` nodes, ``max_chars`` characters
    of leaf text, and no set or dict whose members flood one hash), and strict about node shapes.
    Raises :class:`ResultError` and nothing else on any input."""
    try:
        return _decode(node, max_depth, [max_items, max_chars])
    except ResultError:
        raise
    except (ValueError, TypeError, OverflowError, MemoryError, RecursionError, binascii.Error) as exc:
        raise ResultError(f"malformed result: {type(exc).__name__}: {str(exc)[:200]}") from None


def _decode(root: Any, max_depth: int, budget: list[int]) -> Any:
    leaf, frame = _open(root, 0, max_depth, budget)
    if frame is None:
        return leaf
    stack = [frame]  # [tag, child nodes, decoded children, depth]
    while True:
        tag, kids, done, depth = stack[-1]
        if len(done) < len(kids):
            value, sub = _open(kids[len(done)], depth + 1, max_depth, budget)
            if sub is None:
                done.append(value)
            else:
                stack.append(sub)
            continue
        stack.pop()
        value = _build(tag, done)
        if not stack:
            return value
        stack[-1][2].append(value)


def _text(value: Any, budget: list[int]) -> str:
    if type(value) is not str:
        raise ResultError("malformed result: a leaf holds no text")
    budget[1] -= len(value)
    if budget[1] < 0:
        raise ResultError("result too large: too much text")
    return value


def _open(node: Any, depth: int, max_depth: int, budget: list[int]) -> tuple[Any, list | None]:
    """One node: (its value, None) for a leaf, (None, a frame) for a container."""
    if type(node) is not list or not node or type(node[0]) is not str:
        raise ResultError("malformed result: not a tagged node")
    budget[0] -= 1
    if budget[0] < 0:
        raise ResultError("result too large: too many items")
    if depth > max_depth:
        raise ResultError("result too deep")
    tag, n = node[0], len(node)
    if tag == "none" and n == 1:
        return None, None
    if tag == "bool" and n == 2 and type(node[1]) is bool:
        return node[1], None
    if tag == "int" and n == 2:
        return int(_text(node[1], budget)), None
    if tag == "float" and n == 2:
        return float(_text(node[1], budget)), None
    if tag == "complex" and n == 3:
        return complex(float(_text(node[1], budget)), float(_text(node[2], budget))), None
    if tag == "str" and n == 2:
        return _text(node[1], budget), None
    if tag == "bytes" and n == 2:
        return base64.b64decode(_text(node[1], budget), validate=True), None
    if n == 2 and type(node[1]) is list and (tag in _CONTAINERS or tag == "dict"):
        kids = node[1]
        if tag == "dict":
            if any(type(pair) is not list or len(pair) != 2 for pair in kids):
                raise ResultError("malformed result: a dict entry is not a pair")
            kids = [x for pair in kids for x in pair]
        return None, [tag, kids, [], depth]
    raise ResultError(f"malformed result: unknown node {str(tag)[:40]!r} of length {n}")


def _build(tag: str, values: list) -> Any:
    if tag in ("list", "tuple"):
        return _CONTAINERS[tag](values)
    keys = values if tag != "dict" else values[0::2]
    if len(keys) > MAX_SAME_HASH and max(Counter(map(hash, keys)).values()) > MAX_SAME_HASH:
        raise ResultError("result rejected: its set or dict members collide on one hash")
    if tag == "dict":
        return dict(zip(keys, values[1::2]))
    return _CONTAINERS[tag](values)


def equal(got: Any, expected: Any, atol: float = 0.0, rtol: float = 0.0) -> bool:
    """Type-strict structural equality of plain builtin data. Types must match at every level,
    except that builtin numbers (bool, int, float) compare by value as Python compares them (so
    ``7 == True`` is false and ``1 == True`` true, as in the asserts this judges); floats (and
    complex numbers) compare within ``atol + rtol * |expected|`` (NaN equals NaN; an infinity only itself). Values only
    ever come from the runner's encoder, so no user-defined ``__eq__`` takes part."""
    tg, te = type(got), type(expected)
    if tg in _NUMBERS and te in _NUMBERS:
        if tg is float or te is float:
            # (an int too large for a float has no NaN to check)
            if tg is te and math.isnan(got) and math.isnan(expected):
                return True
            return got == expected or _close(got, expected, atol, rtol)
        return got == expected
    if tg is not te:
        return False
    if tg in (list, tuple):
        return len(got) == len(expected) and all(equal(a, b, atol, rtol) for a, b in zip(got, expected))
    if tg is dict:
        return got.keys() == expected.keys() and all(equal(got[k], expected[k], atol, rtol) for k in got)
    if tg is complex:
        return got == expected or _close(got, expected, atol, rtol)
    return got == expected  # None, bool, str, bytes, set, frozenset (elements are hashable builtins)


def _close(got: Any, expected: Any, atol: float, rtol: float) -> bool:
    """Within ``atol + rtol * |expected|``; an infinity (of either side, or of a complex part) equals only
    itself, as in EvalPlus: ``rtol * inf`` is an infinite tolerance under which any number would pass."""
    if atol <= 0 and rtol <= 0:
        return False
    try:
        if not (cmath.isfinite(got) and cmath.isfinite(expected)):
            return False  # equal infinities were accepted by ``got == expected`` before the tolerance
        return abs(got - expected) <= atol + rtol * abs(expected)
    except (OverflowError, TypeError):
        return False
