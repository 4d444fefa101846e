"""Tables of the app: truths, consolidation runs, cluster reviews and lineage events.

Models hold data and tiny derived values only; workflows live in ``services/``.
"""

from __future__ import annotations

import hashlib
import uuid
from typing import Any, TypeAlias

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone
from pgvector.django import HnswIndex, VectorField

from .choices import (
    CONSOLIDATABLE_ORIGINS,  # noqa: F401  (re-exported: callers import it from models)
    ChangeAction,
    JobKind,
    JobStatus,
    JudgeKind,
    LineageAction,
    MessageRole,
    Origin,
    RetiredReason,
    ReviewFailure,
    ReviewOutcome,
    RiskPolicy,
    RunExecution,
    RunStatus,
    RunTrigger,
    StageMode,
    is_protected,
)
from .quality import quality_of
from .querysets import ClusterReviewQuerySet, JobQuerySet, LiveTruthManager, RunQuerySet, TruthQuerySet

#: Dimensions of every stored embedding: all-MiniLM-L6-v2's (decision D5 in STYLE.md).
#: pgvector writes it into migrations, so it is a constant, never a setting.
EMBEDDING_DIMENSIONS = 384


class Truth(models.Model):
    """A short distilled fact about one user.

    Retirement is a soft delete: ``retired_at`` is set and ``superseded_by`` points at
    the replacement. ``objects`` shows live truths only; ``all_objects`` shows all.
    """

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="truths"
    )
    content = models.TextField()
    origin = models.CharField(max_length=16, choices=Origin.choices, default=Origin.PROMOTED)
    kind = models.CharField(max_length=32, default="fact", help_text="fact, preference, ...")
    pinned = models.BooleanField(default=False, help_text="Pinned truths are never consolidated.")
    generation = models.PositiveSmallIntegerField(
        default=0, help_text="0 for originals; a merge makes max(source generations) + 1."
    )
    score = models.FloatField(default=0.0, help_text="Distillation score; a merge keeps the highest.")
    corroborations = models.PositiveIntegerField(
        default=1, help_text="Observations backing this truth; a merge sums them."
    )
    embedding = VectorField(dimensions=EMBEDDING_DIMENSIONS, null=True, blank=True)
    embedding_model = models.CharField(max_length=200, blank=True)
    source = models.TextField(
        blank=True, help_text="Provenance, e.g. session:<id>; a merge keeps the union, one per line."
    )
    created_at = models.DateTimeField(default=timezone.now, db_index=True)
    updated_at = models.DateTimeField(auto_now=True)
    retired_at = models.DateTimeField(null=True, blank=True, db_index=True)
    superseded_by = models.ForeignKey(
        "self",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="replaces",
        help_text="The truth that replaced this one when it was retired.",
    )
    retired_reason = models.CharField(max_length=16, choices=RetiredReason.choices, blank=True)
    # --- hygiene fields: services/hygiene/ ---
    relevance = models.FloatField(
        default=1.0, help_text="0..1; lowered by decay, raised by merges (+0.1 per retired duplicate)."
    )
    access_count = models.PositiveIntegerField(default=0, help_text="Uses the host reported (record_access).")
    last_accessed = models.DateTimeField(null=True, blank=True, help_text="Last use the host reported.")
    last_decayed = models.DateTimeField(null=True, blank=True, help_text="Pass time of the last decay.")
    held_since = models.DateTimeField(
        default=timezone.now,
        help_text="When this installation first held the truth (loaded, mined, written or made by a merge); "
        "decay counts no disuse before it. created_at keeps the date the truth was stated.",
    )
    validated = models.BooleanField(default=False, help_text="Confirmed by the host (mark_validated).")
    tags = models.JSONField(default=list, blank=True, help_text="List of strings; a merge keeps the union.")
    # --- mining: a mined truth's evidence ---
    evidence = models.JSONField(
        default=list, blank=True,
        help_text="Ids of the session messages a mined truth came from (source session:<id>).",
    )

    objects = LiveTruthManager()
    all_objects = TruthQuerySet.as_manager()

    class Meta:
        verbose_name = "truth"
        base_manager_name = "all_objects"
        ordering = ["user_id", "created_at", "id"]
        indexes = [
            HnswIndex(
                name="truth_embedding_hnsw",
                fields=["embedding"],
                m=16,
                ef_construction=64,
                opclasses=["vector_cosine_ops"],
            ),
            models.Index(fields=["user", "retired_at"], name="truth_user_live"),
        ]
        constraints = [
            models.CheckConstraint(
                condition=~Q(superseded_by=models.F("id")), name="truth_not_superseded_by_itself"
            ),
            models.CheckConstraint(
                condition=Q(retired_at__isnull=True, retired_reason="")
                | Q(retired_at__isnull=False) & ~Q(retired_reason=""),
                name="truth_retirement_complete",
            ),
            models.CheckConstraint(
                condition=Q(origin__in=[c.value for c in Origin]), name="truth_origin_valid"
            ),
            models.CheckConstraint(condition=Q(content__regex=r"\S"), name="truth_content_not_blank"),
            models.CheckConstraint(
                condition=Q(relevance__gte=0) & Q(relevance__lte=1), name="truth_relevance_in_range"
            ),
        ]

    def __str__(self) -> str:
        text = self.content if len(self.content) <= 60 else self.content[:57] + "..."
        return f"#{self.pk} {text}"

    @property
    def is_live(self) -> bool:
        return self.retired_at is None

    @property
    def quality(self) -> float:
        """Composite quality in 0..1 now (``quality.py``, loopctl's formula)."""

        return quality_of(self)

    def is_protected(self, *, max_generation: int) -> bool:
        """Whether consolidation must never retire or reword this truth (``choices.is_protected``)."""
        return is_protected(
            pinned=self.pinned, origin=self.origin, generation=self.generation, max_generation=max_generation
        )


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
    key = models.CharField(max_length=64, help_text="Hash of the member ids and contents; one review per run and key.")
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
    cached_tokens = models.PositiveIntegerField(default=0, help_text="Of which read from the provider's prompt cache.")
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


