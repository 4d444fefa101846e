"""Greedy clustering on vectors the tests control (the greedy pass alone:
``nearest_pairs=False``; its nearest-neighbour pairs in test_clustering_edges.py)."""

from __future__ import annotations

import numpy as np
import pytest

from iris_consolidation.services.pipeline import clustering, vectors
from tests.conftest import vector_at

pytestmark = pytest.mark.django_db


def test_cluster_gathers_neighbours_at_or_above_threshold(truth_factory):
    seed = truth_factory("a", embedding=vector_at(1.0))
    near = truth_factory("b", embedding=vector_at(0.80))
    edge = truth_factory("c", embedding=vector_at(0.75))
    truth_factory("d", embedding=vector_at(0.70))

    clusters = clustering.find_clusters(user_id=seed.user_id, threshold=0.75, nearest_pairs=False)

    assert [c.member_ids for c in clusters] == [(seed.pk, near.pk, edge.pk)]
    assert clusters[0].similarities[1] == pytest.approx(0.80, abs=1e-4)


def test_no_chaining_members_are_compared_with_the_seed(truth_factory):
    # a~b 0.8 and b~c 0.8 but a~c far below the threshold: a's cluster must not hold c.
    a = truth_factory("a", embedding=vector_at(1.0, axis=0, towards=1))
    b = truth_factory("b", embedding=vector_at(0.8, axis=0, towards=1))
    c = truth_factory("c", embedding=vector_at(0.8, axis=1, towards=2))

    clusters = clustering.find_clusters(user_id=a.user_id, threshold=0.75)

    assert clusters[0].member_ids == (a.pk, b.pk)
    assert all(c.pk not in cl.member_ids for cl in clusters)


def test_cluster_size_is_capped(truth_factory):
    truths = [truth_factory(f"t{i}", embedding=vector_at(1.0 - i * 0.01)) for i in range(8)]

    clusters = clustering.find_clusters(user_id=truths[0].user_id, threshold=0.5, max_size=5, nearest_pairs=False)

    assert [len(c.member_ids) for c in clusters] == [5, 3]
    assert clusters[0].member_ids == tuple(t.pk for t in truths[:5])


def test_clusters_never_mix_users(truth_factory, user_factory):
    alice, bob = user_factory("alice"), user_factory("bob")
    a1 = truth_factory("x", user=alice, embedding=vector_at(1.0))
    truth_factory("x", user=bob, embedding=vector_at(1.0))
    a2 = truth_factory("y", user=alice, embedding=vector_at(0.9))

    clusters = clustering.find_clusters(user_id=alice.pk, threshold=0.75)

    assert [c.member_ids for c in clusters] == [(a1.pk, a2.pk)]


def test_pinned_truth_joins_but_never_seeds(truth_factory):
    pinned = truth_factory("p", embedding=vector_at(1.0), pinned=True)
    other = truth_factory("q", embedding=vector_at(0.9))

    clusters = clustering.find_clusters(user_id=pinned.user_id, threshold=0.75)

    assert [c.member_ids for c in clusters] == [(other.pk, pinned.pk)]


def test_embed_missing_writes_384_dimension_unit_vectors(truth_factory):
    from iris_consolidation.embeddings import LocalEmbedder
    from iris_consolidation.models import Truth

    t = truth_factory("Has a son named Tomas")

    assert vectors.embed_missing(user_id=t.user_id, embedder=LocalEmbedder()) == 1
    t = Truth.objects.get(pk=t.pk)
    assert t.embedding is not None and len(t.embedding) == 384
    assert float((np.asarray(t.embedding) ** 2).sum()) == pytest.approx(1.0, abs=1e-4)
    assert vectors.embed_missing(user_id=t.user_id, embedder=LocalEmbedder()) == 0
