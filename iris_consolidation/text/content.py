"""Lost words and contrast: what a member says that a merged text drops, and when two
statements are one frame with a slot swapped ("Is allergic to peanuts" / "Is allergic
to shellfish") rather than a rewording.

Words that only frame a statement (negations, negative verbs, "used to", "no longer",
"quit": ``Language.frame_words`` and ``frame_phrases``) are carried by the polarity and
time-span checks and are not content words. A conservative approximation by design:
when in doubt a word counts as lost, so the validator refuses.
"""

from __future__ import annotations

import difflib

from .languages import LEXICON
from .names import contains_detail, details, name_candidates, singular
from .negation import polarity, positive_idioms
from .normalising import NO_SPACE_RUN, no_space_runs, normalise, significant, tokens, uncovered
from .quantities import strip_cjk
from .rewordings import equivalences, equivalent_in, kept
from .stems import STEMMER, content_stems, missing, same_stem, stem

#: Markers of scripts without spaces that only frame a statement (ended, changed, negated).
_NO_SPACE_FRAME = (
    *LEXICON.no_space_time_ended,
    *LEXICON.no_space_change_markers,
    *LEXICON.no_space_negative_verbs,
    *LEXICON.no_space_negations,
)


def _frame_free(text: str) -> str:
    """The normalised ``text`` without its frame phrases and words (``LEXICON.frame_words``, and
    the markers of scripts without spaces), its numbers in Chinese or Japanese numerals
    (compared by value), and, when negated, its preference words ("Does not like jazz"
    says what "Hates jazz" says)."""
    negated = polarity(text)
    haystack = f" {normalise(strip_cjk(text))} "
    for phrase in (*LEXICON.frame_phrases, *LEXICON.job_frames):
        haystack = haystack.replace(f" {phrase} ", " ")
    for marker in _NO_SPACE_FRAME:
        haystack = haystack.replace(marker, " ")
    if negated:
        for word in LEXICON.no_space_preference:
            haystack = haystack.replace(word, " ")
    return " ".join(w for w in haystack.split() if w not in LEXICON.frame_words and not (negated and stem(w) == "like"))


def lost_words(member: str, content: str, *, reason: str = "", known: frozenset[str] = frozenset()) -> list[str]:
    """Content words of ``member`` that ``content`` drops, sorted.

    A word is kept when ``content`` has a word of its family (``same_stem``), another
    word of its ``LEXICON.synonym_groups`` group, the other side of a ``LEXICON.phrase_equivalences``
    phrase of ``member`` that holds it, or the ``reason`` states it as a synonym of
    words ``content`` has (``equivalences``). Not counted: stop words, details (checked
    one by one by the validator), frame words (``LEXICON.frame_words``: carried by polarity and
    time span), and a preference word in a negated statement ("Does not like jazz" is
    kept by "Hates jazz"). Runs of a script without spaces count by the pieces
    ``content`` does not hold (``uncovered``).
    """
    frame_free = _frame_free(member)
    stems = content_stems(frame_free, exclude=details(member, known=known) | LEXICON.light_verbs)
    have = content_stems(content) | {stem(t) for t in tokens(content)} | {STEMMER.stemWord(t) for t in tokens(content)}
    for group in LEXICON.synonym_groups:
        if group & have:
            have |= group
    restated = equivalent_in(member, content)
    for phrase in restated:
        have |= content_stems(phrase)
    lost = missing(stems, have)
    haystack = normalise(content)
    unsaid = frame_free
    for phrase in restated:
        if no_space_runs(phrase):
            unsaid = unsaid.replace(normalise(phrase), " ")  # its content says it the other way
    pieces = [p for run in no_space_runs(unsaid) for p in uncovered(run, haystack)]
    pairs = equivalences(reason)

    def stated(word: str, *, piece: bool) -> bool:
        for a, b in (*pairs, *((b, a) for a, b in pairs)):
            said = a in word or word in normalise(a) if piece else any(same_stem(word, x) for x in content_stems(a))
            if said and kept(b, content, have):
                return True
        return False

    return sorted({w for w in lost if not stated(w, piece=False)} | {p for p in pieces if not stated(p, piece=True)})


