"""Phase 1's approximate neighbour search, with a faiss IVF index.

Used from ``PHASE1_APPROXIMATE_FROM`` seeds on (``clustering.find_clusters``):
``approximate_pairs`` builds an IVF index over the user's vectors (float16 codes, inner
product on unit vectors) and searches it by range; its candidates are recomputed in
float64 and capped per seed as the exact ones are (``exact_search.mirror_and_refine``).
It checks its own recall against the exact pairs of a sample of seeds
(``sampled_recall``) and probes more cells while that is below ``IVF_MIN_RECALL``; recall
is also measured in ``benchmarks/phase1.py``. faiss is an optional dependency, imported
when an index is built. Reads nothing from the database and writes nothing.
"""

from __future__ import annotations

import logging
import math
from typing import Any

import numpy as np

from ...conf import app_settings
from ...models import EMBEDDING_DIMENSIONS
from .exact_search import THRESHOLD_TOLERANCE, Pairs, mirror_and_refine, nearest_per_row
from .vectors import UserVectors

logger = logging.getLogger(__name__)

#: IVF layout: 4 * sqrt(n) cells, k-means over every vector (not 40 per cell: that is
#: what lifts recall) for 2 iterations, 12 cells probed per query; chosen on planted unit
#: vectors with benchmarks/phase1.py, where it found 99.5% of the exact pairs at 100,000
#: truths (docs/benchmarks.md, "Measured constants"). On dense real embeddings the exact
#: path was as fast, hence the switch at ``PHASE1_APPROXIMATE_FROM`` (50,000) seeds.
IVF_CELLS_PER_SQRT_N = 4.0
IVF_PROBES = 12
IVF_TRAIN_ITERATIONS = 2
#: Screen slack of the index's float16 codes: a stored component is off by at most
#: 2**-11 of itself (half an ulp), so an inner product of unit vectors is off by at most
#: 2**-11 * sum |q_i x_i| <= 4.9e-4 (Cauchy-Schwarz); the float64 recomputation decides.
FP16_SCREEN_MARGIN = 1e-3
#: The IVF path checks itself: the exact pairs of ``IVF_RECALL_SAMPLE`` seeds (256 x n
#: products) against what it found; below ``IVF_MIN_RECALL`` it probes twice as many cells
#: and searches again (the recalls seen at 12 probes: docs/benchmarks.md, "Measured constants").
IVF_MIN_RECALL = 0.99
IVF_RECALL_SAMPLE = 256
#: Bytes per range-search hit while a step of queries is handled: faiss's label (8) and
#: similarity (4), then the hit's seed, mask and filtered copies before the nearest are
#: kept (about 36 more).
RANGE_HIT_BYTES = 48


