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
from .normalising import fold


def _spaced(cue: str) -> str:
    if cue.endswith("*"):
        return r"(?<!\w)" + re.escape(cue[:-1])
    return r"(?<!\w)" + re.escape(cue) + r"(?!\w)"


@cache
def _patterns() -> tuple[tuple[str, re.Pattern[str]], ...]:
    """One compiled alternation of cues per attribute, attributes in name order."""
    names = sorted(set(LEXICON.attributes) | set(LEXICON.no_space_attributes))
    patterns = []
    for name in names:
        parts = [_spaced(c) for c in LEXICON.attributes.get(name, ())]
        parts += [re.escape(c) for c in LEXICON.no_space_attributes.get(name, ())]
        patterns.append((name, re.compile("|".join(parts))))
    return tuple(patterns)


def attributes_of(text: str) -> frozenset[str]:
    """The attributes whose cues ``text`` holds: "Moved to Berlin in May" -> {"home"};
    "Es alérgica a los gatos" -> {"allergies", "pets"}; none -> an empty set."""
    folded = " ".join(fold(text).lower().split())
    return frozenset(name for name, pattern in _patterns() if pattern.search(folded))
