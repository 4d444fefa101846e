"""The lexical arm of phase 1: greedy Jaccard clustering (loopctl), interleaved with the
embedding's clusters (iii's two arms).

Tokens are ``text.tokens`` (lower-cased, contractions expanded, punctuation
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

from collections import Counter, defaultdict
from collections.abc import Sequence
from itertools import chain, repeat

import numpy as np
from django.db.models import Q

from ...conf import app_settings
from ...models import Truth
from ...text import tokens, tokens_of_each
from ..pipeline import exact_search, vectors
from ..pipeline.clustering import CandidateCluster


def token_set(text: str) -> frozenset[str]:
    """The lexical arm's tokens of ``text`` (``text.tokens`` as a set)."""
    return frozenset(tokens(text))


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
    seed_ids = set(
        Truth.objects.for_user(user_id)
        .consolidatable(max_generation=app_settings.MAX_GENERATION)
        .filter(seed_filter if seed_filter is not None else Q())
        .values_list("id", flat=True)
    )
    rows = list(Truth.objects.for_user(user_id).order_by("created_at", "id").values_list("id", "kind", "content"))
    return lexical_clusters(
        rows, user_id=user_id, seed_ids=seed_ids, threshold=threshold, max_size=max_size, min_size=min_size,
        taken=taken,
    )


def lexical_clusters(
    rows: Sequence[tuple[int, str, str]],
    *,
    user_id: int,
    seed_ids: set[int] | frozenset[int],
    threshold: float,
    max_size: int | None = None,
    min_size: int | None = None,
    taken: set[int] | frozenset[int] = frozenset(),
) -> list[CandidateCluster]:
    """``find_lexical_clusters`` over ``rows`` (``(id, kind, content)`` of the user's live
    truths in (created_at, id) order), ``seed_ids`` the truths that may seed. Reads nothing.

    The pairs at or above ``threshold`` are found at once (``jaccard_pairs``, exact), then
    the greedy pass takes each seed in row order with its free partners, most similar
    first (equal scores: lower id first), up to ``max_size`` members.
    """
    max_size = max_size or app_settings.MAX_CLUSTER_SIZE
    min_size = min_size or app_settings.MIN_CLUSTER_SIZE
    ids = [pk for pk, _, _ in rows]
    token_sets = list(map(frozenset, tokens_of_each([content for _, _, content in rows])))
    seeds, members, scores = jaccard_pairs(token_sets, [kind for _, kind, _ in rows], threshold)
    # Per seed row: partners most similar first, equal scores by lower truth id.
    id_array = np.asarray(ids, dtype=np.int64)
    order = np.lexsort((id_array[members] if members.size else members, -scores, seeds))
    seeds, members, scores = seeds[order], members[order].tolist(), scores[order].tolist()
    bounds = np.searchsorted(seeds, np.arange(len(rows) + 1), side="left")
    partnered = np.flatnonzero(np.diff(bounds)).tolist()  # rows with a partner, in order
    bounds = bounds.tolist()
    assigned = bytearray(len(rows))
    blocked = bytearray(len(rows))  # assigned, or taken by the other arm: never a member
    for row, pk in enumerate(ids):
        if pk in taken:
            blocked[row] = 1
    clusters: list[CandidateCluster] = []
    # A row with no partner changes nothing and makes no cluster of ``min_size`` >= 2: only
    # the rows with partners are visited, in row order.
    for row in partnered if min_size >= 2 else range(len(rows)):
        pk = ids[row]
        if pk not in seed_ids or assigned[row] or not token_sets[row]:
            continue
        chosen = [k for k in range(bounds[row], bounds[row + 1]) if not blocked[members[k]]][: max_size - 1]
        if len(chosen) + 1 < min_size:
            continue
        assigned[row] = blocked[row] = 1
        for k in chosen:
            assigned[members[k]] = blocked[members[k]] = 1
        clusters.append(
            CandidateCluster(
                user_id=user_id,
                member_ids=(pk, *(ids[members[k]] for k in chosen)),
                similarities=(1.0, *(round(scores[k], 6) for k in chosen)),
            )
        )
    return clusters


#: Candidate entries generated at a time (bounds the working memory of ``jaccard_pairs``
#: to a few hundred MB whatever the user's size).
PAIR_CHUNK = 2_000_000


