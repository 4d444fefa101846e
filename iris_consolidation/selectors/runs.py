"""A run's records: its reviews (in the run page's order), its dry run's previews and
application, and why its work failed.
"""

from __future__ import annotations

from typing import Any

from django.db.models import (
    Case,
    Count,
    IntegerField,
    Prefetch,
    Q,
    QuerySet,
    Value,
    When,
)

from ..models import (
    ClusterReview,
    ConsolidationJob,
    ConsolidationRun,
    LineageEvent,
)

# --- reviews, previews and applications --------------------------------------------

#: The run page lists changes first, then what stopped them, and the kept clusters last:
#: an operator deciding whether to trust a pass reads what it did.
REVIEW_ORDER = (
    ClusterReview.Outcome.APPLIED,
    ClusterReview.Outcome.PREVIEW,
    ClusterReview.Outcome.REJECTED,
    ClusterReview.Outcome.FAILED,
    ClusterReview.Outcome.STALE,
    ClusterReview.Outcome.KEPT,
)


def list_run_reviews(*, run: ConsolidationRun, outcome: str | None = None) -> QuerySet[ClusterReview]:
    """The run's reviews in ``REVIEW_ORDER`` of outcome, then oldest first, each with
    ``undo_events`` prefetched (one extra query).

    ``outcome``: one of ``ClusterReview.Outcome`` to filter by, or None for all.
    """
    reviews = ClusterReview.objects.filter(run=run).select_related("user").defer("raw_response", "decision")
    if outcome:
        reviews = reviews.filter(outcome=outcome)
    rank = Case(
        *(When(outcome=value, then=Value(i)) for i, value in enumerate(REVIEW_ORDER)),
        default=Value(len(REVIEW_ORDER)),
        output_field=IntegerField(),
    )
    return reviews.order_by(rank, "created_at", "id").prefetch_related(
        Prefetch(
            "events",
            queryset=LineageEvent.objects.filter(action=LineageEvent.Action.UNDO).order_by("created_at", "id"),
            to_attr="undo_events",
        )
    )


def count_reviews_by_outcome(*, run: ConsolidationRun) -> dict[str, int]:
    """``{outcome: count}`` of the run's reviews (one query)."""
    rows = ClusterReview.objects.filter(run=run).values("outcome").annotate(n=Count("id")).order_by()
    return {row["outcome"]: row["n"] for row in rows}


def get_review_undo_events(*, review: ClusterReview) -> list[LineageEvent]:
    """Undo events that reversed (part of) ``review``, oldest first."""
    return list(review.events.filter(action=LineageEvent.Action.UNDO).order_by("created_at", "id"))


def get_application(*, run: ConsolidationRun) -> ConsolidationRun | None:
    """The run that applied the dry run ``run``'s verdicts, if any."""
    return run.applications.order_by("created_at").first()


def list_previews(*, run: ConsolidationRun) -> QuerySet[ClusterReview]:
    """Dry run ``run``'s previewed clusters (outcome preview), in the order they were
    recorded, with their users (what applying it applies; ``dry_runs.stale_previews``)."""
    previews = ClusterReview.objects.filter(run=run, outcome=ClusterReview.Outcome.PREVIEW)
    return previews.select_related("user").order_by("id")


def list_application_refusals(*, application: ConsolidationRun) -> QuerySet[ClusterReview]:
    """The reviews of ``application`` (the run that applied a dry run) where something was
    refused or failed: an action refused (stale member, cap, an invariant) or a failed
    cluster, in the order they were recorded."""
    return (
        ClusterReview.objects.filter(run=application)
        .filter(~Q(rejections=[]) | ~Q(error=""))
        .defer("raw_response", "decision")
        .order_by("id")
    )


# --- failures and jobs ----------------------------------------------------------------


def _retryable_failed_jobs() -> QuerySet[ConsolidationJob]:
    # A cancelled run's jobs were closed unrun (as failed, with the cancel's note): nothing to retry.
    return ConsolidationJob.objects.filter(status=ConsolidationJob.Status.FAILED).exclude(
        run__status=ConsolidationRun.Status.CANCELLED
    )


def count_failed_jobs(*, run: ConsolidationRun) -> int:
    """Failed jobs of ``run``: what "retry failed clusters" re-queues; 0 for a cancelled run (one query)."""
    if run.status == ConsolidationRun.Status.CANCELLED:
        return 0
    return ConsolidationJob.objects.filter(run=run, status=ConsolidationJob.Status.FAILED).count()


def count_failed_jobs_by_run(*, runs: list[ConsolidationRun]) -> dict[Any, int]:
    """``{run id: failed jobs}`` for ``runs`` (``count_failed_jobs`` for each, in one query)."""
    rows = _retryable_failed_jobs().filter(run__in=runs).values("run_id").annotate(n=Count("id")).order_by()
    return {row["run_id"]: row["n"] for row in rows}


def list_failure_causes(*, run: ConsolidationRun, limit: int = 3) -> list[tuple[str, int, str]]:
    """Why ``run``'s work failed: ``(error, count, "cluster")`` of its failed reviews, the
    commonest ``limit`` first; else ``(error, count, "job")`` of its failed jobs (a phase 1
    that failed). Two queries at most."""
    rows = (
        ClusterReview.objects.filter(run=run, outcome=ClusterReview.Outcome.FAILED)
        .exclude(error="")
        .values("error")
        .annotate(n=Count("id"))
        .order_by("-n", "error")[:limit]
    )
    causes = [(row["error"], row["n"], "cluster") for row in rows]
    if causes or run.status == ConsolidationRun.Status.CANCELLED:
        return causes
    jobs = (
        ConsolidationJob.objects.filter(run=run, status=ConsolidationJob.Status.FAILED)
        .exclude(error="")
        .values("error")
        .annotate(n=Count("id"))
        .order_by("-n", "error")[:limit]
    )
    return [(row["error"], row["n"], "job") for row in jobs]


def count_run_jobs(*, run: ConsolidationRun) -> int:
    """Every job of ``run``, whatever its status (one query)."""
    return ConsolidationJob.objects.filter(run=run).count()
