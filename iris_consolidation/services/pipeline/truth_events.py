"""Change events: one audit row and one ``truth_changed`` signal per changed truth.

Every service that creates, retires, restores or undoes a truth calls
``record_changes`` inside the transaction that made the change. The audit rows
(``TruthChange``, append-only) are written in that transaction, so they roll back
with it; the signals are sent with ``transaction.on_commit``, so a receiver sees
each change once, after it is durable, and never one that was rolled back.

Callers here: ``merging.record_review`` (created, retired), ``transfer.load_truths``
(created) and ``undo`` (``RESTORED`` for each source brought back, ``UNDONE`` for the
truth it retires; the row's review is the undone one).
Truths a host creates with the ORM directly are not seen unless it calls it too.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from django.db import transaction

from ...models import ClusterReview, ConsolidationRun, Truth, TruthChange
from ...signals import truth_changed

logger = logging.getLogger(__name__)

CREATED = TruthChange.Action.CREATED
RETIRED = TruthChange.Action.RETIRED
RESTORED = TruthChange.Action.RESTORED
UNDONE = TruthChange.Action.UNDONE


@dataclass(frozen=True, kw_only=True)
class Change:
    """One change to one truth: ``action`` is created, retired, restored or undone."""

    truth: Truth
    action: str
    reason: str = ""


def record_changes(
    changes: Sequence[Change],
    *,
    review: ClusterReview | None = None,
    run: ConsolidationRun | None = None,
    actor: str = "",
) -> list[TruthChange]:
    """Append one ``TruthChange`` per change and queue its signal for after commit.

    Call inside the transaction that changed the truths (outside one, each signal is
    sent at once, as Django's ``on_commit`` does in autocommit). Signal keyword
    arguments: ``truth``, ``action``, ``reason``, ``review``, ``actor``, ``change``.
    """
    if not changes:
        return []
    valid = set(TruthChange.Action.values)
    for change in changes:
        if change.action not in valid:
            raise ValueError(f"Unknown truth change {change.action!r}; use one of {', '.join(sorted(valid))}.")
    if run is None and review is not None:
        run = review.run
    rows = TruthChange.objects.bulk_create(
        [
            TruthChange(
                truth=c.truth,
                user_id=c.truth.user_id,
                action=c.action,
                reason=c.reason,
                content=c.truth.content,
                review=review,
                run=run,
                actor=actor[:150],
            )
            for c in changes
        ],
        batch_size=1000,
    )
    for change, row in zip(changes, rows, strict=True):
        transaction.on_commit(
            functools.partial(
                truth_changed.send,
                sender=Truth,
                truth=change.truth,
                action=change.action,
                reason=change.reason,
                review=review,
                actor=actor,
                change=row,
            )
        )
    return rows


def record_change_tuples(changes: Sequence[tuple[Truth, str, str]], **kwargs: Any) -> list[TruthChange]:
    """``record_changes`` over ``(truth, action, reason)`` tuples (the merge path's shape)."""
    return record_changes([Change(truth=t, action=a, reason=r) for t, a, r in changes], **kwargs)
