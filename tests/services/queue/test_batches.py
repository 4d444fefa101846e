"""Phase 2 tasks carry a batch of one user's cluster jobs (CLUSTERS_PER_CALL), judged in
one model call; the rate limit counts model calls."""

from __future__ import annotations

import pytest
from django_q.models import Schedule

from iris_consolidation import tasks
from iris_consolidation.llm import get_judge_client
from iris_consolidation.models import ConsolidationJob
from iris_consolidation.services.queue import delivery, dispatch, throttling, workers
from tests import llm_stub
from tests.incremental_support import make_pairs

pytestmark = pytest.mark.django_db


class Embedder:
    model_name = "fixed"

    def embed(self, texts):
        from tests.conftest import vector_at

        return [vector_at(1.0) for _ in texts]


def _planned(run_factory, user_ids, capture):
    """Run phase 1 of a queued run for ``user_ids``; returns (run, the batch messages sent)."""
    run = run_factory(execution="queued")
    with capture(execute=False) as callbacks:
        tasks.enqueue_run(run)
        for user_id in user_ids:
            tasks.user_job(str(run.pk), user_id)
    sent = []
    for callback in callbacks:
        cell = callback.__closure__ or ()
        values = [c.cell_contents for c in cell]
        if dispatch.CLUSTERS_TASK in values:
            sent.append(next(v for v in values if isinstance(v, tuple))[1])
    return run, sent


def test_each_users_clusters_are_sent_in_batches_of_clusters_per_call(
    llm_server, run_factory, truth_factory, user_factory, settings, django_capture_on_commit_callbacks
):
    settings.IRIS_CONSOLIDATION_CLUSTERS_PER_CALL = 2
    alice, bob = user_factory("alice"), user_factory("bob")
    make_pairs(truth_factory, alice, 3, prefix="alice")
    make_pairs(truth_factory, bob, 1, prefix="bob", start=3)

    run, sent = _planned(run_factory, [alice.pk, bob.pk], django_capture_on_commit_callbacks)

    cluster_jobs = ConsolidationJob.objects.in_run(run.pk).filter(kind="cluster")
    by_user = {job.pk: job.user_id for job in cluster_jobs}
    assert sorted(len(batch) for batch in sent) == [1, 1, 2]
    assert sorted(pk for batch in sent for pk in batch) == sorted(by_user)
    assert all(len({by_user[pk] for pk in batch}) == 1 for batch in sent)


def test_a_batch_task_makes_one_call_takes_one_start_and_finishes_every_job(
    llm_server, run_factory, truth_factory, user_factory, settings, django_capture_on_commit_callbacks
):
    settings.IRIS_CONSOLIDATION_CLUSTERS_PER_CALL = 3
    user = user_factory()
    make_pairs(truth_factory, user, 3)
    run, sent = _planned(run_factory, [user.pk], django_capture_on_commit_callbacks)
    (batch,) = sent

    results = tasks.cluster_jobs(str(run.pk), batch)

    assert [r["outcome"] for r in results] == ["kept", "kept", "kept"]
    assert len(llm_server.chat_requests()) == 1
    assert len(throttling.recent_starts(name=throttling.CLUSTER_JOBS)) == 1
    assert set(ConsolidationJob.objects.filter(pk__in=batch).values_list("status", flat=True)) == {"done"}


def test_calls_added_by_a_split_reply_are_counted_by_the_rate_limit(
    llm_server, run_factory, truth_factory, user_factory, settings, django_capture_on_commit_callbacks
):
    settings.IRIS_CONSOLIDATION_CLUSTERS_PER_CALL = 2
    settings.IRIS_CONSOLIDATION_LLM_ATTEMPTS = 1
    user = user_factory()
    make_pairs(truth_factory, user, 2)
    llm_server.script = [llm_stub.text("not json"), llm_stub.verdict([], "alone")]
    run, sent = _planned(run_factory, [user.pk], django_capture_on_commit_callbacks)

    tasks.cluster_jobs(str(run.pk), sent[0])

    # The pair's call failed as a whole; each cluster was then asked alone: 3 calls.
    assert len(llm_server.chat_requests()) == 3
    assert len(throttling.recent_starts(name=throttling.CLUSTER_JOBS)) == 3


def test_a_rate_limited_batch_waits_and_comes_back_as_one_task(
    llm_server, run_factory, truth_factory, user_factory, settings, django_capture_on_commit_callbacks
):
    user = user_factory()
    make_pairs(truth_factory, user, 2)
    llm_server.script = [llm_stub.error(429, headers={"retry-after": "20"})]
    run, sent = _planned(run_factory, [user.pk], django_capture_on_commit_callbacks)
    claimed = [delivery.claim(pk) for pk in sent[0]]

    results = workers.work_cluster_jobs(claimed, client=get_judge_client(), embedder=Embedder())

    assert [r["outcome"] for r in results] == ["rate_limited", "rate_limited"]
    assert set(ConsolidationJob.objects.filter(pk__in=sent[0]).values_list("status", flat=True)) == {"waiting"}
    (schedule,) = Schedule.objects.filter(func=dispatch.CLUSTERS_TASK)
    assert str(sorted(sent[0])) in schedule.args
