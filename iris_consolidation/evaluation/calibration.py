"""Calibrate the similarity threshold: what each threshold costs and what it finds.

``calibrate_pairs`` runs the oracle judge (``oracle.OracleJudge``, the pairs' labels)
through clustering and the validator at each threshold (``pair_scoring.score_pairs_at``):
clusters, judge calls per 100 truths (one per cluster the pre-pass leaves, and batched
by ``pair_scoring.CLUSTERS_PER_BATCHED_CALL`` clusters per user), recall and precision of
"same" pairs, refusals by code. ``count_clusters`` needs no labels: it embeds a truths
file once and counts the clusters each threshold gives. Both write nothing that
outlives the call (scratch users in a transaction rolled back at the end).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from pathlib import Path

from django.db import transaction

from .. import run_settings
from ..embeddings import Embedder
from ..exceptions import InvalidInput
from ..models import Truth
from ..services.operations import transfer
from ..services.pipeline import clustering, vectors
from . import pair_scoring, scoring

#: 0.40, 0.45, ..., 0.90: the measured range.
DEFAULT_THRESHOLDS: tuple[float, ...] = tuple(round(0.40 + 0.05 * i, 2) for i in range(11))


def calibrate_pairs(
    pairs_path: Path, *, embedder: Embedder, thresholds: tuple[float, ...] = DEFAULT_THRESHOLDS
) -> list[pair_scoring.PairsReport]:
    """One oracle ``PairsReport`` per threshold, in the order given.

    Raises ``InvalidInput`` for a missing or bad file or a threshold outside (0, 1].
    """
    return pair_scoring.score_pairs_at(pairs_path, thresholds=thresholds, embedder=embedder, oracle=True)


@dataclass(frozen=True, kw_only=True)
class ClusterCount:
    """Clusters a threshold gives on a truths file, with the calls they would cost."""

    threshold: float
    truths: int
    clusters: int
    batched_calls: int

    @property
    def clusters_per_100(self) -> float:
        return 100.0 * self.clusters / self.truths if self.truths else 0.0

    @property
    def batched_per_100(self) -> float:
        return 100.0 * self.batched_calls / self.truths if self.truths else 0.0


def count_clusters(
    truths_path: Path, *, embedder: Embedder, thresholds: tuple[float, ...] = DEFAULT_THRESHOLDS
) -> list[ClusterCount]:
    """Clusters per threshold on a truths file (the ``load_truths`` format), embedded once.

    Raises ``InvalidInput`` for a missing or bad file or a threshold outside (0, 1].
    """
    values = [run_settings.validate_threshold(t) for t in thresholds]
    if not truths_path.is_file():
        raise InvalidInput(scoring.NO_FILE.format(path=truths_path))
    with truths_path.open(encoding="utf-8") as handle:
        rows = transfer.parse_truths(handle, path=str(truths_path))
    tag = uuid.uuid4().hex[:8]
    counts: list[ClusterCount] = []
    try:
        with transaction.atomic():
            users = {name: scoring.scratch_user(tag, name) for name in sorted({r["user"] for r in rows})}
            Truth.objects.bulk_create([Truth(**{**r, "user": users[r["user"]]}) for r in rows], batch_size=1000)
            for user in users.values():
                vectors.embed_missing(user_id=user.pk, embedder=embedder)
            for threshold in values:
                per_user = [len(clustering.find_clusters(user_id=u.pk, threshold=threshold)) for u in users.values()]
                counts.append(
                    ClusterCount(
                        threshold=threshold,
                        truths=len(rows),
                        clusters=sum(per_user),
                        batched_calls=pair_scoring.batched_calls(per_user),
                    )
                )
            raise scoring.ScratchRollback
    except scoring.ScratchRollback:
        pass
    return counts
