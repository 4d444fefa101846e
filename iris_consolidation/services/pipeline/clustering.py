"""Phase 1 of consolidation for one user: embed what lacks an embedding, then
build clusters of candidate duplicates by greedy clustering.

Greedy clustering (DESIGN.md, flow step 2): consolidatable truths are taken in a
stable order (created_at, id). For each one not yet in a cluster (the seed), its
nearest live truths of the same user with cosine similarity to the seed >= threshold
are gathered, nearest first, skipping truths already in a cluster, up to
``max_size`` members in all. A cluster is kept if it has at least ``min_size``
members. Every candidate is compared with the seed, never with the last member
added, so A~B and B~C never pull A and C together (no chaining). Protected truths
may join a cluster as members (the judge sees them, the validator keeps them) but
never seed one. Writes: embeddings only.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from django.db import transaction
from django.db.models import Q

from ...conf import app_settings
from ...embeddings import Embedder
from ...models import Truth
from ...querysets import set_hnsw_search

logger = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class CandidateCluster:
    """Truth ids of one cluster (seed first, then nearest first) and their cosine
    similarity to the seed (1.0 for the seed), in the same order."""

    user_id: int
    member_ids: tuple[int, ...]
    similarities: tuple[float, ...]

    @property
    def seed_id(self) -> int:
        return self.member_ids[0]


def embed_missing(*, user_id: int, embedder: Embedder, batch_size: int | None = None) -> int:
    """Embed the user's live truths that have no embedding from ``embedder``'s model.

    Batches of ``batch_size`` texts (default ``EMBEDDING_BATCH_SIZE``); each batch is
    written in its own short transaction with ``bulk_update``. Returns how many truths
    were embedded. Raises ``EmbeddingError`` (nothing of the failing batch is written).
    """
    batch_size = batch_size or app_settings.EMBEDDING_BATCH_SIZE
    pending = list(
        Truth.objects.for_user(user_id)
        .missing_embedding(model_name=embedder.model_name)
        .order_by("id")
        .values_list("id", "content")
    )
    for start in range(0, len(pending), batch_size):
        batch = pending[start : start + batch_size]
        vectors = embedder.embed([content for _, content in batch])
        rows = [
            Truth(id=pk, embedding=vector, embedding_model=embedder.model_name)
            for (pk, _), vector in zip(batch, vectors, strict=True)
        ]
        with transaction.atomic():
            Truth.all_objects.bulk_update(rows, ["embedding", "embedding_model"])
    return len(pending)


def find_clusters(
    *,
    user_id: int,
    threshold: float | None = None,
    max_size: int | None = None,
    min_size: int | None = None,
    max_generation: int | None = None,
    seed_filter: Q | None = None,
) -> list[CandidateCluster]:
    """Greedy clusters of one user's truths (see the module docstring). Writes nothing.

    ``threshold`` is a cosine similarity in (0, 1]; the rest default to the settings.
    ``seed_filter`` restricts which truths may seed a cluster (incremental passes:
    truths changed after the cursor); neighbours are still any live truth.
    Queries: one for the seeds, then one pgvector nearest-neighbour query per seed not
    yet clustered (more only when more than ``4 * max_size`` of its neighbours are
    within the threshold but already taken).
    """
    threshold = app_settings.SIMILARITY_THRESHOLD if threshold is None else threshold
    max_size = max_size or app_settings.MAX_CLUSTER_SIZE
    min_size = min_size or app_settings.MIN_CLUSTER_SIZE
    max_generation = max_generation or app_settings.MAX_GENERATION

    seeds = (
        Truth.objects.for_user(user_id)
        .consolidatable(max_generation=max_generation)
        .with_embedding()
        .filter(seed_filter if seed_filter is not None else Q())
        .order_by("created_at", "id")
        .values_list("id", "embedding")
    )
    pool = Truth.objects.for_user(user_id)
    max_distance = 1.0 - threshold
    assigned: set[int] = set()
    clusters: list[CandidateCluster] = []
    with transaction.atomic():
        set_hnsw_search(ef_search=app_settings.HNSW_EF_SEARCH)
        for seed_id, vector in seeds.iterator(chunk_size=2000):
            if seed_id in assigned:
                continue
            limit = max_size * 4
            while True:
                # The k nearest, then the threshold in Python (see TruthQuerySet.nearest).
                found = pool.nearest(vector, limit=limit).values_list("id", "distance", "created_at")
                # Equal distances (identical texts) in a stable order: oldest first, then id.
                rows = [(pk, d) for pk, d, _ in sorted(found, key=lambda r: (r[1], r[2], r[0]))]
                within = [(pk, d) for pk, d in rows if d <= max_distance]
                members = [(pk, 1.0 - d) for pk, d in within if pk != seed_id and pk not in assigned]
                # Done when the cluster is full, the user has no more truths, or the
                # nearest rows already reach past the threshold.
                if len(members) >= max_size - 1 or len(rows) < limit or len(within) < len(rows):
                    break
                limit *= 4
            members = members[: max_size - 1]
            if len(members) + 1 < min_size:
                continue
            ids = (seed_id, *(pk for pk, _ in members))
            sims = (1.0, *(round(min(1.0, s), 6) for _, s in members))
            assigned.update(ids)
            clusters.append(CandidateCluster(user_id=user_id, member_ids=ids, similarities=sims))
    logger.info("user %s: %d clusters at threshold %.3f", user_id, len(clusters), threshold)
    return clusters
