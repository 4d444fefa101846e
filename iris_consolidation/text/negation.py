"""Polarity: negation words, negative verbs ("hates", "can't stand") and the negation
markers of scripts without spaces ("不", "ない"), counted so that two negative statements
of one dislike agree ("Hates jazz" / "Does not like jazz"); and the negations a merge
loses or invents.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from .languages import LEXICON
from .normalising import no_space_runs, normalise, tokens
from .rewordings import covered_by

#: Negation markers and negative verbs of scripts without spaces.
_NO_SPACE_NEGATIVE = (*LEXICON.no_space_negations, *LEXICON.no_space_negative_verbs)


def negations(text: str) -> set[str]:
    """Negation words and negative verbs in the normalised text ("not", "never", "hates")."""
    return set(tokens(text)) & (LEXICON.negations | LEXICON.negative_verbs)


def positive_idioms(text: str) -> str:
    """The normalised ``text``, space-padded, with each ``LEXICON.positive_idioms`` phrase read
    as its plain words: "I can't wait to go." -> " i eager to go "."""
    haystack = f" {normalise(text)} "
    for phrase, plain in LEXICON.positive_idioms:
        haystack = haystack.replace(f" {phrase} ", f" {plain} ")
    return haystack


def polarity_words(text: str) -> list[str]:
    """The negations of ``text``, in order, a negative phrase as one ("can not stand"),
    without those that say a state ended ("no longer", "not ... anymore") or that belong
    to a positive idiom ("can not wait to", ``LEXICON.positive_idioms``)."""
    haystack = positive_idioms(text)
    for phrase in LEXICON.ended_negations:
        haystack = haystack.replace(f" {phrase} ", " ")
    for phrase in LEXICON.negative_phrases:
        haystack = haystack.replace(f" {phrase} ", " hates ")
    words = haystack.split()
    if "anymore" in words or "any more" in haystack:
        for i, word in enumerate(words):
            if word in ("not", "never"):
                del words[i]  # "does not smoke anymore": the state ended
                break
    found = [w for w in words if w in LEXICON.negations or w in LEXICON.negative_verbs]
    for marker_words, letters, not_negations in LEXICON.not_negations:
        if not_negations.intersection(found) and _marked(words, marker_words, letters):
            found = [w for w in found if w not in not_negations]  # Portuguese "no" is "in the"
    for run in no_space_runs(text):
        for marker in LEXICON.no_space_time_ended:
            run = run.replace(marker, " ")  # 不再 ("no longer"): the state ended
        for verb in LEXICON.no_space_negative_verbs:
            found.extend(["hates"] * run.count(verb))
            run = run.replace(verb, " ")
        for negation in LEXICON.no_space_negations:
            found.extend(["not"] * run.count(negation))
            run = run.replace(negation, " ")
    return found


_SENTENCE = re.compile(r"[.;!?\n。；！？]+")


def sentence_polarity_keys(text: str) -> set[tuple[bool, bool]]:
    """``polarity_key`` of each sentence of ``text`` (split at . ; ! ? and newlines), so
    that two joined negative statements ("Hates jazz; Does not like jazz") stay negative."""
    return {polarity_key(part) for part in _SENTENCE.split(text) if part.strip()} or {polarity_key("")}


def _marked(words: list[str], marker_words: frozenset[str], letters: str) -> bool:
    """Whether ``words`` hold a marker word or letter of one language (``Language.marker_words``)."""
    return bool(marker_words.intersection(words)) or any(c in letters for w in words for c in w)


def polarity(text: str) -> bool:
    """True when the statement is negated an odd number of times, a negative verb
    ("hates", "dislikes", "can't stand", "avoids") counting as one negation."""
    return len(polarity_words(text)) % 2 == 1


def polarity_key(text: str) -> tuple[bool, bool]:
    """(``polarity``, whether a negative verb is itself negated): "Does not hate jazz"
    is even but no "Likes jazz", so the two keys differ; "Hates jazz" and "Doesn't like
    jazz" share (True, False)."""
    words = polarity_words(text)
    negated_verb = any(w in LEXICON.negative_verbs for w in words) and any(w in LEXICON.negations for w in words)
    return len(words) % 2 == 1, negated_verb


def lost_negations(member: str, content: str, *, covered: Iterable[str] = ()) -> list[str]:
    """Negations of ``member`` that ``content`` drops, in order: a negation word or
    negative verb (or a negation marker of a script without spaces, "不", "ない") kept
    neither as the same word, nor inside a phrase the judge states as a synonym of words
    the content keeps (``covered``, from ``stated_cover``), nor by a sentence of ``content``
    of the member's polarity ("Hates jazz" keeps "Does not like jazz"). Empty when
    nothing is lost."""
    words = polarity_words(member)
    if not words or polarity_key(member) in sentence_polarity_keys(content):
        return []
    phrases = list(covered)
    said = {w for w in words if covered_by(w, phrases)}
    have = set(polarity_words(content)) | set(tokens(content))
    markers = [m for run in no_space_runs(member) for m in _NO_SPACE_NEGATIVE if m in run]
    content_runs = "\n".join(no_space_runs(content))
    lost = [w for w in dict.fromkeys(words) if w not in have and w not in said]
    if markers and any(w in ("not", "hates") for w in lost):
        lost = [w for w in lost if w not in ("not", "hates") or w in tokens(member)]
        lost += [m for m in dict.fromkeys(markers) if m not in content_runs and not covered_by(m, phrases)]
    return lost


def invented_negations(content: str, members: Iterable[str], *, covered: Iterable[str] = ()) -> list[str]:
    """Negations of ``content`` that no member states (words, negative verbs, markers
    of scripts without spaces), in order, unless a stated synonym covers them
    (``covered``, from ``stated_cover``)."""
    members = list(members)
    said = set().union(*(set(polarity_words(m)) | negations(m) for m in members)) if members else set()
    member_runs = "\n".join(r for m in members for r in no_space_runs(m))
    phrases = list(covered)
    found = [w for w in dict.fromkeys(negations(content)) if w not in said]
    found += [m for run in no_space_runs(content) for m in _NO_SPACE_NEGATIVE if m in run and m not in member_runs]
    return [w for w in dict.fromkeys(found) if not covered_by(w, phrases)]
