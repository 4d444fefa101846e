"""Phase 1's neighbourhood groups: each seed beside its nearest truths from each arm, and
each single-valued attribute's truths together (iii's semantic tier; Hindsight's
consolidator judges a new memory beside its nearest ones).

Greedy seed clusters split dense memories: on LoCoMo a truth has many neighbours above the
threshold, a seed takes its four closest, and true partners land in different clusters
(32% of a careful reader's merge pairs shared one, none of its supersedes). Here:

1. **Edges**: each seed (a truth changed since the last pass; every truth on a first pass)
   with its ``NEIGHBOURHOOD_K`` nearest truths by cosine at or above the threshold,
   interleaved, when the lexical arm is judged, with its ``NEIGHBOURHOOD_LEXICAL_K``
   nearest by Jaccard of words among its pairs at or above the threshold (same kind, at
   least ``NEIGHBOURHOOD_JACCARD_FLOOR``; scoring only those bounds the work: all pairs at
   0.25 of a 100,000-truth user's random sentences took gigabytes). Each edge once, ranked by cosine. A floor below
   the threshold (0.30 at the local default of 0.40) was measured: the same recall once
   the attribute arm is there, and more calls; so ``--threshold`` still bounds the pairs.
2. **Groups**: rounds of capped agglomeration. In each round the edges not yet covered are
   joined, strongest first, into groups of at most ``NEIGHBOURHOOD_GROUP_SIZE`` truths (a
   join that would pass the cap is skipped); a group that covers an edge no earlier group
   covered is kept. Restatement groups of 3-5 stay together (their edges are the strongest
   and join first); overlapping windows are never sent twice (a group that adds no edge is
   dropped); the judge may split a group (partial merges).
3. **Attributes** (``attribute_groups``), with the lexical arm (both read words): a user's
   truths about one attribute ("home", "work", ...: ``text.attributes_of``) in time order,
   windows of the group size, each window with a seed, whatever their cosine; a window
   inside a group already made is dropped.

Measured with ``manage.py eval_recall`` (docs/benchmarks.md, "Recall of phase 1"): pair
recall of the whole-memory reference 0.39 -> 0.93 (merges), 0.21 -> 0.86 (supersedes), the
cases among other truths 0.89 -> 1.00, judge calls per 100 LoCoMo truths 3.29 -> 6.34.
Reads nothing from the database; writes nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

import numpy as np
from django.db.models import Q

from ...conf import app_settings
from ...models import Truth
from ...text.attributes import attributes_of_each
from .approximate_search import approximate_pairs
from .clustering import SIMILARITY_DECIMALS, CandidateCluster
from .exact_search import Pairs, exact_pairs, nearest_per_row
from .vectors import UserVectors, load_user_vectors

logger = logging.getLogger(__name__)


def neighbour_edges(
    users: UserVectors, pairs: Pairs, *, k: int, lexical: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
    lexical_k: int = 0,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(low, high, cosine)`` arrays of the distinct edges (positions into ``users``, low <
    high), strongest first (equal: lower positions first): each seed's ``k`` nearest of
    ``pairs`` and its ``lexical_k`` most similar of ``lexical`` ``(seed, member, jaccard)``."""
    rounded = np.round(pairs.similarities, SIMILARITY_DECIMALS)
    kept = nearest_per_row(pairs.seeds, pairs.members, rounded, k)
    a, b = pairs.seeds[kept], pairs.members[kept]
    if lexical is not None and lexical_k and lexical[0].shape[0]:
        seeds, members, scores = lexical
        near = nearest_per_row(seeds, members, scores, lexical_k)
        a, b = np.concatenate((a, seeds[near])), np.concatenate((b, members[near]))
    n = max(users.size, 1)
    low, high = np.minimum(a, b).astype(np.int64), np.maximum(a, b).astype(np.int64)
    key = np.sort(low * n + high)
    key = key[np.concatenate((key[:1] == key[:1], key[1:] != key[:-1]))]
    low, high = key // n, key % n
    cosine = np.round(np.einsum("ij,ij->i", users.vectors[low], users.vectors[high], dtype=np.float64),
                      SIMILARITY_DECIMALS)
    order = np.lexsort((high, low, -cosine))
    return low[order], high[order], cosine[order]


def _capped_groups(n: int, low: Sequence[int], high: Sequence[int], max_size: int) -> np.ndarray:
    """Each position's group (the lowest position of it) after joining the edges in order,
    a join skipped when the two groups together would pass ``max_size``."""
    parent = list(range(n))
    size = [1] * n
    for x, y in zip(low, high, strict=True):
        _join(parent, size, x, y, max_size)
    return np.fromiter((_root(parent, i) for i in range(n)), dtype=np.int64, count=n)


