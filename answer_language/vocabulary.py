"""The words and commands of the answer language: Greek, functions, relations, number words, multipliers and the
unit vocabulary."""

from __future__ import annotations

import re

GREEK = ("alpha beta gamma delta epsilon varepsilon zeta eta theta vartheta iota kappa lambda mu nu xi rho varrho "
         "sigma tau upsilon phi varphi chi psi omega Gamma Delta Theta Lambda Xi Pi Sigma Upsilon Phi Psi "
         "Omega").split()
SYMBOLS = set(GREEK) | {"pi", "infty", "hbar", "ell", "emptyset", "varnothing", "odot", "partial"}
FUNCTIONS = set("sin cos tan cot sec csc arcsin arccos arctan sinh cosh tanh coth log ln lg exp det max min gcd lcm"
                .split())
FRACTIONS = {"frac", "dfrac", "tfrac", "cfrac"}
BINOMS = {"binom", "dbinom", "tbinom"}
DECORATIONS = {"dot", "ddot", "hat", "bar", "vec", "tilde", "overline", "widehat", "widetilde", "mathbf", "boldsymbol",
               "bm"}
# text commands (\operatorname is none: a value hidden in an operator name does not parse)
TEXT_COMMANDS = {"text", "textrm", "textnormal", "textbf", "textit", "textsf", "mbox", "mathrm", "mathit", "mathsf"}
WRAPPERS = {"boxed", "fbox", "textbf", "mathbf", "boldsymbol", "bm", "text", "textrm", "textnormal", "mbox", "mathrm",
            "displaystyle", "textstyle"}
SPACING = {",", ";", ":", "!", " ", "quad", "qquad", "thinspace", "enspace", "medspace", "thickspace", "negthinspace"}
BINARY = {"+": "+", "-": "-", "pm": "\\pm", "mp": "\\mp", "cup": "\\cup", "cap": "\\cap", "setminus": "\\setminus"}
PRODUCTS = {"*": "*", "/": "/", "cdot": "\\cdot", "times": "\\times", "div": "\\div"}
RELATIONS = {"=": "=", "in": "\\in", "<": "<", ">": ">", "le": "\\le", "leq": "\\le", "ge": "\\ge", "geq": "\\ge",
             "lt": "<", "gt": ">", "approx": "\\approx"}
MATRICES = {"pmatrix", "bmatrix", "matrix"}
CHOICES = "ABCDE"

NUMBER_WORDS = {w: i for i, w in enumerate("zero one two three four five six seven eight nine ten eleven twelve "
                                           "thirteen fourteen fifteen sixteen seventeen eighteen nineteen "
                                           "twenty".split())}
NUMBER_WORDS.update({"thirty": 30, "forty": 40, "fifty": 50, "sixty": 60, "seventy": 70, "eighty": 80, "ninety": 90,
                     "hundred": 100, "thousand": 1000, "million": 10 ** 6, "billion": 10 ** 9, "half": 0.5,
                     "dozen": 12})
MULTIPLIERS = {"hundred": "100", "thousand": "1000", "million": "10^{6}", "billion": "10^{9}", "trillion": "10^{12}",
               "dozen": "12", "k": "1000", "M": "10^{6}"}  # K and B are kelvin and byte, never multipliers


# words that give a phrase a value, a negation or "no answer": a \\text{} phrase with one of them is no name
VALUE_WORDS = set(NUMBER_WORDS) | set(MULTIPLIERS) | {
    "pi", "e", "i", "phi", "tau", "infinity", "infinite", "inf", "infty", "twice", "double", "triple", "quarter",
    "first", "third", "fourth", "fifth", "sixth", "seventh", "eighth", "ninth", "tenth", "hundredth", "thousandth",
    "not", "no", "none", "nothing", "never", "neither", "nor", "nobody", "nowhere", "cannot", "without", "undefined",
    "undefinable", "indeterminate", "impossible", "unsolvable", "nonexistent", "dne", "false", "wrong", "incorrect",
    "unknown", "empty", "all", "any", "every", "some", "many", "more", "less", "most", "least", "plus", "minus",
    "times", "over", "negative", "positive", "approximately", "about", "around", "roughly", "maybe", "perhaps",
    "probably", "possibly", "or", "and"}
