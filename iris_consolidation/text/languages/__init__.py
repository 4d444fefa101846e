"""The registered language packs, and the word sets the text rules read, derived from them.

``PACKS`` lists one ``Language`` per module of this folder; ``LEXICON`` is their union
(``derive``), the one place the rules take words from. Adding a language is adding its
module and one entry to ``PACKS``: every set below grows with it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from itertools import chain
from types import MappingProxyType
from typing import Any

from .base import Language
from .de import GERMAN
from .en import ENGLISH
from .es import SPANISH
from .fr import FRENCH
from .it import ITALIAN
from .ja import JAPANESE
from .pt import PORTUGUESE
from .th import THAI
from .zh import CHINESE

__all__ = ["LEXICON", "PACKS", "Language", "Lexicon", "derive"]

#: Every registered language; English first (its stemmer stems every word, see ``text.stems``).
PACKS: tuple[Language, ...] = (ENGLISH, PORTUGUESE, SPANISH, FRENCH, GERMAN, ITALIAN, CHINESE, JAPANESE, THAI)


@dataclass(frozen=True, kw_only=True)
class Lexicon:
    """The words of all packs by concept, as the rules read them (see ``Language`` for
    each concept). Sets are unions; tuples keep the packs' order. ``no_space_*`` hold the
    markers of the scripts without spaces, matched as substrings."""

    packs: tuple[Language, ...]
    contractions: tuple[tuple[str, str], ...]
    stopwords: frozenset[str]
    articles: frozenset[str]
    not_names: frozenset[str]
    months: frozenset[str]
    #: (marker words, marker letters, words that are no negation there) of each language that has some.
    not_negations: tuple[tuple[frozenset[str], str, frozenset[str]], ...]
    negations: frozenset[str]
    negative_verbs: frozenset[str]
    negative_phrases: tuple[str, ...]
    positive_idioms: tuple[tuple[str, str], ...]
    ended_negations: tuple[str, ...]
    preference_words: frozenset[str]
    reported_changes: tuple[str, ...]
    #: The reported changes and the events.
    change_markers: tuple[str, ...]
    time_ended: tuple[str, ...]
    #: Of every pack, spaced and not (a marker of a script without spaces is matched as a substring).
    plans: tuple[str, ...]
    long_ago: tuple[str, ...]
    instructions: tuple[str, ...]
    #: The negative phrases and the packs' frame phrases.
    frame_phrases: tuple[str, ...]
    #: Negations, negative verbs and the packs' frame words.
    frame_words: frozenset[str]
    job_frames: tuple[str, ...]
    light_verbs: frozenset[str]
    synonym_groups: tuple[frozenset[str], ...]
    contrast_frames: tuple[frozenset[str], ...]
    phrase_equivalences: tuple[tuple[str, str], ...]
    #: The characters of the scripts without spaces, and their grammar characters (regex class bodies).
    no_space_script: str
    no_space_grammar: str
    #: (script, fewest characters of a kept piece) of each script whose pieces need more than one.
    min_pieces: tuple[tuple[str, int], ...]
    no_space_negations: tuple[str, ...]
    no_space_negative_verbs: tuple[str, ...]
    no_space_change_markers: tuple[str, ...]
    no_space_time_ended: tuple[str, ...]
    no_space_preference: tuple[str, ...]
    cardinals: Mapping[str, int]
    units: Mapping[str, int]
    tens: Mapping[str, int]
    scales: Mapping[str, int]
    ordinals: Mapping[str, int]
    repeats: Mapping[str, int]
    inexact: frozenset[str]
    numerals: Mapping[str, int]
    numeral_scales: Mapping[str, int]
    counters: str
    ordinal_prefixes: tuple[str, ...]
    prepositions: frozenset[str]
    time_words: frozenset[str]
    scope_words: frozenset[str]
    conjunctions: frozenset[str]
    copulas: frozenset[str]
    definite: frozenset[str]
    indefinite: frozenset[str]
    #: Each attribute's cues in the languages with spaces, and in those without (``Language.attributes``).
    attributes: Mapping[str, tuple[str, ...]]
    no_space_attributes: Mapping[str, tuple[str, ...]]


def _union(packs: Iterable[Language], name: str) -> frozenset[str]:
    return frozenset(chain.from_iterable(getattr(p, name) for p in packs))


def _chain(packs: Iterable[Language], name: str) -> tuple[Any, ...]:
    """The items of one field of every pack, in order, each once."""
    return tuple(dict.fromkeys(chain.from_iterable(getattr(p, name) for p in packs)))


def _merged(packs: Iterable[Language], name: str) -> Mapping[str, int]:
    merged: dict[str, int] = {}
    for pack in packs:
        merged.update(getattr(pack, name))
    return MappingProxyType(merged)


def _attributes(packs: Iterable[Language]) -> Mapping[str, tuple[str, ...]]:
    """Each attribute's cues of every pack, in the packs' order, each once."""
    merged: dict[str, dict[str, None]] = {}
    for pack in packs:
        for name, cues in pack.attributes.items():
            merged.setdefault(name, {}).update(dict.fromkeys(cues))
    return MappingProxyType({name: tuple(cues) for name, cues in merged.items()})


def _numbers(packs: tuple[Language, ...]) -> dict[str, Any]:
    """The ``Lexicon`` fields of number words (``text.quantities``), from every pack."""
    return {
        "cardinals": _merged(packs, "cardinals"),
        "units": _merged(packs, "units"),
        "tens": _merged(packs, "tens"),
        "scales": _merged(packs, "scales"),
        "ordinals": _merged(packs, "ordinals"),
        "repeats": _merged(packs, "repeats"),
        "inexact": _union(packs, "inexact"),
        "numerals": _merged(packs, "numerals"),
        "numeral_scales": _merged(packs, "numeral_scales"),
        "counters": "".join(dict.fromkeys("".join(p.counters for p in packs))),
        "ordinal_prefixes": tuple(dict.fromkeys(p.ordinal_prefix for p in packs if p.ordinal_prefix)),
    }


def derive(packs: Iterable[Language]) -> Lexicon:
    """The ``Lexicon`` of ``packs`` (in their order; a pack's ``code`` must be unique).

    Raises ValueError when two packs share a code."""
    packs = tuple(packs)
    codes = [p.code for p in packs]
    if len(set(codes)) != len(codes):
        raise ValueError(f"Two language packs share a code: {sorted(codes)}.")
    spaced = [p for p in packs if p.spaces]
    unspaced = [p for p in packs if not p.spaces]
    negations, negative_verbs = _union(spaced, "negations"), _union(spaced, "negative_verbs")
    negative_phrases = _chain(packs, "negative_phrases")
    reported = _chain(spaced, "reported_changes")
    return Lexicon(
        packs=packs,
        contractions=_chain(packs, "contractions"),
        stopwords=_union(packs, "stopwords"),
        articles=_union(packs, "articles"),
        not_names=_union(packs, "not_names"),
        months=_union(packs, "months"),
        not_negations=tuple((p.marker_words, p.marker_letters, p.not_negations) for p in packs if p.not_negations),
        negations=negations,
        negative_verbs=negative_verbs,
        negative_phrases=negative_phrases,
        positive_idioms=_chain(packs, "positive_idioms"),
        ended_negations=_chain(packs, "ended_negations"),
        preference_words=_union(spaced, "preference_words"),
        reported_changes=reported,
        change_markers=reported + tuple(m for m in _chain(spaced, "change_events") if m not in reported),
        time_ended=_chain(spaced, "time_ended"),
        plans=_chain(packs, "plans"),
        long_ago=_chain(packs, "long_ago"),
        instructions=_chain(packs, "instructions"),
        frame_phrases=negative_phrases + _chain(packs, "frame_phrases"),
        frame_words=negations | negative_verbs | _union(packs, "frame_words"),
        job_frames=_chain(packs, "job_frames"),
        light_verbs=_union(packs, "light_verbs"),
        synonym_groups=_chain(packs, "synonym_groups"),
        contrast_frames=_chain(packs, "contrast_frames"),
        phrase_equivalences=_chain(packs, "phrase_equivalences"),
        no_space_script="".join(p.script for p in unspaced),
        no_space_grammar="".join(p.grammar_chars for p in unspaced),
        min_pieces=tuple((p.script, p.min_piece) for p in unspaced if p.min_piece > 1),
        no_space_negations=_chain(unspaced, "negations"),
        no_space_negative_verbs=_chain(unspaced, "negative_verbs"),
        no_space_change_markers=_chain(unspaced, "reported_changes") + _chain(unspaced, "change_events"),
        no_space_time_ended=_chain(unspaced, "time_ended"),
        no_space_preference=_chain(unspaced, "preference_words"),
        **_numbers(packs),
        prepositions=_union(packs, "prepositions"),
        time_words=_union(packs, "time_words"),
        scope_words=_union(packs, "scope_words"),
        conjunctions=_union(packs, "conjunctions"),
        copulas=_union(packs, "copulas"),
        definite=_union(packs, "definite"),
        indefinite=_union(packs, "indefinite"),
        attributes=_attributes(spaced),
        no_space_attributes=_attributes(unspaced),
    )


#: The words of every registered pack.
LEXICON = derive(PACKS)
