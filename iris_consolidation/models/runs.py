"""Consolidation runs, the review of each cluster they judged, and each hygiene stage's result.
"""

from __future__ import annotations

import uuid
from typing import TypeAlias

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone

from ..choices import JudgeKind, ReviewFailure, ReviewOutcome, RunExecution, RunStatus, RunTrigger, StageMode
from ..querysets import ClusterReviewQuerySet, RunQuerySet
from .truths import Truth

#: A run's primary key as callers pass it: the UUID, or its text (URLs, task arguments).
RunId: TypeAlias = uuid.UUID | str


class ConsolidationRun(models.Model):
    """One batch of consolidation: what started it, how, and what came of it."""

    Trigger = RunTrigger

    Execution = RunExecution

    JudgeKind = JudgeKind

    Status = RunStatus

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    trigger = models.CharField(max_length=16, choices=Trigger.choices, default=Trigger.COMMAND)
    dry_run = models.BooleanField(
        default=False, help_text="Judged and recorded, but no truth changed (a preview)."
    )
    execution = models.CharField(
        max_length=16, choices=Execution.choices, default=Execution.QUEUED, help_text="Who runs the jobs."
    )
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    threshold = models.FloatField(help_text="Cosine similarity threshold used.")
    judge = models.CharField(max_length=200, blank=True, help_text="Judge and model used.")
    judge_kind = models.CharField(
        max_length=8, choices=JudgeKind.choices, blank=True, default=JudgeKind.OTHER,
        help_text="Rule judge, LLM judge, or another: whether the run's stages may ask a model.",
    )
    judge_model = models.CharField(
        max_length=200, blank=True, help_text="The litellm model an LLM judge calls (its calls, the stages' and "
        "the forecast's); empty for other judges.",
    )
    user_filter = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        help_text="Only this user's truths, if set.",
    )
    users = models.PositiveIntegerField(default=0, help_text="Users to consolidate.")
    users_done = models.PositiveIntegerField(default=0, help_text="Users whose clusters are built.")
    truths = models.PositiveIntegerField(default=0, help_text="Consolidatable truths seen.")
    embedded = models.PositiveIntegerField(default=0, help_text="Truths embedded by this run.")
    clusters_found = models.PositiveIntegerField(default=0)
    clusters_done = models.PositiveIntegerField(default=0)
    merged = models.PositiveIntegerField(default=0, help_text="Merge actions applied.")
    superseded = models.PositiveIntegerField(default=0, help_text="Supersede actions applied.")
    retired = models.PositiveIntegerField(default=0, help_text="Truths retired.")
    # Each reviewed cluster counts once among kept, rejected, stale and deferred (or has
    # applied actions, counted by merged and superseded); failed counts clusters whose
    # judge failed, which a bisection may leave partly applied.
    kept = models.PositiveIntegerField(default=0, help_text="Clusters the judge left as they were.")
    rejected = models.PositiveIntegerField(
        default=0, help_text="Clusters whose every proposal the validator refused (not for the cap)."
    )
    stale = models.PositiveIntegerField(
        default=0, help_text="Clusters not changed because their members changed first (freshness)."
    )
    deferred = models.PositiveIntegerField(
        default=0,
        help_text="Clusters left for a later run, not failed: the run's budget was spent, or it reached its "
        "retirement cap.",
    )
    failed = models.PositiveIntegerField(default=0, help_text="Clusters whose judge failed.")
    llm_calls = models.PositiveIntegerField(default=0)
    stage_calls = models.PositiveIntegerField(
        default=0,
        help_text="Of the LLM calls, those of the stages around the judge (mining, noise, relocation, promotion); "
        "the judge's are the rest.",
    )
    tokens = models.PositiveIntegerField(default=0)
    cost = models.FloatField(default=0.0, help_text="USD, from litellm's price list.")
    # --- judge economics: batched calls, prompt caching, budget ---
    model_clusters = models.PositiveIntegerField(
        default=0, help_text="Clusters sent to the model (clusters per call = this / LLM calls)."
    )
    prompt_tokens = models.PositiveBigIntegerField(default=0, help_text="Prompt tokens, cached ones included.")
    cached_tokens = models.PositiveBigIntegerField(
        default=0, help_text="Prompt tokens read from the provider's prompt cache."
    )
    completion_tokens = models.PositiveBigIntegerField(default=0)
    unpriced = models.PositiveIntegerField(
        default=0, help_text="Reviews whose model calls had no price in litellm's map: the run's cost is unknown."
    )
    forecast = models.JSONField(
        default=dict, blank=True, help_text="Dry runs: the forecast of a real run's calls, tokens and cost."
    )
    embed_seconds = models.FloatField(default=0.0)
    cluster_seconds = models.FloatField(default=0.0)
    created_at = models.DateTimeField(default=timezone.now, db_index=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    scheduled_for = models.DateTimeField(
        null=True, blank=True, db_index=True, help_text="The schedule slot a scheduled run covers."
    )
    notes = models.TextField(blank=True)
    source_run = models.ForeignKey(
        "self",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="applications",
        help_text="The dry run whose verdicts this run applies (re-validated and re-checked for freshness).",
    )
    # --- incremental passes: window, checkpoint, report, effective settings ---
    window_mode = models.CharField(
        max_length=16, blank=True, help_text="How seeds were chosen: cursor, full, last, fallback, duration, iso."
    )
    window_since = models.DateTimeField(
        null=True, blank=True, help_text="Seeds changed at or after this time (empty: per-user cursor or full)."
    )
    window_until = models.DateTimeField(
        null=True, blank=True, help_text="When the run took its snapshot; becomes the checkpoint on success."
    )
    previous_checkpoint = models.DateTimeField(
        null=True, blank=True, help_text="The last successful run's checkpoint when this run was created."
    )
    checkpoint = models.DateTimeField(
        null=True, blank=True, db_index=True, help_text="Written only when the run completed with no failed cluster."
    )
    seeds = models.PositiveIntegerField(default=0, help_text="Truths used as cluster seeds.")
    cache_hits = models.PositiveIntegerField(default=0, help_text="Clusters answered from the verdict cache.")
    inventory = models.JSONField(default=dict, blank=True, help_text="Counts before/after, main changes, LLM use.")
    effective_settings = models.JSONField(
        default=dict, blank=True, help_text="Live settings in force when the run was created."
    )

    objects = RunQuerySet.as_manager()

    class Meta:
        verbose_name = "consolidation run"
        ordering = ["-created_at"]
        constraints = [
            models.CheckConstraint(
                condition=Q(threshold__gt=0) & Q(threshold__lte=1), name="run_threshold_in_range"
            ),
        ]

    def __str__(self) -> str:
        # Whether it writes; how it ran is ``execution``.
        kind = "Dry run" if self.dry_run else "Real run"
        return f"Run {str(self.id)[:8]} ({kind}, {self.get_status_display()})"

    @property
    def kind_label(self) -> str:
        """"dry run", or how the real run's jobs are executed ("queued (workers)", "in process")."""
        return "dry run" if self.dry_run else self.get_execution_display().lower()

    @property
    def on_workers(self) -> bool:
        """Whether this is a real run whose jobs the workers execute: the only runs with
        jobs to retry."""
        return not self.dry_run and self.execution == self.Execution.QUEUED

    @property
    def writes(self) -> bool:
        """Whether the run changes truths (every run but a dry run)."""
        return not self.dry_run

    @property
    def duration_seconds(self) -> float | None:
        if self.started_at is None or self.finished_at is None:
            return None
        return (self.finished_at - self.started_at).total_seconds()


class ClusterReview(models.Model):
    """One cluster's judgement (dry runs included): members, verdict, what was applied.

    Append-only history: written once when the cluster is done.
    """

    Outcome = ReviewOutcome

    Failure = ReviewFailure

    run = models.ForeignKey(ConsolidationRun, on_delete=models.CASCADE, related_name="reviews")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    key = models.CharField(
        max_length=64, help_text="Hash of the member ids and contents; one review per run and key."
    )
    members = models.ManyToManyField(Truth, related_name="reviews", blank=True)
    snapshot = models.JSONField(
        default=list, help_text="Members as the judge saw them: alias, id, content, created_at, ..."
    )
    similarities = models.JSONField(default=dict, help_text="Cosine similarity of each member to the seed.")
    actions = models.JSONField(default=list, help_text="The judge's proposed actions (aliases).")
    applied_actions = models.JSONField(default=list, help_text="Actions written (or previewed), with truth ids.")
    rejections = models.JSONField(default=list, help_text="Actions refused, each with its reason.")
    reasoning = models.TextField(blank=True)
    proposed_content = models.TextField(blank=True)
    outcome = models.CharField(max_length=16, choices=Outcome.choices)
    applied = models.BooleanField(default=False)
    skip_reason = models.TextField(blank=True)
    judge = models.CharField(max_length=200, blank=True)
    model = models.CharField(max_length=200, blank=True)
    prompt_version = models.CharField(max_length=32, blank=True)
    tokens = models.PositiveIntegerField(default=0)
    prompt_tokens = models.PositiveIntegerField(
        default=0, help_text="This cluster's share of its calls' prompt tokens (cached ones included)."
    )
    cached_tokens = models.PositiveIntegerField(
        default=0, help_text="Of which read from the provider's prompt cache."
    )
    completion_tokens = models.PositiveIntegerField(default=0)
    cost = models.FloatField(default=0.0, help_text="USD: this cluster's share of its calls' cost.")
    cost_known = models.BooleanField(default=True, help_text="False when litellm has no price for the model.")
    llm_calls = models.PositiveIntegerField(
        default=0, help_text="Model calls charged to this review (a call over several clusters: to the first)."
    )
    latency_ms = models.PositiveIntegerField(default=0)
    attempts = models.PositiveSmallIntegerField(default=0)
    error = models.TextField(blank=True)
    failure = models.CharField(max_length=16, choices=Failure.choices, blank=True, default="")
    failed_members = models.JSONField(
        default=list, blank=True, help_text="Aliases whose judgement failed even alone (bisection); kept as they were."
    )
    raw_response = models.TextField(blank=True)
    decision = models.JSONField(
        null=True, blank=True, help_text="The decision as recorded (merging.Decision.to_json); none before it was kept."
    )
    created_at = models.DateTimeField(default=timezone.now)

    objects = ClusterReviewQuerySet.as_manager()

    class Meta:
        verbose_name = "cluster review"
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(fields=["run", "key"], name="review_once_per_run_and_cluster"),
        ]

    def __str__(self) -> str:
        return f"Review #{self.pk} ({self.get_outcome_display()})"


