"""Type and range checks of config values against their dataclass field's annotation, at load time.

A YAML or ``--override`` value reaches a config dataclass as whatever YAML made of it. :func:`check_fields`
checks each one against its field's annotation before the dataclass is built, so ``agent_learning_rate: abc``
fails when the config loads, naming the field, instead of inside the optimizer an hour later. Numbers written
as strings are converted (YAML 1.1 reads ``1e-6`` as the string ``"1e-6"``), an integral float fills an
``int`` field (``2.0e8``), a number fills a string field (``--override wandb.group=2024``), and null reaches a
string, list or mapping field as it did before (its class reads it); anything else that does not match is refused.
Ranges: learning rates and counts (``num_*``, ``*_size``, ``*_steps``, ``*_tokens``, ...) must be finite and
non-negative, no number is NaN; sampling values (``temperature`` > 0, ``top_p`` in (0, 1], ``top_k`` and
``max_new_tokens`` >= 1, also per role) must be usable."""

from __future__ import annotations

import collections.abc
import math
import types
import typing
from dataclasses import MISSING, fields
from typing import Any, Mapping

SEQUENCES = (list, tuple, typing.Sequence, collections.abc.Sequence)  # annotation origins that mean "a list"
MAPPINGS = (dict, Mapping, collections.abc.Mapping)  # annotation origins that mean "a mapping"
COUNT_SUFFIXES = ("_size", "_steps", "_tokens", "_interval", "_updates", "_epochs", "_samples", "_iterations",
                  "_generations", "_turns")  # int fields named like this count something: >= 0


class FieldTypeError(ValueError):
    """A value that does not fit its field's annotation (the message names what was expected)."""


def _number(value: Any) -> float | None:
    """``value`` as a float when it is a number or a string that spells one (not a bool), else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        try:
            return float(value)
        except OverflowError:  # an int beyond every float: not a number a field can hold
            return None
    if isinstance(value, str):
        try:
            return float(value.strip().replace("_", ""))
        except ValueError:
            return None
    return None


def _describe(hint: Any) -> str:
    """An annotation in words: ``float``, ``int or None``, ``list of str``, ..."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is type(None):
        return "null"
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_describe(a) for a in args)
    if origin in SEQUENCES or hint in (list, tuple):
        inner = _describe(args[0]) if args else ""
        return f"a list of {inner.split(' ', 1)[1]}s" if inner.startswith(("a ", "an ")) else "a list"
    if origin in MAPPINGS or hint is dict:
        return f"a mapping to {_describe(args[1])}" if len(args) == 2 and args[1] is not Any else "a mapping"
    if origin is typing.Literal:
        return " or ".join(repr(a) for a in args)
    return {float: "a number", int: "an integer", bool: "true or false",
            str: "a string"}.get(hint, getattr(hint, "__name__", str(hint)))


def coerce(value: Any, hint: Any) -> Any:
    """``value`` made to fit ``hint`` (see the module docstring), or :class:`FieldTypeError`."""
    if hint is Any or hint is typing.Any:
        return value
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        # exact matches first, so that "1e-6" for `float | str` stays the number it means and "abc" the string
        for arm in sorted((a for a in args if a is not type(None)), key=lambda a: a is str):
            try:
                return coerce(value, arm)
            except FieldTypeError:
                continue
        raise FieldTypeError(f"expected {_describe(hint)}, got {value!r}")
    if origin is typing.Literal:
        if value in args:
            return value
        raise FieldTypeError(f"expected {_describe(hint)}, got {value!r}")
    if hint is bool:
        if isinstance(value, bool):
            return value
        raise FieldTypeError(f"expected true or false, got {value!r}")
    if hint is float:
        number = _number(value)
        if number is None:
            raise FieldTypeError(f"expected a number, got {value!r}")
        return number
    if hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value  # as it is: a float would round integers above 2**53
        if isinstance(value, str):
            try:
                return int(value.strip().replace("_", ""))
            except ValueError:
                pass
        number = _number(value)
        if number is None or not math.isfinite(number) or not number.is_integer():
            raise FieldTypeError(f"expected an integer, got {value!r}")
        return int(number)
    if value is None and (hint is str or origin in SEQUENCES or origin in MAPPINGS):
        return None  # the class's own reading of null ("none" for a mode, "no eval" for a list) decides, as before
    if hint is str:
        if isinstance(value, str):
            return value
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return str(value)  # an override like wandb.group=2024 or output.run_name=7 names a string
        raise FieldTypeError(f"expected a string, got {value!r} ({type(value).__name__})")
    if origin in SEQUENCES or hint in (list, tuple):
        if isinstance(value, str):  # a Sequence[str] | str field takes its one string through the str arm
            raise FieldTypeError(f"expected {_describe(hint)}, got {value!r}")
        if not isinstance(value, (list, tuple)):
            raise FieldTypeError(f"expected {_describe(hint)}, got {value!r}")
        return [coerce(v, args[0]) for v in value] if args else list(value)
    if origin in MAPPINGS or hint is dict:
        if not isinstance(value, Mapping):
            raise FieldTypeError(f"expected {_describe(hint)}, got {value!r}")
        if len(args) != 2:
            return dict(value)
        out = {}
        for k, v in value.items():
            try:
                out[k] = coerce(v, args[1])
            except FieldTypeError as exc:
                raise FieldTypeError(f"[{k!r}]: {exc}") from None
        return out
    return value  # another class (a dataclass, a callable hook): its own code checks it


