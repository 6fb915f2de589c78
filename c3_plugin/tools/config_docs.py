"""``docs/config.md`` from the config dataclasses: every field with its type, default and its one line of doc,
read from the comment beside it where its default is defined (or the comment block just above it).

Fields a class inherits from CoMLRL's configs (which carry no per-field comments) take what
``trainers/comlrl_compat.MAGRPO_FIELDS`` says about them. ``python -m c3_plugin.tools.config_docs`` rewrites the
file and ``c3_plugin/core/config_keys.json`` (the field names the config loader checks keys against before it
imports any trainer); ``--check`` exits non-zero when either is stale (``tests/tools/test_config_docs.py`` does the
same).
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import functools
import inspect
import io
import json
import sys
import textwrap
import tokenize
from pathlib import Path
from typing import Any

from c3_plugin.core import config as cfg_module
from c3_plugin.core.domain import load_domain
from c3_plugin.core.registry import _BUILTIN, resolve, section
from c3_plugin.trainers.comlrl_compat import MAGRPO_FIELDS

DOC = Path(__file__).resolve().parents[2] / "docs" / "config.md"
# every documented section's field names, for the fast key check at load
KEYS = Path(cfg_module.__file__).with_name("config_keys.json")
DOMAINS = ("math", "code", "travel")  # the shipped domains whose config sections are documented


@functools.lru_cache(maxsize=None)
def _class_comments(cls: type) -> dict[str, str]:
    """Field name -> its comment in ``cls``'s own source (beside the field, or the comment lines just above it);
    read once per class (finding a class's source parses its whole module)."""
    try:
        lines, start = inspect.getsourcelines(cls)
    except (OSError, TypeError):
        return {}
    src = textwrap.dedent("".join(lines))
    comments: dict[int, str] = {}
    for tok in tokenize.generate_tokens(io.StringIO(src).readline):
        if tok.type == tokenize.COMMENT:
            comments[tok.start[0]] = tok.string.lstrip("#").strip()
    body = ast.parse(src).body[0]
    out = {}
    for node in getattr(body, "body", []):
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            text = next((comments[n] for n in range(node.lineno, (node.end_lineno or node.lineno) + 1)
                         if n in comments), None)
            if text is None:  # a block of comment lines right above the field
                above, n = [], node.lineno - 1
                while n in comments and src.splitlines()[n - 1].strip().startswith("#"):
                    above.insert(0, comments[n])
                    n -= 1
                text = " ".join(above) or None
            if text:
                out[node.target.id] = text
    return out


def defined_in(cls: type, name: str) -> type:
    """The class of ``cls``'s MRO whose own annotations define the field ``name`` last (where its default is)."""
    return next(k for k in cls.__mro__ if name in k.__dict__.get("__annotations__", {}))


def ours(klass: type) -> bool:
    """Whether this project (or a user's subclass) defines ``klass``, not CoMLRL."""
    return klass.__module__.split(".")[0] != "comlrl"


def field_docs(cls: type) -> dict[str, str]:
    """Every dataclass field of ``cls`` -> its doc: the comment where its default is defined; a field CoMLRL
    defines (its configs carry no per-field comments) gets what :data:`MAGRPO_FIELDS` says of it here, or a
    pointer to the CoMLRL class."""
    out = {}
    for f in dataclasses.fields(cls):
        home = defined_in(cls, f.name)
        doc = _class_comments(home).get(f.name, "") if ours(home) else ""  # CoMLRL's comments head groups of fields
        if not ours(home):
            note = MAGRPO_FIELDS.get(f.name)
            doc = f"CoMLRL's `{home.__module__}.{home.__name__}` field" + (f"; here {note}" if note else "")
        out[f.name] = doc
    return out


def _default(f: dataclasses.Field) -> str:
    if f.default is not dataclasses.MISSING:
        value = f.default
    elif f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
        value = f.default_factory()  # type: ignore[misc]
    else:
        return "(required)"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _type(f: dataclasses.Field) -> str:
    t = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", str(f.type))
    return str(t).replace("typing.", "")


def _table(cls: type) -> list[str]:
    docs = field_docs(cls)
    rows = ["| field | type | default | what it does |", "| --- | --- | --- | --- |"]
    for f in dataclasses.fields(cls):
        cells = [f"`{f.name}`", f"`{_type(f)}`", f"`{_default(f)}`", docs[f.name] or "(undocumented)"]
        rows.append("| " + " | ".join(c.replace("|", "\\|").replace("\n", " ") for c in cells) + " |")
    return rows


@functools.lru_cache(maxsize=1)
def sections() -> list[tuple[str, type]]:
    """(title, dataclass) of every documented config section, in the order of ``docs/config.md``."""
    out = [(f"`{name}:` ({cls.__name__})", cls) for name, cls in cfg_module.SECTIONS.items()]
    seen = set()
    for name in _BUILTIN:
        cls = resolve(name)[0]
        if cls in seen:
            continue
        seen.add(cls)
        out.append((f"`{section(name)}:` for `algorithm: {name}` ({cls.__name__})", cls))
    for name in DOMAINS:
        domain = load_domain(name)
        if domain.config_cls is not None:
            out.append((f"`{name}:` (the {name} domain, {domain.config_cls.__name__})", domain.config_cls))
    return out


def render() -> str:
    """The whole of ``docs/config.md``."""
    lines = ["# Config fields", "",
             "Generated from the config dataclasses by `python -m c3_plugin.tools.config_docs` (do not edit by hand;",
             "`tests/tools/test_config_docs.py` fails when this file is stale). Each field's doc is "
             "the comment where its",
             "default is defined. A YAML config's top-level keys are the sections below; an algorithm reads the",
             "section named in its heading. Defaults are the dataclass defaults; a YAML config's algorithm section",
             "starts from `config.WORKFLOW_EXPERIMENT_DEFAULTS` (see the README).", "",
             "An LLM_Collab repository's YAML (`agent_model`, `dataset.name`/`train_split`/`eval_split`, a `magrpo`/",
             "`iac`/`maac` section, `reward_processor.scale_factor`, ...) is read in its own layout and mapped onto",
             "these sections with its train script's defaults (`c3_plugin/core/llm_collab.py`; README, \"From an",
             "LLM_Collab YAML\"); the keys with no meaning here are printed by the dry-run and before training.", ""]
    for title, cls in sections():
        lines += [f"## {title}", ""] + _table(cls) + [""]
    return "\n".join(lines)


def key_index() -> str:
    """``core/config_keys.json``: the field names of every algorithm and domain section documented here, so that
    :func:`c3_plugin.core.config.check_keys` can name a typo before the trainers (torch) are imported."""
    index: dict[str, list[str]] = {}
    for name in _BUILTIN:
        names = {f.name for f in dataclasses.fields(resolve(name)[0]) if not f.name.startswith("_")}
        # a shared section (mapl): every reader's fields
        index[section(name)] = sorted(names | set(index.get(section(name), [])))
    for name in DOMAINS:
        cls = load_domain(name).config_cls
        if cls is not None:
            index[name] = sorted(f.name for f in dataclasses.fields(cls) if not f.name.startswith("_"))
    return json.dumps(index, indent=1, sort_keys=True) + "\n"


def undocumented() -> list[str]:
    """``Class.field`` for every field this project defines without a doc line where its default is."""
    return sorted({f"{defined_in(cls, name).__name__}.{name}" for _, cls in sections()
                   for name, doc in field_docs(cls).items()
                   if not doc})


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 when docs/config.md is not what the dataclasses give")
    args = ap.parse_args(argv)
    outputs = {DOC: render(), KEYS: key_index()}
    if args.check:
        stale = [path for path, text in outputs.items() if (path.read_text() if path.exists() else "") != text]
        for path in stale:
            print(f"{path} is stale: run python -m c3_plugin.tools.config_docs", file=sys.stderr)
        return 1 if stale else 0
    for path, text in outputs.items():
        path.write_text(text)
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())


__all__: list[Any] = ["field_docs", "render", "sections", "undocumented"]