def jaccard_pairs(
    token_sets: Sequence[frozenset[str]], kinds: Sequence[str], threshold: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every ordered pair of positions ``(a, b)``, ``a != b``, of the same kind with
    Jaccard similarity >= ``threshold``, and that similarity: three arrays (int64,
    int64, float64), each pair listed both ways. Exact.

    Candidates come from prefix filtering (All-Pairs: Bayardo, Ma and Srikant, WWW 2007;
    PPJoin: Xiao, Wang, Lin and Yu, WWW 2008), tokens ordered rarest first (ties by the
    token), sets in order of size (then position). Two sets ``y`` before ``x`` with
    Jaccard >= t share at least ``ceil(t |x|)`` tokens and at least ``2t / (1 + t) |y|``,
    so their first common token lies among x's first ``|x| - ceil(t |x|) + 1`` tokens
    (the probing prefix) and among y's first ``|y| - ceil(2t / (1 + t) |y|) + 1`` (the
    indexing prefix): every such pair shares a token of the same kind there. Candidates
    then pass the length filter and the positional one (``_candidates``). The survivors'
    intersections are counted exactly (``_overlaps``) and scored
    ``|a ∩ b| / (|a| + |b| - |a ∩ b|)`` in float64, the same division as ``jaccard``.
    """
    n = len(token_sets)
    empty = (np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float64))
    if n < 2:
        return empty
    frequency: Counter[str] = Counter(chain.from_iterable(token_sets))
    if n * n * len(frequency) <= DENSE_PAIRS_UP_TO:
        return _dense_pairs(token_sets, kinds, threshold, frequency=frequency)
    rank = {token: r for r, token in enumerate(sorted(frequency, key=lambda t: (frequency[t], t)))}
    vocabulary = max(len(rank), 1)
    kind_code = {kind: c for c, kind in enumerate(sorted(set(kinds)))}
    lengths = np.fromiter((len(t) for t in token_sets), dtype=np.int64, count=n)
    # Each set's token ranks, ascending (rarest first), concatenated row after row.
    flat = np.fromiter((rank[t] for tokens in token_sets for t in tokens), dtype=np.int64, count=int(lengths.sum()))
    row_of = np.repeat(np.arange(n, dtype=np.int64), lengths)
    flat = flat[np.lexsort((flat, row_of))]
    offsets = np.concatenate(([0], np.cumsum(lengths)))
    position = np.arange(flat.shape[0], dtype=np.int64) - offsets[row_of]
    probe_len = np.clip(lengths - np.ceil(threshold * lengths - 1e-9).astype(np.int64) + 1, 0, lengths)
    mid = 2.0 * threshold / (1.0 + threshold)
    index_len = np.clip(lengths - np.ceil(mid * lengths - 1e-9).astype(np.int64) + 1, 0, probe_len)
    codes = np.fromiter((kind_code[k] for k in kinds), dtype=np.int64, count=n)
    # Processing order of a set: by size, then by position.
    order_of = lengths * n + np.arange(n, dtype=np.int64)
    span = int(order_of.max()) + 1
    group = codes[row_of] * vocabulary + flat
    probing = position < probe_len[row_of]
    indexing = position < index_len[row_of]
    # The index: (group, order) keys of the indexing entries, sorted.
    i_key = group[indexing] * span + order_of[row_of[indexing]]
    i_sort = np.argsort(i_key, kind="stable")
    index = (i_key[i_sort], row_of[indexing][i_sort], position[indexing][i_sort])
    # Each probing entry meets the indexing entries of its group ordered before its set.
    probes = (row_of[probing], position[probing], group[probing] * span)
    a, b = _candidates(probes, index, lengths=lengths, order_of=order_of, threshold=threshold)
    if a.shape[0] == 0:
        return empty
    return _scored(
        a, b, threshold=threshold, row_of=row_of, flat=flat, offsets=offsets, lengths=lengths, vocabulary=vocabulary
    )


def _scored(
    a: np.ndarray, b: np.ndarray, *, threshold: float, row_of: np.ndarray, flat: np.ndarray, offsets: np.ndarray,
    lengths: np.ndarray, vocabulary: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``jaccard_pairs``' result from its candidate rows ``(a, b)`` (a pair may come more
    than once): each distinct pair's intersection counted exactly (``_overlaps``), the pairs
    scoring ``threshold`` or more listed both ways with their score. ``row_of``, ``flat``,
    ``offsets`` and ``lengths``: the sets' token ranks row after row, as ``jaccard_pairs``
    lays them out."""
    n = lengths.shape[0]
    # Distinct pairs by a sort: numpy 2.4's ``np.unique`` hashes int64 keys, 100 times slower here.
    key = np.sort(np.minimum(a, b) * n + np.maximum(a, b))
    key = key[np.concatenate((key[:1] == key[:1], key[1:] != key[:-1]))]
    a, b = key // n, key % n
    shared = _overlaps(a, b, row_keys=row_of * vocabulary + flat, flat=flat, offsets=offsets, lengths=lengths,
                       vocabulary=vocabulary)
    score = shared / (lengths[a] + lengths[b] - shared)
    good = score >= threshold
    a, b, score = a[good], b[good], score[good]
    return np.concatenate((a, b)), np.concatenate((b, a)), np.concatenate((score, score))


