"""Nearest-neighbour pairs through phase 2: a truth in two clusters is merged
once. The oracle judge (labels, no model) merges every cluster whose members the labels
call one statement; the freshness check of the write refuses the second merge.
"""

from __future__ import annotations

import math

import pytest

from iris_consolidation.embeddings import LocalEmbedder
from iris_consolidation.evaluation.oracle import OracleJudge
from iris_consolidation.models import ClusterReview, Truth
from iris_consolidation.services.pipeline import clustering, validation
from iris_consolidation.services.run import decide, lifecycle
from tests.conftest import unit_vector

pytestmark = pytest.mark.django_db

CATS = ("Has a cat named Tom.", "Owns a cat called Tom.", "Keeps a cat named Tom.")


def at_angle(degrees: float):
    r = math.radians(degrees)
    return unit_vector(math.cos(r), math.sin(r))


@pytest.fixture
def overlapping(truth_factory, settings):
    """Three truths and their clusters at 0.8 with at most 2 members: the greedy pass
    gives (a, b) and leaves c out (both its neighbours taken); c's nearest is b, so the
    pair (c, b) follows. The labels call all three one statement."""
    settings.IRIS_CONSOLIDATION_MAX_CLUSTER_SIZE = 2
    a, b, c = (truth_factory(text, embedding=at_angle(angle)) for text, angle in zip(CATS, (0, 12, 24), strict=True))
    clusters = clustering.find_clusters(user_id=a.user_id, threshold=0.8)
    assert [cl.member_ids for cl in clusters] == [(a.pk, b.pk), (c.pk, b.pk)]
    judge = OracleJudge([(CATS[0], CATS[1]), (CATS[1], CATS[2]), (CATS[0], CATS[2])])
    return a, b, c, clusters, judge


def test_a_truth_in_two_clusters_of_one_batch_is_merged_once(overlapping, run_factory):
    a, b, c, clusters, judge = overlapping
    run = run_factory(threshold=0.8)
    lifecycle.start_run(run)

    reviews = decide.decide_batch(run_id=run.pk, clusters=clusters, client=judge, embedder=LocalEmbedder())

    merged = Truth.objects.get(user=a.user, origin="consolidated")
    assert merged.content == "Has a cat named Tom. Owns a cat called Tom."
    assert set(Truth.all_objects.filter(superseded_by=merged).values_list("pk", flat=True)) == {a.pk, b.pk}
    assert set(Truth.objects.filter(user=a.user).values_list("pk", flat=True)) == {merged.pk, c.pk}
    # The pair (c, b) was judged with b live, then refused at the write: b was retired.
    last = ClusterReview.objects.get(pk=reviews[1].pk)
    assert [r["code"] for r in last.rejections] == [validation.Code.STALE_MEMBER]
    assert last.applied_actions == []


def test_a_truth_merged_by_an_earlier_cluster_leaves_its_pair_stale(overlapping, run_factory):
    a, b, c, clusters, judge = overlapping
    run = run_factory(threshold=0.8)
    lifecycle.start_run(run)

    for cluster in clusters:
        decide.decide_cluster(run_id=run.pk, cluster=cluster, client=judge, embedder=LocalEmbedder())

    assert Truth.objects.filter(user=a.user, origin="consolidated").count() == 1
    assert Truth.objects.filter(pk=c.pk).exists()
    run.refresh_from_db()
    assert (run.clusters_done, run.merged, run.stale) == (2, 1, 1)
