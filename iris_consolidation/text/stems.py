"""Content stems: what a truth says, reduced to the stems of its words that are not
function words (``Language.stopwords``), negations or numbers.

Every word is stemmed by the Snowball stemmer of the first registered pack (English),
whatever its language: one word has one stem in every text (a member, a merged text, a
synonym a judge states), so two truths in one language compare equal when their words
do, and a word of another language keeps its spelling nearly whole. Stemming each text
with its own language's stemmer was measured and made the public cases worse (a stated
synonym "gatos = cats" no longer matched the member's "gatos": ``docs/architecture.md``).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable

import snowballstemmer

from .languages import LEXICON
from .names import singular
from .normalising import NO_SPACE_RUN, no_space_runs, normalise, tokens, uncovered
from .quantities import number_word

#: The stemmer of every word: the first pack's.
STEMMER = snowballstemmer.stemmer(next(p.stemmer for p in LEXICON.packs if p.stemmer))


@functools.lru_cache(maxsize=8192)
def stem(word: str) -> str:
    """The Snowball English stem of a lower-case word, a word joined by hyphens or apostrophes
    stemmed part by part; preference words share "like"."""
    if word in LEXICON.preference_words:
        return "like"
    if _JOINED.search(word):  # each part stemmed: "part-time" is "part-time", its parts "part" and "time"
        return "".join(p if _JOINED.fullmatch(p) else STEMMER.stemWord(p) for p in re.split("([-'])", word))
    return STEMMER.stemWord(word)


def same_stem(a: str, b: str) -> bool:
    """Stems of one word family: equal, or one a prefix (>= 5 letters) of the other
    ("allerg" / "allergi", which Snowball leaves apart)."""
    if a == b:
        return True
    short, long_ = sorted((a, b), key=len)
    return len(short) >= 5 and long_.startswith(short)


def content_stems(text: str, *, exclude: Iterable[str] = ()) -> set[str]:
    """Stems of the words of ``text`` that are not stop words, negations, negative verbs
    or ``exclude``d (lower-case words, e.g. the text's details). Runs of a script
    without spaces are left out: ``uncovered`` compares them."""
    skip = set(exclude)
    words = [t.removesuffix("'s") for t in tokens(text)]  # "user's" -> "user"
    # A word joined by hyphens or apostrophes counts whole and by its parts of two letters
    # or more ("positive-reinforcement" says "reinforcement"; "l'hôpital" says "hôpital").
    words += [p for t in words if _JOINED.search(t) for p in _JOINED.split(t) if len(p) > 1]
    return {
        stem(singular(t))
        for t in words
        if t not in LEXICON.stopwords
        and t not in LEXICON.negations
        and t not in LEXICON.negative_verbs
        and singular(t) not in skip
        and t not in skip
        and not t[0].isdigit()
        and not NO_SPACE_RUN.fullmatch(t)
        and not number_word(t)
    }


#: What joins the parts of one word ("positive-reinforcement", "rock'n'roll").
_JOINED = re.compile("[-']")


def _present(stem_: str, others: set[str]) -> bool:
    """Whether ``stem_`` or, for a joined word, each of its parts has a word of its family
    in ``others`` ("positive-reinforc" is kept by "posit" and "reinforc")."""
    if any(same_stem(stem_, o) for o in others):
        return True
    parts = [p for p in _JOINED.split(stem_) if len(p) > 1]  # "l'hôpital": "hôpital"
    return bool(_JOINED.search(stem_)) and bool(parts) and all(any(same_stem(p, o) for o in others) for p in parts)


def missing(stems: set[str], others: set[str]) -> set[str]:
    """The stems of ``stems`` with no word of their family in ``others`` (a joined word
    counts as present when each of its parts is, ``_present``)."""
    return {s for s in stems if not _present(s, others)}


def words_of_stems(text: str, stems: Iterable[str]) -> list[str]:
    """The words of ``text`` (as written, lower-case) whose stems are in ``stems``, in
    order and each once: what an operator reads instead of stems ("bicycl" -> "bicycle").
    A stem no word of ``text`` has is left out."""
    wanted = set(stems)
    found: list[str] = []
    for word in tokens(text):
        base = word.removesuffix("'s")
        if base not in found and (stem(singular(base)) in wanted or base in wanted):
            found.append(base)
    return found


def stem_sequence(text: str) -> list[str]:
    return [stem(singular(t)) for t in tokens(text)]


def has_phrase(text: str, phrase: str) -> bool:
    """Whether ``phrase`` stands in ``text`` as a whole: its words' stems in a row
    ("jogs" has "jog"), or, in a script without spaces, as a substring."""
    if no_space_runs(phrase):
        return normalise(phrase) in normalise(text)
    words, probe = stem_sequence(text), stem_sequence(phrase)
    return bool(probe) and any(words[i : i + len(probe)] == probe for i in range(len(words) - len(probe) + 1))


def unstated_stems(text: str, sources: Iterable[str]) -> set[str]:
    """Content stems of ``text`` found in none of ``sources``, and pieces of its runs
    without spaces (``uncovered``) that no source holds."""
    sources = list(sources)
    stated: set[str] = set()
    for source in sources:
        stated |= content_stems(source)
    haystack = "\n".join(normalise(source) for source in sources)
    pieces = {p for run in no_space_runs(text) for p in uncovered(run, haystack)}
    return missing(content_stems(text), stated) | pieces
