"""Greedy clustering edge cases on vectors the tests control (beyond test_clustering.py).

Angles in one plane make similarities exact: two truths at angles x and y degrees
have cosine similarity cos(x - y).
"""

from __future__ import annotations

import math
import threading
import time
import uuid
from datetime import timedelta

import numpy as np
import pytest
from django.db import connection, transaction
from django.utils import timezone

from iris_consolidation.embeddings import LOCAL_MODEL_NAME, LocalEmbedder
from iris_consolidation.exceptions import EmbeddingDimensionMismatch
from iris_consolidation.models import Origin, RetiredReason, Truth
from iris_consolidation.services.pipeline import clustering, vectors
from tests.conftest import unit_vector, vector_at

pytestmark = pytest.mark.django_db


def at_angle(degrees: float) -> np.ndarray:
    """A unit vector in the plane of the first two axes, ``degrees`` from axis 0."""
    r = math.radians(degrees)
    return unit_vector(math.cos(r), math.sin(r))


def ids(clusters: list[clustering.CandidateCluster]) -> list[tuple[int, ...]]:
    return [c.member_ids for c in clusters]


# --- threshold edges -------------------------------------------------------------


@pytest.mark.parametrize(("threshold", "clustered"), [(0.7999, True), (0.8, True), (0.8001, False)])
def test_threshold_edge_around_a_similarity_of_point_eight(truth_factory, threshold, clustered):
    seed = truth_factory("a", embedding=vector_at(1.0))
    other = truth_factory("b", embedding=vector_at(0.8))

    clusters = clustering.find_clusters(user_id=seed.user_id, threshold=threshold)

    assert ids(clusters) == ([(seed.pk, other.pk)] if clustered else [])


def test_threshold_one_clusters_identical_vectors_only(truth_factory):
    a = truth_factory("a", embedding=vector_at(1.0))
    twin = truth_factory("a again", embedding=vector_at(1.0))
    truth_factory("almost", embedding=vector_at(0.9999))

    clusters = clustering.find_clusters(user_id=a.user_id, threshold=1.0)

    assert ids(clusters) == [(a.pk, twin.pk)]
    assert clusters[0].similarities == (1.0, 1.0)


def test_similarities_are_reported_against_the_seed(truth_factory):
    seed = truth_factory("a", embedding=at_angle(0))
    near = truth_factory("b", embedding=at_angle(20))
    far = truth_factory("c", embedding=at_angle(35))

    (cluster,) = clustering.find_clusters(user_id=seed.user_id, threshold=0.8)

    assert cluster.member_ids == (seed.pk, near.pk, far.pk)
    assert cluster.similarities == pytest.approx(
        (1.0, math.cos(math.radians(20)), math.cos(math.radians(35))), abs=1e-5
    )


# --- chaining --------------------------------------------------------------------


def test_a_chain_splits_into_clusters_around_seeds(truth_factory):
    # a-b, b-c and c-d are 30 degrees apart (0.866); a-c is 60 degrees (0.5).
    a, b, c, d = (
        truth_factory(name, embedding=at_angle(angle)) for name, angle in (("a", 0), ("b", 30), ("c", 60), ("d", 90))
    )

    clusters = clustering.find_clusters(user_id=a.user_id, threshold=0.8, nearest_pairs=False)

    assert ids(clusters) == [(a.pk, b.pk), (c.pk, d.pk)]


def test_member_near_another_member_but_far_from_the_seed_stays_out(truth_factory):
    seed = truth_factory("seed", embedding=at_angle(0))
    member = truth_factory("member", embedding=at_angle(30))
    beyond = truth_factory("beyond", embedding=at_angle(45))  # 15 degrees from member, 45 from seed

    greedy = clustering.find_clusters(user_id=seed.user_id, threshold=0.8, nearest_pairs=False)
    clusters = clustering.find_clusters(user_id=seed.user_id, threshold=0.8)

    assert ids(greedy) == [(seed.pk, member.pk)]
    # Left out, beyond is offered with its nearest neighbour after the greedy cluster.
    assert ids(clusters) == [(seed.pk, member.pk), (beyond.pk, member.pk)]
    assert clusters[1].similarities == pytest.approx((1.0, math.cos(math.radians(15))), abs=1e-5)


