"""Prune (loopctl's consolidate): truths whose relevance or quality fell below a floor.

After decay and the merges, a consolidatable truth is a prune candidate when its
post-decay relevance, or its quality (``quality.py``), is below
``IRIS_CONSOLIDATION_PRUNE_FLOOR`` (0.05). Protected truths (pinned, of origin user or
agent, at the max generation) are never candidates: they are not selected, and
``retire.retire`` checks again under the row lock. The stage retires them with reason
``pruned`` in apply mode only (``stages.run_prune``); undo is ``retire.restore``.
Writes nothing here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

from ...conf import app_settings
from ...models import Truth
from ...quality import quality


@dataclass(frozen=True, kw_only=True)
class PruneCandidate:
    """A truth below the floor, with the figures that put it there."""

    truth: Truth
    relevance: float
    quality: float

    def note(self) -> str:
        return f"relevance {self.relevance:.4f}, quality {self.quality:.4f} below the floor"


def find_candidates(
    *, user_id: int, now: datetime, relevance: Mapping[int, float] | None = None, floor: float | None = None
) -> tuple[int, list[PruneCandidate]]:
    """(truths examined, candidates) among ``user_id``'s consolidatable truths at ``now``.

    ``relevance`` overrides stored values (the decay stage's results in a dry run or in
    report mode, where nothing was written). ``floor`` defaults to the setting. One
    query; a candidate's ``truth`` carries the fields read (``_FIELDS``) and its user.
    """
    floor = float(app_settings.PRUNE_FLOOR if floor is None else floor)
    half_life = float(app_settings.HALF_LIFE_DAYS)
    overrides = relevance or {}
    rows = list(
        Truth.objects.for_user(user_id)
        .consolidatable(max_generation=app_settings.MAX_GENERATION)
        .order_by("created_at", "id")
        .values_list(*_FIELDS)
    )
    found = []
    # Rows, not model instances: a truth is built only for a candidate (few).
    for pk, content, stored, access_count, last_accessed, created_at, validated in rows:
        rel = overrides.get(pk, stored)
        score = quality(relevance=rel, access_count=access_count, last_used=last_accessed or created_at,
                        validated=validated, now=now, half_life_days=half_life)
        if rel < floor or score < floor:
            truth = Truth(id=pk, user_id=user_id, content=content, relevance=stored, access_count=access_count,
                          last_accessed=last_accessed, created_at=created_at, validated=validated)
            found.append(PruneCandidate(truth=truth, relevance=rel, quality=score))
    return len(rows), found


#: The columns ``find_candidates`` reads: what ``quality.quality_of`` reads, and the text.
_FIELDS = ("id", "content", "relevance", "access_count", "last_accessed", "created_at", "validated")
