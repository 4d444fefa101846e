"""Turns cluster reviews into template-ready cards for the run and review pages, and a dry
run's previews and its application's refusals into rows.

The companion of ``run_display`` (the run itself) and ``lineage_display`` (lineages): pure
functions over rows already loaded, no queries, no URLs, no HTML.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from .models import ClusterReview, LineageEvent
from .reasoning_display import (
    ReasoningPart,
    UndoNote,
    grouped,
    judge_label,
    reasoning_parts,
    truth_names,
    undo_note,
    with_truth_numbers,
)


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
    #: What the validator's signals noticed (truths by number) and the second look's
    #: reason for confirming, if the action went to one.
    concerns: tuple[str, ...] = ()
    second_look: str = ""


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
    #: Actions the review applied, of those the judge proposed.
    applied_count: int = 0
    action_count: int = 0
    reasoning_parts: tuple[ReasoningPart, ...] = ()

    @property
    def badge(self) -> str:
        """The card's badge: "Partly applied (1 of 2)" when some actions were refused."""
        if self.outcome == ClusterReview.Outcome.APPLIED and 0 < self.applied_count < self.action_count:
            return f"Partly applied ({self.applied_count} of {self.action_count})"
        return self.outcome_label

    @property
    def undoable(self) -> bool:
        return self.applied and bool(self.result_ids) and not self.undone


def _describe(action: dict[str, Any], names: dict[str, str]) -> str:
    def name(alias: str) -> str:
        return names.get(alias, alias)

    if action.get("action") == "merge":
        return "Merge " + " + ".join(name(a) for a in action.get("ids", []))
    old = ", ".join(name(a) for a in action.get("old", []))
    return f"Supersede {old} by {name(str(action.get('new', '')))}"


def review_card(review: ClusterReview, *, undo_events: Sequence[LineageEvent] = ()) -> ReviewCard:
    """One ``ReviewCard`` from a review (and the undo events that reversed it)."""
    snapshot = list(review.snapshot or [])
    names = truth_names(snapshot)
    members = _member_rows(snapshot, review.similarities or {})
    decisions = _decision_rows(review, names)
    why_not = _why_not(review, names)
    return ReviewCard(
        reasoning_parts=reasoning_parts(
            review.reasoning, names=names, judge_label=judge_label(judge=review.judge, model=review.model)
        ),
        applied_count=len(review.applied_actions or []) if review.applied else 0,
        action_count=len(review.actions or []),
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
        # Each decision shows its own content; the joined field only when there is none.
        proposed_content="" if any(d.content for d in decisions) else review.proposed_content,
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
        undone=tuple(grouped(n for e in undo_events if (n := undo_note(e, other_id=e.result_id)))),
        created_at=review.created_at,
    )


