"""Details a merge must keep: proper names, dates (month and weekday names) and numbers.

Names: a capitalised word inside a sentence is a name unless it is a listed function
word (``Language.not_names``); a sentence's first word is capitalised anyway, so it
counts as a name only if it has a capital inside ("iPhone", "HVRA") or is a name
somewhere else in the cluster (the ``known`` argument, see ``known_names``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from .languages import LEXICON
from .normalising import RAW_WORD, fold, normalise, tokens
from .quantities import numbers, values


def _capitalised(word: str) -> bool:
    return word[0].isupper() or any(c.isupper() for c in word[1:])


def name_candidates(text: str) -> list[tuple[str, bool]]:
    """Capitalised words of ``text`` with whether each starts a sentence."""
    found: list[tuple[str, bool]] = []
    starts = True
    for match in RAW_WORD.finditer(fold(text)):
        word = match.group(0)
        word = word[:-2] if word.endswith("'s") and len(word) > 2 else word  # "Joanna's" names Joanna
        if word in ".!?;:":
            starts = True
            continue
        if _capitalised(word) and word.lower() not in LEXICON.not_names:
            found.append((word, starts))
        starts = False
    return found


def known_names(texts: Iterable[str]) -> frozenset[str]:
    """Lower-case words that stand as names inside a sentence of one of ``texts``."""
    return frozenset(
        word.lower()
        for text in texts
        for word, initial in name_candidates(text)
        if not initial or any(c.isupper() for c in word[1:])
    )


def proper_names(text: str, *, known: frozenset[str] = frozenset()) -> list[str]:
    """Names in ``text``, lower-case, in order (see the module docstring).

    Month and weekday names are included: they are dates, which a merge must keep.
    """
    names = []
    for word, initial in name_candidates(text):
        lower = word.lower()
        if initial and lower not in known and not any(c.isupper() for c in word[1:]):
            continue
        names.append(lower)
    return names


def names_not_dates(text: str, *, known: frozenset[str] = frozenset()) -> set[str]:
    """``proper_names`` of ``text`` without the month and weekday names."""
    return {n for n in proper_names(text, known=known) if n not in LEXICON.months}


def singular(word: str) -> str:
    return word[:-1] if word.endswith("s") and word[:-1] in LEXICON.months else word


def dates(text: str) -> set[str]:
    """Month, weekday and weekend names in ``text`` (lower-case, singular)."""
    return {singular(t) for t in tokens(text)} & LEXICON.months


def details(text: str, *, known: frozenset[str] = frozenset()) -> set[str]:
    """Numbers (by value, see ``numbers``), dates and proper names of ``text``,
    lower-case: what a merge must keep."""
    names = {singular(n) for n in proper_names(text, known=known)}
    return numbers(text) | dates(text) | names


def contains_detail(text: str, detail: str) -> bool:
    """Whether ``detail`` (from ``details``) stands in ``text``: a number by value
    ("3" is in "three cats", never in "13" or "3.5"), a name or date as a whole word."""
    if detail in values(fold(text)):
        return True
    if detail[:1].isdigit() or detail in LEXICON.inexact:
        return False
    haystack = " " + " ".join(singular(t.removesuffix("'s")) for t in tokens(text)) + " "
    probe = normalise(detail)
    if probe and f" {probe} " in haystack:
        return True
    if detail.isalpha():
        return False
    # Inside a longer word ("Jean-Luc's").
    return re.search(re.escape(detail.lower()), fold(text).lower()) is not None
