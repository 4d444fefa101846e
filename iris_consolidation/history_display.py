"""A truth's history page: its audit rows, lineage events and admin edits as one timeline.

Pure functions over the rows ``selectors.get_truth_history`` loaded: no queries, no URLs,
no HTML.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from .choices import JudgeKind, judge_identity
from .models import LineageEvent, RunId
from .reasoning_display import numbered_reason


@dataclass(frozen=True, kw_only=True)
class HistoryRow:
    """One line of a truth's history: when, what happened, who, why, and links."""

    at: datetime
    what: str
    actor: str
    reason: str
    other_id: int | None = None
    review_id: int | None = None
    run_id: RunId | None = None


_OUT_WORDS = {
    LineageEvent.Action.MERGE: "Merged into #{other}",
    LineageEvent.Action.SUPERSEDE: "Superseded by #{other}",
}
_IN_WORDS = {
    LineageEvent.Action.MERGE: "Made by merging #{other}",
    LineageEvent.Action.SUPERSEDE: "Supersedes #{other}",
}
_EDIT_WORDS = {1: "Added in the admin", 2: "Edited in the admin", 3: "Deleted in the admin"}


def actor_words(actor: str) -> str:
    """Who did it, for people: ``llm:openai/x`` -> "the model openai/x (judge)",
    ``rules`` -> "the rule judge", ``hygiene:prune`` -> "the prune stage", ``import``
    -> "an import"; a person's username stays as it is."""
    kind, model = judge_identity(actor)
    if kind == JudgeKind.LLM:
        return f"the model {model} (judge)"
    if kind == JudgeKind.RULES or actor == "rule":
        return "the rule judge"
    if actor.startswith("hygiene:"):
        return f"the {actor.removeprefix('hygiene:')} stage"
    if actor == "import":
        return "an import"
    return actor


def history_rows(history: Any) -> list[HistoryRow]:
    """The ``selectors.TruthHistory`` of a truth as one timeline, newest first.

    Audit rows say what happened to the truth itself; lineage events say which truth
    it was merged into or made from (the audit's "retired" row and the merge event
    describe one step, so both are shown: one says when, the other with what).
    """
    pk = history.truth.pk
    rows: list[HistoryRow] = []
    for change in history.changes:
        rows.append(
            HistoryRow(
                at=change.created_at,
                what=change.get_action_display(),
                actor=actor_words(change.actor),
                reason=numbered_reason(change),
                review_id=change.review_id,
                run_id=change.run_id,
            )
        )
    for event in history.events:
        if event.action == LineageEvent.Action.UNDO:
            what = f"Undo: #{event.source_id} restored from #{event.result_id}"
            other = event.source_id if event.result_id == pk else event.result_id
        elif event.source_id == pk:
            what = _OUT_WORDS[event.action].format(other=event.result_id)
            other = event.result_id
        else:
            what = _IN_WORDS[event.action].format(other=event.source_id)
            other = event.source_id
        rows.append(
            HistoryRow(
                at=event.created_at,
                what=what,
                actor=actor_words(event.actor),
                reason=numbered_reason(event),
                other_id=other,
                review_id=event.review_id,
                run_id=event.review.run_id if event.review is not None else None,
            )
        )
    for entry in history.edits:
        rows.append(
            HistoryRow(
                at=entry.action_time,
                what=_EDIT_WORDS.get(entry.action_flag, "Changed in the admin"),
                actor=entry.user.get_username() if entry.user_id else "",
                reason=entry.get_change_message(),
            )
        )
    rows.sort(key=lambda r: r.at, reverse=True)
    return rows
