"""Phase 1's exact neighbour search, in memory with numpy.

``exact_pairs`` finds every (seed, truth) pair at or above the threshold with blocked
float32 matrix products, then recomputes each candidate's cosine similarity in float64
before the threshold is applied (``mirror_and_refine``, which the approximate search
shares), so any block size and both searches agree on the edges. A seed keeps at most
its ``PHASE1_NEIGHBOURS`` (64) most similar pairs: the same clusters unless 60 of a
seed's 64 nearest are already taken, and bounded work and memory for a dense user whose
every truth is near thousands. Holds the ``Pairs`` value type. Reads nothing from the
database and writes nothing; the faiss index is in ``approximate_search``, the clusters
in ``clustering``.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...conf import app_settings
from ...models import EMBEDDING_DIMENSIONS
from .vectors import UserVectors

#: Slack under the threshold for the float32 screen; float32 products of unit vectors
#: of 384 dimensions are off by about 1e-6 at most, so nothing at or above the
#: threshold is lost before the float64 recomputation decides.
SCREEN_MARGIN = 1e-4
#: Tolerance of the final comparison: embeddings are stored as float32 (pgvector's
#: ``vector``), whose rounding moves a cosine similarity by about 1e-7; a pair at the
#: threshold up to that rounding counts as at the threshold (as pgvector's own
#: single-precision distance did).
THRESHOLD_TOLERANCE = 1e-6
#: Bytes per element of a similarity tile: the float32 product and the boolean mask.
TILE_BYTES_PER_ELEMENT = 5
#: Longest side of a similarity tile, in rows. Tiles on the diagonal are computed whole, so a
#: smaller side wastes fewer products there, while BLAS stays efficient (the sizes timed:
#: docs/benchmarks.md, "Measured constants").
MAX_TILE = 2048
#: Seeds x truths (2,000 x 2,000) at or below which the products run on one BLAS thread,
#: so a small user pays no thread wake-ups (docs/benchmarks.md, "Measured constants").
ONE_THREAD_UP_TO = 4_000_000


@dataclass(frozen=True, kw_only=True)
class Pairs:
    """(seed position, member position, cosine similarity) triples at or above the
    threshold, positions into ``UserVectors``; similarities in float64."""

    seeds: np.ndarray
    members: np.ndarray
    similarities: np.ndarray


def tile_side(memory_bytes: int) -> int:
    """Side of the square similarity tile that fits ``memory_bytes`` of working memory:
    the tile and its mask (``TILE_BYTES_PER_ELEMENT`` per element) and the copy of the
    block's seed vectors (1,536 bytes a row); at most ``MAX_TILE``, at least 16."""
    row_bytes = EMBEDDING_DIMENSIONS * 4
    # Largest s with TILE_BYTES_PER_ELEMENT * s^2 + row_bytes * s <= memory_bytes.
    a, b = TILE_BYTES_PER_ELEMENT, row_bytes
    side = int((-b + math.sqrt(b * b + 4 * a * max(memory_bytes, 0))) / (2 * a))
    return max(16, min(MAX_TILE, side))