# --- nearest-neighbour pairs ------------------------------------------------


def test_a_truth_whose_match_an_earlier_seed_took_is_offered_with_it(truth_factory):
    # The seed takes a and b (both within 36.9 degrees); c is 40 degrees from the seed,
    # and b was taken, so the greedy pass leaves c out; the pair (c, b) follows.
    seed = truth_factory("seed", embedding=at_angle(0))
    a = truth_factory("a", embedding=at_angle(-20))
    b = truth_factory("b", embedding=at_angle(30))
    c = truth_factory("c", embedding=at_angle(40))

    clusters = clustering.find_clusters(user_id=seed.user_id, threshold=0.8)

    assert ids(clusters) == [(seed.pk, a.pk, b.pk), (c.pk, b.pk)]


def test_a_truth_in_a_greedy_cluster_is_not_paired_again(truth_factory):
    # max 2: a takes its nearest b, c takes d; b's own nearest is c (5 degrees), in
    # another cluster, but b is judged in its own: no pair.
    a = truth_factory("a", embedding=at_angle(0))
    b = truth_factory("b", embedding=at_angle(12))
    c = truth_factory("c", embedding=at_angle(17))
    d = truth_factory("d", embedding=at_angle(30))

    clusters = clustering.find_clusters(user_id=a.user_id, threshold=0.8, max_size=2)

    assert ids(clusters) == [(a.pk, b.pk), (c.pk, d.pk)]


def test_a_truth_left_out_by_a_full_cluster_is_paired_with_its_nearest(truth_factory):
    # max 2: a takes b (12 degrees) over c (24); c's neighbours are both taken, so the
    # greedy pass leaves it out; its nearest is b.
    a = truth_factory("a", embedding=at_angle(0))
    b = truth_factory("b", embedding=at_angle(12))
    c = truth_factory("c", embedding=at_angle(24))

    clusters = clustering.find_clusters(user_id=a.user_id, threshold=0.8, max_size=2)

    assert ids(clusters) == [(a.pk, b.pk), (c.pk, b.pk)]
    assert clusters[1].similarities == pytest.approx((1.0, math.cos(math.radians(12))), abs=1e-5)


def test_truths_nearest_to_a_member_of_their_own_cluster_add_no_pair(truth_factory):
    a = truth_factory("a", embedding=at_angle(0))
    b = truth_factory("b", embedding=at_angle(10))
    c = truth_factory("c", embedding=at_angle(14))
    truth_factory("far", embedding=at_angle(90))

    clusters = clustering.find_clusters(user_id=a.user_id, threshold=0.8)

    assert ids(clusters) == [(a.pk, b.pk, c.pk)]


def test_a_protected_truth_never_starts_a_nearest_pair(truth_factory):
    # The pinned truth's nearest is b, in another cluster; it may not seed, so no pair
    # from its side; b's own nearest is its cluster's seed, so none from b's either.
    a = truth_factory("a", embedding=at_angle(0))
    b = truth_factory("b", embedding=at_angle(5))
    pinned = truth_factory("p", embedding=at_angle(30), pinned=True)

    clusters = clustering.find_clusters(user_id=a.user_id, threshold=0.8, max_size=2)

    assert ids(clusters) == [(a.pk, b.pk)]
    assert pinned.pk not in {pk for c in clusters for pk in c.member_ids}


def test_nearest_pairs_follow_the_setting_and_need_a_minimum_size_of_two(truth_factory, settings):
    seed = truth_factory("seed", embedding=at_angle(0))
    truth_factory("member", embedding=at_angle(30))
    truth_factory("beyond", embedding=at_angle(45))

    assert len(clustering.find_clusters(user_id=seed.user_id, threshold=0.8)) == 2
    settings.IRIS_CONSOLIDATION_NEAREST_PAIRS = False
    assert len(clustering.find_clusters(user_id=seed.user_id, threshold=0.8)) == 1
    settings.IRIS_CONSOLIDATION_NEAREST_PAIRS = True
    # Pairs are two members: under a minimum size of 3 none is offered (the member
    # seeds the one cluster: beyond at 15 degrees, the seed at 30).
    member, beyond = Truth.objects.filter(user_id=seed.user_id).exclude(pk=seed.pk).order_by("id")
    assert ids(clustering.find_clusters(user_id=seed.user_id, threshold=0.8, min_size=3)) == [
        (member.pk, beyond.pk, seed.pk)
    ]


