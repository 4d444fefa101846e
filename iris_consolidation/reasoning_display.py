"""The judge's and the records' words as operators read them (shared by the presenters).

Truth numbers for a call's aliases, a review's reasoning split into the pre-pass's part and
the judge's, undo notes, a record's reason, one applied action in a line. Pure functions
over rows already loaded: no queries, no URLs, no HTML.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from .llm.base import ALIAS, truth_names, with_truth_numbers  # noqa: F401  (the presenters' names for them)
from .models import LineageEvent
from .services.pipeline.judging import PREPASS_REASONING

# --- the judge's words in the operator's: truth numbers for aliases ---------------------

#: How the pre-pass's part of a review's reasoning begins (``judging.PREPASS_REASONING``).
PREPASS_PREFIX = PREPASS_REASONING.split("{", 1)[0]
PREPASS_LABEL = PREPASS_PREFIX.rstrip(": ")


@dataclass(frozen=True, kw_only=True)
class ReasoningPart:
    """One labelled part of a review's reasoning: the pre-pass's, or the judge's."""

    label: str
    text: str


def reasoning_parts(reasoning: str, *, names: Mapping[str, str], judge_label: str) -> tuple[ReasoningPart, ...]:
    """A review's reasoning split into the pre-pass's lines (labelled "Pre-pass (no
    model call)") and the judge's (labelled ``judge_label``), aliases as truth numbers.

    ``judging`` joins the pre-pass's note and the model's reasoning with a newline; shown
    whole under one label, a model's merge read as the pre-pass's."""
    parts: list[ReasoningPart] = []
    for line in (reasoning or "").splitlines():
        if not line.strip():
            continue
        if line.startswith(PREPASS_PREFIX):
            label, text = PREPASS_LABEL, line.removeprefix(PREPASS_PREFIX)
        else:
            label, text = judge_label, line
        text = with_truth_numbers(text.strip(), names)
        if parts and parts[-1].label == label:
            parts[-1] = ReasoningPart(label=label, text=f"{parts[-1].text} {text}")
        else:
            parts.append(ReasoningPart(label=label, text=text))
    return tuple(parts)


def judge_label(*, judge: str, model: str) -> str:
    """"Model's reasoning (openai/x)" for a model judge, "Rule judge's reasoning" for the
    rule judge, "Judge's reasoning" when unknown."""
    if model and judge != "rules":
        return f"Model's reasoning ({model})"
    if judge == "rules":
        return "Rule judge's reasoning"
    return "Judge's reasoning"


@dataclass(frozen=True, kw_only=True)
class UndoNote:
    """An undo as recorded: who, when, why, and the truth on the other side."""

    actor: str
    reason: str
    created_at: datetime
    other_id: int
    #: Every truth on the other side when one undo restored several (``grouped``).
    other_ids: tuple[int, ...] = ()


def grouped(notes: Iterable[UndoNote]) -> list[UndoNote]:
    """One note per undo (same actor, reason and time), listing all its truths: an undo
    that restored three truths is one sentence, not three."""
    merged: dict[tuple[str, str, datetime], UndoNote] = {}
    for note in notes:
        key = (note.actor, note.reason, note.created_at.replace(microsecond=0))
        first = merged.get(key)
        ids = (*(first.other_ids if first else ()), note.other_id)
        merged[key] = UndoNote(
            actor=note.actor, reason=note.reason, created_at=(first or note).created_at,
            other_id=(first or note).other_id, other_ids=tuple(dict.fromkeys(ids)),
        )
    return list(merged.values())


def undo_note(event: LineageEvent | None, *, other_id: int) -> UndoNote | None:
    """The ``UndoNote`` of an undo event (None for None)."""
    if event is None:
        return None
    return UndoNote(actor=event.actor, reason=event.reason, created_at=event.created_at, other_id=other_id)


def numbered_reason(record: Any) -> str:
    """The ``reason`` of a lineage event or audit row with truth numbers for its review's
    aliases: rows are written so, and rows recorded earlier kept the judge's ``t1``."""
    review = record.review if record.review_id else None
    return with_truth_numbers(record.reason, truth_names(review.snapshot if review is not None else None))


def action_line(
    action: Mapping[str, Any], names: Mapping[str, str], *, snapshot: Sequence[Mapping[str, Any]] | None, dry_run: bool
) -> str:
    """One applied (or, in a dry run, previewed) action of a review, saying which truth
    survives: ``merge #1 + #6 into a new truth: <content>``; ``merge #14 into protected #3
    (kept as is, no new truth): <its text>``; ``supersede #58 by #59 (kept): <its text>``.
    ``names`` maps the call's aliases to truth numbers (``truth_names``); ``snapshot`` is
    the review's members, whose ``protected`` flag names a merge's keeper."""
    rows = {str(row.get("alias")): row for row in snapshot or ()}
    verb = ("would " if dry_run else "") + str(action["action"])
    if action["action"] == "merge":
        members = [str(a) for a in action.get("ids") or ()]
        keeper = next((a for a in members if rows.get(a, {}).get("protected")), None)
        if keeper is not None:
            absorbed = " + ".join(names.get(a, a) for a in members if a != keeper)
            text = rows[keeper].get("content") or action.get("content", "")
            return f"{verb} {absorbed} into protected {names.get(keeper, keeper)} (kept as is, no new truth): {text}"
        return f"{verb} {' + '.join(names.get(a, a) for a in members)} into a new truth: {action.get('content', '')}"
    new = str(action.get("new"))
    old = " + ".join(names.get(str(a), str(a)) for a in action.get("old") or ())
    return f"{verb} {old} by {names.get(new, new)} (kept): {rows.get(new, {}).get('content', '')}"
