"""The django-q2 entry points run in process (q_sync): a queued run end to end, duplicates."""

from __future__ import annotations

import functools

import pytest
from django.utils import timezone

from iris_consolidation import tasks
from iris_consolidation.models import ClusterReview, ConsolidationJob, Origin, Truth
from iris_consolidation.services.queue import delivery, dispatch, recovery
from iris_consolidation.services.run import jobs as run_jobs
from iris_consolidation.services.run import lifecycle
from tests import llm_stub
from tests.conftest import vector_at

pytestmark = pytest.mark.django_db


@pytest.fixture
def two_clusters(user_factory, truth_factory):
    alice, bob = user_factory("alice"), user_factory("bob")
    return {
        "alice": [
            truth_factory("Works as a nurse", user=alice, embedding=vector_at(1.0)),
            truth_factory("Works as a nurse.", user=alice, embedding=vector_at(0.95)),
        ],
        "bob": [
            truth_factory("Plays the cello", user=bob, embedding=vector_at(1.0)),
            truth_factory("Plays the cello.", user=bob, embedding=vector_at(0.95)),
        ],
    }


def _queued_run():
    return lifecycle.create_run(trigger="command", judge="rules")


def test_queued_run_goes_through_both_phases_and_is_done(two_clusters, django_capture_on_commit_callbacks):
    run = _queued_run()

    with django_capture_on_commit_callbacks(execute=True):
        assert tasks.enqueue_run(run) == 2

    run.refresh_from_db()
    counts = ConsolidationJob.objects.in_run(run.pk).counts_by_status()
    assert (run.status, run.users_done, run.clusters_found, run.clusters_done, run.merged) == ("done", 2, 2, 2, 2)
    assert counts == {"queued": 0, "running": 0, "waiting": 0, "done": 4, "failed": 0}
    assert run.finished_at is not None
    assert Truth.objects.filter(origin=Origin.CONSOLIDATED).count() == 2


def test_run_without_users_is_done_at_once(django_capture_on_commit_callbacks):
    run = _queued_run()

    with django_capture_on_commit_callbacks(execute=True):
        assert tasks.enqueue_run(run) == 0

    run.refresh_from_db()
    assert run.status == "done" and run.finished_at is not None


def test_cluster_task_delivered_twice_applies_its_verdict_once(two_clusters, django_capture_on_commit_callbacks):
    run = _queued_run()
    with django_capture_on_commit_callbacks(execute=True):
        tasks.enqueue_run(run)
    job = ConsolidationJob.objects.get(run=run, kind="cluster", user__username="alice")

    with django_capture_on_commit_callbacks(execute=True):
        again = tasks.cluster_jobs(str(run.pk), [job.pk])

    run.refresh_from_db()
    assert again == [{"jobs": [job.pk], "skipped": True}]
    assert (run.clusters_done, run.merged, run.retired) == (2, 2, 4)
    assert Truth.all_objects.filter(origin=Origin.CONSOLIDATED).count() == 2
    assert ClusterReview.objects.filter(run=run).count() == 2


def test_plan_task_delivered_twice_counts_the_user_once(two_clusters, django_capture_on_commit_callbacks):
    run = _queued_run()
    with django_capture_on_commit_callbacks(execute=True):
        tasks.enqueue_run(run)
    alice = two_clusters["alice"][0].user_id

    with django_capture_on_commit_callbacks(execute=True):
        assert tasks.user_job(str(run.pk), alice) == {"user_id": alice, "skipped": True}

    run.refresh_from_db()
    assert (run.users_done, run.clusters_found) == (2, 2)
    assert ConsolidationJob.objects.filter(run=run, kind="cluster").count() == 2


def test_redelivery_after_the_write_finishes_the_job_without_asking_the_judge_again(
    llm_server, user_factory, truth_factory, django_capture_on_commit_callbacks
):
    """A worker that died after recording its review but before marking its job done."""
    alice = user_factory("alice")
    # Paraphrases, not equal texts: the deterministic pre-pass would merge equal texts
    # without the model, and this test counts the model's calls.
    truth_factory("Is a nurse", user=alice, embedding=vector_at(1.0))
    truth_factory("Has a job as a nurse", user=alice, embedding=vector_at(0.95))
    llm_server.handler = lambda payload: llm_stub.verdict(
        [
            {
                "action": "merge",
                "ids": ["t1", "t2"],
                "content": llm_server.truths_of({"json": payload})[0]["content"],
                "reason": "same",
            }
        ]
    )
    run = lifecycle.create_run(trigger="command", user_id=alice.pk)
    with django_capture_on_commit_callbacks(execute=True):
        tasks.enqueue_run(run)
    job = ConsolidationJob.objects.get(run=run, kind="cluster")
    ConsolidationJob.objects.filter(pk=job.pk).update(status="running", lease_until=timezone.now(), review=None)
    run.refresh_from_db()
    calls = len(llm_server.chat_requests())

    with django_capture_on_commit_callbacks(execute=True):
        tasks.cluster_jobs(str(run.pk), [job.pk])

    job.refresh_from_db()
    assert (job.status, job.faults, job.deliveries) == ("done", 1, 2)
    assert job.review.outcome == "applied"
    assert len(llm_server.chat_requests()) == calls == 1
    assert Truth.all_objects.filter(origin=Origin.CONSOLIDATED).count() == 1


