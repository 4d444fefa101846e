"""Phase 1's in-memory neighbour search against a brute-force reference.

The reference below is the module docstring's rules written the slow, obvious way:
the full float64 cosine matrix, seeds in (created_at, id) order, members ranked by
similarity (rounded as reported) then age, capped, compared with the seed only.
"""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from iris_consolidation.services.pipeline import approximate_search, clustering
from iris_consolidation.services.pipeline.approximate_search import approximate_pairs
from iris_consolidation.services.pipeline.clustering import SIMILARITY_DECIMALS, greedy_clusters
from iris_consolidation.services.pipeline.exact_search import THRESHOLD_TOLERANCE, exact_pairs, tile_side
from iris_consolidation.services.pipeline.vectors import UserVectors

MB = 1024 * 1024


def reference_clusters(
    vectors: np.ndarray,
    can_seed: np.ndarray,
    *,
    threshold: float,
    max_size: int,
    min_size: int,
    nearest_pairs: bool = False,
) -> list[tuple[int, ...]]:
    """Greedy seed-compared clusters by brute force (positions, not ids), then with
    ``nearest_pairs`` each seed left out with its nearest neighbour."""
    x = vectors.astype(np.float64)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    sims = x @ x.T
    assigned: set[int] = set()
    clusters = []
    for seed in range(len(x)):
        if not can_seed[seed] or seed in assigned:
            continue
        near = [
            (round(float(min(sims[seed, j], 1.0)), SIMILARITY_DECIMALS), j)
            for j in range(len(x))
            if j != seed and j not in assigned and sims[seed, j] >= threshold - THRESHOLD_TOLERANCE
        ]
        near.sort(key=lambda sj: (-sj[0], sj[1]))
        members = [j for _, j in near[: max_size - 1]]
        if len(members) + 1 < min_size:
            continue
        assigned.update([seed, *members])
        clusters.append((seed, *members))
    if not nearest_pairs or min_size > 2:
        return clusters
    for seed in range(len(x)):
        near = [
            (round(float(min(sims[seed, j], 1.0)), SIMILARITY_DECIMALS), j)
            for j in range(len(x))
            if j != seed and sims[seed, j] >= threshold - THRESHOLD_TOLERANCE
        ]
        if can_seed[seed] and seed not in assigned and near:
            clusters.append((seed, min(near, key=lambda sj: (-sj[0], sj[1]))[1]))
    return clusters