def neighbourhood_groups(
    users: UserVectors, edges: tuple[np.ndarray, np.ndarray, np.ndarray], *, user_id: int, max_size: int, rounds: int,
) -> list[CandidateCluster]:
    """Groups of the edges (``neighbour_edges``) by rounds of capped agglomeration (the
    module docstring), in the order they are made. Each group's first member is its first
    seed in position order, the others follow in position order, with their cosine
    similarity to it."""
    low, high, _ = edges
    if low.shape[0] <= FEW_EDGES:
        return [_cluster(users, positions, user_id=user_id)
                for positions in _few_edge_groups(low.tolist(), high.tolist(), max_size=max_size, rounds=rounds)]
    covered = np.zeros(low.shape[0], dtype=bool)
    groups: list[CandidateCluster] = []
    for _ in range(rounds):
        todo = np.flatnonzero(~covered)
        if todo.size == 0:
            break
        # Only the positions with an edge left take part: relabel them 0..m-1.
        nodes = np.unique(np.concatenate((low[todo], high[todo])))
        local = _capped_groups(nodes.shape[0], np.searchsorted(nodes, low[todo]).tolist(),
                               np.searchsorted(nodes, high[todo]).tolist(), max_size)
        label = np.full(users.size, -1, dtype=np.int64)
        label[nodes] = nodes[local]
        together = (label[low] == label[high]) & (label[low] >= 0)
        new_roots = np.unique(label[low[together & ~covered]])
        covered |= together
        if new_roots.size == 0:
            break
        members = np.flatnonzero(np.isin(label, new_roots))
        members = members[np.lexsort((members, label[members]))]
        bounds = np.flatnonzero(np.diff(label[members])) + 1
        for group in np.split(members, bounds):
            groups.append(_cluster(users, group, user_id=user_id))
    return groups


_SCALE = 10.0**SIMILARITY_DECIMALS


def _rounded(values: np.ndarray) -> np.ndarray:
    """``np.round(values, SIMILARITY_DECIMALS)`` by the same three steps NumPy takes (times
    10**decimals, ``rint``, divided back: the same values), without its dispatch, which took
    4 of a small group's 18 microseconds (7 December 2026)."""
    return np.rint(values * _SCALE) / _SCALE


#: Up to this many edges, ``neighbourhood_groups`` joins them in Python: a small user's 28
#: edges in 0.03 ms against 0.1 for the arrays' steps of its rounds (7 December 2026). The
#: same groups in the same order either way.
FEW_EDGES = 1_000


def _few_edge_groups(low: list[int], high: list[int], *, max_size: int, rounds: int) -> list[list[int]]:
    """``neighbourhood_groups``' rounds over few edges: each group's positions (ascending),
    groups in the order they are made (by round, then by their lowest position)."""
    covered = [False] * len(low)
    made: list[list[int]] = []
    for _ in range(rounds):
        todo = [i for i, done in enumerate(covered) if not done]
        if not todo:
            break
        parent: dict[int, int] = {}
        size: dict[int, int] = {}
        for i in todo:
            for p in (low[i], high[i]):
                parent[p] = p
                size[p] = 1
        for i in todo:  # as ``_capped_groups``: strongest first, a join past the cap skipped
            _join(parent, size, low[i], high[i], max_size)
        root = {p: _root(parent, p) for p in parent}
        new_roots: set[int] = set()
        for i, (a, b) in enumerate(zip(low, high, strict=True)):
            r = root.get(a)
            if r is not None and r == root.get(b):
                if not covered[i]:
                    new_roots.add(r)
                covered[i] = True
        if not new_roots:
            break
        members: dict[int, list[int]] = {r: [] for r in sorted(new_roots)}
        for p in sorted(root):
            if root[p] in members:
                members[root[p]].append(p)
        made.extend(members.values())
    return made


def _root(parent: dict[int, int] | list[int], x: int) -> int:
    """The root of ``x`` in the union-find ``parent``, halving the path on the way."""
    while parent[x] != x:
        parent[x] = parent[parent[x]]
        x = parent[x]
    return x


def _join(
    parent: dict[int, int] | list[int], size: dict[int, int] | list[int], x: int, y: int, max_size: int
) -> None:
    """Join the groups of ``x`` and ``y`` in the union-find ``parent`` (the lower root stays
    the root), unless they are one group already or together would pass ``max_size``."""
    rx, ry = _root(parent, x), _root(parent, y)
    if rx == ry or size[rx] + size[ry] > max_size:
        return
    if ry < rx:
        rx, ry = ry, rx
    parent[ry] = rx
    size[rx] += size[ry]


def _cluster(users: UserVectors, positions: Sequence[int] | np.ndarray, *, user_id: int) -> CandidateCluster:
    """A ``CandidateCluster`` of ``positions`` (ascending): the first seed first."""
    listed = positions.tolist() if isinstance(positions, np.ndarray) else list(positions)
    can_seed = users.can_seed
    first = next((p for p in listed if can_seed[p]), listed[0])
    order = [first, *(p for p in listed if p != first)]
    sims = _rounded(users.vectors[order] @ users.vectors[first].astype(np.float64)).tolist()
    return CandidateCluster(
        user_id=user_id, member_ids=tuple(users.ids[order].tolist()),
        similarities=(1.0, *(min(s, 1.0) for s in sims[1:])),
    )


