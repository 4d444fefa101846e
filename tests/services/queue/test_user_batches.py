"""Phase 1 of small users in shared tasks (``tasks.user_jobs``): fewer tasks, the same
clusters and merges, each user still on its own job."""

from __future__ import annotations

import math
import time
from datetime import timedelta

import pytest
from django.db import transaction
from django.utils import timezone

from iris_consolidation import tasks
from iris_consolidation.models import ClusterReview, ConsolidationJob, ConsolidationRun, StageResult, Truth
from iris_consolidation.services.hygiene import stages
from iris_consolidation.services.queue import delivery, dispatch
from iris_consolidation.services.run import lifecycle
from iris_consolidation.services.run import plan as run_plan
from tests.conftest import vector_at

pytestmark = pytest.mark.django_db

Job = ConsolidationJob


@pytest.fixture
def sent(monkeypatch):
    """The django-q2 messages sent (func, args), in order; nothing runs."""
    messages: list[tuple[str, tuple]] = []
    monkeypatch.setattr(dispatch, "async_task", lambda func, *args, **kwargs: messages.append((func, args)))
    return messages


def _user_with_facts(truth_factory, user, *, extra: int = 0) -> None:
    """A user whose truths make two clusters: a pair the rule judge merges (equal texts up to
    case and a full stop) and one it keeps (two numbers). Every user gets the same vectors,
    so clusters that mixed users would show."""
    truth_factory("Works as a nurse", user=user, embedding=vector_at(1.0))
    truth_factory("works as a nurse.", user=user, embedding=vector_at(0.99))
    truth_factory("Has two cats", user=user, embedding=vector_at(1.0, axis=2, towards=3))
    truth_factory("Has three cats", user=user, embedding=vector_at(0.95, axis=2, towards=3))
    for i in range(extra):
        truth_factory(f"Visited city number {i}", user=user, embedding=vector_at(1.0, axis=10 + i, towards=200 + i))


def _plan_jobs(run):
    return list(Job.objects.in_run(run.pk).filter(kind=Job.Kind.USER).order_by("id"))


def test_fifty_small_users_and_one_large_are_sent_in_ceil_fifty_over_n_plus_one_tasks(
    run_factory, truth_factory, user_factory, settings, sent, django_capture_on_commit_callbacks
):
    per_task = 8
    settings.IRIS_CONSOLIDATION_PHASE1_USERS_PER_TASK = per_task
    settings.IRIS_CONSOLIDATION_PHASE1_BATCH_MAX_TRUTHS = 4
    small = [user_factory() for _ in range(50)]
    for user in small:
        truth_factory("Likes tea", user=user, embedding=vector_at(1.0))
        truth_factory("Likes tea.", user=user, embedding=vector_at(0.99))
    large = user_factory()
    _user_with_facts(truth_factory, large, extra=1)  # 5 truths: over the bound
    run = run_factory(execution="queued")

    with django_capture_on_commit_callbacks(execute=True):
        tasks.enqueue_run(run)

    plans = [(func, args) for func, args in sent if func in (dispatch.USER_TASK, dispatch.USERS_TASK)]
    assert len(plans) == math.ceil(50 / per_task) + 1
    assert [args for func, args in plans if func == dispatch.USER_TASK] == [(str(run.pk), large.pk)]
    batches = [args[1] for func, args in plans if func == dispatch.USERS_TASK]
    jobs = {job.pk: job.user_id for job in _plan_jobs(run)}
    assert sorted(jobs[pk] for batch in batches for pk in batch) == sorted(u.pk for u in small)
    assert max(len(batch) for batch in batches) == per_task
    assert len(jobs) == 51  # one job per user, batched or not


def test_a_task_carries_at_most_the_truths_one_user_timeout_covers(run_factory, truth_factory, user_factory, settings):
    settings.IRIS_CONSOLIDATION_PHASE1_USERS_PER_TASK = 50
    settings.IRIS_CONSOLIDATION_PHASE1_BATCH_MAX_TRUTHS = 4
    users = [user_factory() for _ in range(5)]
    for user in users:
        for i in range(4):
            truth_factory(f"Fact {i}", user=user)
    run = run_factory(execution="queued")
    lifecycle.start_run(run)
    jobs = [Job(run=run, kind=Job.Kind.USER, key=f"user:{u.pk}", user=u) for u in users]
    original = dispatch.TRUTHS_PER_USER_TIMEOUT
    try:
        dispatch.TRUTHS_PER_USER_TIMEOUT = 8
        groups = dispatch.user_batches(jobs)
    finally:
        dispatch.TRUTHS_PER_USER_TIMEOUT = original

    assert [len(g) for g in groups] == [2, 2, 1]


