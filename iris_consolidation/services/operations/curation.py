"""Operators' direct edits of truths that are not consolidation: pinning, adding a truth.

A pinned truth is protected: consolidation may show it to the judge but never retires
or rewords it (``choices.is_protected``).
"""

from __future__ import annotations

from collections.abc import Iterable

from django.db import transaction
from django.utils import timezone

from ...models import Truth
from ..pipeline import truth_events

#: The reason of the audit row of a truth an operator added in the admin.
ADDED_BY_HAND = "Added by hand in the admin."


def set_pinned(*, truth_ids: Iterable[int], pinned: bool) -> int:
    """Pin (or unpin) the live truths among ``truth_ids``; return how many changed.

    Retired truths are history and stay as they were. ``updated_at`` moves, so a
    dry run that judged these truths before the change sees them as stale when it
    is applied. One UPDATE statement; idempotent.
    """
    return (
        Truth.objects.filter(pk__in=list(truth_ids))
        .exclude(pinned=pinned)
        .update(pinned=pinned, updated_at=timezone.now())
    )


def add_truth(*, truth: Truth, actor: str, reason: str = ADDED_BY_HAND) -> Truth:
    """Save the new ``truth`` an operator (the admin's add page) or the host (``api.add_truth``)
    wrote and audit its creation (``truth_events``: a ``TruthChange`` "created" by ``actor``
    with ``reason``, its signal after commit). Its ``created_at`` is when the user stated it
    (now unless given); it has no embedding yet, so the next pass embeds it. Transaction: one."""
    with transaction.atomic():
        truth.save()
        truth_events.record_changes(
            [truth_events.Change(truth=truth, action=truth_events.CREATED, reason=reason)], actor=actor
        )
    return truth
