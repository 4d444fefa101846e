"""The queue's durable state: a run's job rows, the shared rate limit windows, the schedule's lock.
"""

from __future__ import annotations

import hashlib

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone

from ..choices import JobKind, JobStatus
from ..querysets import JobQuerySet
from .runs import ClusterReview, ConsolidationRun


class ConsolidationJob(models.Model):
    """One queued task of a run, as a durable row: phase 1 for a user or phase 2 for a cluster.

    django-q2 carries the messages; this row says what happened. Every delivery claims
    the row first, so a message delivered twice, redelivered late or lost with a killed
    worker ends the same way (``services/queue/delivery.py``). ``waiting`` is not a failure: the
    job was rate-limited and is re-queued for ``not_before``.
    """

    Kind = JobKind

    Status = JobStatus

    run = models.ForeignKey(ConsolidationRun, on_delete=models.CASCADE, related_name="jobs")
    kind = models.CharField(max_length=8, choices=Kind.choices)
    key = models.CharField(
        max_length=80, help_text="user:<id> or cluster:<hash of member ids>; one job per run and key."
    )
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    member_ids = models.JSONField(default=list, blank=True, help_text="Cluster members, seed first.")
    similarities = models.JSONField(default=list, blank=True, help_text="Cosine similarity of each member to the seed.")
    status = models.CharField(max_length=8, choices=Status.choices, default=Status.QUEUED)
    round = models.PositiveSmallIntegerField(default=0, help_text="Bumped by retry_consolidation.")
    deliveries = models.PositiveIntegerField(default=0, help_text="Times a worker claimed this job.")
    faults = models.PositiveSmallIntegerField(
        default=0, help_text="Deliveries lost to a timeout, a dead worker or an unexpected error (this round)."
    )
    rate_limited = models.PositiveIntegerField(default=0, help_text="Rate-limit replies (429) from the provider.")
    throttled = models.PositiveIntegerField(default=0, help_text="Times put back by the jobs-per-minute limit.")
    first_attempt_at = models.DateTimeField(null=True, blank=True, help_text="Start of the retry window (this round).")
    not_before = models.DateTimeField(null=True, blank=True, help_text="A waiting job runs again from here.")
    lease_until = models.DateTimeField(null=True, blank=True, help_text="A running job past this was lost.")
    dispatched_at = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    worker = models.CharField(max_length=200, blank=True, help_text="host:pid of the last worker that claimed it.")
    review = models.ForeignKey(
        ClusterReview, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    preview = models.ForeignKey(
        ClusterReview,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="+",
        help_text="An apply job's review of the dry run whose verdict it applies.",
    )
    error = models.TextField(blank=True)
    continues = models.BooleanField(
        default=False, help_text="Phase 1 goes on in a new delivery; the error field says how far it got."
    )
    created_at = models.DateTimeField(default=timezone.now)

    objects = JobQuerySet.as_manager()

    class Meta:
        verbose_name = "consolidation job"
        ordering = ["created_at", "id"]
        indexes = [
            models.Index(fields=["run", "status"], name="job_run_status"),
            # The recovery sweep looks at unfinished jobs of every run, each minute.
            models.Index(
                fields=["status", "dispatched_at"],
                condition=Q(status__in=["queued", "running", "waiting"]),
                name="job_active",
            ),
        ]
        constraints = [
            models.UniqueConstraint(fields=["run", "key"], name="job_once_per_run_and_key"),
        ]

    def __str__(self) -> str:
        return f"Job #{self.pk} {self.key} ({self.get_status_display()})"

    def review_key(self, *, in_round: int | None = None) -> str:
        """Key of the ``ClusterReview`` this phase 2 job records in its current round (or
        ``in_round``): sha256 of run, job key and round, so a retry judges afresh."""
        number = self.round if in_round is None else in_round
        return hashlib.sha256(f"{self.run_id}:{self.key}#{number}".encode()).hexdigest()


class RateLimitWindow(models.Model):
    """Shared state of one rate limit: start times (epoch seconds, ascending) inside the
    current window. One row per limit, locked with ``select_for_update`` by every worker
    on every machine (``services/queue/throttling.py``)."""

    name = models.CharField(max_length=100, primary_key=True)
    starts = models.JSONField(default=list)

    class Meta:
        verbose_name = "rate limit window"

    def __str__(self) -> str:
        return self.name


class ScheduleLock(models.Model):
    """The no-overlap lock of scheduled runs: held by ``run`` until ``expires_at``.

    Renewed while the run makes progress and released when it finishes; a lock past
    ``expires_at`` belongs to a holder that died and may be taken over.
    """

    #: Name of the no-overlap lock of scheduled runs.
    SCHEDULED_RUNS = "scheduled-runs"

    name = models.CharField(max_length=100, primary_key=True)
    run = models.ForeignKey(ConsolidationRun, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    acquired_at = models.DateTimeField(null=True, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name = "schedule lock"

    def __str__(self) -> str:
        return self.name