def _range_error(name: str, value: Any, default: Any) -> str | None:
    """Why ``value`` is out of range for a field named ``name`` (None when it is in range)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if isinstance(value, float) and math.isnan(value):
        return "is NaN"
    if isinstance(default, (int, float)) and not isinstance(default, bool) and default < 0:
        return None  # a field whose default is negative has no sign rule here
    lr = "learning_rate" in name or name in ("lr", "critic_lr")
    count = isinstance(value, int) and (name.startswith("num_") or name.endswith(COUNT_SUFFIXES))
    if (lr or count) and not (math.isfinite(value) and value >= 0):
        return f"must be {'a finite number' if lr else 'an integer'} >= 0, got {value!r}"
    return None


def _sampling_error(name: str, value: Any) -> str | None:
    """Why ``value`` is out of range for a sampling field (``temperature``, ``top_p``, ``top_k``, ``max_new_tokens``,
    or a name ending in one of them), with the fix; None when it is in range or not a sampling field."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None  # None (top_k off) and non-numbers: the type check decides

    def named(key: str) -> bool:
        return name == key or name.endswith("_" + key)

    if named("temperature") and not (math.isfinite(value) and value > 0):
        return (f"must be a finite number > 0, got {value!r} (the logits are divided by it: 1.0 samples the model "
                "as it is, e.g. 0.7 sharpens)")
    if named("top_p") and not (math.isfinite(value) and 0 < value <= 1):
        return f"must be in (0, 1], got {value!r} (the nucleus mass kept: 1.0 keeps every token)"
    if named("top_k") and value < 1:
        return f"must be an integer >= 1 or null, got {value!r} (null keeps every token)"
    if named("max_new_tokens") and value < 1:
        return f"must be an integer >= 1, got {value!r} (the most tokens one message may have)"
    return None


def check_fields(cls: type, values: Mapping[str, Any], where: str) -> dict[str, Any]:
    """``values`` (known field names of the dataclass ``cls``) type-checked and converted against ``cls``'s
    annotations, range-checked (module docstring); a bad value raises ``ValueError`` naming ``where.field``,
    what it expected and what it got."""
    try:
        hints = typing.get_type_hints(cls)
    except Exception:  # an annotation this interpreter cannot resolve (another package's class): its own checks only
        return dict(values)
    defaults = {f.name: f.default for f in fields(cls) if f.default is not MISSING}
    out = dict(values)
    for name, value in values.items():
        hint = hints.get(name)
        if hint is None:
            continue
        try:
            out[name] = coerce(value, hint)
        except FieldTypeError as exc:
            raise ValueError(f"{where}.{name}: {exc}") from None
        problem = _sampling_error(name, out[name]) or _range_error(name, out[name], defaults.get(name))
        if not problem and isinstance(out[name], Mapping):  # per-role sampling values, e.g. workflow.temperature
            problem = next((f"for {k!r} {p}" for k, v in out[name].items() if (p := _sampling_error(name, v))), None)
        if problem:
            raise ValueError(f"{where}.{name} {problem}")
    return out
