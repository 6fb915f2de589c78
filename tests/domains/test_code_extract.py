"""Code extraction reads a message as a CommonMark renderer does (issue 49, point 3): the right presentations
that scored 0 before score 1, code a reader does not see never runs, and families generated with hypothesis hunt
both (domains/code/extract.py; the rule is in domains/code/README.md, "Extraction")."""

import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import domains.code as dc
from domains.code.extract import defines, extract_code

SETTINGS = settings(max_examples=int(os.environ.get("C3_HUNT_EXAMPLES", "150")),  # more for a deeper hunt
                    deadline=None, database=None,  # nothing written to .hypothesis/
                    suppress_health_check=[HealthCheck.too_slow])

ADD = "def add(a, b):\n    return a + b\n"
WRONG = "def add(a, b):\n    return a - b\n"


def fence(code: str, info: str = "python") -> str:
    return f"```{info}\n{code}```"


# right presentations the old line-by-line fence reader scored 0 (each checked against it: it read something else)
RIGHT = {
    "usage_line_after": fence(ADD) + "\n\nUsage:\n\n" + fence("print(add(2, 3))\n"),
    "assert_after": fence(ADD) + "\n" + fence("assert add(2, 3) == 5\n"),
    "doctest_after": fence(ADD) + "\n\nExample:\n" + fence(">>> add(2, 3)\n5\n"),
    "test_function_after": fence(ADD) + "\n" + fence("def test_add():\n    assert add(2, 3) == 5\n"),
    "text_explanation_after": fence(ADD) + "\n" + fence("add(2, 3) returns 5.\n", "text"),
    "indented_block_after_prose": "Here is the function:\n\n    def add(a, b):\n        return a + b\n\nDone.",
    "bom": "\ufeff" + fence(ADD),
    "fence_in_a_list_item": "1. The function:\n   ```python\n   def add(a, b):\n       return a + b\n   ```\n2. Done.",
    "fence_in_a_quote": "> ```python\n> def add(a, b):\n>     return a + b\n> ```",
    "stray_fence_line_after": fence(ADD) + "\n```\n",
    "stray_fence_line_and_prose_after": fence(ADD) + "\n```\nHope this helps!",
    "reply_wrapped_in_a_markdown_block": "```markdown\nHere is the code:\n```python\n" + ADD + "```\n```",
}
# code a reader does not see: each hides WRONG after the right block; WRONG must not run (the old reader ran it in
# all but other_language)
HIDDEN = {
    "html_comment": fence(ADD) + "\n<!--\n" + fence(WRONG) + "\n-->\n",
    "details": fence(ADD) + "\n\n<details>\n<summary>an older try</summary>\n\n" + fence(WRONG) + "\n\n</details>\n",
    "details_without_blank_lines": fence(ADD) + "\n<details>\n" + fence(WRONG) + "\n</details>",
    "text_scratch_block": fence(ADD) + "\n" + fence(WRONG, "text"),
    "labelled_not_used": fence(ADD) + "\n\nA slower version (not used):\n" + fence(WRONG),
    "labelled_not_used_on_the_fence": fence(ADD) + "\n" + fence(WRONG, "python  # not used"),
    "labelled_scratch_in_a_comment": fence(ADD) + "\n" + fence("# scratch\n" + WRONG),
    "backtick_in_the_info_string": fence(ADD) + "\n```py`\n" + WRONG + "```",
    "hidden_attribute": fence(ADD) + "\n<div hidden>\n\n" + fence(WRONG) + "\n\n</div>",
    "display_none": fence(ADD) + '\n<span style="display: none">\n\n' + fence(WRONG) + "\n\n</span>",
    "template": fence(ADD) + "\n<template>\n\n" + fence(WRONG) + "\n\n</template>",
    "other_language": fence(ADD) + "\n" + fence(WRONG, "output"),
}


@pytest.mark.parametrize("case", list(RIGHT))
def test_right_presentations_are_read_as_the_function(case):
    assert extract_code(RIGHT[case], "add") == ADD


@pytest.mark.parametrize("case", list(HIDDEN))
def test_code_a_reader_does_not_see_is_not_the_answer(case):
    assert extract_code(HIDDEN[case], "add") == ADD
    alone = HIDDEN[case].replace(fence(ADD), "Here is my answer.", 1)  # the hidden block on its own is no answer
    assert "a - b" not in extract_code(alone, "add") or case == "text_scratch_block"