class StageResult(models.Model):
    """What one hygiene stage did (or would do, in report mode) for one user in one run.

    Written once per (run, user, stage) by ``services/hygiene/stages.py``; the run's
    report sums them. ``findings`` lists the truths concerned (id, content, reason,
    figures), at most ``MAX_FINDINGS`` of them; ``affected`` counts them all, ``refused``
    those a cap held back (prune's share cap: left live, listed as ``refused``).
    """

    MAX_FINDINGS = 200

    run = models.ForeignKey(ConsolidationRun, on_delete=models.CASCADE, related_name="stage_results")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    stage = models.CharField(
        max_length=16, help_text="mine, noise, decay, lexical, semantic, relocate, promote or prune."
    )
    mode = models.CharField(max_length=8, choices=StageMode.choices)
    examined = models.PositiveIntegerField(default=0, help_text="Truths (or clusters) the stage looked at.")
    affected = models.PositiveIntegerField(
        default=0, help_text="Truths retired or decayed (apply), or that would be (report); clusters found."
    )
    applied = models.PositiveIntegerField(default=0, help_text="Of those, changed in the database.")
    refused = models.PositiveIntegerField(
        default=0, help_text="Of those, held back by a cap and left live (prune: the share cap)."
    )
    seconds = models.FloatField(default=0.0)
    findings = models.JSONField(default=list, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        verbose_name = "stage result"
        ordering = ["run", "user_id", "id"]
        constraints = [
            models.UniqueConstraint(fields=["run", "user", "stage"], name="stage_result_once_per_run_user_stage"),
        ]

    def __str__(self) -> str:
        return f"{self.stage} ({self.mode}) of user {self.user_id}: {self.affected}"
