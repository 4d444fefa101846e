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

#: A reason states a synonym as ``word = synonym`` (either side a word or a quoted
#: phrase; "means" and "->" also join them).
# A quoted phrase may hold an apostrophe inside a word ('it's important'); a note in
# brackets may follow it ("'finds inspiration' (t24) = 'watches'").
_PHRASE = r"""(?:["“'‘](?:[^"”'’]|['’](?=\w))+["”'’]|[^\s=,;:"“”'‘’()]+)"""


_EQUIVALENCE = re.compile(rf"""({_PHRASE})(?:\s*\([^)]*\))?\s*(?:=|->|→|means)\s*({_PHRASE})""")


def equivalences(reason: str) -> list[tuple[str, str]]:
    """The synonyms a judge states in ``reason``: ``'father of a boy' = 'son'`` gives
    ("father of a boy", "son"); ``gatos = cats`` gives ("gatos", "cats")."""
    return [(a.strip("\"“”'‘’ "), b.strip("\"“”'‘’ ")) for a, b in _EQUIVALENCE.findall(fold(reason))]


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