# --- size caps and minimum size -----------------------------------------------------


def test_max_size_two_makes_pairs_and_drops_the_odd_one_out(truth_factory):
    truths = [truth_factory(f"t{i}", embedding=vector_at(1.0)) for i in range(5)]

    clusters = clustering.find_clusters(user_id=truths[0].user_id, threshold=0.9, max_size=2, nearest_pairs=False)

    assert ids(clusters) == [(truths[0].pk, truths[1].pk), (truths[2].pk, truths[3].pk)]


def test_cap_keeps_the_nearest_members_not_the_oldest(truth_factory):
    seed = truth_factory("seed", embedding=at_angle(0))
    older_far = truth_factory("far", embedding=at_angle(30))
    newer_near = truth_factory("near", embedding=at_angle(5))

    clusters = clustering.find_clusters(user_id=seed.user_id, threshold=0.8, max_size=2, nearest_pairs=False)

    assert ids(clusters) == [(seed.pk, newer_near.pk)]
    assert older_far.pk not in clusters[0].member_ids


def test_default_cap_is_the_max_cluster_size_setting(truth_factory, settings):
    settings.IRIS_CONSOLIDATION_MAX_CLUSTER_SIZE = 3
    truths = [truth_factory(f"t{i}", embedding=vector_at(1.0)) for i in range(7)]

    clusters = clustering.find_clusters(user_id=truths[0].user_id, threshold=0.9, nearest_pairs=False)

    assert [len(c.member_ids) for c in clusters] == [3, 3]


def test_min_size_drops_small_clusters(truth_factory):
    a = truth_factory("a", embedding=at_angle(0))
    b = truth_factory("b", embedding=at_angle(10))
    c = truth_factory("c", embedding=at_angle(90))
    d = truth_factory("d", embedding=at_angle(95))
    e = truth_factory("e", embedding=at_angle(100))

    clusters = clustering.find_clusters(user_id=a.user_id, threshold=0.8, min_size=3)

    assert ids(clusters) == [(c.pk, d.pk, e.pk)]
    assert b.pk not in {pk for cl in clusters for pk in cl.member_ids}


def test_a_seed_dropped_for_min_size_stays_available_to_later_clusters(truth_factory):
    # threshold 0.8 is about 36.9 degrees: a reaches only b; b reaches a, c and d.
    a = truth_factory("a", embedding=at_angle(0))
    b = truth_factory("b", embedding=at_angle(30))
    c = truth_factory("c", embedding=at_angle(55))
    d = truth_factory("d", embedding=at_angle(60))

    clusters = clustering.find_clusters(user_id=a.user_id, threshold=0.8, min_size=3)

    # Nearest first: c (25 degrees), then a and d tie at 30 degrees: a is older.
    assert ids(clusters) == [(b.pk, c.pk, a.pk, d.pk)]


def test_default_min_size_is_the_min_cluster_size_setting(truth_factory, settings):
    settings.IRIS_CONSOLIDATION_MIN_CLUSTER_SIZE = 3
    a = truth_factory("a", embedding=vector_at(1.0))
    truth_factory("b", embedding=vector_at(1.0))

    assert clustering.find_clusters(user_id=a.user_id, threshold=0.9) == []


def test_seed_whose_nearest_neighbours_are_all_taken_still_finds_a_free_one(truth_factory):
    # Nine identical truths pair up (max 2); the ninth's 8 nearest are all taken,
    # so the query must widen to reach the free truth at 0.9.
    group = [truth_factory(f"g{i}", embedding=vector_at(1.0)) for i in range(9)]
    free = truth_factory("free", embedding=vector_at(0.9))

    clusters = clustering.find_clusters(user_id=group[0].user_id, threshold=0.85, max_size=2, nearest_pairs=False)

    assert ids(clusters)[-1] == (group[8].pk, free.pk)
    assert len(clusters) == 5