# words that join or frame a sentence and name nothing: a \\text{} phrase of them alone is no name (\\text{so} = 5)
CONNECTIVES = {"so", "thus", "hence", "then", "therefore", "well", "also", "finally", "now", "ok", "okay", "yes", "the",
               "an", "is", "are", "was", "equals", "gives", "we", "get", "it", "this", "that", "which", "if", "but",
               "because", "since"}


def number_phrase(words: str) -> int | None:
    """The whole number that English words name (``nine``, ``twenty-five``, ``one hundred and five``, ``two thousand
    twelve``), None when they name none."""
    parts = [w for w in re.split(r"[\s-]+", words.casefold()) if w and w != "and"]
    if not parts or any(w not in NUMBER_WORDS or w in ("half", "dozen") for w in parts):
        return None
    total = current = 0
    last = None
    for w in parts:
        n = NUMBER_WORDS[w]
        if n in (100, 1000, 10 ** 6, 10 ** 9):
            if current == 0 or (n == 100 and current >= 100):
                return None
            current *= n
            if n > 100:
                total, current = total + current, 0
        elif last is not None and last < 100 and not (last >= 20 and last % 10 == 0 and n < 10):
            return None  # "nine nine", "twenty thirty": no one number
        else:
            current += n
        last = n
    return total + current


def is_label(words: str) -> bool:
    """Whether the words of a ``\\text{}`` phrase name something without giving a value: letters and spaces only,
    no unit, and no word of :data:`VALUE_WORDS` (``\\text{one hundred}``, ``\\text{pi}``, ``\\text{no solution}`` and
    ``\\text{the answer is not}`` are no names), nor only words of :data:`CONNECTIVES` (``\\text{so}``,
    ``\\text{thus}``)."""
    if not re.fullmatch(r"[A-Za-z][A-Za-z ]*", words) or unit_key(words):
        return False
    folded = words.casefold().split()
    return not any(w in VALUE_WORDS for w in folded) and not all(w in CONNECTIVES for w in folded)