class LineageEvent(models.Model):
    """One edge of a truth's lineage: ``source`` was retired into ``result`` (append-only).

    An ``undo`` event reverses an earlier merge or supersede: ``source`` is the
    consolidated truth whose making was undone, ``result`` a truth restored as live,
    ``review`` the review undone, ``actor`` the person and ``reason`` their reason.
    """

    Action = LineageAction

    action = models.CharField(max_length=16, choices=Action.choices)
    source = models.ForeignKey(Truth, on_delete=models.PROTECT, related_name="lineage_out")
    result = models.ForeignKey(Truth, on_delete=models.PROTECT, related_name="lineage_in")
    review = models.ForeignKey(
        ClusterReview, null=True, blank=True, on_delete=models.PROTECT, related_name="events"
    )
    reason = models.TextField(blank=True)
    actor = models.CharField(max_length=150, blank=True, help_text="Who did it: a judge or a person.")
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        verbose_name = "lineage event"
        ordering = ["created_at", "id"]
        constraints = [
            models.CheckConstraint(condition=~Q(source=models.F("result")), name="lineage_not_self"),
        ]

    def __str__(self) -> str:
        return f"{self.get_action_display()}: #{self.source_id} -> #{self.result_id}"


# --- Incremental passes: cursor, per-user pass, verdict cache, audit, live settings ---


class ConsolidationCursor(models.Model):
    """Per user, the position ``(updated_at, truth_id)`` up to which truths have been judged.

    A pass seeds clusters only with truths positioned after it. It moves only over
    clusters fully judged and applied, never in a dry run (``services/pipeline/incremental.py``).
    """

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, primary_key=True, on_delete=models.CASCADE, related_name="+"
    )
    updated_at = models.DateTimeField(help_text="updated_at of the last truth covered.")
    truth_id = models.BigIntegerField(help_text="id of the last truth covered (ties on updated_at).")
    run = models.ForeignKey(
        ConsolidationRun, null=True, blank=True, on_delete=models.SET_NULL, related_name="+",
        help_text="The run that last moved the cursor.",
    )
    moved_at = models.DateTimeField(default=timezone.now)

    class Meta:
        verbose_name = "consolidation cursor"

    def __str__(self) -> str:
        return f"Cursor of user {self.user_id}: {self.updated_at.isoformat()} #{self.truth_id}"