# --- what may seed and what may join ---------------------------------------------------


@pytest.mark.parametrize(
    "protection",
    [{"origin": Origin.USER}, {"origin": Origin.AGENT}, {"generation": 5}, {"pinned": True}],
    ids=["user", "agent", "max-generation", "pinned"],
)
def test_protected_truth_joins_a_cluster_but_never_seeds_one(truth_factory, protection):
    protected = truth_factory("p", embedding=vector_at(1.0), **protection)
    other = truth_factory("q", embedding=vector_at(0.95))

    clusters = clustering.find_clusters(user_id=protected.user_id, threshold=0.8)

    assert ids(clusters) == [(other.pk, protected.pk)]


def test_only_protected_truths_make_no_cluster(truth_factory):
    a = truth_factory("a", embedding=vector_at(1.0), pinned=True)
    truth_factory("b", embedding=vector_at(1.0), origin=Origin.USER)

    assert clustering.find_clusters(user_id=a.user_id, threshold=0.5) == []


def test_retired_truths_neither_seed_nor_join(truth_factory):
    keeper = truth_factory("a", embedding=vector_at(1.0))
    retired = truth_factory("a", embedding=vector_at(1.0))
    later = truth_factory("b", embedding=vector_at(0.9))
    Truth.all_objects.filter(pk=retired.pk).update(
        retired_at=timezone.now(), superseded_by=keeper, retired_reason=RetiredReason.MERGED
    )

    clusters = clustering.find_clusters(user_id=keeper.user_id, threshold=0.8)

    assert ids(clusters) == [(keeper.pk, later.pk)]


def test_truths_without_an_embedding_are_left_out(truth_factory):
    a = truth_factory("a", embedding=vector_at(1.0))
    truth_factory("no vector yet")
    b = truth_factory("b", embedding=vector_at(0.9))

    clusters = clustering.find_clusters(user_id=a.user_id, threshold=0.8)

    assert ids(clusters) == [(a.pk, b.pk)]


# --- user isolation ------------------------------------------------------------------


def test_identical_truths_of_other_users_never_fill_a_cluster(truth_factory, user_factory):
    alice, bob, carol = user_factory("alice"), user_factory("bob"), user_factory("carol")
    mine = [truth_factory("x", user=alice, embedding=vector_at(1.0 - i / 100)) for i in range(2)]
    for user in (bob, carol):
        for _ in range(6):
            truth_factory("x", user=user, embedding=vector_at(1.0))

    clusters = clustering.find_clusters(user_id=alice.pk, threshold=0.5)

    assert ids(clusters) == [tuple(t.pk for t in mine)]
    assert {c.user_id for c in clusters} == {alice.pk}


def test_every_cluster_holds_truths_of_its_own_user_only(truth_factory, user_factory):
    users = [user_factory() for _ in range(3)]
    for user in users:
        for i in range(4):
            truth_factory(f"{user.username} {i}", user=user, embedding=vector_at(1.0 - i / 50))

    for user in users:
        clusters = clustering.find_clusters(user_id=user.pk, threshold=0.8)
        members = [pk for c in clusters for pk in c.member_ids]
        owners = set(Truth.objects.filter(pk__in=members).values_list("user_id", flat=True))
        assert len(members) == 4 and owners == {user.pk}


# --- stable order -----------------------------------------------------------------------


def test_clusters_are_the_same_on_every_call(truth_factory):
    rng = np.random.default_rng(7)
    base = rng.normal(size=384)
    truths = [truth_factory(f"t{i}", embedding=base + rng.normal(scale=0.6, size=384)) for i in range(12)]

    first = clustering.find_clusters(user_id=truths[0].user_id, threshold=0.7)
    again = clustering.find_clusters(user_id=truths[0].user_id, threshold=0.7)

    assert first == again
    assert len(first) >= 2


def test_seeds_are_taken_oldest_first_whatever_their_ids(truth_factory):
    t0 = timezone.now() - timedelta(days=1)
    newer = truth_factory("newer", embedding=vector_at(1.0), created_at=t0 + timedelta(hours=2))
    older = truth_factory("older", embedding=vector_at(0.9), created_at=t0)

    clusters = clustering.find_clusters(user_id=newer.user_id, threshold=0.8)

    assert ids(clusters) == [(older.pk, newer.pk)]


