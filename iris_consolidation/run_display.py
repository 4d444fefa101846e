"""Turns runs and cluster reviews into template-ready rows for the run and review pages.

The companion of ``lineage_display`` (which draws lineages): pure functions over rows
already loaded, no queries, no URLs, no HTML.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from .inventory_display import checkpoint_line, window_line
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


# --- the run list and the run page's summary -----------------------------

#: The run's outcome counts in the order the run list and the run page show them, each
#: once: merge and supersede actions applied (or previewed), then clusters
#: kept, rejected, stale, failed and deferred (to a later run: the retirement cap).
#: Each is (attribute of ConsolidationRun, label); a count of zero is left out of the
#: list's compact column but kept in the run page's table. Truths retired is not an
#: outcome but their sum's effect, shown beside.
OUTCOME_FIELDS: tuple[tuple[str, str], ...] = (
    ("merged", "merged"),
    ("superseded", "superseded"),
    ("kept", "kept"),
    ("rejected", "rejected"),
    ("stale", "stale"),
    ("failed", "failed"),
    ("deferred", "deferred"),
)
COST_UNKNOWN = "unknown (no price for this model)"
COST_NONE = "none (no tokens used)"


@dataclass(frozen=True, kw_only=True)
class Count:
    """One labelled count, e.g. ``merged 3``; ``key`` names a CSS class."""

    key: str
    label: str
    value: int


def outcome_counts(run: ConsolidationRun, *, nonzero_only: bool = False) -> list[Count]:
    """The run's outcome counts (``OUTCOME_FIELDS``), each once."""
    counts = [Count(key=name, label=label, value=int(getattr(run, name, 0) or 0)) for name, label in OUTCOME_FIELDS]
    return [c for c in counts if c.value or not nonzero_only]


def cost_text(*, cost: float, tokens: int) -> str:
    """A run's or review's cost for people: USD to 4 places, or why there is none.

    litellm prices only the models in its cost map and reports 0 for the others, so a
    cost of 0 with tokens used means "unknown", as the command line says, never "0.0000".
    """
    if cost > 0:
        return f"${cost:.4f}"
    return COST_NONE if not tokens else COST_UNKNOWN


@dataclass(frozen=True, kw_only=True)
class InventoryRow:
    """Live truths of the run's scope at one moment: total, by kind, by origin."""

    label: str
    live: int
    by_kind: str
    by_origin: str


@dataclass(frozen=True, kw_only=True)
class SettingRow:
    """One effective setting the run was created with; ``overridden`` when the live
    settings record set it rather than the Django settings."""

    name: str
    value: str
    overridden: bool


@dataclass(frozen=True, kw_only=True)
class ChangeRow:
    """One of the run's most significant changes, with the judge's reason."""

    action: str
    truth_ids: tuple[int, ...]
    result_id: int | None
    content: str
    reason: str
    review_id: int | None


@dataclass(frozen=True, kw_only=True)
class RunSummary:
    """The run page's header: what the run looked at, what it stored, what it changed."""

    window: str
    checkpoint: str
    seeds: int
    cache_hits: int
    cost: str
    inventory: tuple[InventoryRow, ...]
    settings: tuple[SettingRow, ...]
    changes: tuple[ChangeRow, ...]


_SETTING_LABELS = {
    "enabled": "scheduled passes enabled",
    "interval_hours": "hours between scheduled runs",
    "scheduled_dry_run_only": "scheduled passes dry-run only",
    "allowed_user_ids": "users (ids)",
    "max_retirements_per_run": "most retirements per run",
    "similarity_threshold": "similarity threshold",
}


def _setting_value(name: str, value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if name == "allowed_user_ids":
        return ", ".join(f"#{v}" for v in value) if value else "every user"
    if name == "interval_hours" and not value:
        return "every schedule slot"
    return str(value)


def _joined(counts: dict[str, int]) -> str:
    return ", ".join(f"{k} {n}" for k, n in counts.items()) or "—"


def run_summary(run: ConsolidationRun) -> RunSummary:
    """The summary header of ``run`` from the fields it stored (window, checkpoint,
    ``inventory``, ``effective_settings``); pure, no queries."""
    data = run.inventory or {}
    inventory = tuple(
        InventoryRow(
            label=label,
            live=int(data[key].get("live", 0)),
            by_kind=_joined(data[key].get("by_kind", {})),
            by_origin=_joined(data[key].get("by_origin", {})),
        )
        for key, label in (("before", "before"), ("after", "after"))
        if key in data
    )
    effective = run.effective_settings or {}
    overridden = set(effective.get("overridden", ()))
    settings = tuple(
        SettingRow(name=label, value=_setting_value(name, effective[name]), overridden=name in overridden)
        for name, label in _SETTING_LABELS.items()
        if name in effective
    )
    changes = tuple(
        ChangeRow(
            action=str(item.get("action", "")) if item.get("applied") else f"would {item.get('action', '')}",
            truth_ids=tuple(int(pk) for pk in item.get("truth_ids", [])),
            result_id=item.get("result_id"),
            content=str(item.get("content", "")),
            reason=str(item.get("reason", "")),
            review_id=item.get("review_id"),
        )
        for item in data.get("changes") or []
    )
    return RunSummary(
        window=window_line(run).removeprefix("Window: "),
        checkpoint=checkpoint_line(run).removeprefix("Checkpoint: "),
        seeds=int(data.get("seeds", run.seeds)),
        cache_hits=run.cache_hits,
        cost=cost_text(cost=run.cost, tokens=run.tokens),
        inventory=inventory,
        settings=settings,
        changes=changes,
    )


# --- the queue: workers and jobs ---------------------------------------------

NO_WORKER = "No worker seen: queued runs wait until one runs (manage.py qcluster)."
WAITING_FOR_WORKER = (
    "No worker has taken or finished a job in the last {silence} s, and this run's jobs are queued. "
    "Start one with manage.py qcluster; this page stops refreshing until then."
)


def _ago(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s ago"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min ago"
    return f"{seconds / 3600:.1f} h ago"


def queue_lines(overview: Any, *, now: datetime | None = None) -> list[tuple[str, str]]:
    """The queue's state as (label, text) rows: workers, jobs, throughput; pure."""
    from django.utils import timezone

    now = now or timezone.now()
    if overview.clusters:
        workers = "; ".join(
            f"qcluster {c.cluster_id[:8]} on {c.host}: {c.workers} worker{'s' if c.workers != 1 else ''}, {c.status}"
            for c in overview.clusters
        )
    elif overview.worker_seen:
        workers = f"a worker took or finished a job {_ago((now - overview.last_seen).total_seconds())}"
    else:
        last = f" (last job {_ago((now - overview.last_seen).total_seconds())})" if overview.last_seen else ""
        workers = NO_WORKER + last
    jobs = overview.jobs
    return [
        ("Workers", workers),
        (
            "Jobs",
            f"{jobs['queued']} queued, {jobs['running']} running, {jobs['waiting']} waiting (rate limited), "
            f"{jobs['failed']} failed",
        ),
        (
            "Throughput",
            f"{overview.done_last_hour} job{'s' if overview.done_last_hour != 1 else ''} done in the last hour",
        ),
    ]