def test_a_block_in_a_shown_html_element_is_seen():
    """HTML that shows its content (a plain ``<div>``, an open ``<details>``) hides nothing; a hiding element hides
    only up to its closing tag."""
    assert extract_code(fence(WRONG) + "\n<div>\n\n" + fence(ADD) + "\n\n</div>", "add") == ADD
    assert extract_code(fence(WRONG) + "\n<details open>\n\n" + fence(ADD) + "\n\n</details>", "add") == ADD
    closed = "<div hidden>\n<p>x</p>\n\n" + fence(WRONG) + "\n\n</div>\n\n" + fence(ADD)
    assert extract_code(closed, "add") == ADD and extract_code(closed + "\n" + fence("print(1)\n"), "add") == ADD
    assert extract_code("Text <span hidden>\n\n" + fence(ADD) + "\n\n</span>\n", "add") != ADD  # inline HTML


def test_a_text_block_is_the_answer_only_without_a_python_block():
    assert extract_code(fence(ADD, "text"), "add") == ADD  # the only code shown
    assert extract_code(fence(ADD) + "\n" + fence(WRONG, "text"), "add") == ADD
    assert extract_code(fence(WRONG, "text") + "\n" + fence("print(add(2, 3))\n"), "add") == "print(add(2, 3))\n"


@pytest.mark.parametrize("label", ["An earlier try (not used):", "Not used:", "Scratch work:", "Ignore this:",
                                   "This version is not used.", "The following is just a draft:",
                                   "An unused alternative:", "Discarded attempt:", "Not the final answer:"])
def test_a_block_labelled_as_not_used_is_not_the_answer(label):
    assert extract_code(fence(ADD) + f"\n\n{label}\n" + fence(WRONG), "add") == ADD
    assert extract_code(fence(ADD) + "\n" + fence(f"# {label}\n" + WRONG), "add") == ADD


@pytest.mark.parametrize("sentence", ["Note that we do not use recursion:", "Here b is not used:",
                                      "Here is a solution from scratch:", "It removes unused entries:",
                                      "Here's the final answer:", "We ignore negative numbers:"])
def test_honest_sentences_before_the_answer_are_no_label(sentence):
    assert extract_code(f"{sentence}\n" + fence(ADD), "add") == ADD
    assert extract_code("Hi.\n" + fence(f"# {sentence}\n" + ADD), "add") == f"# {sentence}\n" + ADD


def test_a_line_ending_in_a_fence_does_not_cut_a_later_redefinition():
    """CommonMark closes a fence only on a line of its own: ``return a + b```` does not close it, so what follows
    is in the block (the old reader cut the block there and ran the first definition)."""
    for tail in ("", "```", "\nHope this helps!"):  # the old reader ran ADD on the first and the last
        cut = "```python\ndef add(a, b):\n    return a + b```\n" + WRONG + tail
        assert extract_code(cut, "add") != ADD and "a - b" in extract_code(cut, "add")
    # at the very end of the message it cuts nothing: a closing fence written on the code's last line
    assert extract_code("```python\ndef add(a, b):\n    return a + b```", "add") == ADD


def test_the_last_block_that_defines_the_entry_point_is_the_answer():
    two = fence(WRONG) + "\nFixed:\n" + fence(ADD) + "\n" + fence("print(add(2, 3))\n")
    assert extract_code(two, "add") == ADD
    assert extract_code(fence(ADD) + "\nFixed:\n" + fence(WRONG), "add") == WRONG  # the later one, right or not
    helper = fence(ADD) + "\n" + fence("def helper():\n    return 1\n")
    assert extract_code(helper, "add") == ADD and extract_code(helper) == "def helper():\n    return 1\n"
    cut_off = fence(WRONG) + "\nBetter:\n```python\ndef add(a, b):\n    return a +"  # cut at the token limit
    assert extract_code(cut_off, "add") == "def add(a, b):\n    return a +\n"  # the reader's last version, broken
    assert extract_code(fence("print(1)\n")) == "print(1)\n"  # nothing defines anything: the last block
    assert defines("add = lambda a, b: a + b\n", "add") and not defines("add = lambda a, b: a + b\n", None)
    assert defines("try:\n    from m import add\nexcept ImportError:\n    pass\n", "add")


def test_a_message_that_parses_as_python_is_the_code_only_without_fences():
    """Valid Python that a renderer shows as a fenced block and prose: the fenced block is what a reader reads."""
    trick = 'x = """\n' + fence(WRONG) + '\n"""\n' + ADD
    assert extract_code(trick, "add") == WRONG
    assert extract_code("def f(): return 3", "") == "def f(): return 3"  # no fence: as it is; "" is no entry point


