"""Turns runs and cluster reviews into template-ready rows for the run and review pages.

The companion of ``lineage_display`` (which draws lineages): pure functions over rows
already loaded, no queries, no URLs, no HTML.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from .lineage_display import UndoNote, undo_note
from .models import ClusterReview, ConsolidationRun, LineageEvent


@dataclass(frozen=True, kw_only=True)
class MemberRow:
    """A cluster member as the judge saw it."""

    alias: str
    id: int
    text: str
    generation: int
    protected: bool
    similarity: float | None


@dataclass(frozen=True, kw_only=True)
class DecisionRow:
    """One proposed action in words, with the result it made (if applied)."""

    summary: str
    content: str
    reason: str
    result_id: int | None
    status: str


@dataclass(frozen=True, kw_only=True)
class ReviewCard:
    """One cluster review as the run page shows it."""

    id: int
    user: str
    user_id: int
    outcome: str
    outcome_label: str
    is_preview: bool
    applied: bool
    members: tuple[MemberRow, ...]
    decisions: tuple[DecisionRow, ...]
    reasoning: str
    proposed_content: str
    why_not: tuple[str, ...]
    error: str
    judge: str
    model: str
    prompt_version: str
    tokens: int
    latency_ms: int
    cost: float
    attempts: int
    result_ids: tuple[int, ...]
    undone: tuple[UndoNote, ...]
    created_at: datetime

    @property
    def undoable(self) -> bool:
        return self.applied and bool(self.result_ids) and not self.undone


def _describe(action: dict[str, Any], names: dict[str, str]) -> str:
    def name(alias: str) -> str:
        return f"{alias} ({names[alias]})" if alias in names else alias

    if action.get("action") == "merge":
        return "Merge " + " + ".join(name(a) for a in action.get("ids", []))
    old = ", ".join(name(a) for a in action.get("old", []))
    return f"Supersede {old} by {name(str(action.get('new', '')))}"


def review_card(review: ClusterReview, *, undo_events: Sequence[LineageEvent] = ()) -> ReviewCard:
    """One ``ReviewCard`` from a review (and the undo events that reversed it)."""
    snapshot = list(review.snapshot or [])
    names = {row["alias"]: f"#{row['id']}" for row in snapshot}
    similarities = review.similarities or {}
    members = tuple(
        MemberRow(
            alias=row["alias"],
            id=int(row["id"]),
            text=str(row["content"]),
            generation=int(row.get("generation", 0)),
            protected=bool(row.get("protected", False)),
            similarity=similarities.get(row["alias"]),
        )
        for row in snapshot
    )
    applied_by_key = {_action_key(a): a for a in review.applied_actions or []}
    rejected_by_key = {_action_key(r["action"]): r["reason"] for r in review.rejections or []}
    decisions = []
    for action in review.actions or []:
        key = _action_key(action)
        done = applied_by_key.get(key)
        if done is not None:
            status = "would apply (preview)" if review.outcome == ClusterReview.Outcome.PREVIEW else "applied"
        elif key in rejected_by_key:
            status = f"not applied: {rejected_by_key[key]}"
        else:
            status = "not applied"
        decisions.append(
            DecisionRow(
                summary=_describe(action, names),
                content=str(action.get("content", "")),
                reason=str(action.get("reason", "")),
                result_id=int(done["result_id"]) if done and "result_id" in done else None,
                status=status,
            )
        )
    why_not: list[str] = []
    if not review.applied:
        why_not = [str(r["reason"]) for r in review.rejections or []]
        if review.error:
            why_not.append(review.error)
        if review.outcome == ClusterReview.Outcome.STALE and not review.rejections and review.skip_reason:
            why_not.append(review.skip_reason)  # not judged: the cluster changed first
        if review.outcome == ClusterReview.Outcome.KEPT:
            why_not.append("The judge proposed no change: every member is kept.")
        if review.outcome == ClusterReview.Outcome.PREVIEW:
            why_not.insert(0, "Dry run: previewed only, nothing was written.")
    return ReviewCard(
        id=review.pk,
        user=str(review.user) if review.user_id else "",
        user_id=review.user_id,
        outcome=review.outcome,
        outcome_label=review.get_outcome_display(),
        is_preview=review.outcome == ClusterReview.Outcome.PREVIEW,
        applied=review.applied,
        members=members,
        decisions=tuple(decisions),
        reasoning=review.reasoning,
        proposed_content=review.proposed_content,
        why_not=tuple(why_not),
        error=review.error,
        judge=review.judge,
        model=review.model,
        prompt_version=review.prompt_version,
        tokens=review.tokens,
        latency_ms=review.latency_ms,
        cost=review.cost,
        attempts=review.attempts,
        result_ids=tuple(sorted({int(a["result_id"]) for a in review.applied_actions or [] if "result_id" in a})),
        undone=tuple(n for e in undo_events if (n := undo_note(e, other_id=e.result_id))),
        created_at=review.created_at,
    )


def _action_key(action: dict[str, Any]) -> tuple[Any, ...]:
    return (
        action.get("action"),
        tuple(action.get("ids", ())),
        tuple(action.get("old", ())),
        action.get("new", ""),
        action.get("content", ""),
    )


def review_cards(reviews: Iterable[ClusterReview]) -> list[ReviewCard]:
    """``review_card`` for each review; uses the ``undo_events`` that
    ``selectors.list_run_reviews`` prefetches."""
    return [review_card(r, undo_events=getattr(r, "undo_events", ())) for r in reviews]


@dataclass(frozen=True, kw_only=True)
class RunProgress:
    """How far a run is: users planned and clusters reviewed, in counts and percent."""

    in_progress: bool
    users_done: int
    users: int
    clusters_done: int
    clusters_found: int
    percent: int
    #: Truths embedded so far (counted batch by batch) and, per user whose phase 1 goes
    #: on across deliveries, how far it got.
    embedded: int = 0
    phase1: tuple[tuple[int, str], ...] = ()


def run_progress(run: ConsolidationRun) -> RunProgress:
    """Progress of ``run``; ``percent`` weighs planning users and reviewing clusters
    alike, and is 100 once the run has finished."""
    in_progress = run.status in (ConsolidationRun.Status.PENDING, ConsolidationRun.Status.RUNNING)
    total = run.users + run.clusters_found
    done = run.users_done + run.clusters_done
    percent = 100 if not in_progress else (int(100 * done / total) if total else 0)
    phase1: tuple[tuple[int, str], ...] = ()
    if in_progress:
        from .services.queue.jobs import phase1_progress

        phase1 = tuple(phase1_progress(run.pk))
    return RunProgress(
        embedded=run.embedded,
        phase1=phase1,
        in_progress=in_progress,
        users_done=run.users_done,
        users=run.users,
        clusters_done=run.clusters_done,
        clusters_found=run.clusters_found,
        percent=min(percent, 100),
    )