def planted(n: int, *, seed: int, dims: int = 384, grouped: float = 0.4) -> np.ndarray:
    """Random unit vectors with planted groups whose members sit at cosine 0.7-0.98
    to the group's first vector, some of them exact duplicates (ties)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, dims)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    i = 0
    while i < n - 1:
        if rng.random() < grouped:
            size = int(rng.integers(2, 9))
            centre = x[i].copy()
            for j in range(i + 1, min(n, i + size)):
                if rng.random() < 0.2:
                    x[j] = centre  # a tie with other duplicates of the same vector
                    continue
                noise = x[j] - centre * float(x[j] @ centre)
                noise /= np.linalg.norm(noise)
                cos = float(rng.uniform(0.7, 0.98))
                x[j] = cos * centre + np.sqrt(1 - cos * cos) * noise
            i += size
        else:
            i += 1
    return x


def in_memory(vectors: np.ndarray, can_seed: np.ndarray, *, search=exact_pairs, memory_bytes: int = 64 * MB, **kw):
    users = UserVectors(ids=np.arange(len(vectors), dtype=np.int64), vectors=vectors.copy(), can_seed=can_seed)
    pairs = search(users, threshold=kw["threshold"], memory_bytes=memory_bytes)
    clusters = greedy_clusters(
        users,
        pairs,
        user_id=1,
        max_size=kw["max_size"],
        min_size=kw["min_size"],
        nearest_pairs=kw.get("nearest_pairs", False),
    )
    return [c.member_ids for c in clusters]


@pytest.mark.parametrize("nearest_pairs", [False, True])
@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize(("threshold", "max_size", "min_size"), [(0.75, 5, 2), (0.9, 3, 2), (0.7, 8, 3)])
def test_exact_pass_equals_the_brute_force_reference(seed, threshold, max_size, min_size, nearest_pairs):
    x = planted(600, seed=seed)
    can_seed = np.random.default_rng(seed).random(600) > 0.1  # a tenth protected: join, never seed
    rules = {"threshold": threshold, "max_size": max_size, "min_size": min_size, "nearest_pairs": nearest_pairs}

    got = in_memory(x, can_seed, **rules)

    assert got == reference_clusters(x, can_seed, **rules)
    assert len(got) > 20


def test_tiny_tiles_give_the_same_clusters_as_one_tile():
    # A 1 KB budget makes 16 x 16 tiles: the upper triangle, mirrors and the
    # non-seed columns before a block must all still be covered.
    x = planted(300, seed=4)
    can_seed = np.random.default_rng(4).random(300) > 0.3
    rules = {"threshold": 0.75, "max_size": 5, "min_size": 2}

    small = in_memory(x, can_seed, memory_bytes=1024, **rules)

    assert tile_side(1024) == 16
    assert small == in_memory(x, can_seed, memory_bytes=256 * MB, **rules)
    assert small == reference_clusters(x, can_seed, **rules)


def test_incremental_seeds_are_compared_with_every_truth():
    # Only the last 50 may seed (after the cursor); they cluster with older truths.
    x = planted(500, seed=5)
    x[480] = x[10]  # a new truth equal to an old one
    can_seed = np.zeros(500, dtype=bool)
    can_seed[450:] = True
    rules = {"threshold": 0.8, "max_size": 5, "min_size": 2, "nearest_pairs": True}

    got = in_memory(x, can_seed, **rules)

    assert got == reference_clusters(x, can_seed, **rules)
    assert any(c[0] == 480 and 10 in c for c in got)
    assert all(c[0] >= 450 for c in got)


def test_no_seed_gives_no_pairs():
    x = planted(50, seed=6)
    assert in_memory(x, np.zeros(50, dtype=bool), threshold=0.5, max_size=5, min_size=2) == []


def test_approximate_path_finds_99_percent_of_the_exact_pairs_on_planted_data():
    x = planted(20_000, seed=7, grouped=0.3)
    users = UserVectors(ids=np.arange(len(x), dtype=np.int64), vectors=x, can_seed=np.ones(len(x), dtype=bool))

    exact = exact_pairs(users, threshold=0.75, memory_bytes=64 * MB)
    approx = approximate_pairs(users, threshold=0.75, memory_bytes=64 * MB)

    exact_set = set(zip(exact.seeds.tolist(), exact.members.tolist(), strict=True))
    approx_set = set(zip(approx.seeds.tolist(), approx.members.tolist(), strict=True))
    assert len(exact_set) > 10_000
    assert approx_set <= exact_set  # the float64 check admits no false pair
    assert len(approx_set) / len(exact_set) >= 0.99


def test_a_dense_user_on_the_approximate_path_gets_results_that_fit_the_budget(monkeypatch):
    # 3,000 truths all near one another: every vector of a probed cell is a hit, so each
    # step's results, not its queries, must fit (faiss's own buffers are not traced by
    # tracemalloc, so the results of every range search are counted as they come).
    import faiss

    rng = np.random.default_rng(3)
    centre = rng.standard_normal(384)
    x = (centre + 0.3 * rng.standard_normal((3_000, 384)) / np.sqrt(384)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    users = UserVectors(ids=np.arange(len(x), dtype=np.int64), vectors=x, can_seed=np.ones(len(x), dtype=bool))
    budget = MB // 2
    steps: list[tuple[int, int]] = []
    search = faiss.IndexIVF.range_search_preassigned

    def counted(index, queries, *args, **kwargs):
        lims, sims, labels = search(index, queries, *args, **kwargs)
        steps.append((queries.shape[0], labels.shape[0]))
        return lims, sims, labels

    monkeypatch.setattr(faiss.IndexIVF, "range_search_preassigned", counted)
    pairs = approximate_pairs(users, threshold=0.75, memory_bytes=budget)

    assert pairs.seeds.shape[0] >= len(x) * 60  # dense: nearly every seed keeps 64
    searched = sum(queries for queries, _ in steps)
    assert searched >= len(x) and searched % len(x) == 0  # every seed, once a search (more probes: again)
    assert max(hits for _, hits in steps) > 64 * max(queries for queries, _ in steps)  # dense indeed
    for queries, hits in steps:
        assert queries * 384 * 4 + hits * approximate_search.RANGE_HIT_BYTES <= budget


def capped_reference_pairs(x: np.ndarray, can_seed: np.ndarray, threshold: float, k: int) -> set[tuple[int, int]]:
    """Each seed's ``k`` most similar others at or above ``threshold``, by brute force."""
    sims = x.astype(np.float64) @ x.astype(np.float64).T
    found = set()
    for seed in np.flatnonzero(can_seed):
        near = sorted((-sims[seed, j], j) for j in range(len(x)) if j != seed and sims[seed, j] >= threshold)
        found.update((int(seed), j) for _, j in near[:k])
    return found