def _unit_table() -> dict[str, str]:
    """Every written form of a unit -> its canonical symbol: SI symbols with the usual prefixes, their names
    (singular and plural, ``-meter`` and ``-metre``), and customary, time, currency and angle units."""
    prefixes = {"": "", "k": "kilo", "c": "centi", "m": "milli", "u": "micro", "n": "nano", "M": "mega", "G": "giga",
                "p": "pico", "d": "deci", "T": "tera", "f": "femto"}
    si = {"m": ("meter", "metre"), "g": ("gram",), "s": ("second",), "L": ("liter", "litre"), "J": ("joule",),
          "W": ("watt",), "Hz": ("hertz",), "eV": ("electronvolt", "electron-volt"), "Pa": ("pascal",),
          "N": ("newton",), "V": ("volt",), "A": ("ampere", "amp"), "C": ("coulomb",), "F": ("farad",),
          "K": ("kelvin",), "mol": ("mole",),
          "T": ("tesla",), "Wb": ("weber",), "H": ("henry",), "S": ("siemens",), "pc": ("parsec",), "bar": ("bar",),
          "cal": ("calorie",), "Wh": ("watt-hour",), "B": ("byte",), "b": ("bit",), "erg": ("erg",)}
    table: dict[str, str] = {}
    for sym, names in si.items():
        for p, pname in prefixes.items():
            if sym in ("K", "mol", "bar", "erg") and p not in ("", "k", "m"):
                continue
            key = p + sym
            table.setdefault(key, key)
            if p == "u":
                table.setdefault("\\mu " + sym, key)
            for name in names:
                word = pname + name
                table[word] = key
                table[word + ("" if word.endswith(("s", "z")) else "s")] = key
                if word.endswith("y"):
                    table[word[:-1] + "ies"] = key
    other = {
        "in": ("inch", "inches", "in."), "ft": ("foot", "feet", "ft."), "yd": ("yard", "yards"),
        "mi": ("mile", "miles"),
        "au": ("AU", "astronomical unit", "astronomical units"), "ly": ("light-year", "light-years", "light year",
                                                                       "light years"),
        "lb": ("lbs", "pound", "pounds", "lb."), "oz": ("ounce", "ounces"), "t": ("ton", "tons", "tonne", "tonnes"),
        "min": ("minute", "minutes", "mins"), "h": ("hr", "hrs", "hour", "hours"), "day": ("days", "d"),
        "week": ("weeks", "wk"), "month": ("months",), "yr": ("year", "years", "yrs"), "sec": ("secs",),
        "gal": ("gallon", "gallons"), "qt": ("quart", "quarts"), "pt": ("pint", "pints"), "cup": ("cups",),
        "tbsp": ("tablespoon", "tablespoons"), "tsp": ("teaspoon", "teaspoons"), "acre": ("acres",),
        "ha": ("hectare", "hectares"), "atm": ("atmosphere", "atmospheres"), "mph": ("miles per hour",),
        "kph": ("kilometers per hour", "kilometres per hour", "km/h", "kmh"), "rpm": ("revolutions per minute",),
        "USD": ("dollar", "dollars", "$", "\\$", "usd", "bucks"), "cent": ("cents", "c", "\u00a2"),
        "EUR": ("euro", "euros"), "GBP": ("pounds sterling",), "yuan": ("RMB", "rmb", "\u5143"), "yen": (),
        "deg": ("degree", "degrees", "deg", "\\circ", "\\degree", "^\\circ"), "rad": ("radian", "radians"),
        "sr": ("steradian", "steradians"), "arcsec": ("arcsecond", "arcseconds"), "arcmin": ("arcminute", "arcminutes"),
        "degC": ("degrees Celsius", "degree Celsius", "Celsius", "\\circ C", "^\\circ C", "\\circ\\mathrm{C}"),
        "degF": ("degrees Fahrenheit", "degree Fahrenheit", "Fahrenheit", "\\circ F", "^\\circ F"),
        "Msun": ("solar mass", "solar masses", "M_\\odot", "M_{\\odot}"), "Lsun": ("L_\\odot", "L_{\\odot}"),
        "amu": ("u_", "dalton", "daltons", "Da"), "ohm": ("ohms", "\\Omega"), "mmHg": ("mm Hg",),
        "knot": ("knots", "kn"), "nmi": ("nautical mile", "nautical miles"),
        "unit": ("units",),  # MATH's geometry answers: 12 square units
    }
    for key, forms in other.items():
        table[key] = key
        for form in forms:
            table[form] = key
    table.pop("u_", None)
    return table


UNITS = _unit_table()
_POWERS = {"square": 2, "sq": 2, "sq.": 2, "cubic": 3, "cu": 3}
_POWER_AFTER = {"squared": 2, "cubed": 3}


def unit_key(phrase: str) -> str | None:
    """The canonical form of a unit phrase (``square inches`` and ``in^2`` give ``in^2``; ``km/h`` and
    ``kilometers per hour`` give ``kph``), None when ``phrase`` is not made of units."""
    phrase = re.sub(r"\s+", " ", phrase.replace("\u00b2", "^2").replace("\u00b3", "^3")).strip()
    phrase = re.sub(r"\^\{(-?\d)\}", r"^\1", phrase)
    if not phrase:
        return None
    if phrase in UNITS:
        return UNITS[phrase]
    parts = re.split(r"\s*/\s*|\s+per\s+", phrase)
    keys = []
    for k, part in enumerate(parts):
        words = part.split()
        power = 1
        if words and words[0] in _POWERS:
            power, words = _POWERS[words[0]], words[1:]
        if words and words[-1] in _POWER_AFTER:
            power, words = _POWER_AFTER[words[-1]], words[:-1]
        text = " ".join(words)
        m = re.fullmatch(r"(.+?)\^(-?\d)", text)
        if m:
            text, power = m.group(1), power * int(m.group(2))
        if text not in UNITS:
            return None
        keys.append(f"{UNITS[text]}^{power * (-1 if k else 1)}")
    if len(keys) == 1 and keys[0].endswith("^1"):
        return keys[0][:-2]
    return "*".join(sorted(keys))