def _outcome(run_id):
    """What a run did, without ids that differ between runs: its counters, clusters,
    reviews and each user's live truths."""
    run = ConsolidationRun.objects.get(pk=run_id)
    clusters = sorted(
        (job.user_id, tuple(job.member_ids), tuple(job.similarities))
        for job in Job.objects.in_run(run_id).filter(kind=Job.Kind.CLUSTER)
    )
    reviews = sorted(
        (r.user_id, tuple(sorted(row["id"] for row in r.snapshot)), r.outcome, len(r.applied_actions))
        for r in ClusterReview.objects.filter(run_id=run_id)
    )
    live = sorted(Truth.objects.values_list("user_id", "content", "generation"))
    counters = (run.status, run.users_done, run.clusters_found, run.clusters_done, run.merged, run.retired, run.failed)
    return counters, clusters, reviews, live


def test_batched_planning_finds_the_clusters_and_merges_of_per_user_planning(
    run_factory, truth_factory, user_factory, settings, django_capture_on_commit_callbacks
):
    settings.IRIS_CONSOLIDATION_PHASE1_BATCH_MAX_TRUTHS = 100
    users = [user_factory() for _ in range(7)]
    for i, user in enumerate(users):
        _user_with_facts(truth_factory, user, extra=i % 3)
    outcomes = {}
    for per_task in (1, 3):
        settings.IRIS_CONSOLIDATION_PHASE1_USERS_PER_TASK = per_task
        with transaction.atomic():
            run = run_factory(execution="queued")
            with django_capture_on_commit_callbacks(execute=True):
                tasks.enqueue_run(run)
            outcomes[per_task] = _outcome(run.pk)
            transaction.set_rollback(True)  # the next planning sees the same data

    counters, clusters, reviews, _ = outcomes[3]
    status, users_done, found, done, merged, _, failed = counters
    assert (status, users_done, failed, merged) == ("done", 7, 0, 7)
    assert found == done >= 14
    assert outcomes[3] == outcomes[1]
    for user_id, member_ids, _ in clusters:  # never two users in one cluster
        assert set(Truth.all_objects.filter(pk__in=member_ids).values_list("user_id", flat=True)) == {user_id}
    assert [outcome for *_, outcome, _ in reviews].count("applied") == 7


def _batched_run(run_factory, truth_factory, user_factory, settings, capture, *, users=4):
    settings.IRIS_CONSOLIDATION_PHASE1_USERS_PER_TASK = users
    settings.IRIS_CONSOLIDATION_PHASE1_BATCH_MAX_TRUTHS = 100
    people = [user_factory() for _ in range(users)]
    for user in people:
        _user_with_facts(truth_factory, user)
    run = run_factory(execution="queued")
    with capture(execute=False) as callbacks:
        tasks.enqueue_run(run)
    assert len(callbacks) == 1  # one phase 1 task for all of them
    return run, people, [job.pk for job in _plan_jobs(run)]


def test_a_user_failing_inside_a_batch_leaves_the_others_planned(
    run_factory, truth_factory, user_factory, settings, monkeypatch, django_capture_on_commit_callbacks
):
    settings.IRIS_CONSOLIDATION_JOB_ATTEMPTS = 1
    run, people, job_ids = _batched_run(
        run_factory, truth_factory, user_factory, settings, django_capture_on_commit_callbacks
    )
    failing = people[1].pk
    real = stages.candidate_clusters

    def clusters(run, user_id, **kwargs):
        if user_id == failing:
            raise RuntimeError("this user's rows are broken")
        return real(run, user_id, **kwargs)

    monkeypatch.setattr(stages, "candidate_clusters", clusters)

    with pytest.raises(RuntimeError, match="broken"), django_capture_on_commit_callbacks(execute=False):
        tasks.user_jobs(str(run.pk), job_ids)

    jobs = {job.user_id: job for job in _plan_jobs(run)}
    assert jobs[failing].status == "failed"
    assert jobs[failing].error.startswith("Gave up after 1 failed deliveries")
    assert [jobs[u.pk].status for u in people if u.pk != failing] == ["done"] * 3
    clusters = Job.objects.in_run(run.pk).filter(kind=Job.Kind.CLUSTER)
    assert sorted(set(clusters.values_list("user_id", flat=True))) == sorted(u.pk for u in people if u.pk != failing)
    run.refresh_from_db()
    assert run.users_done == 3
    assert f"Phase 1 failed for user {failing}" in run.notes
    # The failing user's pass wrote nothing (its savepoint was rolled back); the others' did.
    recorded = set(StageResult.objects.filter(run=run).values_list("user_id", flat=True))
    assert recorded == {u.pk for u in people if u.pk != failing}


