"""A user's truths: the one table consolidation reads and retires, with its vector.

Models hold data and tiny derived values only; workflows live in ``services/``.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone
from pgvector.django import HnswIndex, VectorField

from ..choices import Origin, RetiredReason, is_protected
from ..quality import quality_of
from ..querysets import LiveTruthManager, TruthQuerySet

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
