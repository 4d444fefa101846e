"""services.queue.execution: a run executed in process runs the same job rows as a
queued run, finishes by the same rule and holds cursors the same way after a 429."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest
from django.utils import timezone

from iris_consolidation.conf import app_settings
from iris_consolidation.embeddings import get_embedder
from iris_consolidation.exceptions import JudgeRateLimited
from iris_consolidation.llm.base import JudgeRequest, Verdict
from iris_consolidation.llm.rules import RuleJudge
from iris_consolidation.models import ClusterReview, ConsolidationCursor, ConsolidationJob, ConsolidationRun
from iris_consolidation.services.queue import execution
from tests.conftest import vector_at

pytestmark = pytest.mark.django_db


class RateLimitedJudge:
    """Answers 429 (``retry_after`` seconds) ``times`` times, then judges as the rule judge."""

    calls_model = False

    def __init__(self, *, times: int, retry_after: float) -> None:
        self.name = "rules"
        self.times = times
        self.retry_after = retry_after
        self.calls = 0

    def judge(self, request: JudgeRequest) -> Verdict:
        self.calls += 1
        if self.calls <= self.times:
            raise JudgeRateLimited("429 Too Many Requests", retry_after=self.retry_after)
        return RuleJudge().judge(request)


class FakeTime:
    """A ``sleep``/``clock`` pair that agree: sleeping moves the clock, instantly."""

    def __init__(self) -> None:
        self.now = timezone.now()
        self.slept: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += timedelta(seconds=seconds)

    def clock(self) -> datetime:
        return self.now


@pytest.fixture
def lone_then_pair(truth_factory, user_factory) -> dict[str, Any]:
    """A lone truth (oldest), then two spellings of one statement (a cluster)."""
    user = user_factory("ada")
    lone = truth_factory("Was born in Lisbon", user=user, embedding=vector_at(1.0, axis=7, towards=8))
    first = truth_factory("Drinks green tea every morning", user=user, embedding=vector_at(1.0, axis=3))
    second = truth_factory("drinks green tea every morning.", user=user, embedding=vector_at(0.96, axis=3))
    return {"user": user, "lone": lone, "pair": (first, second)}


def test_sync_run_runs_the_same_job_rows_in_process(lone_then_pair, run_factory):
    run = execution.run_sync(run=run_factory(), client=RuleJudge(), embedder=get_embedder())

    assert (run.status, run.merged, run.execution) == ("done", 1, ConsolidationRun.Execution.IN_PROCESS)
    rows = sorted(ConsolidationJob.objects.in_run(run.pk).values_list("kind", "status"))
    assert rows == [("cluster", "done"), ("user", "done")]
    job = ConsolidationJob.objects.get(run=run, kind="cluster")
    assert job.review.key == job.review_key() and job.review.outcome == ClusterReview.Outcome.APPLIED


def test_sync_run_waits_out_a_rate_limit_in_the_job(lone_then_pair, run_factory):
    fake = FakeTime()
    judge = RateLimitedJudge(times=1, retry_after=5.0)

    run = execution.run_sync(
        run=run_factory(), client=judge, embedder=get_embedder(), sleep=fake.sleep, clock=fake.clock
    )

    assert (run.status, run.merged, judge.calls) == ("done", 1, 2)
    assert fake.slept == [5.0]
    job = ConsolidationJob.objects.get(run=run, kind="cluster")
    assert (job.status, job.rate_limited, job.faults) == ("done", 1, 0)


def test_sync_rate_limit_timeout_holds_the_cursor_like_a_queued_run(lone_then_pair, run_factory):
    """Bug: the sync copy of the failed review had another key and an empty snapshot, so
    the user's cursor stayed put; a queued run holds it just before the cluster."""
    fake = FakeTime()
    judge = RateLimitedJudge(times=99, retry_after=float(app_settings.RETRY_WINDOW) + 60)

    run = execution.run_sync(
        run=run_factory(), client=judge, embedder=get_embedder(), sleep=fake.sleep, clock=fake.clock
    )

    job = ConsolidationJob.objects.get(run=run, kind="cluster")
    review = job.review
    assert (review.outcome, review.failure) == (ClusterReview.Outcome.FAILED, ClusterReview.Failure.RATE_LIMITED)
    assert review.key == job.review_key()
    first, second = lone_then_pair["pair"]
    assert sorted(row["id"] for row in review.snapshot) == sorted([first.pk, second.pk])
    cursor = ConsolidationCursor.objects.get(user=lone_then_pair["user"])
    lone = lone_then_pair["lone"]
    assert (lone.updated_at, lone.pk) <= (cursor.updated_at, cursor.truth_id) < (first.updated_at, first.pk)


def test_sync_run_finishes_by_the_job_rule(lone_then_pair, run_factory):
    """One finish rule: a run whose every cluster failed is failed, sync or queued (the
    sync counters said partial)."""
    judge = RateLimitedJudge(times=99, retry_after=float(app_settings.RETRY_WINDOW) + 60)

    run = execution.run_sync(run=run_factory(), client=judge, embedder=get_embedder())

    assert (run.status, run.failed, run.clusters_done) == (ConsolidationRun.Status.FAILED, 1, 1)
    assert run.finished_at is not None
