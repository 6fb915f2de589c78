"""The README's shell commands work as typed after its two set-up commands and ``source .venv/bin/activate``: every
``python``, ``c3`` and ``torchrun`` line names a script, module or subcommand that exists in this environment (the
``.venv`` the suite runs in), whose ``--help`` exits 0 and lists every option the line uses; the dry-runs of the math
configs run as written (the other domains' dry-runs are run by their own tests)."""

import importlib.util
import re
import shlex
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent  # the environment's bin/ (``.venv/bin`` under make test)
ACTIVATE = "source .venv/bin/activate"


def readme_commands() -> list[list[str]]:
    """Every command line of the README's ``bash`` blocks as its words (continuations joined, comments dropped)."""
    text = (ROOT / "README.md").read_text()
    out = []
    for block in re.findall(r"```bash\n(.*?)```", text, re.S):
        for line in re.sub(r"\\\n", " ", block).splitlines():
            words = shlex.split(line, comments=True)
            while words and re.fullmatch(r"[A-Z_]+=\S*", words[0]):  # CUDA_VISIBLE_DEVICES=1 python ...
                words = words[1:]
            if words:
                out.append(words)
    return out


COMMANDS = readme_commands()
RUNNABLE = [w for w in COMMANDS if w[0] in ("python", "c3", "torchrun") or w[0].endswith("/bin/python")]


def target(words: list[str]) -> tuple[str, str, list[str]]:
    """``("script", path, args)``, ``("module", name, args)`` or ``("c3", subcommand, args)`` of one command line."""
    if words[0] == "c3":
        return "c3", words[1], words[2:]
    if words[0] == "torchrun":  # its own options come first, the script is its first .py argument
        i = next(i for i, w in enumerate(words) if w.endswith(".py"))
        return "script", words[i], words[i + 1:]
    if words[1] == "-m":
        return "module", words[2], words[3:]
    return "script", words[1], words[2:]


def test_the_readme_says_to_activate_the_environment_before_its_commands():
    flat = [" ".join(w) for w in COMMANDS]
    assert ACTIVATE in flat, "the README must say `source .venv/bin/activate` in a bash block"
    first = min(i for i, w in enumerate(COMMANDS) if w in RUNNABLE and w[0] in ("python", "c3", "torchrun"))
    assert flat.index(ACTIVATE) < first and flat[:2] == ["make demo", "make test"], flat[:3]
    assert len(RUNNABLE) >= 20, len(RUNNABLE)


def test_the_environment_has_the_commands_the_readme_uses():
    """What activation puts on PATH: python, the c3 console script (of this package) and torchrun."""
    for name in ("python", "c3", "torchrun"):
        assert (BIN / name).exists(), f"{BIN / name} is missing: make setup installs it"
    assert "c3_plugin.tools.cli" in (BIN / "c3").read_text() and "console" in (BIN / "c3").read_text()


@pytest.mark.parametrize("words", RUNNABLE, ids=[" ".join(w)[:70] for w in RUNNABLE])
def test_each_readme_command_resolves_and_takes_its_options(words, entry_point):
    kind, name, args = target(words)
    # train_centralized.py reads --algorithm before its CLI (a wrong value exits 2 there): it goes with --help
    at = args.index("--algorithm") if kind == "script" and "--algorithm" in args else None
    first = args[at:at + 2] if at is not None else []
    if kind == "script":
        assert (ROOT / name).is_file(), name
        code, out, err = entry_point(name, *first, "--help")
    elif kind == "module":
        assert importlib.util.find_spec(name) is not None, name
        code, out, err = entry_point("-m", name, "--help")
    else:
        code, out, err = entry_point("-m", "c3_plugin", name, "--help")
    assert code == 0, (words, out[-2000:], err[-2000:])
    options = {a.split("=", 1)[0] for a in args if a.startswith("--")} - set(first[:1])
    assert all(o in out for o in options), (words, sorted(o for o in options if o not in out))
    for i, word in enumerate(args[:-1]):
        if word == "--config":
            assert (ROOT / args[i + 1]).is_file(), args[i + 1]


DRY_RUNS = [w for w in RUNNABLE if w[0] == "python" and "--dry-run" in w and "configs/math/" in " ".join(w)]


@pytest.mark.parametrize("words", DRY_RUNS, ids=[" ".join(w)[:70] for w in DRY_RUNS])
def test_the_math_dry_runs_run_as_written(words, entry_point):
    assert DRY_RUNS, "the README shows a math dry-run"
    code, out, err = entry_point(words[1], *words[2:])
    assert code == 0 and out.startswith("dry-run: "), (words, out[-2000:], err[-2000:])
