"""Pure text rules shared by the rule judge and the validator, for truths in any of the
registered languages (``languages.PACKS``: English, Portuguese, Spanish, French, German,
Italian, Chinese, Japanese, Thai), and texts that mix them.

They pull out of a truth's text what a merge must never lose: numbers (by value:
"3" = "three" = "três" = "三只"), dates, proper names and negations; they normalise text
so that two spellings of one statement compare equal; and they reduce a truth to its
content stems, so that the validator can tell "the same frame with one thing swapped"
(``contrast``: "Is allergic to peanuts" / "Is allergic to shellfish") from a rewording,
and can spot words that no source stated. Scripts without spaces (Chinese, Japanese,
Thai) are compared by character cover (``uncovered``). A conservative approximation by
design: when in doubt a detail counts as present in a source, so the validator refuses.

Modules, by concern: ``normalising`` (tokens, runs of scripts without spaces),
``quantities`` (numbers by value), ``names`` (names, dates, details), ``stems`` (content stems),
``rewordings`` (everyday and stated synonyms), ``negation`` (polarity), ``changes`` (changed and
ended states), ``content`` (lost words, contrast, one frame filled twice) and
``wordorder`` (when a change of word order carries no role), and ``patterns`` (the strings a
regular expression's every match holds, for scans that skip a pattern). The words they read come
from the language packs in ``languages/``, one module per language; adding a language is
adding a pack (see ``languages/__init__.py``). Pure; no database.
"""

from __future__ import annotations

from .changes import (
    addresses_model,
    change_marker,
    ended_marker,
    fulfils,
    reports_change,
    set_long_ago,
    states_change,
    states_plan,
    time_ended,
)
from .content import contrast, lost_words, parallel, reordered, share_frame, shares_only_details
from .names import contains_detail, dates, details, known_names, names_not_dates, proper_names
from .negation import invented_negations, lost_negations, negations, polarity, polarity_key
from .normalising import no_space_runs, normalise, share_script_text, tokens, tokens_of_each, uncovered
from .quantities import is_number, numbers, values
from .rewordings import covered_by, equivalences, stated_between, stated_cover, vouched
from .stems import content_stems, has_phrase, same_stem, stem, unstated_stems, words_of_stems
from .wordorder import list_reordered, moved_phrase, side_by_side

__all__ = [
    "addresses_model",
    "fulfils",
    "set_long_ago",
    "states_plan",
    "change_marker",
    "contains_detail",
    "content_stems",
    "contrast",
    "covered_by",
    "dates",
    "details",
    "ended_marker",
    "equivalences",
    "has_phrase",
    "invented_negations",
    "is_number",
    "known_names",
    "lost_negations",
    "list_reordered",
    "lost_words",
    "moved_phrase",
    "names_not_dates",
    "negations",
    "no_space_runs",
    "normalise",
    "numbers",
    "parallel",
    "polarity",
    "polarity_key",
    "proper_names",
    "reordered",
    "reports_change",
    "same_stem",
    "share_script_text",
    "share_frame",
    "shares_only_details",
    "side_by_side",
    "stated_between",
    "stated_cover",
    "stem",
    "states_change",
    "time_ended",
    "tokens",
    "tokens_of_each",
    "uncovered",
    "unstated_stems",
    "values",
    "vouched",
    "words_of_stems",
]