def shares_only_details(a: str, b: str, *, reason: str = "", known: frozenset[str] = frozenset()) -> set[str]:
    """The details (names, numbers, dates) ``a`` and ``b`` share when that is all they
    share: each says something of its own and neither keeps any content word of the
    other (by ``lost_words``: families, synonyms, rewordings, or synonyms the ``reason``
    states). Empty otherwise.

    Two facts about one named thing ("Works as an accountant at Birch & Co" / "Organises
    the Birch & Co office softball team"): the shared name pulls them into one
    cluster, and nothing else says they are one fact.
    """
    # A capitalised first word of both texts is a name too ("Birch & Coで会計士...").
    initial = [{w.lower() for w, first in name_candidates(t) if first} for t in (a, b)]
    known = known | (initial[0] & initial[1])
    shared = {d for d in details(a, known=known) if contains_detail(b, d)}
    if not shared:
        return set()
    for x, y in ((a, b), (b, a)):
        own = _units(lost_words(x, "", known=known))
        if not own or own - _units(lost_words(x, y, reason=reason, known=known)):
            return set()
    return shared


def _units(words: list[str]) -> set[str]:
    """``lost_words`` output as comparable units: stems, and the content characters of
    pieces of a script without spaces (how pieces are grouped depends on the other text)."""
    units: set[str] = set()
    for word in words:
        if NO_SPACE_RUN.search(word):
            units |= {c for c in word if significant(c)}
        else:
            units.add(word)
    return units


def contrast(a: str, b: str, *, known: frozenset[str] = frozenset()) -> tuple[set[str], set[str]] | None:
    """The swapped words if ``a`` and ``b`` share a frame with a slot changed, else None.

    Over content stems other than details: both have words of their own, and they
    share at least as many words as either has alone ("Owns a red bicycle" / "Owns a
    red car": shared {red}, swapped {bicycl} / {car}). Rewordings share less than they
    change ("Has a son named Tomas" / "Is the father of a boy called Tomas"). Stems of
    one ``LEXICON.contrast_frames`` group count as one word ("work" / "job").
    """
    stems_a = _one_frame(content_stems(_frame_free(positive_idioms(a)), exclude=details(a, known=known)))
    stems_b = _one_frame(content_stems(_frame_free(positive_idioms(b)), exclude=details(b, known=known)))
    only_a, only_b = missing(stems_a, stems_b), missing(stems_b, stems_a)
    shared = stems_a - only_a
    # A rewording ("before noon" / "morning") is no swapped slot.
    only_a -= {s for x in equivalent_in(a, b) for s in content_stems(x)}
    only_b -= {s for x in equivalent_in(b, a) for s in content_stems(x)}
    # One slot swapped: a word or two on each side of a short statement. Long statements
    # that share a topic differ in several words at once: rewordings, not a swapped slot.
    one_slot = max(len(only_a), len(only_b)) <= CONTRAST_SLOT_WORDS
    short = max(len(stems_a), len(stems_b)) <= CONTRAST_STATEMENT_WORDS
    if only_a and only_b and shared and one_slot and short and len(shared) >= max(len(only_a), len(only_b)):
        return only_a, only_b
    return None


#: Most content words on either side of a contrast (a swapped slot): "a red bicycle" /
#: "a red car" swap one; "considering counseling to help trans people accept themselves"
#: / "... to help others" reword a clause (LoCoMo's merges: 33 of 73 flagged at any size).
CONTRAST_SLOT_WORDS = 2


#: Most content words of a statement with a swapped slot: a short fact ("Drinks coffee
#: with oat milk": 4). Two longer statements that share all but a word or two are, as
#: measured on the recorded replies of a real model (LoCoMo: 7 of its 73 actions), two
#: wordings of one observation ("finds it rewarding" / "finds it fulfilling").
CONTRAST_STATEMENT_WORDS = 4


