"""Pure text functions shared by the rule judge and the validator.

They pull out of a truth's text what a merge must never lose: numbers, dates,
proper names and negations; they normalise text so that two spellings of one
statement compare equal; and they reduce a truth to its content stems (Snowball
English stems of the words that are not function words) so that the validator can
tell "the same frame with one thing swapped" (a contrast: "Is allergic to peanuts" /
"Is allergic to shellfish") from a rewording, and can spot words that no source
stated. English only; a conservative approximation by design: when in doubt a
detail counts as present in a source, so the validator refuses.

Names: a capitalised word inside a sentence is a name unless it is a listed function
word; a sentence's first word is capitalised anyway, so it counts as a name only if
it has a capital inside ("iPhone", "HVRA") or is a name somewhere else in the cluster
(the ``known`` argument, see ``known_names``).
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections.abc import Iterable

import snowballstemmer

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
_RAW_WORD = re.compile(r"[^\W\d_]+(?:['-][^\W\d_]+)*|[.!?;:]", re.UNICODE)
NEGATIONS = frozenset(
    {"not", "no", "never", "none", "nobody", "nothing", "neither", "nor", "without", "dislikes", "hates"}
)
MONTHS = frozenset(
    "january february march april may june july august september october november december "
    "jan feb mar apr jun jul aug sep sept oct nov dec monday tuesday wednesday thursday friday "
    "saturday sunday weekend weekday".split()
)
# Capitalised words that are not names when they start a clause or stand alone.
_NOT_NAMES = frozenset(
    "i the a an he she they we you it his her their my our your this that these those is was "
    "has have had does did do user users likes loves prefers works lives enjoys".split()
)
#: Function words and the glue of truth phrasing ("has", "named", "the user"): they
#: carry no fact of their own, so they are left out of content stems.
STOPWORDS = frozenset(
    """a an the this that these those it its they them their theirs he him his she her hers
    i me my mine we us our you your user users person someone
    is am are was were be been being has have had having do does did doing get gets got
    owns own possesses named called
    and or but so if then than as of at by for from in into on onto to with within about
    over under up down out off through during before after above below between among per
    via near also too very really quite just only still even much many more most some any
    each every all both either one's who whom whose which what when where while why how
    there here can could will would shall should may might must
    s""".split()
)
#: Words of preference, reduced to one stem so that "Likes green best" and "Favourite
#: colour is green" share it.
_PREFERENCE = frozenset(
    "like likes liked love loves loved enjoy enjoys enjoyed prefer prefers preferred "
    "favourite favourites favorite favorites fond".split()
)
#: Words in a newer statement that say the state changed, so an older one may retire
#: in its favour. Phrases are matched on the normalised text.
CHANGE_MARKERS = (
    "now",
    "no longer",
    "anymore",
    "any more",
    "not anymore",
    "instead",
    "moved",
    "moves",
    "switched",
    "replaced",
    "changed",
    "stopped",
    "quit",
    "left",
    "became",
    "becomes",
    "started",
    "new",
    "rescheduled",
    "updated",
    "married",
    "divorced",
    "graduated",
    "retired",
    "sold",
    "gave up",
    "has since",
    "used to",
    "was moved",
    "got rid",
)

#: Words that say a state has ended ("Worked there until 2023", "used to"): such a
#: statement covers another span of time than one without them.
TIME_ENDED = ("until", "till", "formerly", "former", "previously", "used to", "anymore", "any more", "no longer")

_stemmer = snowballstemmer.stemmer("english")


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


def _capitalised(word: str) -> bool:
    return word[0].isupper() or any(c.isupper() for c in word[1:])


def _name_candidates(text: str) -> list[tuple[str, bool]]:
    """Capitalised words of ``text`` with whether each starts a sentence."""
    found: list[tuple[str, bool]] = []
    starts = True
    for match in _RAW_WORD.finditer(_ascii_fold(text)):
        word = match.group(0)
        if word in ".!?;:":
            starts = True
            continue
        if _capitalised(word) and word.lower() not in _NOT_NAMES:
            found.append((word, starts))
        starts = False
    return found


def known_names(texts: Iterable[str]) -> frozenset[str]:
    """Lower-case words that stand as names inside a sentence of one of ``texts``."""
    return frozenset(
        word.lower()
        for text in texts
        for word, initial in _name_candidates(text)
        if not initial or any(c.isupper() for c in word[1:])
    )


def proper_names(text: str, *, known: frozenset[str] = frozenset()) -> list[str]:
    """Names in ``text``, lower-case, in order (see the module docstring).

    Month and weekday names are included: they are dates, which a merge must keep.
    """
    names = []
    for word, initial in _name_candidates(text):
        lower = word.lower()
        if initial and lower not in known and not any(c.isupper() for c in word[1:]):
            continue
        names.append(lower)
    return names


def _singular(word: str) -> str:
    return word[:-1] if word.endswith("s") and word[:-1] in MONTHS else word


def dates(text: str) -> set[str]:
    """Month, weekday and weekend names in ``text`` (lower-case, singular)."""
    return {_singular(t) for t in tokens(text)} & MONTHS


def negations(text: str) -> set[str]:
    """Negation words in the normalised text ("not", "never", "no", ...)."""
    return set(tokens(text)) & NEGATIONS


def polarity(text: str) -> bool:
    """True when the statement is negated an odd number of times."""
    return sum(1 for t in tokens(text) if t in NEGATIONS) % 2 == 1


def details(text: str, *, known: frozenset[str] = frozenset()) -> set[str]:
    """Numbers, dates and proper names of ``text``, lower-case: what a merge must keep."""
    names = {_singular(n) for n in proper_names(text, known=known)}
    return {n.lower() for n in numbers(text)} | dates(text) | names


def contains_detail(text: str, detail: str) -> bool:
    """Whether ``detail`` (from ``details``) stands in ``text`` as a whole word or number."""
    haystack = " " + " ".join(_singular(t) for t in tokens(text)) + " "
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


@functools.lru_cache(maxsize=8192)
def stem(word: str) -> str:
    """The Snowball English stem of a lower-case word; preference words share "like"."""
    if word in _PREFERENCE:
        return "like"
    return _stemmer.stemWord(word)


def same_stem(a: str, b: str) -> bool:
    """Stems of one word family: equal, or one a prefix (>= 5 letters) of the other
    ("allerg" / "allergi", which Snowball leaves apart)."""
    if a == b:
        return True
    short, long_ = sorted((a, b), key=len)
    return len(short) >= 5 and long_.startswith(short)


def content_stems(text: str, *, exclude: Iterable[str] = ()) -> set[str]:
    """Stems of the words of ``text`` that are not stop words, negations or ``exclude``d
    (lower-case words, e.g. the text's details)."""
    skip = set(exclude)
    words = [t.removesuffix("'s") for t in tokens(text)]  # "user's" -> "user"
    return {
        stem(_singular(t))
        for t in words
        if t not in STOPWORDS
        and t not in NEGATIONS
        and _singular(t) not in skip
        and t not in skip
        and not t[0].isdigit()
    }


def _missing(stems: set[str], others: set[str]) -> set[str]:
    return {s for s in stems if not any(same_stem(s, o) for o in others)}


def unstated_stems(text: str, sources: Iterable[str]) -> set[str]:
    """Content stems of ``text`` found in none of ``sources``."""
    stated: set[str] = set()
    for source in sources:
        stated |= content_stems(source)
    return _missing(content_stems(text), stated)


def contrast(a: str, b: str, *, known: frozenset[str] = frozenset()) -> tuple[set[str], set[str]] | None:
    """The swapped words if ``a`` and ``b`` share a frame with a slot changed, else None.

    Over content stems other than details: both have words of their own, and they
    share at least as many words as either has alone ("Owns a red bicycle" / "Owns a
    red car": shared {red}, swapped {bicycl} / {car}). Rewordings share less than they
    change ("Has a son named Tomas" / "Is the father of a boy called Tomas").
    """
    stems_a = content_stems(a, exclude=details(a, known=known))
    stems_b = content_stems(b, exclude=details(b, known=known))
    only_a, only_b = _missing(stems_a, stems_b), _missing(stems_b, stems_a)
    shared = stems_a - only_a
    if only_a and only_b and shared and len(shared) >= max(len(only_a), len(only_b)):
        return only_a, only_b
    return None


def states_change(text: str) -> bool:
    """Whether ``text`` says a state changed ("Moved to Berlin", "no longer", "now")."""
    haystack = f" {normalise(text)} "
    return any(f" {marker} " in haystack for marker in CHANGE_MARKERS)


def time_ended(text: str) -> bool:
    """Whether ``text`` says its state has ended ("until 2023", "used to", "no longer")."""
    haystack = f" {normalise(text)} "
    return any(f" {marker} " in haystack for marker in TIME_ENDED)


def reordered(a: str, b: str) -> bool:
    """Whether ``a`` and ``b`` use the same words with content words in another order
    ("Works as an accountant at Birch" / "Birch as an accountant at Works")."""
    words_a, words_b = tokens(a), tokens(b)
    if sorted(words_a) != sorted(words_b):
        return False
    return [w for w in words_a if w not in STOPWORDS] != [w for w in words_b if w not in STOPWORDS]
