"""Code extraction: the code a reader of the rendered message sees as the answer.

The message is read with a CommonMark parser (markdown-it-py), so a block is what a renderer shows as one: a
fence in a list item or a quote, a 4-space indented block, a fence that never closes (it runs to the end). What a
reader does not see as code never runs: HTML comments and other HTML blocks, what a hiding element holds (a closed
``<details>``, ``hidden``, ``display: none``), a block in another language or labelled as not used, a "fence"
CommonMark does not open (a backtick in a backtick fence's info string). The rule is stated in
``domains/code/README.md`` ("Extraction").
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

from markdown_it import MarkdownIt

PYTHON_TAGS = {"", "python", "py", "python3", "py3", "ipython", "code"}  # a block's language (the info string's
# first word, case-folded, up to a character other than a letter, digit, _+#-: ```{python}, ```python:a.py,
# ```python3.10): these blocks are candidates
TEXT_TAGS = {"text", "txt", "plaintext", "plain"}  # candidates only when the message has no Python block; any
# other language (```bash, ```output, ```json, ```pycon) is no candidate
MARKDOWN_TAGS = {"markdown", "md"}  # a block of markdown source: its own blocks are read (one level)
MAX_PROSE_LINES = 8  # prose lines dropped at most at each end of unfenced code
LABEL_WORDS = 20  # a label is the last sentence before a block, at most this many words
# a block labelled as not used is not the answer. The label is the info string after the language (any of NOT_USED),
# the block's first line when it is a comment, or the sentence right before the block (a LABEL there): narrow
# forms, so that "we do not use recursion:" or "b is not used:" before the answer does not reject it
_MARK = (r"(?:not (?:be )?used|unused|(?<!from )scratch(?:pad)?|discarded"
         r"|not (?:the|my|a) (?:final )?(?:answer|solution)|not final|for reference only"
         r"|not part of the (?:answer|solution))")
_DONT = r"(?:(?:do not|don't|never) (?:use|run) (?:this|it|me|the following)|ignore (?:this|it|me|the following|below))"
_WHAT = r"(?:version|attempt|approach|draft|code|block|alternative|try|solution|implementation|work|snippet|one)"
NOT_USED = re.compile(rf"\b(?:{_MARK}|{_DONT})\b", re.IGNORECASE)
LABEL = re.compile(
    rf"[(\[]\s*(?:{_MARK}|{_DONT})\b[^)\]]*[)\]]"  # "(not used)", "[scratch]"
    rf"|^\W*(?:{_MARK}|{_DONT})\b"  # "Not used:", "Scratch work:", "Ignore this:"
    rf"|\b{_MARK}\s+{_WHAT}\b"  # "an unused version", "a discarded attempt"
    rf"|\b(?:this|that|it|the following|below|(?:this|that|the) {_WHAT})\s+(?:is|was)\s+(?:only |just )?(?:a )?"
    rf"(?:{_MARK}|draft)\b", re.IGNORECASE)  # "this version is not used", "the following is just a draft"
_LANG = re.compile(r"[{.]*([a-z0-9_+#-]*)")  # the language of an info string: `python`, `{python}`, `python:a.py`
_TAG = re.compile(r"<(/?)([A-Za-z][A-Za-z0-9-]*)\b([^<>]*)>")  # an HTML tag inside what CommonMark read as HTML
HIDING_TAGS = {"template", "script", "style", "noscript"}  # elements whose content a browser does not show
_HIDING_ATTR = re.compile(r"\bhidden\b|display\s*:\s*none|visibility\s*:\s*hidden", re.IGNORECASE)
VOID_TAGS = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}
_NOT_A_FENCE = re.compile(r"^[ \t>]*(?:`{3,}|~{3,})")  # such a line in a paragraph: a fence CommonMark refused
_TOP_DEF = re.compile(r"^(?:async[ \t]+)?(?:def|class)[ \t]+([A-Za-z_]\w*)", re.MULTILINE)
_PARSER = MarkdownIt("commonmark").disable("inline")  # blocks only: inline parsing costs up to ~1 s on 50 kB of
# brackets, and only a paragraph that holds an HTML tag needs it (_INLINE)
_INLINE = MarkdownIt("commonmark")


@dataclass
class Block:
    kind: str  # "python" or "text"
    code: str
    lines: tuple[int, int]  # the source lines it spans, [start, end)


def _code(text: str) -> str:
    lines = text.split("\n")
    while lines and not lines[-1].strip():
        lines.pop()
    return "\n".join(lines) + "\n"


def _tree(code: str) -> ast.Module | None:
    try:
        return ast.parse(code)
    except (SyntaxError, ValueError, MemoryError, RecursionError, OverflowError):
        return None


def _names(body: list[ast.stmt], any_def: bool) -> set[str]:
    """Names a module body binds at its top level (through ``if``/``try``/``with`` too): functions and classes,
    and with ``any_def`` False also assignments and imports (``add = lambda a, b: a + b``)."""
    out: set[str] = set()
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(node.name)
        elif not any_def and isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            out.update(t.id for t in targets if isinstance(t, ast.Name))
        elif not any_def and isinstance(node, (ast.Import, ast.ImportFrom)):
            out.update((a.asname or a.name).split(".")[0] for a in node.names)
        for field in ("body", "orelse", "finalbody"):
            if isinstance(node, (ast.If, ast.Try, ast.With)) and isinstance(getattr(node, field, None), list):
                out |= _names(getattr(node, field), any_def)
        for handler in getattr(node, "handlers", []) if isinstance(node, ast.Try) else []:
            out |= _names(handler.body, any_def)
    return out


def defines(code: str, entry_point: str | None) -> bool:
    """Whether ``code`` defines ``entry_point`` at its top level (any function or class when it is None). Code
    that does not parse (a completion cut at the token limit) defines what its top-level ``def``/``class`` lines
    name."""
    tree = _tree(code)
    names = _names(tree.body, entry_point is None) if tree is not None else set(_TOP_DEF.findall(code))
    return bool(names) if entry_point is None else entry_point in names


def _label(text: str) -> str:
    """The last sentence of a paragraph, when it is short enough to be a block's label."""
    lines = [line for line in text.strip().split("\n") if line.strip()]
    last = re.split(r"(?<=[.!?])\s+", lines[-1].strip())[-1] if lines else ""
    return last if len(last.split()) <= LABEL_WORDS else ""