#: ``jaccard_pairs`` of at most this many (sets x sets x distinct tokens) counts every
#: intersection at once with a matrix product (``_dense_pairs``): a user of 100 truths in
#: 0.1 ms against 0.6 by prefix filtering, whose steps cost more than the work they save
#: at that size (3 December 2026). Either way the pairs and scores are the same.
DENSE_PAIRS_UP_TO = 20_000_000


def _dense_pairs(
    token_sets: Sequence[frozenset[str]], kinds: Sequence[str], threshold: float, *, frequency: Counter[str]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``jaccard_pairs`` by counting every intersection: a 0/1 matrix of sets x tokens
    times its transpose (float32, exact for counts below 2**24), then the same score
    ``|a ∩ b| / (|a| + |b| - |a ∩ b|)`` in float64 and the same filter, pairs in the
    same (a, b) order. ``frequency``: the number of sets each token is in."""
    n = len(token_sets)
    # Only a token of two sets or more is in an intersection of two sets: the others (most
    # of a user's words) get no column; only the product's diagonal changes.
    shared_tokens = [token for token, count in frequency.items() if count >= 2]
    column = dict(zip(shared_tokens, range(len(shared_tokens)), strict=True))
    lengths = np.fromiter(map(len, token_sets), dtype=np.int64, count=n)
    cells = np.fromiter(map(column.get, chain.from_iterable(token_sets), repeat(-1)), dtype=np.int64,
                        count=int(lengths.sum()))
    shared_cell = cells >= 0
    incidence = np.zeros((n, max(len(column), 1)), dtype=np.float32)
    incidence[np.repeat(np.arange(n), lengths)[shared_cell], cells[shared_cell]] = 1.0
    with exact_search.blas_threads(n, n):
        shared = incidence @ incidence.T
    kind_code = {kind: c for c, kind in enumerate(sorted(set(kinds)))}
    codes = np.fromiter(map(kind_code.__getitem__, kinds), dtype=np.int64, count=n)
    # The pairs a < b of one kind that share a token, row after row.
    sharing = shared > 0
    if len(kind_code) > 1:
        sharing &= codes[:, None] == codes[None, :]
    a, b = np.nonzero(np.triu(sharing, 1))
    common = shared[a, b].astype(np.int64)
    score = common / (lengths[a] + lengths[b] - common)
    good = score >= threshold
    a, b, score = a[good].astype(np.int64), b[good].astype(np.int64), score[good]
    return np.concatenate((a, b)), np.concatenate((b, a)), np.concatenate((score, score))


def _candidates(
    probes: tuple[np.ndarray, np.ndarray, np.ndarray], index: tuple[np.ndarray, np.ndarray, np.ndarray], *,
    lengths: np.ndarray, order_of: np.ndarray, threshold: float,
) -> tuple[np.ndarray, np.ndarray]:
    """The (x, y) rows of ``jaccard_pairs``' candidates: each probing entry ``(row,
    position, group key)`` against the index entries ``(key, row, position)`` of its group
    ordered before its row, ``PAIR_CHUNK`` at a time, kept by the length filter and the
    positional one (PPJoin: sharing the tokens at positions i and j bounds the overlap by
    ``1 + min(|x| - i - 1, |y| - j - 1)``, the largest bound at their first common token),
    both with slack, so they only drop pairs that cannot reach the threshold."""
    p_rows, p_pos, p_key = probes
    i_key, i_rows, i_pos = index
    first = np.searchsorted(i_key, p_key, side="left")
    counts = np.searchsorted(i_key, p_key + order_of[p_rows], side="left") - first
    found_a: list[np.ndarray] = [np.zeros(0, dtype=np.int64)]
    found_b: list[np.ndarray] = [np.zeros(0, dtype=np.int64)]
    cumulative = np.cumsum(counts)
    start = 0
    while start < counts.shape[0]:
        base = cumulative[start - 1] if start else 0
        stop = max(int(np.searchsorted(cumulative, base + PAIR_CHUNK, side="right")), start + 1)
        c = counts[start:stop]
        total = int(c.sum())
        if total:
            probe = np.repeat(np.arange(start, stop), c)
            entry = first[probe] + np.arange(total) - np.repeat(np.cumsum(c) - c, c)
            x, y = p_rows[probe], i_rows[entry]
            lx, ly = lengths[x], lengths[y]
            need = threshold / (1.0 + threshold) * (lx + ly) - 1e-9
            bound = 1 + np.minimum(lx - p_pos[probe] - 1, ly - i_pos[entry] - 1)
            keep = (bound >= need) & (ly >= threshold * lx - 1e-9)
            found_a.append(x[keep])
            found_b.append(y[keep])
        start = stop
    return np.concatenate(found_a), np.concatenate(found_b)


#: Sets of at most this many tokens are intersected by comparing every token with every
#: token (``_overlaps``); longer ones by a sorted lookup of each token.
DENSE_TOKENS = 16


def _overlaps(
    a: np.ndarray, b: np.ndarray, *, row_keys: np.ndarray, flat: np.ndarray, offsets: np.ndarray,
    lengths: np.ndarray, vocabulary: int,
) -> np.ndarray:
    """|a ∩ b| of each pair of rows, ``PAIR_CHUNK / 8`` pairs at a time: pairs of short
    sets (``DENSE_TOKENS``) by comparing their padded token ranks all against all, the
    others by looking each token of a up among b's (``row_keys``: row * vocabulary +
    rank, sorted)."""
    shared = np.zeros(a.shape[0], dtype=np.int64)
    width = int(min(lengths.max(), DENSE_TOKENS))
    short = np.flatnonzero(lengths <= width)
    padded = np.full((lengths.shape[0], width), -1, dtype=np.int64)  # -1: no token
    within = np.arange(offsets[-1]) - np.repeat(offsets[:-1], lengths)
    rows = np.repeat(np.arange(lengths.shape[0]), lengths)
    keep = np.isin(rows, short)
    padded[rows[keep], within[keep]] = flat[keep]
    dense = (lengths[a] <= width) & (lengths[b] <= width)
    step = max(1, PAIR_CHUNK // 8)
    for lo in range(0, a.shape[0], step):
        part = np.arange(lo, min(lo + step, a.shape[0]))
        near = part[dense[part]]
        if near.size:
            left, right = padded[a[near]], padded[b[near]]
            same = (left[:, :, None] == right[:, None, :]) & (left[:, :, None] >= 0)
            shared[near] = same.sum(axis=(1, 2))
        far = part[~dense[part]]
        if far.size:
            aa, bb = a[far], b[far]
            pair_len = lengths[aa]
            pair_of = np.repeat(np.arange(aa.shape[0]), pair_len)
            inside = np.arange(pair_of.shape[0]) - np.repeat(np.cumsum(pair_len) - pair_len, pair_len)
            probe_key = bb[pair_of] * vocabulary + flat[offsets[aa][pair_of] + inside]
            at = np.minimum(np.searchsorted(row_keys, probe_key), row_keys.shape[0] - 1)
            shared[far] = np.bincount(pair_of[row_keys[at] == probe_key], minlength=aa.shape[0])
    return shared


def neighbours(
    users: vectors.UserVectors, rows: Sequence[tuple[int, str, str]], seeds: np.ndarray, members: np.ndarray, *,
    floor: float,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(seed, member, jaccard)`` of the candidate pairs ``(seeds, members)`` (positions into
    ``users``; the embedding's pairs at or above the threshold) whose truths are of one kind
    and share at least ``floor`` of their words (Jaccard of ``token_set``); ``rows``: the
    user's live truths as ``(id, kind, content)``. The neighbourhoods' lexical edges
    (``neighbourhoods.find_groups``): only pairs the embedding found are scored, so the work
    is bounded by the embedding's ``PHASE1_NEIGHBOURS`` pairs a seed, whatever the floor."""
    empty = (np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float64))
    if seeds.shape[0] == 0:
        return empty
    # Only the truths of a candidate pair are read (a small user's few pairs name a few).
    involved = np.zeros(users.size, dtype=bool)
    involved[seeds] = True
    involved[members] = True
    position = {int(users.ids[p]): int(p) for p in np.flatnonzero(involved)}
    words: list[frozenset[str]] = [frozenset()] * users.size
    kinds: list[str] = [""] * users.size
    found = [(position[pk], kind, content) for pk, kind, content in rows if pk in position]
    for (p, kind, _), tokens_of in zip(found, tokens_of_each([c for _, _, c in found]), strict=True):
        words[p], kinds[p] = frozenset(tokens_of), kind
    if seeds.shape[0] <= FEW_PAIRS:
        return _few_neighbours(seeds, members, words, kinds, floor=floor)
    rank: dict[str, int] = {}
    for token in chain.from_iterable(words):
        rank.setdefault(token, len(rank))
    vocabulary = max(len(rank), 1)
    lengths = np.fromiter(map(len, words), dtype=np.int64, count=users.size)
    flat = np.fromiter((rank[t] for w in words for t in w), dtype=np.int64, count=int(lengths.sum()))
    row_of = np.repeat(np.arange(users.size, dtype=np.int64), lengths)
    flat = flat[np.lexsort((flat, row_of))]
    offsets = np.concatenate(([0], np.cumsum(lengths)))
    codes = {kind: c for c, kind in enumerate(sorted(set(kinds)))}
    kind_code = np.fromiter((codes[k] for k in kinds), dtype=np.int64, count=users.size)
    same = (kind_code[seeds] == kind_code[members]) & (lengths[seeds] > 0) & (lengths[members] > 0)
    a, b = seeds[same].astype(np.int64), members[same].astype(np.int64)
    if a.shape[0] == 0:
        return empty
    shared = _overlaps(a, b, row_keys=row_of * vocabulary + flat, flat=flat, offsets=offsets, lengths=lengths,
                       vocabulary=vocabulary)
    score = shared / (lengths[a] + lengths[b] - shared)
    keep = score >= floor
    return a[keep], b[keep], score[keep]


