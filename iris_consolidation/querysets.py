"""QuerySets of the app's models, including every pgvector query.

Cosine distance here (``CosineDistance``, the ``<=>`` operator) matches the HNSW
index's ``vector_cosine_ops`` opclass declared on ``Truth``; pgvector's cosine
distance is ``1 - cosine similarity``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.db import connection, models
from django.db.models import Case, Count, ExpressionWrapper, F, FloatField, Func, Q, Value, When
from django.db.models.functions import Cast, Coalesce, Concat, Greatest, Least, Ln, Power
from pgvector.django import CosineDistance

from . import quality
from .choices import JobKind, JobStatus, RunStatus, protected_q

if TYPE_CHECKING:
    from .llm.base import Spend
    from .models import Truth  # noqa: F401  (named in string annotations)


class TruthQuerySet(models.QuerySet["Truth"]):
    """Filters over truths, live or retired."""

    def live(self) -> TruthQuerySet:
        """Truths not retired."""
        return self.filter(retired_at__isnull=True)

    def retired(self) -> TruthQuerySet:
        """Soft-deleted truths."""
        return self.filter(retired_at__isnull=False)

    def for_user(self, user_id: int) -> TruthQuerySet:
        """Truths of one user; every consolidation query starts here."""
        return self.filter(user_id=user_id)

    def consolidatable(self, *, max_generation: int) -> TruthQuerySet:
        """Live truths that are not protected (``choices.is_protected``): unpinned, of origin
        promoted or consolidated, below ``max_generation``. The merging service re-checks
        the same rule under a row lock (``Truth.is_protected``)."""
        return self.live().exclude(protected_q(max_generation=max_generation))

    def protected(self, *, max_generation: int) -> TruthQuerySet:
        """Live truths that consolidation may show to the judge but never retire."""
        return self.live().filter(protected_q(max_generation=max_generation))

    def missing_embedding(self, *, model_name: str) -> TruthQuerySet:
        """Truths with no embedding, or one made by another model than ``model_name``."""
        return self.filter(Q(embedding__isnull=True) | ~Q(embedding_model=model_name))

    def with_quality(self, *, now: datetime, half_life_days: float) -> TruthQuerySet:
        """Annotate ``quality_now``: ``quality.quality`` at ``now`` computed in SQL, term by
        term (relevance clamped, log-scaled uses, recency halving every ``half_life_days``
        from the last use or else ``created_at``, validated), so the admin can filter by it."""
        real: FloatField = FloatField()
        relevance = Least(Value(1.0), Greatest(Value(0.0), Cast("relevance", real)))
        uses = Least(
            Value(1.0),
            ExpressionWrapper(
                Ln(Value(1.0) + Greatest(Cast("access_count", real), Value(0.0)))
                / Value(math.log1p(quality.ACCESS_SATURATION)),
                output_field=real,
            ),
        )
        seconds = Func(
            Value(now) - Coalesce("last_accessed", "created_at"),
            template="EXTRACT(EPOCH FROM %(expressions)s)",
            output_field=real,
        )
        days = Greatest(Value(0.0), ExpressionWrapper(seconds / Value(86400.0), output_field=real))
        recency = Power(Value(0.5), ExpressionWrapper(days / Value(float(half_life_days)), output_field=real))
        validated = Case(When(validated=True, then=Value(1.0)), default=Value(0.0), output_field=real)
        score = ExpressionWrapper(
            Value(quality.WEIGHT_RELEVANCE) * relevance
            + Value(quality.WEIGHT_ACCESS) * uses
            + Value(quality.WEIGHT_RECENCY) * recency
            + Value(quality.WEIGHT_VALIDATED) * validated,
            output_field=real,
        )
        return self.annotate(quality_now=Least(Value(1.0), Greatest(Value(0.0), score)))

    def with_embedding(self) -> TruthQuerySet:
        return self.filter(embedding__isnull=False)

    def with_cosine_distance(self, vector: Sequence[float]) -> TruthQuerySet:
        """Annotate ``distance`` = cosine distance (0..2) to ``vector``."""
        return self.annotate(distance=CosineDistance("embedding", vector))

    def nearest(self, vector: Sequence[float], *, limit: int) -> TruthQuerySet:
        """The ``limit`` truths nearest to ``vector`` (annotated ``distance``), nearest first.

        Ordered by the distance alone: that is the ORDER BY an HNSW index can serve on
        every PostgreSQL version (a tie-break makes PostgreSQL 15 scan and sort; docs/benchmarks.md,
        "Measured constants").
        Callers that need a stable order among equal distances sort the rows afterwards.
        There is no distance filter on purpose: filter the rows afterwards. A filter on
        the distance inside the query makes pgvector's HNSW iterative scan read up to
        ``hnsw.max_scan_tuples`` (20,000) index tuples whenever fewer than ``limit`` rows
        pass it, which is almost always (pgvector's README, "Distance filters", gives the
        same advice; the cost: docs/benchmarks.md, "Measured constants").
        """
        return self.with_embedding().with_cosine_distance(vector).order_by("distance")[:limit]


class LiveTruthManager(models.Manager.from_queryset(TruthQuerySet)):  # type: ignore[misc]
    """Default manager: live truths only. Use ``Truth.all_objects`` for retired ones."""

    def get_queryset(self) -> TruthQuerySet:
        return super().get_queryset().filter(retired_at__isnull=True)


def spend_counters(spend: Spend, *, calls: int | None = None) -> dict[str, Any]:
    """The run counters ``spend`` adds to, as update expressions: calls (``calls`` if
    given: a review counts calls known without a usage block), tokens, cost, and one
    ``unpriced`` record when any of its calls had no price (the run's cost is then unknown)."""
    return {
        "llm_calls": F("llm_calls") + (spend.calls if calls is None else calls),
        "tokens": F("tokens") + spend.tokens,
        "prompt_tokens": F("prompt_tokens") + spend.prompt_tokens,
        "cached_tokens": F("cached_tokens") + spend.cached_tokens,
        "completion_tokens": F("completion_tokens") + spend.completion_tokens,
        "cost": F("cost") + spend.cost,
        "unpriced": F("unpriced") + (1 if spend.unpriced else 0),
    }


class RunQuerySet(models.QuerySet):
    """Filters over consolidation runs."""

    def in_progress(self) -> RunQuerySet:
        return self.filter(status__in=[RunStatus.PENDING, RunStatus.RUNNING])

    def dry_runs(self) -> RunQuerySet:
        return self.filter(dry_run=True)

    def add_spend(self, spend: Spend | None) -> int:
        """Add a stage's model ``spend`` to these runs' counters in one UPDATE (``spend_counters``,
        and its calls to ``stage_calls``: the judge's calls are the rest); nothing for no spend or
        no call. The one way a stage's model calls reach the run
        (``merging.record_review`` adds a review's in its own update)."""
        if spend is None or not spend.calls:
            return 0
        return self.update(**spend_counters(spend), stage_calls=F("stage_calls") + spend.calls)

    def add_note(self, note: str) -> int:
        """Append ``note`` as the last line of these runs' notes, in one UPDATE (no read,
        so no lost line beside another writer); returns the rows changed. The one way
        the app writes a run's notes."""
        line = note.strip()
        text: models.TextField = models.TextField()
        # RTRIM with these characters drops trailing blanks and newlines (plain RTRIM: spaces only).
        kept = Func(F("notes"), Value(" \t\r\n"), function="RTRIM", output_field=text)
        return self.update(
            notes=Case(
                When(notes="", then=Value(line, output_field=text)),
                default=Concat(kept, Value("\n" + line, output_field=text), output_field=text),
                output_field=text,
            )
        )


class JobQuerySet(models.QuerySet):
    """Filters over consolidation jobs (queued tasks of a run)."""

    def active(self) -> JobQuerySet:
        """Jobs not finished: queued, running or waiting."""
        return self.filter(status__in=[JobStatus.QUEUED, JobStatus.RUNNING, JobStatus.WAITING])

    def in_run(self, run_id: object) -> JobQuerySet:
        return self.filter(run_id=run_id)

    def retried_review_keys(self, *, user_id: int) -> set[str]:
        """Keys of the user's reviews that a retry put aside (earlier rounds of re-queued
        cluster jobs among these): history, no longer what the run says about their clusters."""
        retried = self.filter(kind=JobKind.CLUSTER, user_id=user_id, round__gt=0)
        return {job.review_key(in_round=r) for job in retried for r in range(job.round)}

    def phase1_progress(self) -> list[tuple[int, str]]:
        """``(user id, note)`` of these jobs' unfinished user jobs whose phase 1 goes on
        across deliveries (``continues``), by user id."""
        rows = self.active().filter(kind=JobKind.USER, continues=True).order_by("user_id")
        return list(rows.values_list("user_id", "error"))

    def counts_by_status(self) -> dict[str, int]:
        """These jobs counted by status: queued, running, waiting, done, failed (zeros included)."""
        counts = dict(self.values_list("status").annotate(n=Count("id")).order_by())
        return {status: int(counts.get(status, 0)) for status in JobStatus.values}


class ClusterReviewQuerySet(models.QuerySet):
    """Filters over cluster reviews."""

    def in_run(self, run_id: object) -> ClusterReviewQuerySet:
        return self.filter(run_id=run_id)

    def applied(self) -> ClusterReviewQuerySet:
        return self.filter(applied=True)


def set_hnsw_search(*, ef_search: int) -> None:
    """Tune pgvector's HNSW search for the current transaction (``SET LOCAL``).

    ``hnsw.ef_search`` trades speed for recall (see conf ``HNSW_EF_SEARCH``);
    ``hnsw.iterative_scan = strict_order`` (pgvector >= 0.8) keeps scanning the index
    when the ``user_id`` filter removes candidates, with results still in distance
    order. Must run inside ``transaction.atomic()``.
    """
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL hnsw.ef_search = %s", [int(ef_search)])
        cursor.execute("SET LOCAL hnsw.iterative_scan = strict_order")