def _refine(users: UserVectors, seeds: np.ndarray, members: np.ndarray, threshold: float, memory_bytes: int) -> Pairs:
    """Recompute the candidates' cosine similarities in float64 and keep those at or
    above ``threshold`` (less ``THRESHOLD_TOLERANCE``). Chunks fit ``memory_bytes``: two
    gathered float32 rows and their float64 copies, 9,216 bytes a pair."""
    step = max(64, memory_bytes // (EMBEDDING_DIMENSIONS * (4 + 8) * 2))
    sims = np.empty(seeds.shape[0], dtype=np.float64)
    # Each truth's float64 norm once (not once per pair it is in).
    norms = np.sqrt(np.einsum("ij,ij->i", users.vectors, users.vectors, dtype=np.float64))
    for start in range(0, seeds.shape[0], step):
        s, m = seeds[start : start + step], members[start : start + step]
        dots = np.einsum("ij,ij->i", users.vectors[s], users.vectors[m], dtype=np.float64)
        sims[start : start + step] = dots / np.clip(norms[s] * norms[m], 1e-12, None)
    keep = sims >= threshold - THRESHOLD_TOLERANCE
    return Pairs(seeds=seeds[keep], members=members[keep], similarities=np.minimum(sims[keep], 1.0))


def nearest_per_row(rows: np.ndarray, cols: np.ndarray, sims: np.ndarray, k: int) -> np.ndarray:
    """Indices of the pairs to keep so that each row keeps at most its ``k`` most similar
    (equal similarities: the lower column first); every pair when no row has more."""
    if rows.shape[0] == 0 or np.bincount(rows).max() <= k:
        return np.arange(rows.shape[0])
    order = np.lexsort((cols, -sims, rows))
    sorted_rows = rows[order]
    first = np.searchsorted(sorted_rows, sorted_rows, side="left")
    rank = np.arange(sorted_rows.shape[0]) - first
    return np.sort(order[rank < k])


_threadpools: Any = None


def blas_threads(seeds: int, truths: int) -> Any:
    """A context for the products of ``seeds`` rows by ``truths`` columns that keeps BLAS
    to one thread when they are small (``ONE_THREAD_UP_TO``), else changes nothing
    (threadpoolctl). Two threads on a small product cost more than they save, and
    OpenBLAS's second thread then spins for a while after each product, taking the core
    another worker or PostgreSQL would use (docs/benchmarks.md, "Measured constants")."""
    global _threadpools
    if seeds * truths > ONE_THREAD_UP_TO:
        return contextlib.nullcontext()
    if _threadpools is None:
        from threadpoolctl import ThreadpoolController

        _threadpools = ThreadpoolController()
    return _threadpools.limit(limits=1, user_api="blas")


def exact_pairs(users: UserVectors, *, threshold: float, memory_bytes: int) -> Pairs:
    """Every (seed, truth) pair with cosine similarity >= ``threshold``, exactly.

    Tiles of seed rows x truth columns, float32 products, at most ``tile_side`` on a
    side so a tile and its mask fit ``memory_bytes``. Pairs of two seeds are computed
    once (upper triangle) and mirrored; a seed's pairs with a non-seed before it are
    computed from the seed's side. Work: about s x n / 2 products for s seeds of n
    truths when all are seeds, s x n when few are.
    """
    seed_positions = np.flatnonzero(users.can_seed)
    with blas_threads(seed_positions.shape[0], users.size):
        return _exact_pairs(users, seed_positions, threshold=threshold, memory_bytes=memory_bytes)


class _EarlierPartners:
    """Pairs (earlier seed, later seed) that an earlier seed's own cap dropped, kept for
    the later seed: a pair of two seeds is computed once, from the earlier one's row, so
    a truth whose nearest is a hub (an earlier truth near more than ``PHASE1_NEIGHBOURS``
    others) would otherwise lose it. Each later seed keeps its ``k`` most similar; the
    lists are compacted to that whenever they exceed 2 * k pairs per truth."""

    def __init__(self, n: int, k: int) -> None:
        self.k, self.bound = k, 2 * k * max(n, 1)
        self.rows: list[np.ndarray] = []
        self.cols: list[np.ndarray] = []
        self.sims: list[np.ndarray] = []
        self.size = 0

    def add(self, rows: np.ndarray, cols: np.ndarray, sims: np.ndarray) -> None:
        kept = nearest_per_row(cols, rows, sims, self.k)  # per later seed, in this lot
        self.rows.append(rows[kept])
        self.cols.append(cols[kept])
        self.sims.append(sims[kept])
        self.size += kept.shape[0]
        if self.size > self.bound:
            self.compact()

    def compact(self) -> None:
        rows, cols, sims = np.concatenate(self.rows), np.concatenate(self.cols), np.concatenate(self.sims)
        kept = nearest_per_row(cols, rows, sims, self.k)
        self.rows, self.cols, self.sims = [rows[kept]], [cols[kept]], [sims[kept]]
        self.size = kept.shape[0]

    def add_dropped(
        self, rows: np.ndarray, cols: np.ndarray, sims: np.ndarray, kept: np.ndarray, can_seed: np.ndarray
    ) -> None:
        """Of the candidates (rows, cols, sims), those not in ``kept`` whose column is a
        later seed."""
        if kept.shape[0] == rows.shape[0]:
            return
        dropped = np.ones(rows.shape[0], dtype=bool)
        dropped[kept] = False
        dropped &= (cols > rows) & can_seed[cols]
        if dropped.any():
            self.add(rows[dropped], cols[dropped], sims[dropped])


def _exact_pairs(users: UserVectors, seed_positions: np.ndarray, *, threshold: float, memory_bytes: int) -> Pairs:
    n = users.size
    non_seed_before = np.cumsum(~users.can_seed)  # non-seeds at positions <= j
    side = tile_side(memory_bytes)
    screen = np.float32(threshold - SCREEN_MARGIN)
    found_rows: list[np.ndarray] = []
    found_cols: list[np.ndarray] = []
    neighbours = int(app_settings.PHASE1_NEIGHBOURS)
    earlier = _EarlierPartners(n, neighbours)
    for r0 in range(0, seed_positions.shape[0], side):
        rows = seed_positions[r0 : r0 + side]
        first = int(rows[0])
        block = users.vectors[rows]
        block_rows: list[np.ndarray] = []
        block_cols: list[np.ndarray] = []
        block_sims: list[np.ndarray] = []
        for c0 in range(0, n, side):
            c1 = min(n, c0 + side)
            if c1 <= first and non_seed_before[c1 - 1] == (non_seed_before[c0 - 1] if c0 else 0):
                continue  # only seeds here, all before this block: covered by their own rows
            seeds_here, cols, hit_s = _tile_pairs(
                users, rows, block, c0, c1, screen=screen, neighbours=neighbours, earlier=earlier
            )
            block_rows.append(seeds_here)
            block_cols.append(cols)
            block_sims.append(hit_s)
        if block_rows:
            seeds_here, cols, hit_s = np.concatenate(block_rows), np.concatenate(block_cols), np.concatenate(block_sims)
            kept = nearest_per_row(seeds_here, cols, hit_s, neighbours)
            earlier.add_dropped(seeds_here, cols, hit_s, kept, users.can_seed)
            found_rows.append(seeds_here[kept])
            found_cols.append(cols[kept])
    if earlier.size:
        earlier.compact()
        # Listed from the later seed's side; the mirror step adds the other side.
        found_rows.append(earlier.rows[0])
        found_cols.append(earlier.cols[0])
    return mirror_and_refine(
        users, found_rows, found_cols, threshold=threshold, memory_bytes=memory_bytes, dedupe=earlier.size > 0
    )


def _tile_pairs(
    users: UserVectors, rows: np.ndarray, block: np.ndarray, c0: int, c1: int, *,
    screen: np.float32, neighbours: int, earlier: _EarlierPartners,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(seed positions, truth positions, float32 similarities) of one tile, seed rows
    ``rows`` (their vectors ``block``) x truth columns ``c0:c1``: the pairs at or above
    ``screen`` that are this block's to compute (a seed with a later truth or an earlier
    non-seed), each seed's ``neighbours`` most similar. Later seeds' partners that a cap
    drops go to ``earlier``."""
    product = block @ users.vectors[c0:c1].T
    mask = product >= screen  # one pass over the tile (counted, then read)
    if neighbours < c1 - c0 and np.count_nonzero(mask) > neighbours * len(rows):
        del mask
        # Dense: each row's ``neighbours`` largest kept pairs, picked in place
        # (argpartition), not by sorting millions of hits.
        _drop_mirrors(product, users.can_seed, rows, c0, c1)
        if c1 > rows[0]:  # not only earlier columns
            _add_later_seeds_nearest(product, users.can_seed, rows, c0, c1, screen=screen, neighbours=neighbours,
                                     earlier=earlier)
        top = np.argpartition(product, -neighbours, axis=1)[:, -neighbours:]
        hit_s = np.take_along_axis(product, top, axis=1).ravel()
        hit_r = np.repeat(np.arange(len(rows)), neighbours)
        hit_c = top.ravel()
        del product, top
        above = hit_s >= screen
        seeds_here, cols, hit_s = rows[hit_r[above]], hit_c[above] + c0, hit_s[above]
        kept = nearest_per_row(seeds_here, cols, hit_s, neighbours)
        return seeds_here[kept], cols[kept], hit_s[kept]
    hit_r, hit_c = np.divmod(np.flatnonzero(mask), c1 - c0)  # faster than nonzero's two passes
    hit_s = product[hit_r, hit_c]
    del product, mask
    cols = hit_c + c0
    seeds_here = rows[hit_r]
    # Keep (seed, later truth), and (seed, earlier non-seed); the rest are mirrors.
    keep = (cols > seeds_here) | ((cols < seeds_here) & ~users.can_seed[cols])
    seeds_here, cols, hit_s = seeds_here[keep], cols[keep], hit_s[keep]
    kept = nearest_per_row(seeds_here, cols, hit_s, neighbours)
    earlier.add_dropped(seeds_here, cols, hit_s, kept, users.can_seed)
    return seeds_here[kept], cols[kept], hit_s[kept]


def _drop_mirrors(product: np.ndarray, can_seed: np.ndarray, rows: np.ndarray, c0: int, c1: int) -> None:
    """Set to -inf, in place, the products of a dense tile that are not this block's
    pairs: a seed with an earlier seed (computed from that seed's row)."""
    if c0 > rows[-1]:
        pass  # every column after every seed of the block: all kept
    elif c1 <= rows[0]:
        product[:, can_seed[c0:c1]] = -np.inf  # earlier seeds: their own rows
    else:
        columns = np.arange(c0, c1)
        mirror = ~((columns[None, :] > rows[:, None])
                   | ((columns[None, :] < rows[:, None]) & ~can_seed[c0:c1][None, :]))
        np.putmask(product, mirror, -np.inf)
        del mirror


def _add_later_seeds_nearest(
    product: np.ndarray, can_seed: np.ndarray, rows: np.ndarray, c0: int, c1: int, *,
    screen: np.float32, neighbours: int, earlier: _EarlierPartners,
) -> None:
    """Give ``earlier`` each later seed's nearest among this block's rows, from a dense
    tile (the rows' own cap may drop them)."""
    depth = min(neighbours, len(rows))
    by_column = np.ascontiguousarray(product.T)  # argpartition along rows of memory
    top = np.argpartition(by_column, -depth, axis=1)[:, -depth:]
    top_s = np.take_along_axis(by_column, top, axis=1).ravel()
    del by_column
    top_r, top_c = rows[top.ravel()], np.repeat(np.arange(c0, c1), depth)
    later = (top_s >= screen) & (top_c > top_r) & can_seed[top_c]
    earlier.add(top_r[later], top_c[later], top_s[later])


def mirror_and_refine(
    users: UserVectors, rows: list[np.ndarray], cols: list[np.ndarray], *, threshold: float, memory_bytes: int,
    dedupe: bool = False,
) -> Pairs:
    """The found (seed, truth) pairs, each pair of two seeds added from the other side
    too, recomputed in float64 and capped per seed. ``dedupe``: the same pair may have
    been found from both sides (the IVF path; a later seed's kept partner), keep it once."""
    n = users.size
    seeds = np.concatenate(rows) if rows else np.zeros(0, dtype=np.int64)
    members = np.concatenate(cols) if cols else np.zeros(0, dtype=np.int64)
    both = users.can_seed[members]
    seeds, members = np.concatenate([seeds, members[both]]), np.concatenate([members, seeds[both]])
    if dedupe:
        # Distinct pairs by a sort: numpy 2.4's ``np.unique`` hashes int64 keys, 100 times slower here.
        key = np.sort(seeds.astype(np.int64) * n + members.astype(np.int64))
        key = key[np.concatenate((key[:1] == key[:1], key[1:] != key[:-1]))]
        seeds, members = key // n, key % n
    return _nearest_pairs(_refine(users, seeds.astype(np.int64, copy=False), members.astype(np.int64, copy=False),
                                  threshold, memory_bytes))


def _nearest_pairs(pairs: Pairs) -> Pairs:
    """``pairs`` with each seed's at most ``PHASE1_NEIGHBOURS`` most similar members."""
    kept = nearest_per_row(pairs.seeds, pairs.members, pairs.similarities, int(app_settings.PHASE1_NEIGHBOURS))
    if kept.shape[0] == pairs.seeds.shape[0]:
        return pairs
    return Pairs(seeds=pairs.seeds[kept], members=pairs.members[kept], similarities=pairs.similarities[kept])


