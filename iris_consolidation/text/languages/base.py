"""``Language``: the words of one language that the text rules read.

A pack holds only its own language's words, lower-case, as the normalised text spells
them (contractions expanded: "can not", never "can't"). Every field but ``code`` is
optional: a language contributes what it has. The rules read the union of all packs
(``languages.LEXICON``), never one pack, because a truth's language is not known and
truths mix languages ("Mora em Berlin, works at Siemens").

Words of one pack are matched in the text of every language, so a pack lists no word
that is a common content word of another language (Spanish "nada" is "nothing" and
Portuguese "swims": it is left out; French "son" is "his" and English "son": left out).

A language written without spaces (``spaces=False``: Chinese, Japanese, Thai) names its
characters (``script``), and its word lists are matched as substrings of a run of those
characters.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

_EMPTY: Mapping[str, int] = MappingProxyType({})


def _empty() -> Mapping[str, int]:
    return _EMPTY


_NO_ATTRIBUTES: Mapping[str, tuple[str, ...]] = MappingProxyType({})


def _no_attributes() -> Mapping[str, tuple[str, ...]]:
    return _NO_ATTRIBUTES


@dataclass(frozen=True, kw_only=True)
class Language:
    """The words of one language for the text rules (see the module docstring).

    Sets are frozensets of words; lists whose order matters (the first marker found is
    the one a refusal names) are tuples. Stems (``synonym_groups``, ``contrast_frames``)
    are the stems ``text.stem`` gives.
    """

    #: ISO 639-1 code ("en").
    code: str
    #: Snowball algorithm name (``snowballstemmer.algorithms()``), or None where words are not stemmed.
    stemmer: str | None = None
    #: False for a script written without spaces between words.
    spaces: bool = True
    #: With ``spaces=False``: the script's characters, as the body of a regex class ("\u0e01-\u0e5b").
    script: str = ""
    #: With ``spaces=False``: characters of grammar, not content (particles, endings), a regex class body.
    grammar_chars: str = ""
    #: With ``spaces=False``: the fewest characters a piece of a run must have to count as kept.
    min_piece: int = 1

    # Normalising
    #: (regex, replacement) pairs that expand contractions before words are read.
    contractions: tuple[tuple[str, str], ...] = ()
    #: Function words and the glue of truth phrasing ("has", "named"): no content word.
    stopwords: frozenset[str] = frozenset()
    #: Articles, left out of a statement's frame ("Chose a desk" / "Chose an e-reader").
    articles: frozenset[str] = frozenset()
    #: Capitalised words that are no name when they start a clause ("The", "Likes").
    not_names: frozenset[str] = frozenset()
    #: Month, weekday and weekend names: dates, which a merge must keep.
    months: frozenset[str] = frozenset()

    # Telling the language apart
    #: Words and letters that mark a text as in this language ("não", "ã").
    marker_words: frozenset[str] = frozenset()
    marker_letters: str = ""
    #: Negations of another language that are no negation in a text marked as this one
    #: (Portuguese "no" is "in the").
    not_negations: frozenset[str] = frozenset()

    # Polarity
    #: Negation words ("not", "never"); in a script without spaces, markers ("不", "ない").
    negations: frozenset[str] | tuple[str, ...] = frozenset()
    #: Verbs that state a dislike ("hates"): each counts as one negation.
    negative_verbs: frozenset[str] | tuple[str, ...] = frozenset()
    #: Phrases that state a dislike with a negation inside ("can not stand"): one negation.
    negative_phrases: tuple[str, ...] = ()
    #: Idioms whose negation states a liking, read as the plain words: ("can not wait to", "eager to").
    positive_idioms: tuple[tuple[str, str], ...] = ()
    #: Negation phrases that say a state ended ("no longer"): no negation of the statement.
    ended_negations: tuple[str, ...] = ()
    #: Words of preference ("likes", "favourite"): one stem, "like"; dropped from a negated statement.
    preference_words: frozenset[str] | tuple[str, ...] = frozenset()

    # Change and time
    #: Words that report a change against an earlier state ("now", "moved", "no longer").
    reported_changes: tuple[str, ...] = ()
    #: Words that name an event that may change a state ("married", "started").
    change_events: tuple[str, ...] = ()
    #: Words that say a state has ended ("until", "used to").
    time_ended: tuple[str, ...] = ()
    #: Words that state an intention or an effort under way, whose later outcome replaces
    #: them ("plans to", "is considering", "currently").
    plans: tuple[str, ...] = ()
    #: Words that set a statement long before it was said ("as a child", "years ago"): no
    #: outcome of a plan stated earlier.
    long_ago: tuple[str, ...] = ()
    #: Phrases that address the model rather than state a fact ("ignore all previous
    #: instructions"): such a truth is data, and takes part in no merge or supersede.
    instructions: tuple[str, ...] = ()
    #: Phrases and words that only frame a statement, carried by the polarity and time checks.
    frame_phrases: tuple[str, ...] = ()
    frame_words: frozenset[str] = frozenset()
    #: Phrases that say no more than the copula ("works as" a nurse = "is" a nurse).
    job_frames: tuple[str, ...] = ()
    #: Light verbs a member may lose ("goes running" = "runs").
    light_verbs: frozenset[str] = frozenset()

    # Rewordings
    #: Stems of one meaning in truths about a person ({"birthday", "born", "birth"}).
    synonym_groups: tuple[frozenset[str], ...] = ()
    #: Stems that name one frame for the contrast check ({"job", "work", ...}).
    contrast_frames: tuple[frozenset[str], ...] = ()
    #: Everyday rewordings of one fact, either way round: ("father of a boy", "son").
    phrase_equivalences: tuple[tuple[str, str], ...] = ()

    # Numbers
    #: Cardinals read alone ("três": 3).
    cardinals: Mapping[str, int] = field(default_factory=_empty)
    #: A cardinal grammar (units, tens, scales read together: "two hundred and five").
    units: Mapping[str, int] = field(default_factory=_empty)
    tens: Mapping[str, int] = field(default_factory=_empty)
    scales: Mapping[str, int] = field(default_factory=_empty)
    ordinals: Mapping[str, int] = field(default_factory=_empty)
    #: Repetitions ("twice": 2, read "2x").
    repeats: Mapping[str, int] = field(default_factory=_empty)
    #: Inexact quantities, each equal only to itself ("dozens").
    inexact: frozenset[str] = frozenset()
    #: Numerals of a script without spaces ("三": 3) and their scales ("十": 10), read
    #: before a counter (measure word) or after the ordinal prefix.
    numerals: Mapping[str, int] = field(default_factory=_empty)
    numeral_scales: Mapping[str, int] = field(default_factory=_empty)
    counters: str = ""
    ordinal_prefix: str = ""

    # Single-valued attributes of a person
    #: Cues of each attribute a later truth may change ("home": "lives in", "moved to"), by a
    #: name shared by every pack; a cue matches whole words, and a cue ending in "*" may end
    #: inside a word ("allerg*" matches "allergic"); in a script without spaces, anywhere.
    #: Phase 1 offers a user's truths of one attribute to the judge together
    #: (``text.attributes_of``, ``services/pipeline/attributes.py``).
    attributes: Mapping[str, tuple[str, ...]] = field(default_factory=_no_attributes)

    # Word order
    #: Words that may start a moved phrase: prepositions, and words of time or frequency.
    prepositions: frozenset[str] = frozenset()
    time_words: frozenset[str] = frozenset()
    #: Words whose meaning depends on where they stand ("only", "not").
    scope_words: frozenset[str] = frozenset()
    #: Words that join the items of a list ("and", "or"): items in another order say the same.
    conjunctions: frozenset[str] = frozenset()
    #: Singular copulas of an equative ("is"), and the words that start a definite or an
    #: indefinite side of one ("my", "the" / "a", "some").
    copulas: frozenset[str] = frozenset()
    definite: frozenset[str] = frozenset()
    indefinite: frozenset[str] = frozenset()

    def word_lists(self) -> dict[str, frozenset[str] | tuple[str, ...]]:
        """Each field that holds words or phrases, by name: for checks of a pack."""
        return {
            name: value
            for name, value in vars(self).items()
            if isinstance(value, (frozenset, tuple)) and all(isinstance(v, str) for v in value)
        }