class UserPass(models.Model):
    """What one run did for one user in phase 1: the seed bound, the seeds, the cursor move."""

    run = models.ForeignKey(ConsolidationRun, on_delete=models.CASCADE, related_name="user_passes")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    bound_updated_at = models.DateTimeField(
        null=True, blank=True, help_text="Seeds were positioned after this (empty: every truth)."
    )
    bound_id = models.BigIntegerField(null=True, blank=True)
    cursor_updated_at = models.DateTimeField(null=True, blank=True, help_text="The user's cursor before the run.")
    cursor_id = models.BigIntegerField(null=True, blank=True)
    covers_cursor = models.BooleanField(
        default=False, help_text="The seeds cover everything after the cursor, so the cursor may move."
    )
    seeds = models.PositiveIntegerField(default=0)
    last_seed_updated_at = models.DateTimeField(null=True, blank=True)
    last_seed_id = models.BigIntegerField(null=True, blank=True)
    advanced_updated_at = models.DateTimeField(null=True, blank=True, help_text="The cursor after the run.")
    advanced_id = models.BigIntegerField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        verbose_name = "user pass"
        verbose_name_plural = "user passes"
        constraints = [models.UniqueConstraint(fields=["run", "user"], name="user_pass_once_per_run")]

    def __str__(self) -> str:
        return f"Pass of user {self.user_id} in run {str(self.run_id)[:8]}"


class VerdictCacheEntry(models.Model):
    """A "keep" verdict on one cluster state: members (content hashes), prompt version, model.

    ``key`` hashes all of them, so any change to a member, the prompt or the model
    misses the entry; entries are never updated except for their hit counters.
    """

    key = models.CharField(max_length=64, unique=True)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    stage = models.CharField(
        max_length=16, blank=True, default="",
        help_text='Blank: the judge\'s "keep" on a cluster; "relocate" or "promote": that stage\'s answer to '
        "leave one truth as it is (not a note, not a rule).",
    )
    model = models.CharField(max_length=200)
    prompt_version = models.CharField(max_length=64)
    member_hashes = models.JSONField(default=list, help_text="sha256 of each member as the judge saw it, sorted.")
    reasoning = models.TextField(blank=True)
    hits = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(default=timezone.now)
    last_hit_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name = "cached verdict"
        verbose_name_plural = "cached verdicts"

    def __str__(self) -> str:
        return f"keep: {len(self.member_hashes)} members, {self.model} / {self.prompt_version}"


class TruthChange(models.Model):
    """Append-only audit of every creation, retirement, restoration and undo of a truth.

    Written in the same transaction as the change (``services/pipeline/truth_events.py``); the
    ``truth_changed`` signal is sent after that transaction commits.
    """

    Action = ChangeAction

    truth = models.ForeignKey(Truth, on_delete=models.PROTECT, related_name="changes")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    action = models.CharField(max_length=16, choices=Action.choices)
    reason = models.TextField(blank=True)
    content = models.TextField(blank=True, help_text="The truth's text at the time of the change.")
    review = models.ForeignKey(
        ClusterReview, null=True, blank=True, on_delete=models.PROTECT, related_name="truth_changes"
    )
    run = models.ForeignKey(
        ConsolidationRun, null=True, blank=True, on_delete=models.PROTECT, related_name="truth_changes"
    )
    actor = models.CharField(max_length=150, blank=True, help_text="A judge, a person or an import.")
    created_at = models.DateTimeField(default=timezone.now, db_index=True)

    class Meta:
        verbose_name = "truth change"
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["user", "created_at"], name="truth_change_user_time")]

    def __str__(self) -> str:
        return f"{self.get_action_display()} #{self.truth_id}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        # Append-only: a change is a fact about the past, so rows are never rewritten.
        if not self._state.adding:
            raise ValueError("Truth changes are append-only; they cannot be edited.")
        super().save(*args, **kwargs)

    def delete(self, *args: Any, **kwargs: Any) -> Any:
        raise ValueError("Truth changes are append-only; they cannot be deleted.")