def test_a_failing_user_with_attempts_left_is_queued_again_alone(
    run_factory, truth_factory, user_factory, settings, monkeypatch, sent, django_capture_on_commit_callbacks
):
    settings.IRIS_CONSOLIDATION_JOB_ATTEMPTS = 3
    run, people, job_ids = _batched_run(
        run_factory, truth_factory, user_factory, settings, django_capture_on_commit_callbacks
    )
    failing = people[0].pk
    real = stages.candidate_clusters

    def clusters(run, user_id, **kwargs):
        if user_id == failing:
            raise RuntimeError("flaky")
        return real(run, user_id, **kwargs)

    monkeypatch.setattr(stages, "candidate_clusters", clusters)

    with django_capture_on_commit_callbacks(execute=True), pytest.raises(RuntimeError):
        tasks.user_jobs(str(run.pk), job_ids)

    job = Job.objects.in_run(run.pk).get(user_id=failing, kind=Job.Kind.USER)
    assert (job.status, job.faults) == ("queued", 1)
    assert (dispatch.USER_TASK, (str(run.pk), failing)) in sent


def test_a_batch_delivered_again_does_no_work_twice(
    run_factory, truth_factory, user_factory, settings, monkeypatch, django_capture_on_commit_callbacks
):
    run, people, job_ids = _batched_run(
        run_factory, truth_factory, user_factory, settings, django_capture_on_commit_callbacks
    )
    planned = []
    real = stages.candidate_clusters

    def clusters(run, user_id, **kwargs):
        planned.append(user_id)
        if user_id == people[2].pk and planned.count(user_id) == 1:
            raise KeyboardInterrupt  # the worker dies here: not an error the task handles
        return real(run, user_id, **kwargs)

    monkeypatch.setattr(stages, "candidate_clusters", clusters)
    with pytest.raises(KeyboardInterrupt), django_capture_on_commit_callbacks(execute=False):
        tasks.user_jobs(str(run.pk), job_ids)
    # The batch is planned in one transaction: the worker died before it committed.
    status = {job.user_id: job.status for job in _plan_jobs(run)}
    assert [status[u.pk] for u in people] == ["running"] * 4
    assert not StageResult.objects.filter(run=run).exists()

    # The same message while the dead worker's lease runs: nothing to do.
    with django_capture_on_commit_callbacks(execute=False):
        assert tasks.user_jobs(str(run.pk), job_ids) == [{"jobs": job_ids, "skipped": True}]
    # Past the lease: the users are planned again, once; done, they are not planned again.
    Job.objects.in_run(run.pk).filter(status="running").update(lease_until=timezone.now() - timedelta(seconds=1))
    with django_capture_on_commit_callbacks(execute=False):
        tasks.user_jobs(str(run.pk), job_ids)
    with django_capture_on_commit_callbacks(execute=False):
        assert tasks.user_jobs(str(run.pk), job_ids) == [{"jobs": job_ids, "skipped": True}]

    first = [u.pk for u in people[:3]]
    assert planned == first + [u.pk for u in people]
    jobs = {job.user_id: job for job in _plan_jobs(run)}
    assert [(jobs[u.pk].status, jobs[u.pk].faults) for u in people] == [("done", 1)] * 4
    run.refresh_from_db()
    assert (run.users_done, run.clusters_found) == (4, 8)
    assert Job.objects.in_run(run.pk).filter(kind=Job.Kind.CLUSTER).count() == 8
    semantic = StageResult.objects.filter(run=run, stage="semantic")
    assert sorted(semantic.values_list("user_id", flat=True)) == sorted(u.pk for u in people)


