"""The host project's reports of use: ``record_access`` and ``mark_validated``.

Both are bookkeeping, not edits: they change the hygiene fields only, with
``QuerySet.update``, so ``updated_at`` stays and the incremental cursor and the
judge's freshness check do not see them. Retired truths are left as they are.
Re-exported by ``iris_consolidation.api`` for hosts.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from django.db import transaction
from django.db.models import Case, F, Value, When
from django.utils import timezone

from ...exceptions import InvalidInput
from ...models import Truth

NAIVE_TIME = "record_access needs a time with a time zone (e.g. django.utils.timezone.now()); got {value!r}."


def _ids(truth_ids: Iterable[int]) -> list[int]:
    return sorted({int(pk) for pk in truth_ids})


def record_access(truth_ids: Iterable[int], at: datetime | None = None) -> int:
    """Count one use of each live truth in ``truth_ids`` at ``at`` (default: now).

    ``access_count`` += 1 per id (an id listed twice counts once); ``last_accessed``
    becomes ``at`` unless it is already later (an old use reported late does not move
    it back). Decay restarts from the last use (``decay.baseline``). Returns how many
    truths were updated. Transaction: one statement. Raises ``InvalidInput`` for a
    naive ``at``.
    """
    at = at or timezone.now()
    if timezone.is_naive(at):
        raise InvalidInput(NAIVE_TIME.format(value=at))
    ids = _ids(truth_ids)
    if not ids:
        return 0
    with transaction.atomic():
        return Truth.objects.filter(pk__in=ids).update(
            access_count=F("access_count") + 1,
            last_accessed=Case(
                When(last_accessed__isnull=True, then=Value(at)),
                When(last_accessed__lt=at, then=Value(at)),
                default=F("last_accessed"),
            ),
        )


def mark_validated(truth_ids: Iterable[int]) -> int:
    """Mark each live truth in ``truth_ids`` as validated (confirmed by the host).

    Idempotent; returns how many live truths were named. One statement.
    """
    ids = _ids(truth_ids)
    if not ids:
        return 0
    return Truth.objects.filter(pk__in=ids).update(validated=True)
