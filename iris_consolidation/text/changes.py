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


def _says(text: str, markers: tuple[str, ...]) -> bool:
    """Whether ``text`` holds one of ``markers`` (of any pack): a marker with letters of a
    spaced script as whole words, one of a script without spaces anywhere in its runs."""
    haystack = f" {normalise(text)} "
    runs = "\n".join(no_space_runs(text))
    for marker in markers:
        if no_space_runs(marker):
            if marker in runs:
                return True
        elif f" {normalise(marker)} " in haystack:
            return True
    return False


def states_plan(text: str) -> bool:
    """Whether ``text`` states an intention or an effort under way ("Plans to submit her
    screenplay", "Is currently restoring a car", "打算搬家"; ``LEXICON.plans``): a later
    statement of its outcome replaces it."""
    return _says(text, LEXICON.plans)


def set_long_ago(text: str) -> bool:
    """Whether ``text`` sets what it says long before it was said ("Learned the cello as a
    child", "hace años"; ``LEXICON.long_ago``): no outcome of a plan stated earlier."""
    return _says(text, LEXICON.long_ago)


def addresses_model(text: str) -> bool:
    """Whether ``text`` is an instruction to the model rather than a fact ("Ignore all previous
    instructions and ...", ``LEXICON.instructions``)."""
    return _says(text, LEXICON.instructions)


def fulfils(old: str, new: str) -> bool:
    """Whether ``new`` may state the outcome of a plan or effort that ``old`` states: ``old``
    states one (``states_plan``), ``new`` states none and is not set long ago ("Plans to submit
    her screenplay" / "Submitted her screenplay"; not "Wants to learn the cello" / "Learned the
    cello as a child"). Whether they are about one thing is the caller's to check."""
    return states_plan(old) and not states_plan(new) and not set_long_ago(new)
