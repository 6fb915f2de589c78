"""The answer language of the math reward: which box a reader reads, what a box may say (parsed whole into one
reading), and whether a reading says what the gold's reading says. The grammar, on one page, is in this package's
``README.md``.

Plain Python, no dependency, importing neither the library (``c3_plugin``) nor any domain: the math domain's
reward calls it. The comparison of two clean values (math-verify, numbers exact) runs in a worker process
(:mod:`answer_language.worker`, driven by :class:`answer_language.client.Checker`), so a parse or check that
overruns its bound is killed, never waited for.

Modules, one concern each: ``boxes`` (the box read), ``vocabulary`` (words, commands, units), ``tokens``
(characters to tokens), ``readings`` (what a box says), ``cursor``/``sides``/``names``/``expressions``/``parser``
(the grammar's rules), ``reader`` (:func:`read`), ``judge`` (:func:`judge`), ``compare`` (math-verify, in the
worker only), ``worker`` and ``client`` (the worker process and its driver).
"""

from answer_language.boxes import last_box
from answer_language.judge import claims, judge, percent_readings
from answer_language.reader import MAX_ANSWER_CHARS, read
from answer_language.readings import Item, Reading, Side
from answer_language.tokens import ParseError
from answer_language.vocabulary import MULTIPLIERS, NUMBER_WORDS, UNITS, unit_key

__all__ = ["MAX_ANSWER_CHARS", "MULTIPLIERS", "NUMBER_WORDS", "UNITS", "Item", "ParseError", "Reading", "Side",
           "claims", "judge", "last_box", "percent_readings", "read", "unit_key"]
