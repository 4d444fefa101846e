"""Change and time: words that say a state changed ("now", "moved", "agora", "现在") or
ended ("until", "used to", "já não", "不再"), from ``Language.reported_changes``,
``change_events`` and ``time_ended``.
"""

from __future__ import annotations

from .languages import LEXICON
from .normalising import no_space_runs, normalise


def _has_marker(text: str, words: tuple[str, ...], no_space: tuple[str, ...]) -> bool:
    haystack = f" {normalise(text)} "
    runs = "\n".join(no_space_runs(text))
    return any(f" {m} " in haystack for m in words) or any(m in runs for m in no_space)


def reports_change(text: str) -> bool:
    """Whether ``text`` reports a change against an earlier state ("now", "moved",
    "left", "used to", "quit", ``LEXICON.reported_changes``): such a member is superseded
    or kept, never merged away."""
    return time_ended(text) or _has_marker(text, LEXICON.reported_changes, LEXICON.no_space_change_markers)


def states_change(text: str) -> bool:
    """Whether ``text`` says a state changed ("Moved to Berlin", "no longer", "now",
    "agora", "现在", "引っ越した")."""
    return _has_marker(text, LEXICON.change_markers, LEXICON.no_space_change_markers)


def time_ended(text: str) -> bool:
    """Whether ``text`` says its state has ended ("until 2023", "used to", "no longer",
    "já não", "不再")."""
    return _has_marker(text, LEXICON.time_ended, LEXICON.no_space_time_ended)


def change_marker(text: str) -> str:
    """The first word of ``text`` that says its state ended or changed ("until", "moved",
    "现在"), or "" when none does: what a refusal quotes."""
    haystack = f" {normalise(text)} "
    markers = (*LEXICON.time_ended, *LEXICON.reported_changes)
    runs = "\n".join(no_space_runs(text))
    found = next((m for m in markers if f" {m} " in haystack), "")
    return found or next((m for m in LEXICON.no_space_change_markers if m in runs), "")


def ended_marker(text: str) -> str:
    """The first word of ``text`` that says its state ended ("until", "used to", "不再"),
    or "" when none does."""
    haystack = f" {normalise(text)} "
    runs = "\n".join(no_space_runs(text))
    found = next((m for m in LEXICON.time_ended if f" {m} " in haystack), "")
    return found or next((m for m in LEXICON.no_space_time_ended if m in runs), "")
