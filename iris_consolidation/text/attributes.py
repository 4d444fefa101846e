"""Which single-valued attributes of a person a truth speaks of ("home", "work", "age"...).

A truth that says where the person lives and a later one that says they moved are about
one attribute whatever their wording ("Lives in Lisbon" / "Moved to Berlin in September",
cosine 0.2 to 0.4 with the local embedder): phase 1 offers them to the judge together
(``services/pipeline/attributes.py``). The cues are the language packs'
(``Language.attributes``), every pack's read in every text, as every text rule does: a
spaced cue matches whole words of the lower-cased text (one ending in "*" may end inside a
word: "allerg*" matches "allergic"), a cue of a script without spaces matches anywhere.
A cue finds candidates only; the judge and the validator decide. Pure.
"""

from __future__ import annotations

import re
from functools import cache

from .languages import LEXICON
from .normalising import NO_SPACE_RUN, fold


def _spaced(cue: str) -> str:
    if cue.endswith("*"):
        return r"(?<!\w)" + re.escape(cue[:-1])
    return r"(?<!\w)" + re.escape(cue) + r"(?!\w)"


@cache
def _patterns() -> dict[str, re.Pattern[str]]:
    """One compiled alternation of cues per attribute."""
    names = sorted(set(LEXICON.attributes) | set(LEXICON.no_space_attributes))
    patterns = {}
    for name in names:
        parts = [_spaced(c) for c in LEXICON.attributes.get(name, ())]
        parts += [re.escape(c) for c in LEXICON.no_space_attributes.get(name, ())]
        patterns[name] = re.compile("|".join(parts))
    return patterns


_WORD = re.compile(r"\w+")


@cache
def _screen() -> tuple[dict[str, frozenset[str]], tuple[tuple[str, str], ...], tuple[tuple[str, str], ...]]:
    """What a text must hold for an attribute's pattern to be worth running: the first word of
    a spaced cue as a whole word (``anchors``: word -> attributes), the stem of a one-word
    "*" cue anywhere (``stems``), a cue of a script without spaces anywhere (``unspaced``).
    Every match of a pattern holds one of these, so screening first finds the same attributes."""
    anchors: dict[str, set[str]] = {}
    stems: list[tuple[str, str]] = []
    for name, cues in LEXICON.attributes.items():
        for cue in cues:
            first = _WORD.match(cue)
            if cue.endswith("*") and (first is None or first.end() >= len(cue) - 1):
                stems.append((cue[:-1], name))
            elif first is not None:
                anchors.setdefault(first.group(), set()).add(name)
            else:  # a cue starting with no word character: screen it as a substring
                stems.append((cue.rstrip("*"), name))
    unspaced = tuple((cue, name) for name, cues in LEXICON.no_space_attributes.items() for cue in cues)
    return {w: frozenset(n) for w, n in anchors.items()}, tuple(stems), unspaced


@cache
def _ascii_stems() -> tuple[tuple[str, str], ...]:
    """The screen's stems that an ASCII text can hold."""
    return tuple((stem, name) for stem, name in _screen()[1] if stem.isascii())


def attributes_of(text: str) -> frozenset[str]:
    """The attributes whose cues ``text`` holds: "Moved to Berlin in May" -> {"home"};
    "Es alérgica a los gatos" -> {"allergies", "pets"}; none -> an empty set.

    Screened first (``_screen``: a set lookup per word), so a text with no cue costs no
    regular expression: 100,000 random sentences took 42 s with every attribute's pattern
    run on each, a few seconds screened."""
    plain = text.isascii()  # most truths: no folding, no cue of another script to look for
    folded = text.lower() if plain else fold(text).lower()
    if "  " in folded or "\n" in folded or "\t" in folded:
        folded = " ".join(folded.split())
    anchors, stems, unspaced = _screen()
    candidates = {name for word in _WORD.findall(folded) for name in anchors.get(word, ())}
    candidates.update(name for stem, name in (_ascii_stems() if plain else stems)
                      if name not in candidates and stem in folded)
    if not plain and NO_SPACE_RUN.search(folded):
        candidates.update(name for cue, name in unspaced if name not in candidates and cue in folded)
    if not candidates:
        return frozenset()
    patterns = _patterns()
    return frozenset(name for name in candidates if patterns[name].search(folded))
