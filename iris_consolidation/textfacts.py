"""Pure text functions shared by the rule judge and the validator.

They pull out of a truth's text what a merge must never lose: numbers, dates,
proper names and negations; and they normalise text so that two spellings of one
statement compare equal. English only; a conservative approximation by design:
when in doubt a detail counts as present in a source, so the validator refuses.
"""

from __future__ import annotations

import re
import unicodedata

_CONTRACTIONS = [
    (r"\bcan't\b", "can not"),
    (r"\bwon't\b", "will not"),
    (r"\bcannot\b", "can not"),
    (r"n't\b", " not"),
    (r"'m\b", " am"),
    (r"'re\b", " are"),
    (r"'ve\b", " have"),
    (r"'ll\b", " will"),
    (r"'d\b", " would"),
]
_WORD = re.compile(r"[0-9]+(?:[.,:/-][0-9]+)*|[^\W\d_]+(?:['’-][^\W\d_]+)*", re.UNICODE)
NEGATIONS = frozenset({"not", "no", "never", "none", "nobody", "nothing", "neither", "nor", "without", "dislikes", "hates"})
MONTHS = frozenset(
    "january february march april may june july august september october november december "
    "jan feb mar apr jun jul aug sep sept oct nov dec monday tuesday wednesday thursday friday "
    "saturday sunday".split()
)
# Capitalised words that are not names when they start a clause or stand alone.
_NOT_NAMES = frozenset(
    "i the a an he she they we you it his her their my our your this that these those is was "
    "has have had does did do user users likes loves prefers works lives enjoys".split()
)


def _ascii_fold(text: str) -> str:
    return unicodedata.normalize("NFKC", text).replace("’", "'").replace("‘", "'")


def normalise(text: str) -> str:
    """Lower-case, contractions expanded, punctuation dropped, spaces collapsed.

    "I'm a nurse." and "i am a nurse" both give "i am a nurse".
    """
    text = _ascii_fold(text).lower()
    for pattern, repl in _CONTRACTIONS:
        text = re.sub(pattern, repl, text)
    return " ".join(_WORD.findall(text))


def tokens(text: str) -> list[str]:
    """Words of the normalised text, in order."""
    return normalise(text).split()


def numbers(text: str) -> set[str]:
    """Every number in ``text`` as written ("3", "2023", "3:30"), plus number words,
    hyphenated ones whole ("twenty-one")."""
    found = set(re.findall(r"\d+(?:[.,:/-]\d+)*", text))
    words = {t for t in tokens(text) if t in _NUMBER_WORDS or _NUMBER_WORDS.intersection(t.split("-"))}
    return found | words


_NUMBER_WORDS = frozenset(
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen "
    "fifteen sixteen seventeen eighteen nineteen twenty thirty forty fifty sixty seventy eighty "
    "ninety hundred thousand million billion first second third fourth fifth twice once "
    "half double triple dozen".split()
)


def proper_names(text: str) -> list[str]:
    """Capitalised words that are not sentence-initial function words, in order.

    Month and weekday names are included: they are dates, which a merge must keep.
    """
    text = _ascii_fold(text)
    names: list[str] = []
    for match in re.finditer(r"[^\W\d_]+(?:['-][^\W\d_]+)*", text):
        word = match.group(0)
        if not word[0].isupper():
            continue
        if word.lower() in _NOT_NAMES:
            continue
        names.append(word.lower())
    return names


def dates(text: str) -> set[str]:
    """Month and weekday names in ``text`` (lower-case)."""
    return set(tokens(text)) & MONTHS


def negations(text: str) -> set[str]:
    """Negation words in the normalised text ("not", "never", "no", ...)."""
    return set(tokens(text)) & NEGATIONS


def polarity(text: str) -> bool:
    """True when the statement is negated an odd number of times."""
    return sum(1 for t in tokens(text) if t in NEGATIONS) % 2 == 1


def details(text: str) -> set[str]:
    """Numbers, dates and proper names of ``text``, lower-case: what a merge must keep."""
    return {n.lower() for n in numbers(text)} | dates(text) | set(proper_names(text))


def contains_detail(text: str, detail: str) -> bool:
    """Whether ``detail`` (from ``details``) stands in ``text`` as a whole word or number."""
    haystack = " " + normalise(text) + " "
    probe = normalise(detail)
    if probe and f" {probe} " in haystack:
        return True
    if detail.isalpha():
        return False
    # Inside a longer word ("Jean-Luc's"), but a number never inside another
    # number: "2" is not in "12", "2.5" or "1.2".
    pattern = re.escape(detail.lower())
    if detail[:1].isdigit():
        pattern = r"(?<!\d)(?<!\d[.,:/-])" + pattern
    if detail[-1:].isdigit():
        pattern += r"(?![.,:/-]?\d)"
    return re.search(pattern, _ascii_fold(text).lower()) is not None
