"""Operators' direct edits of truths that are not consolidation: pinning.

A pinned truth is protected: consolidation may show it to the judge but never retires
or rewords it (``choices.is_protected``).
"""

from __future__ import annotations

from collections.abc import Iterable

from django.utils import timezone

from ...models import Truth


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