@pytest.mark.parametrize("memory_bytes", [64 * MB, 64 * 1024])
def test_a_truth_whose_nearest_is_a_hub_keeps_it(settings, memory_bytes):
    # Truth 0 (the hub) is near 20 others at cosine 0.86-0.955; the last truth's only
    # neighbour is the hub (0.78). A pair of two seeds is computed from the earlier one's row, where
    # the hub keeps its 8 nearest: the last truth lost its only pair (found by a fresh
    # user's trial: 221 of 248 sparse truths of LoCoMo as one user lost pairs).
    settings.IRIS_CONSOLIDATION_PHASE1_NEIGHBOURS = 8
    rng = np.random.default_rng(5)
    basis, _ = np.linalg.qr(rng.standard_normal((384, 384)))
    hub = basis[:, 0]
    x = [hub]
    for i in range(20):  # cosine 0.86-0.955 with the hub, no two alike (no ties)
        c = 0.86 + 0.005 * i
        x.append(c * hub + np.sqrt(1 - c * c) * basis[:, 1 + i])
    for i in range(30):  # unrelated truths between them
        x.append(basis[:, 100 + i])
    x.append(0.78 * hub + np.sqrt(1 - 0.78**2) * basis[:, 300])  # at most 0.745 with the hub's neighbours
    x = np.asarray(x, dtype=np.float32)
    users = UserVectors(ids=np.arange(len(x), dtype=np.int64), vectors=x, can_seed=np.ones(len(x), dtype=bool))
    last = len(x) - 1

    pairs = exact_pairs(users, threshold=0.75, memory_bytes=memory_bytes)

    found = set(zip(pairs.seeds.tolist(), pairs.members.tolist(), strict=True))
    assert {p for p in found if p[0] == last} == {(last, 0)}
    assert found == capped_reference_pairs(x, users.can_seed, 0.75 - 1e-6, 8)
    clusters = greedy_clusters(users, pairs, user_id=1, max_size=5, min_size=2, nearest_pairs=True)
    assert (last, 0) in [c.member_ids for c in clusters]