def test_equally_near_members_are_ordered_by_creation_time_then_id(truth_factory):
    t0 = timezone.now() - timedelta(days=1)
    seed = truth_factory("seed", embedding=vector_at(1.0), created_at=t0)
    late = truth_factory("late", embedding=vector_at(0.9), created_at=t0 + timedelta(hours=3))
    early = truth_factory("early", embedding=vector_at(0.9), created_at=t0 + timedelta(hours=1))
    same_time = truth_factory("same time", embedding=vector_at(0.9), created_at=t0 + timedelta(hours=1))

    (cluster,) = clustering.find_clusters(user_id=seed.user_id, threshold=0.8)

    assert cluster.member_ids == (seed.pk, early.pk, same_time.pk, late.pk)


# --- embedding ------------------------------------------------------------------------------


def test_embed_missing_works_in_batches_and_skips_retired_truths(truth_factory):
    truths = [truth_factory(f"Fact number {i}") for i in range(5)]
    retired = truth_factory("Old fact")
    Truth.all_objects.filter(pk=retired.pk).update(
        retired_at=timezone.now(), superseded_by=truths[0], retired_reason=RetiredReason.MERGED
    )

    embedded = vectors.embed_missing(user_id=truths[0].user_id, embedder=LocalEmbedder(), batch_size=2)

    assert embedded == 5
    assert set(Truth.objects.values_list("embedding_model", flat=True)) == {LOCAL_MODEL_NAME}
    assert Truth.all_objects.get(pk=retired.pk).embedding is None


def test_embed_missing_embeds_the_next_batch_while_writing_and_stops_at_the_deadline(truth_factory):
    truths = [truth_factory(f"Fact number {i}" + "!" * i) for i in range(5)]  # shortest first: creation order
    embedder = LocalEmbedder(threads=1)
    calls, batches = [], []

    class Recording:
        model_name = embedder.model_name

        def embed(self, texts):
            calls.append((threading.current_thread().name, list(texts)))
            return embedder.embed(texts)

    started = time.monotonic()
    embedded = vectors.embed_missing(
        user_id=truths[0].user_id,
        embedder=Recording(),
        batch_size=2,
        on_batch=lambda count, seconds: batches.append((count, seconds)),
    )
    elapsed = time.monotonic() - started

    assert embedded == 5
    assert [texts for _, texts in calls] == [[t.content for t in truths[i : i + 2]] for i in (0, 2, 4)]
    assert all(name.startswith("iris-embed-ahead") for name, _ in calls)
    assert [count for count, _ in batches] == [2, 2, 1]
    assert 0 < sum(seconds for _, seconds in batches) <= elapsed
    for truth in truths:
        truth.refresh_from_db()
        assert np.allclose(np.asarray(truth.embedding), embedder.embed([truth.content])[0], atol=1e-6)

    Truth.all_objects.filter(user_id=truths[0].user_id).update(embedding=None, embedding_model="")
    calls.clear()
    passed = vectors.embed_missing(
        user_id=truths[0].user_id, embedder=Recording(), batch_size=2, deadline=time.monotonic() - 1
    )

    assert passed == 2 and len(calls) == 1  # the batch under way is written; none is begun after it
    assert Truth.objects.filter(embedding__isnull=False).count() == 2


def test_saved_embeddings_are_the_exact_float32_vectors_of_the_given_truths(truth_factory):
    first, second, other = (truth_factory(text) for text in ("Likes tea", "Owns a cat", "Plays chess"))
    rng = np.random.default_rng(3)
    new = rng.standard_normal((2, 384)).astype(np.float32)

    with transaction.atomic():
        vectors.save_embeddings([second.pk, first.pk], new, model_name="model-b")
        vectors.save_embeddings([other.pk], new[:1], model_name="model-c")  # the staging table is empty again

    rows = {t.pk: t for t in Truth.objects.all()}
    assert np.array_equal(np.asarray(rows[second.pk].embedding, dtype=np.float32), new[0])
    assert np.array_equal(np.asarray(rows[first.pk].embedding, dtype=np.float32), new[1])
    assert np.array_equal(np.asarray(rows[other.pk].embedding, dtype=np.float32), new[0])
    assert [rows[pk].embedding_model for pk in (first.pk, second.pk, other.pk)] == ["model-b", "model-b", "model-c"]