class LiveSettings(models.Model):
    """The one editable settings record (pk 1): empty fields fall back to the Django settings.

    Read at the start of every run (``run_settings.get_effective_settings``), so a change takes
    effect on the next run without a restart.
    """

    SINGLETON_ID = 1

    id = models.PositiveSmallIntegerField(primary_key=True, default=SINGLETON_ID, editable=False)
    enabled = models.BooleanField(
        null=True, blank=True, help_text="Scheduled passes run. Empty: IRIS_CONSOLIDATION_ENABLED."
    )
    interval_hours = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text=(
            "Least hours between two scheduled runs: a schedule slot sooner after the last one is skipped. "
            "Empty: IRIS_CONSOLIDATION_SCHEDULE_INTERVAL_HOURS (0: every slot)."
        ),
    )
    scheduled_dry_run_only = models.BooleanField(
        null=True, blank=True,
        help_text="Scheduled passes only preview (dry run). Empty: IRIS_CONSOLIDATION_SCHEDULED_DRY_RUN_ONLY.",
    )
    allowed_users = models.ManyToManyField(
        settings.AUTH_USER_MODEL, blank=True, related_name="+",
        help_text="Only these users are consolidated. Empty: IRIS_CONSOLIDATION_USER_ALLOWLIST (empty: everyone).",
    )
    max_retirements_per_run = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="Most truths one run may retire. Empty: IRIS_CONSOLIDATION_MAX_RETIREMENTS_PER_RUN.",
    )
    max_prune_share = models.FloatField(
        null=True,
        blank=True,
        help_text="Most of a user's live truths one pass may prune, a share from 0 to 1 (0.1: 10%). "
        "Empty: IRIS_CONSOLIDATION_MAX_PRUNE_SHARE.",
    )
    similarity_threshold = models.FloatField(
        null=True, blank=True, help_text="Cosine similarity in (0, 1]. Empty: IRIS_CONSOLIDATION_SIMILARITY_THRESHOLD."
    )
    max_cost_per_run = models.DecimalField(
        max_digits=12,
        decimal_places=4,
        null=True,
        blank=True,
        help_text="USD one run may spend on judge calls; the clusters left wait for the next run. "
        "Empty: IRIS_CONSOLIDATION_MAX_COST_PER_RUN (empty: no cap).",
    )
    # Stages of a pass: off, report (listed, nothing changed) or apply; empty: the setting.
    noise_mode = models.CharField(
        max_length=8, blank=True, choices=StageMode.choices, help_text="Noise stage. Empty: IRIS_CONSOLIDATION_NOISE."
    )
    decay_mode = models.CharField(
        max_length=8, blank=True, choices=StageMode.choices, help_text="Decay stage. Empty: IRIS_CONSOLIDATION_DECAY."
    )
    lexical_mode = models.CharField(
        max_length=8, blank=True, choices=StageMode.choices,
        help_text="Lexical (Jaccard) arm; report: clusters counted, not judged. Empty: IRIS_CONSOLIDATION_LEXICAL.",
    )
    semantic_mode = models.CharField(
        max_length=8, blank=True, choices=StageMode.choices,
        help_text="Embedding arm; report: clusters counted, not judged. Empty: IRIS_CONSOLIDATION_SEMANTIC.",
    )
    prune_mode = models.CharField(
        max_length=8, blank=True, choices=StageMode.choices, help_text="Prune stage. Empty: IRIS_CONSOLIDATION_PRUNE."
    )
    # Mining, relocation and promotion.
    mine_mode = models.CharField(
        max_length=8, blank=True, choices=StageMode.choices,
        help_text="Mining of sessions for new truths. Empty: IRIS_CONSOLIDATION_MINE.",
    )
    relocate_mode = models.CharField(
        max_length=8, blank=True, choices=StageMode.choices,
        help_text="Relocation of reference-heavy truths to notes. Empty: IRIS_CONSOLIDATION_RELOCATE.",
    )
    promote_mode = models.CharField(
        max_length=8, blank=True, choices=StageMode.choices,
        help_text="Promotion of standing instructions to learned rules. Empty: IRIS_CONSOLIDATION_PROMOTE.",
    )
    risk_policy = models.CharField(
        max_length=8,
        blank=True,
        choices=RiskPolicy.choices,
        help_text="What a model's action that passes every invariant but raises a signal gets: a second look "
        "by the model (verify), a refusal, or acceptance. Empty: IRIS_CONSOLIDATION_RISK_POLICY.",
    )
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name = "live settings"
        verbose_name_plural = "live settings"
        constraints = [
            models.CheckConstraint(condition=Q(id=1), name="live_settings_singleton"),
            models.CheckConstraint(
                condition=Q(similarity_threshold__isnull=True)
                | Q(similarity_threshold__gt=0) & Q(similarity_threshold__lte=1),
                name="live_settings_threshold_in_range",
            ),
            models.CheckConstraint(
                condition=Q(interval_hours__isnull=True) | Q(interval_hours__gte=1),
                name="live_settings_interval_positive",
            ),
            models.CheckConstraint(
                condition=Q(max_cost_per_run__isnull=True) | Q(max_cost_per_run__gte=0),
                name="live_settings_max_cost_not_negative",
            ),
            models.CheckConstraint(
                condition=Q(max_prune_share__isnull=True) | Q(max_prune_share__gte=0) & Q(max_prune_share__lte=1),
                name="live_settings_prune_share_in_range",
            ),
        ]

    def __str__(self) -> str:
        return "Live settings"


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


# --- Sessions, notes, learned rules ---