def _not_used(info: str, content: str, before: str) -> bool:
    first = next((line.strip() for line in content.split("\n") if line.strip()), "")
    comment = first if first.startswith("#") else ""
    rest = info.split(None, 1)[1] if len(info.split(None, 1)) > 1 else ""
    return bool(NOT_USED.search(rest) or LABEL.search(comment.lstrip("#").strip()) or LABEL.search(_label(before)))


def _hides(name: str, attrs: str) -> bool:
    """Whether an HTML element hides its content from a reader: a closed ``<details>``, ``<template>``,
    ``<script>``, ``<style>``, ``<noscript>``, or one with ``hidden``, ``display: none`` or ``visibility: hidden``."""
    if name == "details":
        return not re.search(r"\bopen\b", attrs, re.IGNORECASE)
    return name in HIDING_TAGS or bool(_HIDING_ATTR.search(attrs))


def _elements(content: str, stack: list[tuple[str, bool]]) -> None:
    """Follows the HTML elements opened and closed in ``content``: an opening pushes (name, whether it hides its
    content), a closing pops up to its opening; void and self-closing tags change nothing."""
    for m in _TAG.finditer(content):
        closing, name, attrs = m.group(1), m.group(2).casefold(), m.group(3)
        if closing:
            names = [n for n, _ in stack]
            if name in names:
                del stack[len(names) - 1 - names[::-1].index(name):]
        elif name not in VOID_TAGS and not attrs.rstrip().endswith("/"):
            stack.append((name, _hides(name, attrs)))


def _hidden(stack: list[tuple[str, bool]]) -> bool:
    return any(h for _, h in stack)


def _inline_html(text: str) -> list[str]:
    """The HTML tags of a paragraph, as CommonMark reads them (not in a code span); parsed only where a tag may be."""
    if "<" not in text or not _TAG.search(text):
        return []
    try:
        return [c.content for c in _INLINE.parseInline(text)[0].children or [] if c.type == "html_inline"]
    except Exception:  # model output never crashes a reward: a paragraph the parser cannot read holds no tag
        return []


def _fence_body(tok, src: list[str]) -> str:
    """A fence's code; a fence that runs to the end of the message without a closing line, whose last line ends
    with the fence (``return x```: a closing fence written on the code's last line), loses that suffix."""
    content = tok.content
    end = tok.map[1] if tok.map else 0
    last = next((line for line in reversed(src[:end]) if line.strip()), "")
    closed = bool(last.strip()) and set(last.strip().lstrip(">").strip()) == {tok.markup[0]}
    at_end = not any(line.strip() for line in src[end:])
    if at_end and not closed and tok.markup[0] == "`" and content.rstrip().endswith(tok.markup):
        content = content.rstrip()[: -len(tok.markup)]
    return content