def attribute_groups(
    users: UserVectors, rows: Sequence[tuple[int, str]], *, user_id: int, max_size: int,
) -> list[CandidateCluster]:
    """Groups of the truths of ``rows`` (``(id, content)`` in time order) that speak of one
    attribute (``text.attributes_of``), in windows of ``max_size`` that overlap by one
    truth, each window holding a seed of ``users``; attributes in name order. A truth
    without a vector in ``users`` is left out."""
    position = {int(pk): p for p, pk in enumerate(users.ids.tolist())}
    by_attribute: dict[str, list[int]] = {}
    found = [(position[pk], content) for pk, content in rows if pk in position]
    for (p, _), names in zip(found, attributes_of_each([content for _, content in found]), strict=True):
        for name in names:
            by_attribute.setdefault(name, []).append(p)
    groups: list[CandidateCluster] = []
    step = max(max_size - 1, 1)
    for name in sorted(by_attribute):
        positions = by_attribute[name]
        if len(positions) < 2:
            continue
        for start in range(0, max(len(positions) - 1, 1), step):
            window = np.asarray(positions[start : start + max_size], dtype=np.int64)
            if window.shape[0] >= 2 and users.can_seed[window].any():
                groups.append(_cluster(users, np.sort(window), user_id=user_id))
    return groups


def add_new(groups: list[CandidateCluster], extra: Sequence[CandidateCluster]) -> list[CandidateCluster]:
    """``groups`` and each group of ``extra`` whose members are not all in one group before it."""
    holding: dict[int, list[int]] = {}
    sets = [frozenset(g.member_ids) for g in groups]
    for position, group in enumerate(groups):
        for pk in group.member_ids:
            holding.setdefault(pk, []).append(position)
    out = list(groups)
    for group in extra:
        members = frozenset(group.member_ids)
        if not any(members <= sets[p] for p in holding.get(group.member_ids[0], ())):
            for pk in group.member_ids:
                holding.setdefault(pk, []).append(len(out))
            sets.append(members)
            out.append(group)
    return out


Edges = tuple[np.ndarray, np.ndarray, np.ndarray]


def find_groups(
    *,
    user_id: int,
    threshold: float | None = None,
    rows: Sequence[tuple[int, str, str]] | None = None,
    seed_filter: Q | None = None,
    small: bool = False,
    vectors: UserVectors | None = None,
    near_words: Callable[[UserVectors, Sequence[tuple[int, str, str]], np.ndarray, np.ndarray], Edges]
    | None = None,
    attributes: bool = True,
) -> list[CandidateCluster]:
    """Phase 1's groups of one user by neighbourhoods and attributes (the module
    docstring), at the settings. ``rows``: the user's live truths as ``(id, kind,
    content)`` in (created_at, id) order if the caller has read them (else one query);
    ``vectors``, ``seed_filter`` and ``small`` as for ``clustering.find_clusters``.
    ``near_words(users, rows, seeds, members)``: the lexical arm's ``(seed, member,
    jaccard)`` positions among the embedding's pairs (``lexical.neighbours``), or None when
    that arm is off. ``attributes``: add the attributes' groups (with
    ``SAME_ATTRIBUTE``). Queries: at most two. Writes nothing."""
    threshold = app_settings.SIMILARITY_THRESHOLD if threshold is None else threshold
    users = vectors
    if users is None:
        users = load_user_vectors(user_id=user_id, max_generation=app_settings.MAX_GENERATION,
                                  seed_filter=seed_filter, small=small)
    seeds = int(users.can_seed.sum())
    if seeds == 0:
        return []
    if rows is None:
        rows = list(Truth.objects.for_user(user_id).order_by("created_at", "id").values_list("id", "kind", "content"))
    floor = float(threshold)
    approximate = seeds >= app_settings.PHASE1_APPROXIMATE_FROM
    search = approximate_pairs if approximate else exact_pairs
    pairs = search(users, threshold=floor, memory_bytes=int(app_settings.PHASE1_MEMORY_MB * 1024 * 1024))
    lexical_k = int(app_settings.NEIGHBOURHOOD_LEXICAL_K)
    lexical = near_words(users, rows, pairs.seeds, pairs.members) if near_words is not None and lexical_k else None
    edges = neighbour_edges(users, pairs, k=int(app_settings.NEIGHBOURHOOD_K), lexical=lexical,
                            lexical_k=lexical_k)
    size = int(app_settings.NEIGHBOURHOOD_GROUP_SIZE)
    groups = neighbourhood_groups(users, edges, user_id=user_id, max_size=size,
                                  rounds=int(app_settings.NEIGHBOURHOOD_ROUNDS))
    if attributes and app_settings.SAME_ATTRIBUTE:
        groups = add_new(groups, attribute_groups(users, [(r[0], r[2]) for r in rows], user_id=user_id,
                                                  max_size=size))
    logger.info("user %s: %d groups (%d seeds among %d truths, %d edges, floor %.3f)", user_id, len(groups), seeds,
                users.size, edges[0].shape[0], floor)
    return groups