def test_saving_vectors_of_another_size_writes_nothing(truth_factory):
    truth = truth_factory("Likes tea", embedding=vector_at(1.0), embedding_model="model-a")

    with pytest.raises(EmbeddingDimensionMismatch):
        vectors.save_embeddings([truth.pk], np.ones((1, 512), dtype=np.float32), model_name="model-b")

    truth.refresh_from_db()
    assert (truth.embedding_model, list(truth.embedding)[0]) == ("model-a", pytest.approx(1.0))


@pytest.mark.django_db(transaction=True)
def test_saved_embeddings_outside_a_transaction_are_written(truth_factory):
    truth = truth_factory("Likes tea")
    new = np.random.default_rng(4).standard_normal((1, 384)).astype(np.float32)

    vectors.save_embeddings([truth.pk], new, model_name="model-b")  # autocommit: one transaction of its own

    truth.refresh_from_db()
    assert truth.embedding_model == "model-b"
    assert np.array_equal(np.asarray(truth.embedding, dtype=np.float32), new[0])


@pytest.mark.django_db(transaction=True)
def test_a_role_without_the_temporary_privilege_saves_embeddings_all_the_same(truth_factory):
    truth = truth_factory("Likes tea")
    new = np.random.default_rng(6).standard_normal((1, 384)).astype(np.float32)
    role, table = f"iris_no_temp_{uuid.uuid4().hex[:8]}", Truth._meta.db_table
    database = connection.ops.quote_name(connection.settings_dict["NAME"])
    connection.close()  # a new session: one that made a temporary table before is not asked again
    with connection.cursor() as cursor:
        cursor.execute("SELECT rolsuper FROM pg_roles WHERE rolname = current_user")
        if not cursor.fetchone()[0]:
            pytest.skip("creating a role and revoking a database privilege needs a superuser")
        cursor.execute(f"CREATE ROLE {role} NOLOGIN")
        cursor.execute(f"GRANT SELECT, UPDATE ON {table} TO {role}")
        cursor.execute(f"REVOKE TEMPORARY ON DATABASE {database} FROM PUBLIC")
        cursor.execute(f"SET ROLE {role}")
    try:
        vectors.save_embeddings([truth.pk], new, model_name="model-b")
    finally:
        connection.close()
        with connection.cursor() as cursor:
            cursor.execute(f"GRANT TEMPORARY ON DATABASE {database} TO PUBLIC")
            cursor.execute(f"REVOKE ALL ON {table} FROM {role}")
            cursor.execute(f"DROP ROLE {role}")

    truth.refresh_from_db()
    assert truth.embedding_model == "model-b"
    assert np.array_equal(np.asarray(truth.embedding, dtype=np.float32), new[0])


def test_embed_missing_replaces_embeddings_of_another_model(truth_factory):
    stale = truth_factory("Has a son named Tomas", embedding=vector_at(1.0), embedding_model="old-model")
    current = truth_factory("Likes tea", embedding=vector_at(0.5), embedding_model=LOCAL_MODEL_NAME)

    embedded = vectors.embed_missing(user_id=stale.user_id, embedder=LocalEmbedder())

    stale.refresh_from_db()
    current.refresh_from_db()
    assert embedded == 1
    assert stale.embedding_model == LOCAL_MODEL_NAME
    assert list(stale.embedding)[:2] != pytest.approx([1.0, 0.0])
    assert list(current.embedding)[:2] == pytest.approx([0.5, math.sqrt(0.75)], abs=1e-6)


def test_embed_missing_touches_only_the_given_user(truth_factory, user_factory):
    alice, bob = user_factory("alice"), user_factory("bob")
    truth_factory("Likes tea", user=alice)
    theirs = truth_factory("Likes coffee", user=bob)

    assert vectors.embed_missing(user_id=alice.pk, embedder=LocalEmbedder()) == 1
    assert Truth.objects.get(pk=theirs.pk).embedding is None
