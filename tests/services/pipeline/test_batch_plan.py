"""Phase 1 for a batch of small users (``batch_plan``) gives what ``build_user_plan`` gives
user by user: the same clusters, stage results, seeds, counters and writes, with clusters
that never mix users, in a number of queries that does not grow with the batch."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import numpy as np
import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext, isolate_apps
from django.utils import timezone

from iris_consolidation.conf import app_settings
from iris_consolidation.models import (
    EMBEDDING_DIMENSIONS,
    ConsolidationCursor,
    ConsolidationRun,
    StageResult,
    Truth,
    UserPass,
)
from iris_consolidation.services.hygiene import passes, stages
from iris_consolidation.services.pipeline import vectors
from iris_consolidation.services.run import lifecycle
from iris_consolidation.services.run import plan as run_plan
from tests.services.pipeline.test_phase1_same_results import NOISY, _add_user_truths, _NoEmbedder, _phase1_module

pytestmark = pytest.mark.django_db

NOW = timezone.now()


def _users(user_factory: Any, count: int = 5, per_user: int = 40) -> list[Any]:
    """Users of planted vector groups and random sentences, with noise candidates and a
    lexical duplicate each; the last two have the same truths (a cluster that mixed users
    would show), and one more user has no truth at all."""
    phase1 = _phase1_module()
    users = []
    for u in range(count):
        user = user_factory()
        seed = 30 + min(u, count - 2)
        vectors, _ = phase1.synthetic_vectors(per_user, grouped=0.4, seed=seed)
        texts = phase1.random_sentences(per_user, seed=seed)
        texts[: len(NOISY)] = NOISY
        texts[12] = texts[13].upper()
        _add_user_truths(user, texts, vectors=vectors, seed=seed)
        users.append(user)
    users.append(user_factory())
    return users


def _outcome(run: ConsolidationRun) -> dict[str, Any]:
    """What a pass leaves: stage results (but seconds, and the run's own times in mine's
    window), the users' pass rows, the run's counters, the live truths."""
    run.refresh_from_db()
    results = []
    for r in StageResult.objects.filter(run=run).order_by("user_id", "stage"):
        findings = [{k: v for k, v in f.items() if k != "window"} for f in r.findings]
        results.append((r.user_id, r.stage, r.mode, r.examined, r.affected, r.applied, findings))
    passes = list(UserPass.objects.filter(run=run).order_by("user_id").values_list(
        "user_id", "bound_id", "cursor_id", "covers_cursor", "seeds", "last_seed_id"))
    counters = (run.users_done, run.truths, run.seeds, run.clusters_found, run.forecast)
    live = list(Truth.objects.order_by("id").values_list("id", "relevance"))
    return {"results": results, "passes": passes, "counters": counters, "live": live}


def _one_by_one(run: ConsolidationRun, users: list[Any]) -> dict[int, Any]:
    """Each user planned alone (``build_user_plan``, the large users' path), then counted."""
    plans = [run_plan.build_user_plan(run_id=run.pk, user_id=u.pk, embedder=_NoEmbedder()) for u in users]
    run_plan.count_user_plans(run_id=run.pk, plans=plans)
    return {plan.user_id: plan.clusters for plan in plans}


def _batched(run: ConsolidationRun, users: list[Any]) -> dict[int, Any]:
    batch = run_plan.plan_users(run_id=run.pk, user_ids=[u.pk for u in users], embedder=_NoEmbedder())
    assert batch.failed == {} and batch.not_started == []
    return {user_id: plan.clusters for user_id, plan in batch.plans.items()}


@pytest.mark.parametrize("dry_run", [True, False], ids=["dry run", "noise and decay applied"])
def test_a_batch_plans_each_user_as_one_by_one(user_factory, settings, dry_run):
    settings.IRIS_CONSOLIDATION_NOISE = "apply"
    settings.IRIS_CONSOLIDATION_DECAY = "apply"
    users = _users(user_factory)
    # A cursor for the first user: only its truths after the cursor seed (cursor mode).
    middle = Truth.objects.filter(user=users[0]).order_by("updated_at", "id")[29]
    ConsolidationCursor.objects.create(user=users[0], updated_at=middle.updated_at, truth_id=middle.pk)
    outcomes, clusters = [], []
    for plan in (_one_by_one, _batched):
        with transaction.atomic():
            run = lifecycle.create_run(trigger="command", dry_run=dry_run, judge="rules",
                                           execution="in_process", threshold=0.8)
            run.started_at = NOW  # decay is computed at the pass time: the same for both
            run.save(update_fields=["started_at"])
            clusters.append(plan(run, users))
            outcomes.append(_outcome(run))
            transaction.set_rollback(True)  # the next plan starts from the same truths

    assert clusters[1] == clusters[0]
    assert outcomes[1] == outcomes[0]
    one = outcomes[0]
    assert sum(len(c) for c in clusters[0].values()) >= 10
    assert one["counters"][0] == len(users)
    assert one["passes"][0][4] == 10  # the cursor held: only the truths after it seed
    full = lifecycle.create_run(trigger="command", dry_run=True, judge="rules", execution="in_process",
                                    threshold=0.8, full=True)
    unbounded = run_plan.plan_user(run_id=full.pk, user_id=users[0].pk, embedder=_NoEmbedder())
    assert unbounded != clusters[0][users[0].pk]  # so the bound changed the clusters
    noise = [r for r in one["results"] if r[1] == "noise"]
    assert sum(r[4] for r in noise) >= len(users) - 1  # each user with truths has noise found
    assert sum(r[5] for r in noise) == (0 if dry_run else sum(r[4] for r in noise))
    for user_id, found in clusters[1].items():  # never a truth of another user
        for cluster in found:
            assert set(Truth.all_objects.filter(pk__in=cluster.member_ids).values_list("user_id", flat=True)) == {
                user_id
            }


def _count_queries(users: list[Any]) -> int:
    run = lifecycle.create_run(trigger="command", dry_run=True, judge="rules", execution="in_process")
    with CaptureQueriesContext(connection) as queries:
        run_plan.plan_users(run_id=run.pk, user_ids=[u.pk for u in users], embedder=_NoEmbedder())
    return len(queries)


def test_a_batch_costs_the_same_few_queries_for_three_users_or_six(user_factory):
    users = _users(user_factory, count=6, per_user=20)
    few, more = _count_queries(users[:3]), _count_queries(users[:6])
    # The run, the users' facts, truths with their vectors, and cursors; the cursor bounds
    # and the counters (with the forecast, under the run's lock); inside a test, each
    # transaction is also a savepoint and its release. The stage results go in one COPY,
    # not seen here.
    assert few == more == 12


def test_a_user_that_raises_is_left_out_and_the_others_are_planned(user_factory, monkeypatch):
    users = _users(user_factory, count=3, per_user=20)
    real = stages.candidate_clusters

    def clusters(run, user_id, **kwargs):
        if user_id == users[1].pk:
            raise RuntimeError("this user's rows are broken")
        return real(run, user_id, **kwargs)

    monkeypatch.setattr(stages, "candidate_clusters", clusters)
    run = lifecycle.create_run(trigger="command", dry_run=True, judge="rules", execution="in_process")
    batch = run_plan.build_user_plans(run_id=run.pk, user_ids=[u.pk for u in users], embedder=_NoEmbedder())

    assert list(batch.failed) == [users[1].pk]
    assert str(batch.failed[users[1].pk]) == "this user's rows are broken"
    assert sorted(batch.plans) == sorted(u.pk for u in users if u != users[1])
    recorded = set(StageResult.objects.filter(run=run).values_list("user_id", flat=True))
    assert recorded == {users[0].pk, users[2].pk, users[3].pk}  # users[3] has no truth: its stages found none


def test_a_broken_transaction_plans_each_user_alone(user_factory, monkeypatch):
    """A database error without a savepoint (a dry run's batch) breaks the batch's
    transaction: nothing of it is written, and each user is planned again on its own."""
    users = _users(user_factory, count=3, per_user=20)
    real = stages.candidate_clusters
    calls: list[int] = []

    def clusters(run, user_id, **kwargs):
        calls.append(user_id)
        if user_id == users[1].pk:
            with connection.cursor() as cursor:
                cursor.execute("SELECT * FROM no_such_table")
        return real(run, user_id, **kwargs)

    monkeypatch.setattr(stages, "candidate_clusters", clusters)
    run = lifecycle.create_run(trigger="command", dry_run=True, judge="rules", execution="in_process")
    batch = run_plan.build_user_plans(run_id=run.pk, user_ids=[u.pk for u in users], embedder=_NoEmbedder())

    assert calls[:2] == [users[0].pk, users[1].pk]  # the batch stopped at the broken user
    assert calls[2:] == [u.pk for u in users]  # then one by one
    assert list(batch.failed) == [users[1].pk]
    assert sorted(batch.plans) == sorted(u.pk for u in users if u != users[1])
    semantic = StageResult.objects.filter(run=run, stage="semantic")
    assert sorted(semantic.values_list("user_id", flat=True)) == sorted([users[0].pk, users[2].pk, users[3].pk])



def test_a_second_delivery_plans_as_one_by_one_without_falling_back(user_factory, monkeypatch):
    """A user already planned in the run (its results recorded, as after a worker died
    before its job was marked done) is planned again like one by one would: the results
    recorded first stay, and the batch does not break on them."""
    users = _users(user_factory, count=2, per_user=20)
    fallbacks = []
    real = run_plan.build_user_plan
    monkeypatch.setattr(run_plan, "build_user_plan", lambda **kw: fallbacks.append(kw) or real(**kw))
    outcomes, clusters = [], []
    for plan in (_one_by_one, _batched):
        with transaction.atomic():
            run = lifecycle.create_run(trigger="command", dry_run=False, judge="rules", execution="in_process")
            run.started_at = NOW
            run.save(update_fields=["started_at"])
            real(run_id=run.pk, user_id=users[0].pk, embedder=_NoEmbedder())  # the first delivery
            first = {r.stage: r.pk for r in StageResult.objects.filter(run=run, user=users[0])}
            clusters.append(plan(run, users))
            assert {r.stage: r.pk for r in StageResult.objects.filter(run=run, user=users[0])} == first
            outcomes.append(_outcome(run))
            transaction.set_rollback(True)
    assert clusters[1] == clusters[0]
    assert outcomes[1] == outcomes[0]
    assert len(fallbacks) == len(users)  # the one-by-one pass's own calls only


def test_a_result_recorded_meanwhile_breaks_the_batch_and_each_user_is_planned_alone(user_factory, monkeypatch):
    """Another delivery records a user's result after the batch read them: the batch's
    COPY meets the row (an IntegrityError), nothing of the batch is written, and each
    user is planned on its own."""
    users = _users(user_factory, count=2, per_user=20)
    real = stages.candidate_clusters
    raced = []

    def clusters(run, user_id, **kwargs):
        if user_id == users[1].pk and not raced:
            raced.append(user_id)
            StageResult.objects.create(run=run, user_id=user_id, stage="semantic", mode="apply")
        return real(run, user_id, **kwargs)

    monkeypatch.setattr(stages, "candidate_clusters", clusters)
    run = lifecycle.create_run(trigger="command", dry_run=False, judge="rules", execution="in_process")
    batch = run_plan.build_user_plans(run_id=run.pk, user_ids=[u.pk for u in users], embedder=_NoEmbedder())

    assert raced == [users[1].pk]
    assert batch.failed == {}
    assert sorted(batch.plans) == sorted(u.pk for u in users)
    semantic = StageResult.objects.filter(run=run, stage="semantic")
    assert sorted(semantic.values_list("user_id", flat=True)) == sorted(u.pk for u in users)


def test_another_driver_reads_and_writes_the_same_through_the_orm(user_factory, monkeypatch):
    """Without psycopg 3 (no binary reads, no COPY) a batch reads its rows through the ORM
    and inserts its results with ``bulk_create``: the same plans and results."""
    users = _users(user_factory, count=2, per_user=20)
    outcomes, clusters = [], []
    for binary in (True, False):
        monkeypatch.setattr(vectors, "is_psycopg3", lambda connection, binary=binary: binary)
        with transaction.atomic():
            run = lifecycle.create_run(trigger="command", dry_run=True, judge="rules", execution="in_process")
            run.started_at = NOW
            run.save(update_fields=["started_at"])
            clusters.append(_batched(run, users))
            outcomes.append(_outcome(run))
            transaction.set_rollback(True)
    assert clusters[1] == clusters[0]
    assert outcomes[1] == outcomes[0]
    assert len(outcomes[0]["results"]) == 7 * len(users)


@isolate_apps("iris_consolidation")
def test_the_copy_writes_a_foreign_key_as_django_prepares_it():
    """A foreign key to a plain key field is written as its target's values (no call per
    value); one to a key field of the host's own class goes through Django's
    ``get_db_prep_save``, which calls that class's own preparation."""
    import uuid

    from django.db import models

    class HexKey(models.CharField):  # a host's key: a UUID stored as 32 hex digits
        def get_db_prep_value(self, value, connection, prepared=False):
            return None if value is None else uuid.UUID(str(value)).hex

    class Owner(models.Model):
        id = HexKey(primary_key=True, max_length=32)

        class Meta:
            app_label = "iris_consolidation"

    class Note(models.Model):
        owner = models.ForeignKey(Owner, on_delete=models.CASCADE)

        class Meta:
            app_label = "iris_consolidation"

    cases = [
        (Note._meta.get_field("owner"), [uuid.UUID(int=5)]),
        (StageResult._meta.get_field("run"), [uuid.UUID(int=7), uuid.uuid4()]),
        (StageResult._meta.get_field("user"), [3, 2**40]),
    ]
    for field, values in cases:
        prepare = run_plan._copy_preparer(field)
        for value in values:
            assert (value if prepare is None else prepare(value)) == field.get_db_prep_save(value, connection)
    assert run_plan._copy_preparer(Note._meta.get_field("owner"))(uuid.UUID(int=5)) == "0" * 31 + "5"
    assert run_plan._copy_preparer(StageResult._meta.get_field("user")) is int  # no call to Django per value


@pytest.mark.parametrize("psycopg3", [True, False], ids=["psycopg3", "another driver"])
def test_a_batch_reads_what_each_user_alone_reads(user_factory, monkeypatch, psycopg3):
    """The batch's one query gives each user the rows and vectors its pass would read alone
    (``passes.pass_rows``, ``vectors.load_user_vectors``): a truth without an embedding is in
    the rows and not in the vectors, a retired truth in neither, and a user with no embedded
    truth has no vectors."""
    rng = np.random.default_rng(7)
    now = timezone.now()
    # Per user, whether each truth has an embedding and whether it is retired.
    shapes = {"none": [], "bare": [(False, False)] * 3, "mixed": [(True, False), (False, False), (True, True),
              (False, True), (True, False), (False, False)], "embedded": [(True, False)] * 4}
    users = {name: user_factory(name) for name in shapes}
    truths = []
    for name, shape in shapes.items():
        for i, (embedded, retired) in enumerate(shape):
            truths.append(Truth(
                user=users[name], content=f"{name} {i}", created_at=now - timedelta(hours=i % 2),
                embedding=rng.standard_normal(EMBEDDING_DIMENSIONS).astype(np.float32) * 3 if embedded else None,
                embedding_model="m" if embedded else "", retired_at=now if retired else None,
                retired_reason="noise" if retired else "",
            ))
    Truth.all_objects.bulk_create(truths[::-1])  # ids against the created_at order
    if not psycopg3:
        monkeypatch.setattr(vectors, "is_psycopg3", lambda connection: False)
    ids = [u.pk for u in users.values()]

    rows, read = run_plan._rows_and_vectors_of(ids)

    assert {user_id: len(r) for user_id, r in rows.items()} == {
        users["bare"].pk: 3, users["mixed"].pk: 4, users["embedded"].pk: 4}
    assert sorted(read) == [users["mixed"].pk, users["embedded"].pk]
    for user in users.values():
        assert rows.get(user.pk, []) == list(passes.pass_rows(Truth.objects.for_user(user.pk)))
        alone = vectors.load_user_vectors(user_id=user.pk, max_generation=app_settings.MAX_GENERATION, small=True)
        got_ids, got_vectors = read.get(user.pk, run_plan.NO_VECTORS)
        assert got_ids.tolist() == alone.ids.tolist()
        assert np.array_equal(got_vectors, alone.vectors)
    mixed = [t for t in truths if t.user_id == users["mixed"].pk]
    # Its live embedded truths, 0 and 4, have the same created_at: by id, 4 inserted first.
    assert read[users["mixed"].pk][0].tolist() == [mixed[4].pk, mixed[0].pk]