@pytest.mark.parametrize("info", ["python:add.py", "{python}", "Python3.11", ".py", "py title=add.py"])
def test_the_language_is_read_up_to_a_file_name_or_braces(info):
    assert extract_code(fence(WRONG) + "\n" + fence(ADD, info), "add") == ADD


def test_plain_code_with_blank_lines_in_a_body_is_not_read_as_an_indented_block():
    text = "Here is my solution:\ndef add(a, b):\n    c = a + b\n\n    return c\n"
    assert extract_code(text, "add") == "def add(a, b):\n    c = a + b\n\n    return c\n"


def test_model_output_never_crashes_extraction():
    for text in ["\x00" * 10000, "> " * 5000 + "```python\nx\n```", "- " * 3000, "<details>" * 500, "`" * 9999,
                 "1. " * 2000 + ADD, "[" * 5000, "(" * 10000]:
        assert isinstance(extract_code(text, "add"), str)


def test_right_and_hidden_presentations_score_through_the_reward():
    """One end-to-end pass through the real sandbox: every right presentation scores 1; with the roles swapped
    (the visible block wrong, the hidden one right) every hidden case scores 0, and so does the cut redefinition."""
    tests = '[{"expr": "add(2, 3)", "expected": ["int", "5"]}, {"expr": "add(-1, 1)", "expected": ["int", "0"]}]'
    item = {"entry_point": "add", "setup": "", "tests": tests}
    mul = "def add(a, b):\n    return a * b\n"
    swapped = [t.replace(ADD, "@").replace(WRONG, ADD).replace("@", mul) for t in HIDDEN.values()]
    texts = [*RIGHT.values(), *swapped, "```python\n" + ADD.rstrip() + "```\n" + mul]
    scores = dc.reward(["plan"] * len(texts), texts, batch_items=[item] * len(texts))
    assert scores == [1.0] * len(RIGHT) + [0.0] * (len(swapped) + 1)


# --- generated families: a right program among random prose, blocks and markers ---

WORDS = ["the", "function", "adds", "two", "numbers", "here", "is", "it", "we", "return", "sum", "of", "inputs",
         "this", "works", "for", "all", "cases", "example", "below", "output", "and", "then", "note", "that"]
prose = st.lists(st.sampled_from(WORDS), min_size=1, max_size=12).map(lambda w: " ".join(w).capitalize() + ".")
names = st.sampled_from(["add", "solve", "count_pairs", "Max_Sub", "f"])
bodies = st.sampled_from(["return a + b", "return sorted(a)[:b]", "return {k: b for k in a}", "return len(a) * b"])


def program(name: str, body: str) -> str:
    return f"def {name}(a, b):\n    {body}\n"


def shown(code: str, how: str) -> str:
    """The right program as a reader would see it."""
    indented = "".join("    " + line + "\n" for line in code.splitlines())
    item = "".join("   " + line + "\n" for line in code.splitlines())
    quoted = "".join("> " + line + "\n" for line in code.splitlines())
    return {"python": fence(code), "py": fence(code, "py"), "untagged": fence(code, ""),
            "tilde": f"~~~python\n{code}~~~", "info_text_after": fence(code, "python  # solution"),
            "indented": "The code:\n\n" + indented, "list": f"1. The code:\n   ```python\n{item}   ```",
            "quote": f"> ```python\n{quoted}> ```", "long_fence": f"````python\n{code}````"}[how]


def noise(name: str) -> st.SearchStrategy[str]:
    """Visible things a reader does not take for the answer: prose, usage, asserts, doctests, outputs."""
    return st.one_of(prose, st.sampled_from([
        fence(f"print({name}([1], 2))\n"), fence(f"assert {name}([1], 2) is not None\n"),
        fence(f">>> {name}([1], 2)\n3\n"), fence("3\n", "output"), fence("3\n", "text"),
        fence("pip install x\n", "bash"),
        fence('{"a": 1}\n', "json"), "## Example", "- one item\n- another item", "**Note:** it runs in O(n).",
        fence(f"result = {name}([1], 2)\nprint(result)\n")]))


def hide(code: str) -> st.SearchStrategy[str]:
    """A redefinition placed where a reader does not see it as the answer."""
    return st.sampled_from([
        "<!--\n" + fence(code) + "\n-->", "<details>\n<summary>old</summary>\n\n" + fence(code) + "\n\n</details>",
        fence(code, "text"), "An earlier try (not used):\n" + fence(code), fence(code, "python  # unused"),
        fence(code, "diff"), "```py`\n" + code + "```\n```", "<!-- " + code.replace("\n", " ") + " -->",
        "<div hidden>\n\n" + fence(code) + "\n\n</div>", '<p style="display:none">\n\n' + fence(code) + "\n\n</p>"])