def test_users_not_started_before_the_embedding_share_are_queued_again_together(
    run_factory, truth_factory, user_factory, settings, monkeypatch, sent, clock, django_capture_on_commit_callbacks
):
    run, people, job_ids = _batched_run(
        run_factory, truth_factory, user_factory, settings, django_capture_on_commit_callbacks
    )
    settings.IRIS_CONSOLIDATION_USER_JOB_TIMEOUT = 1  # embedding may use 0.5 s of the task
    # Every user has a truth to embed again (made by another model).
    Truth.objects.filter(user__in=people, content="Has two cats").update(embedding_model="an-older-model")
    real = run_plan.embed_user

    def embed(run, *, user_id, deadline, **kwargs):
        done = real(run, user_id=user_id, deadline=deadline, **kwargs)
        clock.advance(max(0.0, deadline - time.monotonic()) + 0.05)  # the first user takes the share
        return done

    monkeypatch.setattr(run_plan, "embed_user", embed)

    with django_capture_on_commit_callbacks(execute=True):
        results = tasks.user_jobs(str(run.pk), job_ids)

    # The first user's embedding reached the deadline: it continues in a new delivery (its
    # truth is embedded); the others had not started and go back together.
    assert [r.get("continued", False) for r in results] == [True, False, False, False]
    assert [r.get("released", False) for r in results] == [False, True, True, True]
    jobs = {job.user_id: job for job in _plan_jobs(run)}
    assert [(jobs[u.pk].status, jobs[u.pk].faults) for u in people] == [("queued", 0)] * 4
    assert jobs[people[0].pk].continues
    assert not Truth.objects.filter(user=people[0], embedding_model="an-older-model").exists()
    assert Truth.objects.filter(user__in=people[1:], embedding_model="an-older-model").count() == 3
    assert [args[1] for func, args in sent if func == dispatch.USERS_TASK] == [job_ids[1:]]


def test_claim_batch_takes_only_the_jobs_left_to_do(run_factory, user_factory, settings):
    run = run_factory(execution="queued")
    lifecycle.start_run(run)
    users = [user_factory() for _ in range(3)]
    jobs = [Job.objects.create(run=run, kind=Job.Kind.USER, key=f"user:{u.pk}", user=u) for u in users]
    Job.objects.filter(pk=jobs[0].pk).update(status="done")
    now = timezone.now()

    taken = delivery.claim_batch([j.pk for j in jobs], worker="host:1", timeout=60, now=now)

    assert [j.pk for j in taken] == [jobs[1].pk, jobs[2].pk]
    assert all(j.lease_until == now + timedelta(seconds=60 + delivery.LEASE_MARGIN) for j in taken)
    assert delivery.claim_batch([j.pk for j in jobs], timeout=60, now=now) == []


def test_a_batch_delivered_again_after_its_plans_committed_finishes_every_user(
    run_factory, truth_factory, user_factory, settings, monkeypatch, django_capture_on_commit_callbacks
):
    """The worker died after the batch's plans were committed and before its jobs were
    marked done: the task delivered again plans the users as recorded and finishes them."""
    settings.IRIS_CONSOLIDATION_JOB_ATTEMPTS = 2
    run, people, job_ids = _batched_run(
        run_factory, truth_factory, user_factory, settings, django_capture_on_commit_callbacks
    )
    real = delivery.finish_user_jobs

    def die(done, **kwargs):
        raise KeyboardInterrupt  # the worker dies between the two commits

    monkeypatch.setattr(delivery, "finish_user_jobs", die)
    with pytest.raises(KeyboardInterrupt), django_capture_on_commit_callbacks(execute=False):
        tasks.user_jobs(str(run.pk), job_ids)
    assert StageResult.objects.filter(run=run, stage="semantic").count() == len(people)
    monkeypatch.setattr(delivery, "finish_user_jobs", real)
    Job.objects.in_run(run.pk).filter(status="running").update(lease_until=timezone.now() - timedelta(seconds=1))

    with django_capture_on_commit_callbacks(execute=False):
        tasks.user_jobs(str(run.pk), job_ids)

    jobs = {job.user_id: job for job in _plan_jobs(run)}
    assert [(jobs[u.pk].status, jobs[u.pk].faults) for u in people] == [("done", 1)] * len(people)
    run.refresh_from_db()
    assert (run.users_done, run.clusters_found) == (4, 8)
    assert StageResult.objects.filter(run=run, stage="semantic").count() == len(people)