def test_unexpected_error_is_a_fault_requeued_until_job_attempts(two_clusters, settings):
    from iris_consolidation.exceptions import JudgeMisconfigured
    from iris_consolidation.services.pipeline.clustering import CandidateCluster

    settings.IRIS_CONSOLIDATION_JOB_ATTEMPTS = 2
    run = _queued_run()
    lifecycle.start_run(run)
    ConsolidationJob.objects.filter(run=run, kind="user").update(status="done")  # phase 1 done: cluster jobs follow
    members = two_clusters["alice"]
    cluster = {"user_id": members[0].user_id, "member_ids": [t.pk for t in members], "similarities": [1.0, 0.95]}
    job = run_jobs.create_cluster_jobs(
        run.pk,
        [
            CandidateCluster(
                user_id=members[0].user_id, member_ids=tuple(cluster["member_ids"]), similarities=(1.0, 0.95)
            )
        ],
        now=timezone.now(),
    )[0]
    settings.IRIS_CONSOLIDATION_JUDGE = "nonexistent"  # get_judge_client raises JudgeMisconfigured

    with pytest.raises(JudgeMisconfigured):  # django-q2 records the failure
        tasks.cluster_jobs(str(run.pk), [job.pk])
    job.refresh_from_db()
    assert (job.status, job.faults) == ("queued", 1)

    with pytest.raises(JudgeMisconfigured):
        tasks.cluster_jobs(str(run.pk), [job.pk])
    job.refresh_from_db()
    run.refresh_from_db()
    assert (job.status, job.faults) == ("failed", 2)
    assert job.error.startswith(
        delivery.GAVE_UP.format(faults=2, attempts=2, error="JudgeMisconfigured: Unknown judge")[:60]
    )
    assert job.review.outcome == "failed"
    assert (run.status, run.failed) == ("failed", 1)
    assert Truth.objects.filter(pk__in=cluster["member_ids"]).count() == 2