#: Up to this many candidate pairs, ``neighbours`` intersects each pair's word sets in
#: Python: a small user's 56 pairs in 0.02 ms against 0.1 for the arrays' steps (7 December
#: 2026). The same pairs and scores either way.
FEW_PAIRS = 2_000


def _few_neighbours(
    seeds: np.ndarray, members: np.ndarray, words: Sequence[frozenset[str]], kinds: Sequence[str], *, floor: float,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``neighbours``' result for few pairs: each pair of one kind whose word sets are both
    non-empty and share at least ``floor`` (Jaccard), in the pairs' order."""
    kept_a: list[int] = []
    kept_b: list[int] = []
    scores: list[float] = []
    for a, b in zip(seeds.tolist(), members.tolist(), strict=True):
        wa, wb = words[a], words[b]
        if not wa or not wb or kinds[a] != kinds[b]:
            continue
        shared = len(wa & wb)
        score = shared / (len(wa) + len(wb) - shared)
        if score >= floor:
            kept_a.append(a)
            kept_b.append(b)
            scores.append(score)
    return (np.asarray(kept_a, dtype=np.int64), np.asarray(kept_b, dtype=np.int64),
            np.asarray(scores, dtype=np.float64))


def interleave(
    semantic: Sequence[CandidateCluster], lexical: Sequence[CandidateCluster]
) -> tuple[list[CandidateCluster], int]:
    """The two arms' clusters alternated (semantic first), and how many lexical clusters
    were added; a lexical cluster whose members all sit in one semantic cluster is dropped.

    Only the semantic clusters that hold a lexical cluster's seed can hold all of it, so
    each is compared with those alone: a truth is in one semantic cluster, or a few (a
    nearest pair's member is in another cluster too). Comparing each with every semantic
    cluster took 2.3 s for a user of 100,000 truths (8,330 semantic clusters, 5 December
    2026)."""
    covered = [set(c.member_ids) for c in semantic]
    holding: defaultdict[int, list[int]] = defaultdict(list)  # truth id -> its semantic clusters
    for position, cluster in enumerate(semantic):
        for pk in cluster.member_ids:
            holding[pk].append(position)
    extra = [c for c in lexical
             if not any(set(c.member_ids) <= covered[p] for p in holding.get(c.member_ids[0], ()))]
    merged: list[CandidateCluster] = []
    for i in range(max(len(semantic), len(extra))):
        if i < len(semantic):
            merged.append(semantic[i])
        if i < len(extra):
            merged.append(extra[i])
    return merged, len(extra)