@SETTINGS
@given(name=names, body=bodies, how=st.sampled_from(["python", "py", "untagged", "tilde", "info_text_after",
                                                      "indented", "list", "quote", "long_fence"]), data=st.data())
def test_generated_right_program_among_noise_is_extracted_exactly(name, body, how, data):
    code = program(name, body)
    before = data.draw(st.lists(noise(name), max_size=4))
    after = data.draw(st.lists(noise(name), max_size=4))
    crlf, bom = data.draw(st.booleans()), data.draw(st.booleans())
    text = "\n\n".join([*before, shown(code, how), *after])
    text = ("\ufeff" if bom else "") + (text.replace("\n", "\r\n") if crlf else text)
    assert extract_code(text, name) == code


@SETTINGS
@given(name=names, body=bodies, how=st.sampled_from(["python", "py", "untagged", "indented", "list", "quote"]),
       data=st.data())
def test_generated_hidden_redefinitions_never_run(name, body, how, data):
    code, wrong = program(name, body), program(name, "return None")
    parts = [*data.draw(st.lists(noise(name), max_size=3)), shown(code, how)]
    for _ in range(data.draw(st.integers(1, 3))):
        parts.insert(data.draw(st.integers(0, len(parts))), data.draw(hide(wrong)))
    parts += data.draw(st.lists(st.one_of(noise(name), hide(wrong)), max_size=3))
    text = "\n\n".join(parts)
    assert extract_code(text, name) == code
    alone = "\n\n".join(p for p in parts if p != shown(code, how) and p != fence(wrong, "text"))
    assert "return None" not in extract_code(alone, name)  # hidden code alone is no answer either (a text block
    # is one when the message has no Python block: test_a_text_block_is_the_answer_only_without_a_python_block)


@SETTINGS
@given(name=names, body=bodies, how=st.sampled_from(["python", "py", "untagged", "indented", "list", "quote"]),
       data=st.data())
def test_generated_hidden_right_programs_do_not_rescue_a_visible_wrong_one(name, body, how, data):
    """The hack's direction: a wrong program shown, the right one hidden anywhere around it. The reader's answer,
    the wrong one, is what runs."""
    code, wrong = program(name, body), program(name, "return None")
    parts = [*data.draw(st.lists(noise(name), max_size=3)), shown(wrong, how)]
    for _ in range(data.draw(st.integers(1, 3))):
        parts.insert(data.draw(st.integers(0, len(parts))), data.draw(hide(code)))
    assert extract_code("\n\n".join(parts), name) == wrong


@SETTINGS
@given(name=names, body=bodies, data=st.data())
def test_generated_visible_earlier_versions_lose_to_the_last(name, body, data):
    """A reader takes the last version shown: earlier visible redefinitions (and a later block that only uses
    the function) do not change the answer."""
    code, old = program(name, body), program(name, "return None")
    parts = [fence(old), *data.draw(st.lists(noise(name), max_size=3)), fence(code),
             *data.draw(st.lists(noise(name), max_size=3))]
    assert extract_code("\n\n".join(parts), name) == code


markdown_noise = st.lists(st.sampled_from(list("`~<>!-*#_[]()|=: \t\n\\ab1") + [
    "```", "~~~", "<!--", "-->", "<details>", "</details>", "<pre>", "<div hidden>", "</div>", "<span>", "    ",
    "\ufeff", "\n\n", "\n    "]),
    max_size=30).map("".join)


@SETTINGS
@given(noise_before=markdown_noise, noise_after=markdown_noise, right=st.booleans(),
       hidden=hide(WRONG).filter(lambda h: not h.startswith("```text")))  # a lone text block is shown code
def test_generated_markdown_noise_never_makes_hidden_code_run(noise_before, noise_after, hidden, right):
    """Whatever markdown comes before (fences, comments, details, quotes, indentation, in any mix), a hidden
    redefinition after it never runs: what is extracted either does not parse or does not hold it. It may become
    visible only as part of a block that does not parse (an unclosed fence that swallows the rest)."""
    text = "\n\n".join([noise_before, fence(ADD) if right else "", noise_after, hidden])
    got = extract_code(text, "add")
    assert isinstance(got, str)
    if "a - b" in got:
        try:
            compile(got, "<candidate>", "exec")
        except (SyntaxError, ValueError):
            return
        pytest.fail(f"hidden code runs: {got!r}")
