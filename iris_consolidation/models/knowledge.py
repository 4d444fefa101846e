"""Sessions, notes and learned rules: what mining reads, relocation writes and promotion appends.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone

from ..choices import MessageRole
from .runs import ConsolidationRun
from .truths import Truth


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
