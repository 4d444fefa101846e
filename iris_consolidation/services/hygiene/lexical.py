"""The lexical arm of phase 1: greedy Jaccard clustering (loopctl), interleaved with the
embedding's clusters (iii's two arms).

Tokens are ``textfacts.tokens`` (lower-cased, contractions expanded, punctuation
trimmed); the Jaccard similarity of two truths is |A ∩ B| / |A ∪ B| over their token
sets. Greedy, as the embedding arm: consolidatable truths seed in a stable order
(created_at, id); each unassigned seed gathers unassigned live truths **of the same
kind** whose Jaccard similarity to the seed (never to the last member: no chaining)
is >= ``IRIS_CONSOLIDATION_JACCARD_THRESHOLD`` (0.6), most similar first, up to
``MAX_CLUSTER_SIZE``; clusters of at least ``MIN_CLUSTER_SIZE`` are kept. Protected
truths may join but never seed.

A truth already in one of the embedding's clusters may seed a lexical cluster but
never join one (``taken``), so the arm adds what the embedding left out without
splitting what it found. These are candidates only: they go through the same judge
and validator as the embedding's, so a Jaccard match alone never merges. ``interleave`` alternates the two
arms' clusters, so a near-duplicate the embedding ranks low is still judged early,
and drops a lexical cluster that lies inside one embedding cluster (already judged).
Reads only.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Sequence

from django.db.models import Q

from ... import textfacts
from ...conf import app_settings
from ...models import Truth
from ..pipeline.clustering import CandidateCluster


def token_set(text: str) -> frozenset[str]:
    """The lexical arm's tokens of ``text`` (``textfacts.tokens`` as a set)."""
    return frozenset(textfacts.tokens(text))


def jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    """|a ∩ b| / |a ∪ b|; 0 for two empty sets."""
    union = len(a | b)
    return len(a & b) / union if union else 0.0


def find_lexical_clusters(
    *,
    user_id: int,
    threshold: float | None = None,
    max_size: int | None = None,
    min_size: int | None = None,
    seed_filter: Q | None = None,
    taken: set[int] | frozenset[int] = frozenset(),
) -> list[CandidateCluster]:
    """Greedy Jaccard clusters of one user's truths (see the module docstring).

    ``similarities`` of each cluster are Jaccard similarities to the seed (1.0 for the
    seed). ``seed_filter`` restricts the seeds (incremental passes). ``taken``: truths
    already in a cluster of the other arm; they may seed a lexical cluster but never
    join one as a member, so the lexical arm only adds what the embedding left out
    (a truth the embedding ranked below its threshold, or cut from a full cluster) and
    never splits a group the embedding found. Two queries.
    """
    threshold = float(app_settings.JACCARD_THRESHOLD if threshold is None else threshold)
    max_size = max_size or app_settings.MAX_CLUSTER_SIZE
    min_size = min_size or app_settings.MIN_CLUSTER_SIZE
    seed_ids = set(
        Truth.objects.for_user(user_id)
        .consolidatable(max_generation=app_settings.MAX_GENERATION)
        .filter(seed_filter if seed_filter is not None else Q())
        .values_list("id", flat=True)
    )
    rows = list(Truth.objects.for_user(user_id).order_by("created_at", "id").values_list("id", "kind", "content"))
    tokens = {pk: token_set(content) for pk, _, content in rows}
    index = _prefix_index(rows, tokens, threshold)
    assigned: set[int] = set()
    clusters: list[CandidateCluster] = []
    for seed_id, kind, _ in rows:
        if seed_id not in seed_ids or seed_id in assigned or not tokens[seed_id]:
            continue
        seed_tokens = tokens[seed_id]
        candidates = {pk for token in _prefix(seed_tokens, index.rank, threshold) for pk in index.lists[(kind, token)]}
        # Length filter: |B| >= threshold * |A| and |A| >= threshold * |B| for any pair reaching it.
        shortest, longest = threshold * len(seed_tokens) - 1e-9, len(seed_tokens) / threshold + 1e-9
        scored = []
        for pk in candidates:
            if pk == seed_id or pk in assigned or pk in taken:
                continue
            other = tokens[pk]
            if not shortest <= len(other) <= longest:
                continue
            shared = len(seed_tokens & other)
            score = shared / (len(seed_tokens) + len(other) - shared)
            if score >= threshold:
                scored.append((-score, pk))
        scored.sort()
        members = scored[: max_size - 1]
        if len(members) + 1 < min_size:
            continue
        ids = (seed_id, *(pk for _, pk in members))
        assigned.update(ids)
        sims = (1.0, *(round(-s, 6) for s, _ in members))
        clusters.append(CandidateCluster(user_id=user_id, member_ids=ids, similarities=sims))
    return clusters


class _PrefixIndex:
    """Inverted lists of each truth's prefix tokens, keyed by (kind, token); ``rank`` orders
    tokens from rarest to most common (ties by the token)."""

    def __init__(self, rank: dict[str, tuple[int, str]], lists: dict[tuple[str, str], list[int]]) -> None:
        self.rank = rank
        self.lists = lists


def _prefix(token_set_: frozenset[str], rank: dict[str, tuple[int, str]], threshold: float) -> list[str]:
    """The prefix filter of All-Pairs (Bayardo, Ma and Srikant, "Scaling up all pairs
    similarity search", WWW 2007): with tokens ordered rarest first, two sets of Jaccard
    similarity >= ``threshold`` share a token among each one's first
    ``|x| - ceil(threshold * |x|) + 1`` tokens, since they share at least
    ``ceil(threshold * |x|)`` tokens. Indexing and probing only prefixes keeps every pair
    at or above the threshold and skips the long lists of common words."""
    ordered = sorted(token_set_, key=rank.__getitem__)
    keep = len(ordered) - math.ceil(threshold * len(ordered) - 1e-9) + 1
    return ordered[: max(keep, 0)]


def _prefix_index(
    rows: Sequence[tuple[int, str, str]], tokens: dict[int, frozenset[str]], threshold: float
) -> _PrefixIndex:
    frequency: Counter[str] = Counter(token for pk, _, _ in rows for token in tokens[pk])
    rank = {token: (count, token) for token, count in frequency.items()}
    lists: dict[tuple[str, str], list[int]] = defaultdict(list)
    for pk, kind, _ in rows:
        for token in _prefix(tokens[pk], rank, threshold):
            lists[(kind, token)].append(pk)
    return _PrefixIndex(rank, lists)


def interleave(
    semantic: Sequence[CandidateCluster], lexical: Sequence[CandidateCluster]
) -> tuple[list[CandidateCluster], int]:
    """The two arms' clusters alternated (semantic first), and how many lexical clusters
    were added; a lexical cluster whose members all sit in one semantic cluster is dropped."""
    covered = [set(c.member_ids) for c in semantic]
    extra = [c for c in lexical if not any(set(c.member_ids) <= s for s in covered)]
    merged: list[CandidateCluster] = []
    for i in range(max(len(semantic), len(extra))):
        if i < len(semantic):
            merged.append(semantic[i])
        if i < len(extra):
            merged.append(extra[i])
    return merged, len(extra)