def _frame_words(text: str) -> list[str]:
    """The words of ``text`` as stems, articles left out, for ``parallel``."""
    return [stem(singular(w)) if w not in LEXICON.stopwords else w for w in tokens(text) if w not in LEXICON.articles]


def parallel(a: str, b: str, *, known: frozenset[str] = frozenset()) -> tuple[set[str], set[str]] | None:
    """The words of each side if ``a`` and ``b`` are one frame filled twice, else None.

    Shared syntax makes two different statements look alike ("Chose a
    standing desk over a treadmill desk for the home office" / "Chose an e-reader over
    paper books for travelling": both "chose _ over _ for _"). Aligned word by word
    (``difflib``, articles left out), the two start with the same words and keep the
    same words in the same order, among them a content word other than a preference
    ("likes": the commonest frame of all), and differ only in two slots or more, each
    filled on both sides with content words: a list of different choices. A rewording
    moves, adds or drops words. ``contrast`` finds the frames with one slot changed.
    """
    words_a, words_b = _frame_words(a), _frame_words(b)
    slots_a: set[str] = set()
    slots_b: set[str] = set()
    slots = 0
    frame_has_content = False
    opcodes = difflib.SequenceMatcher(a=words_a, b=words_b, autojunk=False).get_opcodes()
    if not opcodes or opcodes[0][0] != "equal":
        return None  # the frame starts the statement: its verb ("chose", "picked")
    for tag, i1, i2, j1, j2 in opcodes:
        if tag == "equal":
            glue = LEXICON.stopwords | LEXICON.light_verbs
            frame_has_content |= any(w not in glue and w != "like" for w in words_a[i1:i2])
            continue
        if tag != "replace":
            return None
        fill_a = {w for w in words_a[i1:i2] if w not in LEXICON.stopwords}
        fill_b = {w for w in words_b[j1:j2] if w not in LEXICON.stopwords}
        if not fill_a or not fill_b:
            return None
        if max(len(fill_a), len(fill_b)) > CONTRAST_SLOT_WORDS:
            return None  # a clause reworded, not a slot filled with another choice
        if equivalent_in(" ".join(words_a[i1:i2]), " ".join(words_b[j1:j2])):
            continue  # a rewording of the same filler ("jogging" / "running")
        slots += 1
        slots_a |= fill_a
        slots_b |= fill_b
    if slots < 2 or not frame_has_content:
        return None
    # One frame filled twice has more filler than frame ("chose _ over _ for _"); two
    # statements that share most of their words and differ in a few are rewordings.
    frame = {w for tag, i1, i2, _, _ in opcodes if tag == "equal" for w in words_a[i1:i2] if w not in LEXICON.stopwords}
    if len(frame) >= min(len(slots_a), len(slots_b)):
        return None
    return slots_a, slots_b


def share_frame(a: str, b: str) -> bool:
    """Whether ``a`` and ``b`` each have a stem of one ``LEXICON.contrast_frames`` group ("Lives in
    Lisbon" / "Moved to Berlin": where one lives; "Works as a nurse" / "Changed jobs")."""
    stems_a, stems_b = content_stems(a), content_stems(b)
    return any(
        any(same_stem(x, g) for x in stems_a for g in group) and any(same_stem(y, g) for y in stems_b for g in group)
        for group in LEXICON.contrast_frames
    )


def _one_frame(stems: set[str]) -> set[str]:
    """``stems`` with each ``LEXICON.contrast_frames`` stem replaced by its group's first one
    in sorted order ("work" and "job" both read "career")."""
    for group in LEXICON.contrast_frames:
        if stems & group:
            stems = (stems - group) | {min(group)}
    return stems


def reordered(a: str, b: str) -> bool:
    """Whether ``a`` and ``b`` use the same words with content words in another order
    ("Works as an accountant at Birch" / "Birch as an accountant at Works")."""
    words_a, words_b = tokens(a), tokens(b)
    if sorted(words_a) != sorted(words_b):
        return False
    return [w for w in words_a if w not in LEXICON.stopwords] != [w for w in words_b if w not in LEXICON.stopwords]