def test_the_approximate_path_probes_more_cells_until_its_sample_finds_99_percent(caplog):
    # Pairs at cosine 0.42-0.55 among random vectors, threshold 0.40: far apart, so 12 of
    # the 219 cells find few of them (a fresh user's trial: 68.8% on LoCoMo users forced
    # onto this path). The path checks a sample against brute force and probes more.
    from iris_consolidation.services.pipeline.approximate_search import sampled_recall

    rng = np.random.default_rng(11)
    x = rng.standard_normal((3_000, 384))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    for i in range(0, 1_000, 2):
        noise = x[i + 1] - x[i] * (x[i + 1] @ x[i])
        cos = rng.uniform(0.42, 0.55)
        x[i + 1] = cos * x[i] + np.sqrt(1 - cos * cos) * noise / np.linalg.norm(noise)
    x = x.astype(np.float32)
    users = UserVectors(ids=np.arange(len(x), dtype=np.int64), vectors=x, can_seed=np.ones(len(x), dtype=bool))

    with caplog.at_level("INFO", logger="iris_consolidation"):
        pairs = approximate_pairs(users, threshold=0.40, memory_bytes=16 * MB)

    found, expected = sampled_recall(users, pairs, np.arange(len(x)), threshold=0.40, memory_bytes=16 * MB)
    assert expected >= 1_000
    assert found / expected >= 0.99
    assert "probing 24" in caplog.text  # it did need more than 12


@pytest.mark.parametrize("n", [1, 2, 3, 5, 9])
def test_the_approximate_path_takes_a_user_smaller_than_its_cell_count(n):
    # 4 * sqrt(n) cells would outnumber the vectors (faiss's k-means then fails): an
    # operator may set PHASE1_APPROXIMATE_FROM to 1. With at most 12 cells every cell is
    # probed, so the pairs are the exact ones.
    x = planted(n, seed=n)
    if n > 1:
        x[1] = x[0]  # at least one pair
    users = UserVectors(ids=np.arange(n, dtype=np.int64), vectors=x, can_seed=np.ones(n, dtype=bool))

    approx = approximate_pairs(users, threshold=0.75, memory_bytes=MB)
    exact = exact_pairs(users, threshold=0.75, memory_bytes=MB)

    assert sorted(zip(approx.seeds.tolist(), approx.members.tolist(), strict=False)) == sorted(
        zip(exact.seeds.tolist(), exact.members.tolist(), strict=False)
    )
    assert approx.seeds.shape[0] >= (2 if n > 1 else 0)


@pytest.mark.parametrize("search", [exact_pairs, approximate_pairs])
def test_working_memory_stays_within_the_budget(search):
    # 8,000 truths: one full similarity matrix would be 256 MB; a 4 MB budget holds.
    # On the IVF path faiss's own allocations (the index: 776 bytes a truth, documented)
    # are not traced; every numpy array is, the probed cells (12 bytes a probe) too.
    x = planted(8_000, seed=8)
    users = UserVectors(ids=np.arange(len(x), dtype=np.int64), vectors=x, can_seed=np.ones(len(x), dtype=bool))
    budget = 4 * MB
    import faiss  # noqa: F401  (importing the module is not the path's working memory)

    tracemalloc.start()
    try:
        pairs = search(users, threshold=0.75, memory_bytes=budget)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()

    # Found lists, their concatenation, mirrors and refined copies: documented as about
    # 100 bytes per pair on top of the budget.
    pair_bytes = pairs.seeds.shape[0] * 100
    probed_cells = len(x) * approximate_search.IVF_PROBES * 12 if search is approximate_pairs else 0
    assert pairs.seeds.shape[0] > 1000
    assert peak <= budget + pair_bytes + probed_cells + MB


