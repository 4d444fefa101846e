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
from ...quality import quality_of


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
    report mode, where nothing was written). ``floor`` defaults to the setting.
    """
    floor = float(app_settings.PRUNE_FLOOR if floor is None else floor)
    overrides = relevance or {}
    truths = list(
        Truth.objects.for_user(user_id)
        .consolidatable(max_generation=app_settings.MAX_GENERATION)
        .defer("embedding")
        .order_by("created_at", "id")
    )
    found = []
    for truth in truths:
        rel = overrides.get(truth.pk, truth.relevance)
        score = quality_of(truth, now=now, relevance=rel)
        if rel < floor or score < floor:
            found.append(PruneCandidate(truth=truth, relevance=rel, quality=score))
    return len(truths), found