def _member_rows(snapshot: list[dict[str, Any]], similarities: dict[str, Any]) -> tuple[MemberRow, ...]:
    """The review's members as the snapshot holds them, with each one's cosine similarity."""
    return tuple(
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


def _decision_rows(review: ClusterReview, names: dict[str, str]) -> list[DecisionRow]:
    """One row per action the judge proposed: applied (or previewed), refused or not applied."""
    applied_by_key = {_action_key(a): a for a in review.applied_actions or []}
    rejected_by_key = {
        _action_key(r["action"]): with_truth_numbers(str(r["reason"]), names) for r in review.rejections or []
    }
    noted = {_action_key(r["action"]): r["action"] for r in review.rejections or []} | applied_by_key
    decisions = []
    for action in review.actions or []:
        key = _action_key(action)
        done = applied_by_key.get(key)
        if done is not None:
            status = "would apply (preview)" if review.outcome == ClusterReview.Outcome.PREVIEW else "applied"
        elif key in rejected_by_key:
            status = "refused (why below)" if not review.applied else f"refused: {rejected_by_key[key]}"
        else:
            status = "not applied"
        decisions.append(
            DecisionRow(
                summary=_describe(action, names),
                content=str(action.get("content", "")),
                reason=with_truth_numbers(str(action.get("reason", "")), names),
                result_id=int(done["result_id"]) if done and "result_id" in done else None,
                status=status,
                concerns=tuple(
                    with_truth_numbers(str(sig.get("concern", "")), names)
                    for sig in (noted.get(key) or {}).get("signals", ())
                ),
                second_look=with_truth_numbers(str((noted.get(key) or {}).get("second_look", "")), names),
            )
        )
    return decisions


def _why_not(review: ClusterReview, names: dict[str, str]) -> list[str]:
    """Why nothing of the review was applied, each reason once; empty when it was applied."""
    why_not: list[str] = []
    if not review.applied:
        # Each refusal once, here (its decision row says "refused (why below)"); with
        # several actions, each reason names the action it refused.
        several = len(review.actions or []) > 1
        why_not = [
            (f"{_describe(r['action'], names)}: " if several else "") + with_truth_numbers(str(r["reason"]), names)
            for r in review.rejections or []
        ]
        if review.error:
            why_not.append(with_truth_numbers(review.error, names))
        if review.outcome == ClusterReview.Outcome.STALE and not review.rejections and review.skip_reason:
            why_not.append(review.skip_reason)  # not judged: the cluster changed first
        if review.outcome == ClusterReview.Outcome.KEPT:
            why_not.append("The judge proposed no change: every member is kept.")
        if review.outcome == ClusterReview.Outcome.PREVIEW:
            why_not.insert(0, "Dry run: previewed only, nothing was written.")
    return list(dict.fromkeys(why_not))  # each reason once


def _action_key(action: dict[str, Any]) -> tuple[Any, ...]:
    return (
        action.get("action"),
        tuple(action.get("ids", ())),
        tuple(action.get("old", ())),
        action.get("new", ""),
        action.get("content", ""),
    )


@dataclass(frozen=True, kw_only=True)
class ReviewGroup:
    """The cards of one outcome on a page of the run, with the run's count of it; changes
    (applied, previewed) open, the rest folded, so 27 refusals are one line until opened."""

    outcome: str
    label: str
    count: int
    cards: tuple[ReviewCard, ...]
    open: bool


#: Outcomes whose group starts open on the run page: the changes.
OPEN_OUTCOMES = frozenset({ClusterReview.Outcome.APPLIED, ClusterReview.Outcome.PREVIEW})


def review_groups(cards: Sequence[ReviewCard], counts: dict[str, int], *, filtered: bool = False) -> list[ReviewGroup]:
    """``cards`` grouped by outcome in their order; ``counts`` are the run's counts by
    outcome (``selectors.count_reviews_by_outcome``); ``filtered`` (one outcome shown) opens all."""
    groups: dict[str, list[ReviewCard]] = {}
    for card in cards:
        groups.setdefault(card.outcome, []).append(card)
    return [
        ReviewGroup(
            outcome=outcome,
            label=items[0].outcome_label,
            count=counts.get(outcome, len(items)),
            cards=tuple(items),
            open=filtered or outcome in OPEN_OUTCOMES,
        )
        for outcome, items in groups.items()
    ]


def review_cards(reviews: Iterable[ClusterReview]) -> list[ReviewCard]:
    """``review_card`` for each review; uses the ``undo_events`` that
    ``selectors.list_run_reviews`` prefetches."""
    return [review_card(r, undo_events=getattr(r, "undo_events", ())) for r in reviews]


@dataclass(frozen=True, kw_only=True)
class RefusalRow:
    """Something refused when a dry run was applied: the action (truths by number), why,
    the refusal's code, and the application's review that records it."""

    review_id: int
    action: str
    reason: str
    code: str


def application_refusals(reviews: Iterable[ClusterReview]) -> list[RefusalRow]:
    """One row per action an application refused (``review.rejections``) and per cluster
    that failed (``review.error``), from the application's reviews
    (``selectors.list_application_refusals``); truths by number, never by alias."""
    rows = []
    for review in reviews:
        names = truth_names(review.snapshot)
        for r in review.rejections or []:
            rows.append(
                RefusalRow(
                    review_id=review.pk,
                    action=_describe(r.get("action") or {}, names),
                    reason=with_truth_numbers(str(r.get("reason", "")), names),
                    code=str(r.get("code", "")),
                )
            )
        if review.error:
            members = ", ".join(names.values())
            rows.append(
                RefusalRow(
                    review_id=review.pk,
                    action=f"Cluster of {members}",
                    reason=with_truth_numbers(review.error, names),
                    code=review.failure or "failed",
                )
            )
    return rows


@dataclass(frozen=True, kw_only=True)
class PreviewChoice:
    """A dry run's previewed cluster on the apply confirmation page: its review, user,
    members and previewed actions (truths by number), and whether it has gone stale
    (every action names a member changed since; not offered)."""

    review_id: int
    user: str
    members: tuple[str, ...]
    actions: tuple[str, ...]
    stale: bool


def preview_choices(previews: Iterable[ClusterReview], *, stale: set[int]) -> list[PreviewChoice]:
    """One ``PreviewChoice`` per preview (``selectors.list_previews``); ``stale`` holds the ids
    ``dry_runs.stale_previews`` found."""
    choices = []
    for review in previews:
        names = truth_names(review.snapshot)
        actions = []
        for entry in review.applied_actions or []:
            content = str(entry.get("content") or "")
            actions.append(_describe(entry, names) + (f": “{content}”" if content else ""))
        choices.append(
            PreviewChoice(
                review_id=review.pk,
                user=str(review.user) if review.user_id else "",
                members=tuple(
                    f"{names.get(str(row['alias']), '?')} “{row['content']}”" for row in review.snapshot or ()
                ),
                actions=tuple(actions),
                stale=review.pk in stale,
            )
        )
    return choices