def approximate_pairs(users: UserVectors, *, threshold: float, memory_bytes: int) -> Pairs:
    """Pairs at or above ``threshold`` found with a faiss IVF index (inner product on
    unit vectors, vectors stored as float16 codes) searched by range: approximate,
    recall of the exact pairs measured in ``benchmarks/phase1.py`` (kept at 99% or
    more). Each seed queries the index; pairs of two seeds found from either side are
    kept once. Memory: the index holds 776 bytes per truth (float16 codes and an id),
    each truth's probed cells 144 bytes more; queries run in steps whose results fit
    ``memory_bytes`` even if every vector of the probed cells is a hit.
    """
    x = users.vectors
    n = users.size
    # No more cells than vectors: k-means needs a point per centroid (a user of 5 truths
    # under PHASE1_APPROXIMATE_FROM = 1 would otherwise fail in faiss).
    cells = max(1, min(n, int(IVF_CELLS_PER_SQRT_N * math.sqrt(n))))
    probes = min(cells, IVF_PROBES)
    quantizer, index, probe_cells, probe_sims = _ivf_index(x, cells=cells, probes=probes, memory_bytes=memory_bytes)
    seed_positions = np.flatnonzero(users.can_seed)
    sizes = np.sort([index.invlists.list_size(cell) for cell in range(cells)])

    def search(cells_probed: np.ndarray, sims_probed: np.ndarray) -> Pairs:
        return _range_pairs(users, index, seed_positions, cells_probed, sims_probed, sizes=sizes,
                            threshold=threshold, memory_bytes=memory_bytes)

    pairs = search(probe_cells[seed_positions], probe_sims[seed_positions])
    del probe_cells, probe_sims
    sample = _recall_sample(seed_positions)
    found, expected = sampled_recall(users, pairs, sample, threshold=threshold, memory_bytes=memory_bytes)
    while found < IVF_MIN_RECALL * expected and probes < cells:
        # Pairs far apart at a loose threshold sit in cells the query did not probe: probe
        # twice as many (real embeddings of template sentences at 0.75 needed 24).
        logger.info("faiss IVF: %d of %d sampled exact pairs at %d probes; probing %d",
                    found, expected, probes, min(cells, 2 * probes))
        probes = min(cells, 2 * probes)
        index.nprobe = probes
        sims, cells_found = quantizer.search(np.ascontiguousarray(x[seed_positions]), probes)
        pairs = search(cells_found, sims)
        del sims, cells_found
        found, expected = sampled_recall(users, pairs, sample, threshold=threshold, memory_bytes=memory_bytes)
    logger.info("faiss IVF: %d of %d sampled exact pairs at %d probes of %d cells", found, expected, probes, cells)
    return pairs


