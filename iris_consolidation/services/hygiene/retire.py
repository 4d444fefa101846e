"""Retire truths by a hygiene stage (noise, prune) and restore them: soft, audited, undoable.

A hygiene retirement sets ``retired_at`` and ``retired_reason`` (``noise`` or
``pruned``); ``superseded_by`` stays empty, because nothing replaced the truth. Each
retirement and each restoration writes one ``TruthChange`` audit row (with the run)
and sends ``truth_changed`` after commit (``pipeline/truth_events.py``). Nothing is
ever deleted. ``restore`` is the undo of such a retirement.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from ...conf import app_settings
from ...exceptions import UndoRefused
from ...models import ConsolidationRun, RetiredReason, Truth
from ...run_settings import retirement_cap
from ..pipeline import truth_events

logger = logging.getLogger(__name__)

#: Retirement reasons of the hygiene stages; ``restore`` undoes only these.
HYGIENE_REASONS = (RetiredReason.NOISE, RetiredReason.PRUNED)

NOT_HYGIENE = "Truth #{truth} was not retired by the noise or prune stage; there is nothing to restore here."
REASON_REQUIRED = "Give a reason for the restoration; it is kept in the truth's audit rows."


def retire(
    *, truth_ids: Sequence[int], reason: str, note: dict[int, str], run: ConsolidationRun | None, actor: str
) -> list[int]:
    """Retire the live, unprotected truths among ``truth_ids`` with ``reason``.

    ``note`` maps a truth id to the audit row's text (the category or the figures).
    Locks the rows (ascending ids, as ``merging.record_review`` does) and re-checks
    protection under the lock; a truth retired or protected meanwhile is skipped.
    Respects the run's retirement cap (``run_settings.retirement_cap``), counting
    these on the run's ``retired``. Transaction: one. Returns the ids retired.
    """
    if not truth_ids:
        return []
    retired: list[Truth] = []
    with transaction.atomic():
        room = None
        if run is not None:
            locked_run = ConsolidationRun.objects.select_for_update().get(pk=run.pk)
            room = max(0, retirement_cap(locked_run) - locked_run.retired)
        now = timezone.now()
        rows = Truth.all_objects.select_for_update().filter(pk__in=sorted(set(truth_ids))).order_by("pk")
        for truth in rows:
            if room is not None and len(retired) >= room:
                break
            if truth.retired_at is not None or truth.is_protected(max_generation=app_settings.MAX_GENERATION):
                continue
            truth.retired_at = now
            truth.retired_reason = reason
            # update() rather than save(): updated_at stays, the row's content did not change.
            Truth.all_objects.filter(pk=truth.pk).update(retired_at=now, retired_reason=reason)
            retired.append(truth)
        if run is not None and retired:
            ConsolidationRun.objects.filter(pk=run.pk).update(retired=F("retired") + len(retired))
        truth_events.record_changes(
            [
                truth_events.Change(truth=t, action=truth_events.RETIRED, reason=f"{reason}: {note.get(t.pk, '')}")
                for t in retired
            ],
            run=run,
            actor=actor,
        )
    return [t.pk for t in retired]


def restore(*, truth_id: int, actor: str, reason: str) -> Truth:
    """Undo a noise or prune retirement: the truth is live again, one ``restored`` audit row.

    A pruned truth comes back with relevance 1.0 and ``last_decayed`` now (a renewal),
    so the next pass does not prune it again at once.

    Transaction: one, with the row locked. Raises ``UndoRefused`` when the truth does
    not exist, is live, or was retired for another reason (merges and supersedes are
    undone by ``operations.undo``), or when ``reason`` is empty.
    """
    reason = reason.strip()
    if not reason:
        raise UndoRefused(REASON_REQUIRED)
    with transaction.atomic():
        truth = Truth.all_objects.select_for_update().filter(pk=truth_id).first()
        if truth is None or truth.retired_at is None or truth.retired_reason not in HYGIENE_REASONS:
            raise UndoRefused(NOT_HYGIENE.format(truth=truth_id))
        fields: dict[str, Any] = {"retired_at": None, "retired_reason": ""}
        if truth.retired_reason == RetiredReason.PRUNED:
            # An operator's restoration renews the truth; else the next pass prunes it again.
            fields.update(relevance=1.0, last_decayed=timezone.now())
        for name, value in fields.items():
            setattr(truth, name, value)
        Truth.all_objects.filter(pk=truth.pk).update(**fields)
        truth_events.record_changes(
            [truth_events.Change(truth=truth, action=truth_events.RESTORED, reason=reason)], actor=actor
        )
    logger.info("restored truth %s (by %s)", truth_id, actor)
    return truth


def is_hygiene_retirement(truth: Any) -> bool:
    """Whether ``truth`` was retired by the noise or prune stage."""
    return truth.retired_at is not None and truth.retired_reason in HYGIENE_REASONS
