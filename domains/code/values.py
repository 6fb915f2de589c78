"""Plain builtin data crossing the sandbox boundary: decoding and type-strict equality."""

from __future__ import annotations

import base64
import math
from typing import Any

_NUMBERS = (bool, int, float)


def decode(node: Any) -> Any:
    """Inverse of the runner's ``encode``: a tagged tree -> builtin values."""
    tag = node[0]
    if tag == "none":
        return None
    if tag == "bool":
        return bool(node[1])
    if tag == "int":
        return int(node[1])
    if tag == "float":
        return float(node[1])
    if tag == "complex":
        return complex(float(node[1]), float(node[2]))
    if tag == "str":
        return str(node[1])
    if tag == "bytes":
        return base64.b64decode(node[1])
    if tag in ("list", "tuple", "set", "frozenset"):
        items = [decode(x) for x in node[1]]
        return {"list": list, "tuple": tuple, "set": set, "frozenset": frozenset}[tag](items)
    if tag == "dict":
        return {decode(k): decode(v) for k, v in node[1]}
    raise ValueError(f"unknown tag {tag!r}")


def equal(got: Any, expected: Any, atol: float = 0.0) -> bool:
    """Type-strict structural equality of plain builtin data. Types must match at every level,
    except that builtin numbers (bool, int, float) compare by value as Python compares them;
    floats compare within ``atol`` (NaN equals NaN). Values only ever come from the runner's
    encoder, so no user-defined ``__eq__`` takes part."""
    tg, te = type(got), type(expected)
    if tg in _NUMBERS and te in _NUMBERS:
        if tg is float or te is float:
            if math.isnan(got) and math.isnan(expected):
                return True
            return got == expected or (atol > 0 and abs(got - expected) <= atol)
        return got == expected
    if tg is not te:
        return False
    if tg in (list, tuple):
        return len(got) == len(expected) and all(equal(a, b, atol) for a, b in zip(got, expected))
    if tg is dict:
        return got.keys() == expected.keys() and all(equal(got[k], expected[k], atol) for k in got)
    if tg is complex:
        return got == expected or (atol > 0 and abs(got - expected) <= atol)
    return got == expected  # None, bool, str, bytes, set, frozenset (elements are hashable builtins)
