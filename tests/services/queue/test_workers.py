"""One delivery of a cluster job: the jobs-per-minute limit and provider 429s, through
litellm against the stub, with a controlled clock."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone
from django_q.models import Schedule

from iris_consolidation import tasks
from iris_consolidation.llm import get_judge_client
from iris_consolidation.models import ClusterReview, ConsolidationJob, RateLimitWindow, Truth
from iris_consolidation.services.pipeline.clustering import CandidateCluster
from iris_consolidation.services.queue import delivery, dispatch, throttling, workers
from iris_consolidation.services.run import jobs as run_jobs
from tests import llm_stub
from tests.conftest import vector_at

pytestmark = pytest.mark.django_db

NOW = timezone.now()


class Embedder:
    model_name = "fixed"

    def embed(self, texts):
        return [vector_at(1.0) for _ in texts]


def _claim(run_factory, truth_factory, texts):
    run = run_factory(execution="queued")
    a = truth_factory(texts[0], embedding=vector_at(1.0))
    b = truth_factory(texts[1], user=a.user, embedding=vector_at(0.95))
    job = run_jobs.create_cluster_jobs(
        run.pk,
        [CandidateCluster(user_id=a.user_id, member_ids=(a.pk, b.pk), similarities=(1.0, 0.95))],
        now=timezone.now(),
    )[0]
    return delivery.claim(job.pk, now=NOW)


@pytest.fixture
def claimed(run_factory, truth_factory):
    """A claimed job whose cluster the rule judge merges (near-equal texts)."""
    return _claim(run_factory, truth_factory, ("Works as a nurse", "Works as a nurse."))


@pytest.fixture
def model_job(run_factory, truth_factory):
    """A claimed job whose cluster reaches the model: paraphrases, not equal texts, which
    the deterministic pre-pass would merge without asking it."""
    return _claim(run_factory, truth_factory, ("Is a nurse", "Has a job as a nurse"))


def _judge(job, **kwargs):
    kwargs.setdefault("clock", lambda: NOW)
    return workers.work_cluster_jobs([job], client=get_judge_client(), embedder=Embedder(), **kwargs)[0]


def test_429_puts_the_job_back_until_the_providers_reset_time(llm_server, model_job):
    llm_server.script = [llm_stub.error(429, headers={"retry-after": "17"})]

    assert _judge(model_job) == {"job": model_job.pk, "outcome": "rate_limited"}

    model_job.refresh_from_db()
    assert (model_job.status, model_job.rate_limited, model_job.faults) == ("waiting", 1, 0)
    assert model_job.not_before == NOW + timedelta(seconds=17)
    schedule = Schedule.objects.get(func=dispatch.CLUSTERS_TASK)
    assert (schedule.schedule_type, schedule.next_run) == (Schedule.ONCE, model_job.not_before)
    assert str(model_job.run_id) in schedule.args and dispatch.group_name(model_job.run_id) in schedule.kwargs
    assert not ClusterReview.objects.exists()
    assert len(llm_server.chat_requests()) == 1  # litellm's own retries are off


def test_429_without_a_wait_header_waits_the_default(llm_server, model_job):
    llm_server.script = [llm_stub.error(429)]

    _judge(model_job)

    model_job.refresh_from_db()
    assert model_job.not_before == NOW + timedelta(seconds=workers.DEFAULT_RETRY_AFTER)


def test_429_whose_wait_ends_past_the_retry_window_fails_the_cluster(llm_server, model_job, settings):
    settings.IRIS_CONSOLIDATION_RETRY_WINDOW = 7200
    llm_server.script = [llm_stub.error(429, headers={"retry-after": "30"})]
    ConsolidationJob.objects.filter(pk=model_job.pk).update(first_attempt_at=NOW - timedelta(seconds=7180))
    model_job.refresh_from_db()

    assert _judge(model_job)["outcome"] == "failed"

    model_job.refresh_from_db()
    assert model_job.status == "failed" and model_job.faults == 0
    assert model_job.review.failure == ClusterReview.Failure.RATE_LIMITED
    # The operator reads which model limited the rate (the one check of this message's text).
    assert "Rate limited by openai/stub-judge" in model_job.review.error
    assert Truth.objects.filter(pk__in=model_job.member_ids).count() == 2
    assert not Schedule.objects.filter(func=dispatch.CLUSTERS_TASK).exists()


def test_short_wait_under_the_limit_is_taken_in_the_worker(llm_server, model_job, settings):
    llm_server.script = [llm_stub.verdict([])]
    settings.IRIS_CONSOLIDATION_JOBS_PER_MINUTE = 1
    settings.IRIS_CONSOLIDATION_LLM_TIMEOUT = 5.0  # leaves 100 s of the 120 s timeout to wait
    throttling.acquire(name=throttling.CLUSTER_JOBS, limit=1, period=60)  # the window is full
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        # The time passes: the start that filled the window leaves it.
        RateLimitWindow.objects.filter(name=throttling.CLUSTER_JOBS).update(starts=[])

    result = _judge(model_job, sleep=sleep)

    assert result["outcome"] == "kept"
    assert len(slept) == 1 and 0 < slept[0] <= 60 + throttling.START_MARGIN
    assert len(llm_server.chat_requests()) == 1


def test_long_wait_under_the_limit_puts_the_job_back_in_the_queue(llm_server, model_job, settings):
    claimed = model_job
    settings.IRIS_CONSOLIDATION_JOBS_PER_MINUTE = 1
    settings.IRIS_CONSOLIDATION_LLM_TIMEOUT = 60.0  # leaves 45 s of the 120 s timeout: too short
    throttling.acquire(name=throttling.CLUSTER_JOBS, limit=1, period=60)

    assert _judge(claimed, sleep=pytest.fail, clock=timezone.now) == {"job": claimed.pk, "outcome": "throttled"}
    assert llm_server.chat_requests() == []  # no call made, no review recorded
    assert not ClusterReview.objects.exists()

    claimed.refresh_from_db()
    assert (claimed.status, claimed.throttled, claimed.rate_limited, claimed.faults) == ("waiting", 1, 0, 0)
    # Due 45 s (the most a worker may wait: 120 - 60 - 15) before the window has room.
    room = throttling.recent_starts(name=throttling.CLUSTER_JOBS)[0] + 60 + throttling.START_MARGIN
    assert claimed.not_before.timestamp() == pytest.approx(room - workers.max_throttle_sleep(), abs=2)
    assert workers.max_throttle_sleep() == 45
    assert Schedule.objects.get(func=dispatch.CLUSTERS_TASK).next_run == claimed.not_before


def test_rule_judge_clusters_are_not_throttled(rules_judge, claimed, settings):
    settings.IRIS_CONSOLIDATION_JOBS_PER_MINUTE = 1
    throttling.acquire(name=throttling.CLUSTER_JOBS, limit=1, period=60)  # the window is full

    assert _judge(claimed, sleep=pytest.fail)["outcome"] == "applied"

    claimed.refresh_from_db()
    assert (claimed.status, claimed.throttled) == ("done", 0)
    assert len(throttling.recent_starts(name=throttling.CLUSTER_JOBS)) == 1  # none taken


def test_clusters_the_pre_pass_settles_are_not_throttled(llm_server, claimed, settings):
    # The LLM judge is configured, but the deterministic pre-pass merges these two
    # (equal after normalisation): no model call, so no wait for the rate limit.
    settings.IRIS_CONSOLIDATION_JOBS_PER_MINUTE = 1
    throttling.acquire(name=throttling.CLUSTER_JOBS, limit=1, period=60)

    assert _judge(claimed, sleep=pytest.fail)["outcome"] == "applied"

    assert llm_server.chat_requests() == []
    assert len(throttling.recent_starts(name=throttling.CLUSTER_JOBS)) == 1


def test_phase_one_is_not_throttled(
    rules_judge, run_factory, truth_factory, settings, django_capture_on_commit_callbacks
):
    settings.IRIS_CONSOLIDATION_JOBS_PER_MINUTE = 1
    throttling.acquire(name=throttling.CLUSTER_JOBS, limit=1, period=60)
    truth_factory("Works as a nurse", embedding=vector_at(1.0))
    truth_factory("Works as a nurse.", embedding=vector_at(0.95))
    run = run_factory(execution="queued")

    with django_capture_on_commit_callbacks(execute=False):
        tasks.enqueue_run(run)
        user_job = ConsolidationJob.objects.get(run=run, kind="user")
        tasks.user_job(str(run.pk), user_job.user_id)

    run.refresh_from_db()
    assert (run.users_done, run.clusters_found) == (1, 1)


@pytest.fixture
def rules_judge(settings):
    settings.IRIS_CONSOLIDATION_JUDGE = "rules"