def _ivf_index(x: np.ndarray, *, cells: int, probes: int, memory_bytes: int) -> tuple[Any, Any, np.ndarray, np.ndarray]:
    """(quantizer, index, probe cells, probe similarities): a trained IVF index of ``cells``
    cells holding every row of ``x`` (n, 384), set to probe ``probes`` cells, and each
    row's ``probes`` nearest cells (n, probes) int64 with their similarities (float32)."""
    import faiss

    n = x.shape[0]
    quantizer = faiss.IndexFlatIP(EMBEDDING_DIMENSIONS)
    index = faiss.IndexIVFScalarQuantizer(
        quantizer, EMBEDDING_DIMENSIONS, cells, faiss.ScalarQuantizer.QT_fp16, faiss.METRIC_INNER_PRODUCT
    )
    index.by_residual = False  # codes of the vectors themselves: the error bound above holds
    index.cp.niter = IVF_TRAIN_ITERATIONS
    index.cp.seed = 1234  # faiss's default, stated: the same vectors give the same cells
    index.cp.max_points_per_centroid = max(1, math.ceil(n / cells))  # train on every vector
    index.cp.min_points_per_centroid = 1  # no warning for a small user: every vector is used
    index.train(x)
    index.nprobe = probes
    # Each vector's ``probes`` nearest cells, found once: the nearest places it in the
    # index, and a seed's query probes them all (faiss would search the quantizer twice).
    probe_cells = np.empty((n, probes), dtype=np.int64)
    probe_sims = np.empty((n, probes), dtype=np.float32)
    step = max(256, memory_bytes // (EMBEDDING_DIMENSIONS * 4 * 8))
    for start in range(0, n, step):
        chunk = np.ascontiguousarray(x[start : start + step])
        sims, cells_found = quantizer.search(chunk, probes)
        probe_cells[start : start + step], probe_sims[start : start + step] = cells_found, sims
        nearest = np.ascontiguousarray(cells_found[:, 0])
        index.add_core(chunk.shape[0], faiss.swig_ptr(chunk), None, faiss.swig_ptr(nearest))
    return quantizer, index, probe_cells, probe_sims


def _range_pairs(
    users: UserVectors, index: Any, seed_positions: np.ndarray, cells_probed: np.ndarray, sims_probed: np.ndarray,
    *, sizes: np.ndarray, threshold: float, memory_bytes: int,
) -> Pairs:
    """The pairs the seeds' range queries find, refined and capped per seed. Rows of
    ``cells_probed`` / ``sims_probed`` follow ``seed_positions``; ``sizes``: the index's
    cell sizes, ascending."""
    x = users.vectors
    radius = float(threshold - FP16_SCREEN_MARGIN)
    neighbours = int(app_settings.PHASE1_NEIGHBOURS)
    # A query returns at most every vector of the cells it probes: for a dense user (every
    # truth near thousands) the results, not the queries, are what must fit the budget.
    most_hits = int(sizes[-cells_probed.shape[1] :].sum())
    query_step = max(1, memory_bytes // (EMBEDDING_DIMENSIONS * 4 + RANGE_HIT_BYTES * most_hits))
    rows: list[np.ndarray] = []
    cols: list[np.ndarray] = []
    for start in range(0, seed_positions.shape[0], query_step):
        queries = seed_positions[start : start + query_step]
        lims, found_sims, found = index.range_search_preassigned(
            np.ascontiguousarray(x[queries]), radius,
            cells_probed[start : start + query_step], sims_probed[start : start + query_step],
        )
        seeds_here = np.repeat(queries, np.diff(lims).astype(np.int64))
        keep = found != seeds_here
        seeds_here, found, found_sims = seeds_here[keep], found[keep], found_sims[keep]
        kept = nearest_per_row(seeds_here, found, found_sims, neighbours)
        rows.append(seeds_here[kept])
        cols.append(found[kept])
    return mirror_and_refine(users, rows, cols, threshold=threshold, memory_bytes=memory_bytes, dedupe=True)


def _recall_sample(seed_positions: np.ndarray) -> np.ndarray:
    """``IVF_RECALL_SAMPLE`` seed positions, the same for the same seeds (a fixed rng)."""
    if seed_positions.shape[0] <= IVF_RECALL_SAMPLE:
        return seed_positions
    rng = np.random.default_rng(0)
    return np.sort(rng.choice(seed_positions, size=IVF_RECALL_SAMPLE, replace=False))


def sampled_recall(
    users: UserVectors, pairs: Pairs, sample: np.ndarray, *, threshold: float, memory_bytes: int
) -> tuple[int, int]:
    """(found, expected): the exact pairs of the ``sample`` seeds (positions), found by
    brute force (``len(sample)`` x n float32 products, in rows that fit
    ``memory_bytes``), and how many of them ``pairs`` holds.

    A seed with more than ``PHASE1_NEIGHBOURS`` exact pairs expects its that many most
    similar; a found pair counts when its similarity reaches the last expected one's less
    1e-5 (near-duplicate texts tie at the cut; float32 products differ by about 1e-6).
    """
    k = int(app_settings.PHASE1_NEIGHBOURS)
    x = users.vectors
    expected = found = 0
    order = np.lexsort((pairs.members, pairs.seeds))
    seeds_sorted = pairs.seeds[order]
    chunk_rows = max(1, min(256, memory_bytes // (8 * max(users.size, 1))))
    for start in range(0, sample.shape[0], chunk_rows):
        chunk = sample[start : start + chunk_rows]
        product = x[chunk] @ x.T
        product[np.arange(chunk.shape[0]), chunk] = -np.inf  # not itself
        for row, seed in enumerate(chunk.tolist()):
            hits = product[row][product[row] >= threshold - THRESHOLD_TOLERANCE]
            if hits.shape[0] == 0:
                continue
            want = min(k, hits.shape[0])
            cut = np.partition(hits, hits.shape[0] - want)[hits.shape[0] - want]
            lo, hi = np.searchsorted(seeds_sorted, [seed, seed + 1])
            have = pairs.similarities[order[lo:hi]]
            expected += want
            found += min(want, int(np.count_nonzero(have >= cut - 1e-5)))
    return found, expected