def read(text: str, nested: bool = False) -> tuple[list[Block], list[str]]:
    """The visible candidate blocks of a message, in order, and its lines with every line a reader does not see
    as prose or bare code blanked (fences, HTML, what a hiding element holds, blocks labelled as not used). A
    ``markdown`` block (a whole reply wrapped in one) is read as markdown in turn, once."""
    src = text.split("\n")
    try:
        tokens = _PARSER.parse(text)
    except Exception:  # model output never crashes a reward: a message the parser cannot read has no blocks
        return [], src
    blocks: list[Block] = []
    keep = list(src)
    stack: list[tuple[str, bool]] = []  # the HTML elements open here
    before = ""
    for tok in tokens:
        start, end = tok.map if tok.map else (0, 0)
        if tok.type == "html_block":
            _elements(tok.content, stack)
        elif tok.type == "inline":
            for html in _inline_html(tok.content):
                _elements(html, stack)
            before = tok.content
            if _hidden(stack):
                keep[start:end] = [""] * (end - start)
            else:  # a paragraph line that looks like a fence but opens none (```py`): the rest is no code either
                cut = next((i for i in range(start, end) if _NOT_A_FENCE.match(src[i])), end)
                keep[cut:end] = [""] * (end - cut)
            continue
        if tok.type not in ("fence", "code_block", "html_block"):
            continue
        info = tok.info.strip() if tok.type == "fence" else ""
        lang = _LANG.match(info.casefold()).group(1)
        visible = not _hidden(stack) and tok.type != "html_block" and not _not_used(info, tok.content, before)
        if tok.type != "code_block" or not visible:
            keep[start:end] = [""] * (end - start)
        body = _fence_body(tok, src) if tok.type == "fence" else tok.content
        if visible and lang in MARKDOWN_TAGS and not nested:
            blocks.extend(read(body, nested=True)[0])
        elif visible and body.strip() and (lang in PYTHON_TAGS or lang in TEXT_TAGS):
            blocks.append(Block("python" if lang in PYTHON_TAGS else "text", _code(body), (start, end)))
        before = ""
    return blocks, keep


def bare_code(lines: list[str]) -> str | None:
    """Unfenced code with prose lines before or after it: the whole text when it parses, else the longest run of
    lines, dropping at most :data:`MAX_PROSE_LINES` at each end, that parses; None when none does."""
    n = len(lines)
    for drop in range(0, 2 * MAX_PROSE_LINES + 1):
        for head in range(max(0, drop - MAX_PROSE_LINES), min(drop, MAX_PROSE_LINES) + 1):
            kept = lines[head:n - (drop - head)]
            if any(line.strip() for line in kept) and not (kept and kept[0].startswith((" ", "\t"))):
                code = _code("\n".join(kept))
                if _tree(code) is not None:
                    return code
    return None


def extract_code(text: str, entry_point: str | None = None) -> str:
    """The code of a message, read as a renderer shows it (the rule: ``domains/code/README.md``, "Extraction").

    * the whole message when it parses as Python and holds no fence, HTML or hidden part;
    * else, of the visible Python blocks (fenced ``python``/``py``/untagged, or indented; ``text`` blocks only when
      there is none), **the last one that defines the entry point** (any function or class when
      ``entry_point`` is None): a later usage line, assert, doctest, test function or output block is no answer;
    * else the unfenced code among the prose (prose lines dropped at each end, at most :data:`MAX_PROSE_LINES`)
      when it defines the entry point; else the last visible block; else that unfenced code; else the visible text
      (it does not parse, so it fails its tests; hidden code is not in it)."""
    if not isinstance(text, str):
        return ""
    text = text.replace("\r\n", "\n").replace("\r", "\n").lstrip("\ufeff")
    entry_point = entry_point or None
    blocks, prose = read(text)
    if prose == text.split("\n") and _tree(text) is not None:  # no fence, HTML or hidden part: plain code
        return text
    blocks = [b for b in blocks if b.kind == "python"] or blocks
    answer = [b for b in blocks if defines(b.code, entry_point)]
    if answer:
        return answer[-1].code
    bare = bare_code(prose)
    if bare is not None and defines(bare, entry_point):
        return bare
    if blocks:
        return blocks[-1].code
    return bare or _code("\n".join(prose)).strip("\n")  # nothing parses: what a reader sees (it fails its tests)
