"""Rewordings: everyday ones (``Language.phrase_equivalences``: "father of a boy" /
"son", "jog" / "run"), and the synonyms a judge states in its reason (``'x' = 'y'``),
with what a merged text keeps by them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from .languages import LEXICON
from .normalising import fold, no_space_runs, normalise, tokens, uncovered
from .quantities import values
from .stems import content_stems, has_phrase, missing, same_stem, stem

#: A reason states a synonym as ``word = synonym``: either side a quoted phrase or words
#: without quotes ("black coffee = 黑咖啡"); "means" and "->" also join them.
# A quoted phrase may hold an apostrophe inside a word ('it's important'); a note in
# brackets may follow it ("'finds inspiration' (t24) = 'watches'").
_QUOTED = r"""["“'‘](?:[^"”'’]|['’](?=\w))+["”'’]"""
# A word without quotes: no separator of the reason (",", ";", ":", brackets, a full stop
# that ends a sentence, "=", "->", "→"), and not the word "means".
_BARE_WORD = r"""(?!means\b)(?:[^\s=,;:"“”'‘’()→.<>-]|\.(?=\S)|-(?!>))+"""
_BARE = rf"{_BARE_WORD}(?:[ \t]+{_BARE_WORD})*"
_EQUIVALENCE = re.compile(rf"""({_QUOTED}|{_BARE})(?:\s*\([^)]*\))?\s*(?:=|->|→|\bmeans\b)\s*({_QUOTED}|{_BARE})""")
_QUOTES = "\"“”'‘’ "
#: Most words of a side without quotes read as a synonym (the reason's words before it
#: are its sentence, not the synonym: "both say black coffee = 黑咖啡").
BARE_SIDE_WORDS = 5


def _sides(side: str, *, left: bool) -> list[str]:
    """The phrases a side of a stated synonym may be: a quoted side as written; words
    without quotes as each run of up to ``BARE_SIDE_WORDS`` of them that touches the "="
    (the left side's endings, the right side's beginnings), longest first."""
    if side[:1] in _QUOTES:
        return [side.strip(_QUOTES)]
    words = side.split()
    runs = range(min(len(words), BARE_SIDE_WORDS), 0, -1)
    return [" ".join(words[-n:] if left else words[:n]) for n in runs]


def equivalences(reason: str) -> list[tuple[str, str]]:
    """The synonyms a judge states in ``reason``: ``'father of a boy' = 'son'`` gives
    ("father of a boy", "son"); ``gatos = cats`` gives ("gatos", "cats"). A side written
    without quotes gives each reading of ``_sides`` ("both drink black coffee = 黑咖啡"
    gives ("black coffee", "黑咖啡") among others, longest first): a rule takes the pair
    whose sides stand where it looks, so "black" is not left out of the synonym."""
    pairs: list[tuple[str, str]] = []
    for a, b in _EQUIVALENCE.findall(fold(reason)):
        pairs += [(x, y) for x in _sides(a, left=True) for y in _sides(b, left=False)]
    return list(dict.fromkeys(pairs))


def kept(phrase: str, content: str, content_stems_: set[str]) -> bool:
    """Whether every content word of ``phrase`` stands in ``content``; a phrase of
    function words only ("and", "too much", "when i was three") when its every word does."""
    stems = content_stems(phrase)
    runs = no_space_runs(phrase)
    if not stems and not runs:
        words = tokens(phrase)
        return bool(words) and set(words) <= set(tokens(content))
    haystack = normalise(content)
    return not missing(stems, content_stems_) and all(not uncovered(r, haystack) for r in runs)


def equivalent_in(member: str, content: str) -> list[str]:
    """Phrases of ``member`` that ``content`` restates by ``LEXICON.phrase_equivalences``."""
    return [
        x
        for a, b in LEXICON.phrase_equivalences
        for x, y in ((a, b), (b, a))
        if has_phrase(member, x) and has_phrase(content, y)
    ]


def stated_cover(content: str, reason: str) -> list[str]:
    """The source-side phrases of the synonyms the judge states in ``reason`` whose
    other side ``content`` keeps (``equivalences``; either side may be the source's):
    what a merge may reword without losing it ("every six months" = "twice a year")."""
    have = content_stems(content) | {stem(t) for t in tokens(content)}
    covered = []
    for a, b in equivalences(reason):
        if kept(b, content, have):
            covered.append(a)
        if kept(a, content, have):
            covered.append(b)
    return covered


def stated_between(source: str, content: str, reason: str) -> list[str]:
    """The source-side phrases of the synonyms the judge states in ``reason`` whose
    source side stands in ``source`` and whose other side stands in ``content``, each as
    a whole phrase (``has_phrase``; either side may be the source's): how a name, a
    place or an identifier may be reworded ("IBM" = "International Business Machines",
    "München" = "Munich", "K8s" = "Kubernetes"). Stricter than ``stated_cover``, which
    asks only that the content keep the other side."""
    return [
        x
        for a, b in equivalences(reason)
        for x, y in ((a, b), (b, a))
        if has_phrase(source, x) and has_phrase(content, y)
    ]


def covered_by(word: str, phrases: Iterable[str]) -> bool:
    """Whether ``word`` (a token, number value or marker) stands in one of ``phrases``."""
    for phrase in phrases:
        if word in tokens(phrase) or word in normalise(phrase) and no_space_runs(word):
            return True
        if word in values(fold(phrase)):
            return True
        if any(same_stem(stem(word), s) for s in content_stems(phrase)):
            return True
    return False


def vouched(reason: str, sources: Iterable[str]) -> list[str]:
    """The content-side phrases of the synonyms the judge states in ``reason`` whose other
    side one of ``sources`` holds: words a merge may use that no source wrote ("spent" =
    "spending")."""
    sources = list(sources)
    found = []
    for a, b in equivalences(reason):
        for x, y in ((a, b), (b, a)):
            if any(kept(y, source, content_stems(source) | {stem(t) for t in tokens(source)}) for source in sources):
                found.append(x)
    return found
