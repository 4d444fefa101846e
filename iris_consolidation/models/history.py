"""What happened to truths, append-only: lineage events (merge, supersede, undo) and the audit rows.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone

from ..choices import ChangeAction, LineageAction
from .runs import ClusterReview, ConsolidationRun
from .truths import Truth


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
