"""What one delivery of a claimed job does: phase 1 for a user, phase 2 for a cluster.

The caller (``tasks.py``) claims the job (``jobs.claim``) and handles faults; these
functions do the work and move the job on. Phase 2 passes the jobs-per-minute limit
first (``throttling``; phase 1 is not throttled), then asks the judge once. A
provider's 429 puts the job back to wait for the provider's reset time, for up to
``RETRY_WINDOW`` seconds from its first attempt, without counting as a failure; past
the window the cluster is recorded as failed with that reason.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from django.utils import timezone

from ...conf import app_settings
from ...embeddings import Embedder
from ...exceptions import JudgeRateLimited
from ...llm.base import JudgeClient
from ...models import ClusterReview, ConsolidationJob
from ..operations import dry_runs
from ..pipeline import consolidation
from . import jobs, throttling

logger = logging.getLogger(__name__)

#: Seconds to wait after a 429 that names no wait (no retry-after or reset header).
DEFAULT_RETRY_AFTER = 30.0
#: Seconds of a cluster task's timeout kept free for the judge's call
#: (LLM_TIMEOUT) plus this margin (embedding the merged content, the write).
THROTTLE_SLEEP_MARGIN = 15.0

RATE_LIMIT_EXHAUSTED = (
    "Rate limited by the provider past the retry window: the next attempt would start {wait:.0f} s from now, "
    "after the {window} s (IRIS_CONSOLIDATION_RETRY_WINDOW) that began with the first attempt at {first}. "
    "Last reply: {error}"
)
THROTTLED = "Waiting for room under IRIS_CONSOLIDATION_JOBS_PER_MINUTE ({limit} per {period:g} s)."


def max_throttle_sleep() -> float:
    """Seconds a cluster task may wait in its worker for room under the rate limit.

    What is left of ``CLUSTER_JOB_TIMEOUT`` after ``LLM_TIMEOUT`` and a margin; a longer
    wait puts the job back in the queue (through a schedule, due that much before the
    room appears) instead of holding a worker.
    """
    return max(0.0, float(app_settings.CLUSTER_JOB_TIMEOUT) - float(app_settings.LLM_TIMEOUT) - THROTTLE_SLEEP_MARGIN)


def plan_user_job(job: ConsolidationJob, *, embedder: Embedder) -> dict[str, Any]:
    """Phase 1 of a claimed user job: embed, cluster, create and send the cluster jobs."""
    plan = consolidation.build_user_plan(run_id=job.run_id, user_id=job.user_id, embedder=embedder)
    created = jobs.finish_user_job(job, plan)
    return {"user_id": job.user_id, "clusters": created}


def _pass_throttle(job: ConsolidationJob, *, sleep: Callable[[float], None], clock: Callable[[], datetime]) -> bool:
    """Take a start under the jobs-per-minute limit, waiting in the worker if the wait is
    short; returns False if the job was put back to wait instead."""
    limit = int(app_settings.JOBS_PER_MINUTE)
    period = float(app_settings.RATE_LIMIT_PERIOD)
    most = max_throttle_sleep()
    while True:
        wait = throttling.acquire(name=throttling.CLUSTER_JOBS, limit=limit, period=period)
        if wait <= 0:
            return True
        if wait <= most:
            sleep(wait)
            continue
        # Come back early by what a worker may wait: the scheduler fires up to 30 s late
        # anyway, and the rest of the wait is then taken in the worker, up to the second.
        until = clock() + timedelta(seconds=wait - most)
        jobs.defer(job, until=until, note=THROTTLED.format(limit=limit, period=period))
        return False


def apply_review_job(job: ConsolidationJob, *, embedder: Embedder) -> dict[str, Any]:
    """Phase 2 of a claimed apply job: apply the dry run's verdict (``dry_runs.apply_review``,
    no model call, so no throttle); returns ``{"job", "outcome"}``."""
    review = dry_runs.apply_review(run_id=job.run_id, review_id=job.preview_id, embedder=embedder)
    jobs.finish_cluster_job(job, review)
    return {"job": job.pk, "outcome": review.outcome}


def judge_cluster_job(
    job: ConsolidationJob,
    *,
    client: JudgeClient,
    embedder: Embedder,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], datetime] = timezone.now,
    throttled: bool = True,
) -> dict[str, Any]:
    """Phase 2 of a claimed cluster job; returns ``{"job", "outcome"}``.

    Outcomes: a review outcome (applied, kept, rejected, stale, failed), "throttled" or
    "rate_limited" (the job waits; not a failure). A review already recorded for this
    job's round (an earlier delivery wrote it and died) finishes the job without a call.
    ``throttled=False`` skips the jobs-per-minute limit (a run executed in process
    judges one cluster at a time).
    """
    key = job.review_key()
    review = ClusterReview.objects.filter(run_id=job.run_id, key=key).first()
    if review is None:
        if throttled and not _pass_throttle(job, sleep=sleep, clock=clock):
            return {"job": job.pk, "outcome": "throttled"}
        try:
            review = consolidation.consolidate_cluster(
                run_id=job.run_id, cluster=jobs.candidate(job), client=client, embedder=embedder, key=key
            )
        except JudgeRateLimited as exc:
            review = _rate_limited(job, exc, client=client, clock=clock)
            if review is None:
                return {"job": job.pk, "outcome": "rate_limited"}
    jobs.finish_cluster_job(job, review)
    return {"job": job.pk, "outcome": review.outcome}


def _rate_limited(
    job: ConsolidationJob, exc: JudgeRateLimited, *, client: JudgeClient, clock: Callable[[], datetime]
) -> ClusterReview | None:
    """Wait out a 429 inside the retry window (returns None), or record the failure."""
    now = clock()
    wait = exc.retry_after if exc.retry_after is not None else DEFAULT_RETRY_AFTER
    window = int(app_settings.RETRY_WINDOW)
    first = job.first_attempt_at or now
    if now + timedelta(seconds=wait) <= first + timedelta(seconds=window):
        jobs.defer(job, until=now + timedelta(seconds=wait), rate_limited=True, note=str(exc))
        logger.info("run %s: job %s rate limited, again in %.1f s", job.run_id, job.key, wait)
        return None
    error = RATE_LIMIT_EXHAUSTED.format(wait=wait, window=window, first=first.isoformat(), error=exc)
    return consolidation.record_cluster_failure(
        run_id=job.run_id,
        cluster=jobs.candidate(job),
        judge=client.name,
        error=error,
        key=job.review_key(),
        failure=ClusterReview.Failure.RATE_LIMITED,
    )
