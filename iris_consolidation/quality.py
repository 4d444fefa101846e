"""The composite quality score of a truth (loopctl's consolidate), pure functions.

    quality = 0.45 x relevance + 0.30 x access + 0.15 x recency + 0.10 x validated

Each term is normalised to 0..1, so the score stays in 0..1:

- ``relevance``: the stored field, already 0..1 (lowered by decay, raised by merges);
  clamped in case a host wrote a value out of range.
- ``access``: ``log(1 + n) / log(1 + ACCESS_SATURATION)``, capped at 1, for ``n`` uses
  the host reported (``record_access``). The log scale makes the first few uses count
  most: 1 use gives 0.15, 3 give 0.30, 10 give 0.52, 100 or more give 1.
- ``recency``: ``0.5 ^ (days since last use / HALF_LIFE_DAYS)``, days counted from
  ``last_accessed``, else ``created_at``: 1 for a truth used just now, 0.5 after one
  half-life, towards 0 after; a time in the future counts as now.
- ``validated``: 1 if the host confirmed the truth (``mark_validated``), else 0.

Nothing here reads the database or writes; ``quality_of`` reads one truth's fields.
"""

from __future__ import annotations

import math
from datetime import datetime
from typing import Any

from django.utils import timezone

from .conf import app_settings

#: Weights of the four terms (loopctl's consolidate); they sum to 1.
WEIGHT_RELEVANCE = 0.45
WEIGHT_ACCESS = 0.30
WEIGHT_RECENCY = 0.15
WEIGHT_VALIDATED = 0.10
#: Uses at which the access term reaches 1 (log-scaled below that).
ACCESS_SATURATION = 100


def access_term(access_count: int) -> float:
    """``log(1 + n) / log(1 + ACCESS_SATURATION)`` capped at 1; 0 for no use."""
    n = max(0, int(access_count))
    return min(1.0, math.log1p(n) / math.log1p(ACCESS_SATURATION))


def recency_term(*, last_used: datetime, now: datetime, half_life_days: float) -> float:
    """``0.5 ^ (days since last_used / half_life_days)`` in (0, 1]; 1 for a future time."""
    days = max(0.0, (now - last_used).total_seconds() / 86400.0)
    return 0.5 ** (days / half_life_days)


def quality(
    *,
    relevance: float,
    access_count: int,
    last_used: datetime,
    validated: bool,
    now: datetime,
    half_life_days: float | None = None,
) -> float:
    """The composite quality in 0..1 (see the module docstring for each term).

    ``half_life_days`` defaults to ``IRIS_CONSOLIDATION_HALF_LIFE_DAYS``.
    """
    half_life = float(half_life_days if half_life_days is not None else app_settings.HALF_LIFE_DAYS)
    score = (
        WEIGHT_RELEVANCE * min(1.0, max(0.0, float(relevance)))
        + WEIGHT_ACCESS * access_term(access_count)
        + WEIGHT_RECENCY * recency_term(last_used=last_used, now=now, half_life_days=half_life)
        + WEIGHT_VALIDATED * (1.0 if validated else 0.0)
    )
    return min(1.0, max(0.0, score))


def quality_of(truth: Any, *, now: datetime | None = None, relevance: float | None = None) -> float:
    """``quality`` of a ``Truth`` (or any object with its hygiene fields) at ``now``.

    ``relevance`` replaces the stored one (the prune stage passes the post-decay value
    of a dry run, which is never written).
    """
    return quality(
        relevance=truth.relevance if relevance is None else relevance,
        access_count=truth.access_count,
        last_used=truth.last_accessed or truth.created_at,
        validated=truth.validated,
        now=now or timezone.now(),
    )
