"""Incremental passes: each user's cursor, what a run did for a user in phase 1, the verdict cache.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone

from .runs import ConsolidationRun


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