# --- through the database --------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize("approximate", [False, True])
def test_find_clusters_equals_the_reference_and_stays_within_one_user(truth_factory, user_factory, approximate):
    alice, bob = user_factory("alice"), user_factory("bob")
    x = planted(120, seed=9)
    truths = [truth_factory(f"a{i}", user=alice, embedding=v) for i, v in enumerate(x)]
    for i, v in enumerate(x[:60]):  # bob holds copies of alice's vectors
        truth_factory(f"b{i}", user=bob, embedding=v)
    truths[3].pinned = True
    truths[3].save(update_fields=["pinned"])
    can_seed = np.ones(120, dtype=bool)
    can_seed[3] = False

    clusters = clustering.find_clusters(user_id=alice.pk, threshold=0.75, approximate=approximate)

    # The default settings: nearest-neighbour pairs after the greedy clusters.
    expected = reference_clusters(x, can_seed, threshold=0.75, max_size=5, min_size=2, nearest_pairs=True)
    assert len(expected) > len(reference_clusters(x, can_seed, threshold=0.75, max_size=5, min_size=2))
    assert [c.member_ids for c in clusters] == [tuple(truths[p].pk for p in c) for c in expected]
    alice_ids = {t.pk for t in truths}
    assert all(set(c.member_ids) <= alice_ids for c in clusters)


def test_small_products_run_on_one_blas_thread_and_large_ones_keep_the_pool():
    """A small user's products take one BLAS thread (``ONE_THREAD_UP_TO``); larger ones
    leave the BLAS pool as it was; the pool is restored after the small ones."""
    from threadpoolctl import threadpool_info

    from iris_consolidation.services.pipeline import exact_search

    def blas_threads() -> list[int]:
        # numpy's own BLAS (faiss may load another, which numpy's products do not use).
        return [pool["num_threads"] for pool in threadpool_info()
                if pool["user_api"] == "blas" and "numpy" in pool["filepath"]]

    before = blas_threads()
    assert before  # numpy's BLAS is loaded
    with exact_search.blas_threads(100, 100):
        assert blas_threads() == [1] * len(before)
    assert blas_threads() == before
    with exact_search.blas_threads(3_000, 3_000):
        assert blas_threads() == before


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("search", "memory_bytes"), [(exact_pairs, 64 * MB), (exact_pairs, 4096), (approximate_pairs, 64 * MB)]
)
def test_a_dense_user_keeps_each_seeds_nearest_members_only(search, memory_bytes, settings):
    """400 truths all within cosine 0.8-0.99 of one centre (every pair above 0.5): each
    seed keeps its ``PHASE1_NEIGHBOURS`` most similar members, not all 399, and greedy
    clusters still form as the brute force's while enough of them are free."""
    settings.IRIS_CONSOLIDATION_PHASE1_NEIGHBOURS = 8
    rng = np.random.default_rng(9)
    centre = rng.standard_normal(384)
    centre /= np.linalg.norm(centre)
    x = np.empty((400, 384), dtype=np.float32)
    for i in range(400):
        noise = rng.standard_normal(384)
        noise -= centre * (noise @ centre)
        noise /= np.linalg.norm(noise)
        cos = rng.uniform(0.8, 0.99)
        x[i] = cos * centre + np.sqrt(1 - cos * cos) * noise
    users = UserVectors(ids=np.arange(400, dtype=np.int64), vectors=x.copy(), can_seed=np.ones(400, dtype=bool))

    pairs = search(users, threshold=0.5, memory_bytes=memory_bytes)

    per_seed = np.bincount(pairs.seeds, minlength=400)
    assert per_seed.max() == 8
    sims = x.astype(np.float64) @ x.T.astype(np.float64)
    np.fill_diagonal(sims, -1.0)
    first = pairs.members[pairs.seeds == 0]
    assert set(first.tolist()) <= set(np.argsort(-sims[0])[:16].tolist())  # among its nearest
    clusters = greedy_clusters(users, pairs, user_id=1, max_size=5, min_size=2)
    members = [m for c in clusters for m in c.member_ids]
    assert len(members) == len(set(members)) > 80  # no truth in two clusters
    for c in clusters:  # each member at or above the threshold, nearest first
        near = [sims[c.member_ids[0], m] for m in c.member_ids[1:]]
        assert min(near) >= 0.5 and near == sorted(near, reverse=True)
    reference = reference_clusters(x, np.ones(400, dtype=bool), threshold=0.5, max_size=5, min_size=2)
    assert clusters[0].member_ids == reference[0]  # the first seed compares with every truth