@pytest.mark.django_db(transaction=True)
def test_two_deliveries_judging_at_once_apply_the_verdict_once(two_clusters):
    """Both deliveries get past the claim (the first one's lease ran out while it was
    slow) and reach the judge together; the write happens once."""
    import threading

    from django.db import connection

    from iris_consolidation.llm.rules import RuleJudge
    from iris_consolidation.services.queue import workers

    barrier = threading.Barrier(2, timeout=10)

    class TogetherJudge(RuleJudge):
        def judge(self, request):
            barrier.wait()  # both deliveries hold a verdict before either writes
            return super().judge(request)

    run = _queued_run()
    lifecycle.start_run(run)
    ConsolidationJob.objects.filter(run=run, kind="user").update(status="done")  # phase 1 done: cluster jobs follow
    members = two_clusters["alice"]
    from iris_consolidation.services.pipeline.clustering import CandidateCluster

    job = run_jobs.create_cluster_jobs(
        run.pk,
        [
            CandidateCluster(
                user_id=members[0].user_id, member_ids=tuple(t.pk for t in members), similarities=(1.0, 0.95)
            )
        ],
        now=timezone.now(),
    )[0]
    claimed = delivery.claim(job.pk)
    outcomes: list[str] = []

    def deliver() -> None:
        try:
            result = workers.work_cluster_jobs([claimed], client=TogetherJudge(), embedder=_Embedder())[0]
            outcomes.append(result["outcome"])
        finally:
            connection.close()

    threads = [threading.Thread(target=deliver) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    run.refresh_from_db()
    assert outcomes == ["applied", "applied"]  # the second found the first one's review
    assert ClusterReview.objects.filter(run=run).count() == 1
    assert Truth.all_objects.filter(origin=Origin.CONSOLIDATED).count() == 1
    assert (run.merged, run.retired, run.clusters_done) == (1, 2, 1)


class _Embedder:
    model_name = "fixed"

    def embed(self, texts):
        return [vector_at(1.0) for _ in texts]


def test_retry_after_the_model_was_unavailable_asks_the_model_again(
    llm_server, user_factory, truth_factory, django_capture_on_commit_callbacks
):
    """The first round stopped the model tier for the user; the retry is a new round."""
    alice = user_factory("alice")
    truth_factory("Is a nurse", user=alice, embedding=vector_at(1.0))
    truth_factory("Has a job as a nurse", user=alice, embedding=vector_at(0.95))
    llm_server.script = [llm_stub.error(500, message="upstream exploded")]
    run = lifecycle.create_run(trigger="command", user_id=alice.pk)
    with django_capture_on_commit_callbacks(execute=True):
        tasks.enqueue_run(run)
    run.refresh_from_db()
    assert (run.status, run.failed) == ("failed", 1)

    llm_server.script = [
        llm_stub.verdict([{"action": "merge", "ids": ["t1", "t2"], "content": "Is a nurse", "reason": "same"}])
    ]
    with django_capture_on_commit_callbacks(execute=True):
        assert recovery.retry_failed(run.pk) == 1

    run.refresh_from_db()
    assert (run.status, run.merged, run.failed) == ("done", 1, 0)
    assert len(llm_server.chat_requests()) == 2


class SlowEmbedder:
    """Takes ``seconds`` of ``clock`` per batch, like a model on a busy machine; distinct
    vectors per text, except that texts ending in "again" repeat the vector of the text
    before it."""

    model_name = "slow-test-embedder"

    def __init__(self, seconds: float, clock) -> None:
        self.seconds, self.clock = seconds, clock
        self.batches = 0

    def embed(self, texts):
        import numpy as np

        self.batches += 1
        self.clock.advance(self.seconds)
        out = []
        for text in texts:
            n = int(text.split()[1])
            v = np.zeros(384, dtype=np.float32)
            v[n] = 1.0
            out.append(v)
        return np.stack(out)


def test_a_user_larger_than_one_tasks_budget_finishes_phase_one_across_deliveries(
    user_factory, truth_factory, settings, monkeypatch, clock, django_capture_on_commit_callbacks
):
    # Budget: half of a 1 s timeout for embedding; batches of 2 truths take 0.3 s each
    # (of the test's clock: no real wait), so 20 truths need several deliveries, none of
    # them a fault. Each delivery is run here as the broker would deliver the task it re-queued.
    settings.IRIS_CONSOLIDATION_USER_JOB_TIMEOUT = 1
    settings.IRIS_CONSOLIDATION_EMBEDDING_BATCH_SIZE = 2
    embedder = SlowEmbedder(0.3, clock)
    monkeypatch.setattr(tasks, "_worker_embedder", functools.cache(lambda: embedder))
    alice = user_factory("alice")
    for i in range(10):
        truth_factory(f"Fact {i} once", user=alice)
        truth_factory(f"Fact {i} twice", user=alice)  # same vector: one cluster per fact
    run = _queued_run()
    with django_capture_on_commit_callbacks(execute=False):
        tasks.enqueue_run(run)
    job = ConsolidationJob.objects.get(run=run, kind="user")

    results = []
    while job.status != "done" and len(results) < 20:
        with django_capture_on_commit_callbacks(execute=False) as sent:
            results.append(tasks.user_job(str(run.pk), alice.pk))
        job.refresh_from_db()
        if job.status != "done":
            assert len(sent) == 1  # the continuation's task
            assert job.error.startswith("Phase 1 continues in a new delivery")

    run.refresh_from_db()
    assert (job.status, job.faults, job.error) == ("done", 0, "")
    assert len(results) >= 3 and all(r.get("continued") for r in results[:-1])
    assert (run.embedded, run.users_done, run.clusters_found) == (20, 1, 10)
    assert embedder.batches == 10  # nothing embedded twice
    assert ConsolidationJob.objects.filter(run=run, kind="cluster").count() == 10
    assert ConsolidationJob.objects.in_run(run.pk).counts_by_status()["failed"] == 0


def test_phase_one_progress_is_shown_while_a_user_continues(user_factory, truth_factory, run_factory):
    from django.core.management import call_command

    alice = user_factory("alice")
    truth_factory("Fact 1 once", user=alice)
    run = run_factory(execution="queued")
    run.status = "running"
    run.users, run.embedded = 1, 4000
    run.save()
    job = run_jobs.ensure_user_job(run.pk, alice.pk)
    note = delivery.PHASE1_CONTINUES.format(embedded=2000, pending=16000)
    ConsolidationJob.objects.filter(pk=job.pk).update(error=note, continues=True)

    from io import StringIO

    out = StringIO()
    call_command("consolidation_status", stdout=out)

    assert ConsolidationJob.objects.in_run(run.pk).phase1_progress() == [(alice.pk, note)]
    assert "0 of 1 users planned, 4000 truths embedded" in out.getvalue()
    assert f"user {alice.get_username()} (#{alice.pk}): {note}" in out.getvalue()


def test_user_job_timeout_grows_with_the_users_size(user_factory, truth_factory, settings, monkeypatch):
    from django_q.conf import Conf

    from iris_consolidation.models import Truth as T

    settings.IRIS_CONSOLIDATION_USER_JOB_TIMEOUT = 60
    monkeypatch.setattr(dispatch, "TRUTHS_PER_USER_TIMEOUT", 2)
    monkeypatch.setattr(Conf, "RETRY", 180)
    alice = user_factory("alice")
    assert dispatch.timeout_of("user", user_id=alice.pk) == 60  # no truths: the setting
    T.objects.bulk_create([T(user=alice, content=f"t{i}") for i in range(3)])
    assert dispatch.timeout_of("user", user_id=alice.pk) == 120  # two started blocks of 2
    T.objects.bulk_create([T(user=alice, content=f"u{i}") for i in range(10)])
    assert dispatch.timeout_of("user", user_id=alice.pk) == 150  # capped 30 s below the broker's retry
    assert dispatch.timeout_of("user") == 60
