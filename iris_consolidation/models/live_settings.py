"""The live settings record: the settings an operator edits in the admin, read at the start of each run.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q

from ..choices import RiskPolicy, StageMode


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