class ChatSession(models.Model):
    """One chat session of a user (imported with ``load_sessions`` or written by the host).

    Its messages feed the ``mine`` stage; ``external_id`` is the session's id in the
    source (a mined truth's ``source`` is ``session:<external_id>``).
    """

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="chat_sessions")
    external_id = models.CharField(max_length=200, help_text="The session's id in its source, unique per user.")
    started_at = models.DateTimeField(db_index=True)
    source = models.TextField(blank=True, help_text="Provenance of the session (file and locator).")
    created_at = models.DateTimeField(default=timezone.now, help_text="When it was imported or written.")

    class Meta:
        verbose_name = "chat session"
        ordering = ["user_id", "started_at", "id"]
        constraints = [
            models.UniqueConstraint(fields=["user", "external_id"], name="chat_session_once_per_user"),
        ]

    def __str__(self) -> str:
        return f"Session {self.external_id}"


class SessionMessage(models.Model):
    """One message of a chat session: the user's own (``role`` user) or another's (context)."""

    Role = MessageRole

    session = models.ForeignKey(ChatSession, on_delete=models.CASCADE, related_name="messages")
    position = models.PositiveIntegerField(help_text="Order within the session, from 0.")
    external_id = models.CharField(max_length=200, blank=True, help_text="The message's id in its source, e.g. D1:3.")
    role = models.CharField(max_length=8, choices=Role.choices)
    speaker = models.CharField(max_length=200, blank=True)
    content = models.TextField()
    at = models.DateTimeField(db_index=True, help_text="When the message was written.")

    class Meta:
        verbose_name = "session message"
        ordering = ["session_id", "position"]
        constraints = [
            models.UniqueConstraint(fields=["session", "position"], name="session_message_once_per_position"),
            models.CheckConstraint(
                condition=Q(role__in=[c.value for c in MessageRole]), name="session_message_role_valid"
            ),
        ]

    def __str__(self) -> str:
        text = self.content if len(self.content) <= 60 else self.content[:57] + "..."
        return f"{self.external_id or self.position} {self.speaker}: {text}"


class Note(models.Model):
    """A markdown note of one user that received reference-heavy truths (``relocate`` stage).

    ``body`` ends with a ``## Connections`` section of ``[[slug]]`` wikilinks to the user's
    related notes. A pointer truth "See [[slug]]: ..." stays live in its place.
    """

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="notes")
    slug = models.SlugField(max_length=80, help_text="Unique per user; the target of [[wikilinks]].")
    title = models.CharField(max_length=200)
    body = models.TextField(help_text="Markdown, with a ## Connections section of [[wikilinks]].")
    source_truths = models.ManyToManyField(Truth, related_name="notes", blank=True)
    run = models.ForeignKey(
        ConsolidationRun, null=True, blank=True, on_delete=models.SET_NULL, related_name="+",
        help_text="The run that wrote it.",
    )
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name = "note"
        ordering = ["user_id", "slug"]
        constraints = [models.UniqueConstraint(fields=["user", "slug"], name="note_slug_once_per_user")]

    def __str__(self) -> str:
        return f"[[{self.slug}]] {self.title}"


class LearnedRule(models.Model):
    """One line of a user's learned rules (iii's auto-managed list).

    Auto-managed rules are appended by the ``promote`` stage, deduplicated by
    ``fingerprint`` and never edited; hand-authored ones (``hand_authored``) are the
    person's and no stage ever changes them.
    """

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="learned_rules")
    text = models.CharField(max_length=300, help_text="One line.")
    fingerprint = models.CharField(
        max_length=64, help_text="sha256 of the normalised text; one rule per user and fingerprint."
    )
    hand_authored = models.BooleanField(default=False, help_text="Written by the person; never changed by a stage.")
    source_truths = models.ManyToManyField(Truth, related_name="learned_rules", blank=True)
    reason = models.TextField(blank=True, help_text="The model's reason for the promotion.")
    model = models.CharField(max_length=200, blank=True)
    run = models.ForeignKey(
        ConsolidationRun, null=True, blank=True, on_delete=models.SET_NULL, related_name="+",
        help_text="The run that appended it (empty: hand-authored).",
    )
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        verbose_name = "learned rule"
        ordering = ["user_id", "created_at", "id"]
        constraints = [
            models.UniqueConstraint(fields=["user", "fingerprint"], name="learned_rule_once_per_fingerprint"),
            models.CheckConstraint(condition=~Q(text__contains="\n"), name="learned_rule_one_line"),
        ]

    def __str__(self) -> str:
        return self.text
