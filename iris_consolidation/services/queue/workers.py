"""What one delivery of claimed jobs does: phase 1 for a user, phase 2 for a batch of
one user's clusters (one model call).

The caller (``tasks.py``) claims the job (``delivery.claim``) and handles faults; these
functions do the work and move the job on. Phase 2 passes the jobs-per-minute limit
right before the judge's first model call (``throttling``): work that calls no
model (phase 1, the rule judge, clusters the deterministic pre-pass settles) never
waits for it. A
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
from ..run import decide
from ..run.jobs import candidate
from ..run.plan import UserPlan, build_user_plans
from . import delivery, dispatch, throttling

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
#: Share of a user task's timeout spent embedding before the rest goes to a new delivery.
EMBED_SHARE = 0.5
THROTTLED = "Waiting for room under IRIS_CONSOLIDATION_JOBS_PER_MINUTE ({limit} per {period:g} s)."


class _Deferred(Exception):
    """The job was put back to wait for room under the rate limit (nothing recorded)."""


def max_throttle_sleep() -> float:
    """Seconds a cluster task may wait in its worker for room under the rate limit.

    What is left of ``CLUSTER_JOB_TIMEOUT`` after ``LLM_TIMEOUT`` and a margin; a longer
    wait puts the job back in the queue (through a schedule, due that much before the
    room appears) instead of holding a worker.
    """
    return max(0.0, float(app_settings.CLUSTER_JOB_TIMEOUT) - float(app_settings.LLM_TIMEOUT) - THROTTLE_SLEEP_MARGIN)


def work_user_job(
    job: ConsolidationJob, *, embedder: Embedder, embed_deadline: float | None = None
) -> dict[str, Any]:
    """Phase 1 of a claimed user job: embed, cluster, create and send the cluster jobs.

    Embedding stops after the committed batch that passes ``EMBED_SHARE`` of the task's
    timeout (or at ``embed_deadline``, ``time.monotonic()`` seconds: a task of several
    users passes its own); the job then continues in a new delivery (not a fault), which
    embeds the rest or, with nothing left, clusters with its whole timeout. So a user of
    any size gets through embedding; clustering must fit one timeout
    (``dispatch.timeout_of``, which grows with the user's size).
    """
    deadline = embed_deadline
    if deadline is None:
        deadline = time.monotonic() + EMBED_SHARE * dispatch.timeout_of(job.kind, user_id=job.user_id)
    # A batch of one (``plan.build_user_plans``): a large user is planned alone inside it.
    results, failed = work_user_jobs([job], embedder=embedder, embed_deadline=deadline)
    if failed:
        raise failed[job.pk]
    return results[0]


def _continue_later(job: ConsolidationJob, plan: UserPlan) -> dict[str, Any]:
    """Hand a job whose embedding stopped at its deadline to a new delivery (not a fault)."""
    note = delivery.PHASE1_CONTINUES.format(embedded=plan.embedded, pending=plan.pending)
    delivery.continue_later(job, note=note)
    logger.info("run %s: user %s: %s", job.run_id, job.user_id, note)
    return {"user_id": job.user_id, "continued": True, "pending": plan.pending}


def work_user_jobs(
    jobs: list[ConsolidationJob], *, embedder: Embedder, embed_deadline: float | None = None
) -> tuple[list[dict[str, Any]], dict[int, Exception]]:
    """``work_user_job`` for the claimed jobs of several small users of one run
    (``dispatch.user_batches``), planned together (``plan.build_user_plans``) and
    finished together (``delivery.finish_user_jobs``). A user whose embedding stops at
    ``embed_deadline`` continues in a new delivery; users not started by then are handed
    back together (``delivery.release``). Returns the results, one a user, and ``{job id:
    exception}`` of the users whose phase 1 raised: the caller records their faults."""
    deadline = embed_deadline
    if deadline is None:
        deadline = time.monotonic() + EMBED_SHARE * dispatch.timeout_of(ConsolidationJob.Kind.USER)
    batch = build_user_plans(
        run_id=jobs[0].run_id, user_ids=[job.user_id for job in jobs], embedder=embedder, embed_deadline=deadline
    )
    results: list[dict[str, Any]] = []
    finished = []
    for job in jobs:
        plan = batch.plans.get(job.user_id)
        if plan is not None and not plan.complete:
            results.append(_continue_later(job, plan))
        elif plan is not None:
            finished.append((job, plan))
    created = delivery.finish_user_jobs(finished)
    results += [{"user_id": job.user_id, "clusters": created[job.pk]} for job, _ in finished]
    later = [job for job in jobs if job.user_id in set(batch.not_started)]
    if later:
        delivery.release(later)
        results += [{"user_id": job.user_id, "released": True} for job in later]
    failed = {job.pk: batch.failed[job.user_id] for job in jobs if job.user_id in batch.failed}
    results += [{"user_id": job.user_id, "error": str(batch.failed[job.user_id])} for job in jobs
                if job.user_id in batch.failed]
    return results, failed


def _pass_throttle(
    batch: list[ConsolidationJob], *, sleep: Callable[[float], None], clock: Callable[[], datetime]
) -> bool:
    """Take one start (one model call) under the jobs-per-minute limit for ``batch``,
    waiting in the worker if the wait is short; returns False if the batch was put back
    to wait instead (one scheduled task, so it stays one call)."""
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
        delivery.defer_batch(batch, until=until, note=THROTTLED.format(limit=limit, period=period))
        return False


def _wait_for_start(*, sleep: Callable[[float], None]) -> bool:
    """Take one start under the jobs-per-minute limit, waiting in the worker only while
    the wait is short (``max_throttle_sleep``); False when it is longer. Never defers."""
    limit, period, most = int(app_settings.JOBS_PER_MINUTE), float(app_settings.RATE_LIMIT_PERIOD), max_throttle_sleep()
    while True:
        wait = throttling.acquire(name=throttling.CLUSTER_JOBS, limit=limit, period=period)
        if wait <= 0:
            return True
        if wait > most:
            return False
        sleep(wait)


def work_apply_job(job: ConsolidationJob, *, embedder: Embedder) -> dict[str, Any]:
    """Phase 2 of a claimed apply job: apply the dry run's verdict (``dry_runs.apply_review``,
    no model call, so no throttle); returns ``{"job", "outcome"}``."""
    review = dry_runs.apply_review(run_id=job.run_id, review_id=job.preview_id, embedder=embedder)
    delivery.finish_cluster_job(job, review)
    return {"job": job.pk, "outcome": review.outcome}


def work_cluster_jobs(
    batch: list[ConsolidationJob],
    *,
    client: JudgeClient,
    embedder: Embedder,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], datetime] = timezone.now,
    throttled: bool = True,
) -> list[dict[str, Any]]:
    """Phase 2 of claimed cluster jobs of one user, judged in one model call
    (``decide.decide_batch``); returns ``{"job", "outcome"}`` per job.

    Outcomes: a review outcome (applied, kept, rejected, stale, failed, deferred),
    "throttled" or "rate_limited" (the jobs wait together; not a failure). A job whose
    review for its round is already recorded (an earlier delivery wrote it and died) is
    finished without a call. The rate limit counts model calls: the batch takes one
    start before its call, and the calls a split reply added are charged after it.
    ``throttled=False`` skips the limit (a run executed in process judges one batch at
    a time).
    """
    results: dict[int, str] = {}
    pending: list[ConsolidationJob] = []
    for job in batch:
        review = ClusterReview.objects.filter(run_id=job.run_id, key=job.review_key()).first()
        if review is None:
            pending.append(job)
            continue
        delivery.finish_cluster_job(job, review)
        results[job.pk] = review.outcome
    if pending:
        before_model = _model_gate(pending, throttled=throttled, sleep=sleep, clock=clock)
        try:
            reviews = decide.decide_batch(
                run_id=pending[0].run_id,
                clusters=[candidate(job) for job in pending],
                client=client,
                embedder=embedder,
                keys=[job.review_key() for job in pending],
                before_model=before_model,
            )
        except _Deferred:
            results.update((job.pk, "throttled") for job in pending)
            return [{"job": job.pk, "outcome": results[job.pk]} for job in batch]
        except JudgeRateLimited as exc:
            failures = _rate_limited(pending, exc, client=client, clock=clock)
            if failures is None:
                results.update((job.pk, "rate_limited") for job in pending)
                return [{"job": job.pk, "outcome": results[job.pk]} for job in batch]
            reviews = failures
        extra_calls = sum(r.llm_calls for r in reviews) - 1
        if throttled and extra_calls > 0:
            throttling.charge(name=throttling.CLUSTER_JOBS, count=extra_calls)
        for job, review in zip(pending, reviews, strict=True):
            delivery.finish_cluster_job(job, review)
            results[job.pk] = review.outcome
    return [{"job": job.pk, "outcome": results[job.pk]} for job in batch]


def _model_gate(
    pending: list[ConsolidationJob], *, throttled: bool, sleep: Callable[[float], None],
    clock: Callable[[], datetime],
) -> Callable[[], None]:
    """``before_model`` for ``decide.decide_batch``: each model call of the batch takes a
    start under the jobs-per-minute limit (unless not ``throttled``); raises ``_Deferred``
    when the first must wait longer than a worker may (the batch was put back) or a later
    one (a second look) cannot start now."""
    starts = 0

    def before_model() -> None:
        # Only model calls wait for the limit: the rule judge and the pre-pass never get here.
        nonlocal starts
        starts += 1
        if not throttled:
            return
        if starts == 1 and not _pass_throttle(pending, sleep=sleep, clock=clock):
            raise _Deferred
        if starts > 1 and not _wait_for_start(sleep=sleep):
            # A second look after the judge's call: the batch has its verdict, so it is
            # not put back; the flagged actions wait for a later run (judging says so).
            raise _Deferred

    return before_model


def _rate_limited(
    batch: list[ConsolidationJob], exc: JudgeRateLimited, *, client: JudgeClient, clock: Callable[[], datetime]
) -> list[ClusterReview] | None:
    """Wait out a 429 inside the retry window (the batch waits together; returns None),
    or record each cluster's failure (the window runs from the batch's first attempt)."""
    now = clock()
    wait = exc.retry_after if exc.retry_after is not None else DEFAULT_RETRY_AFTER
    window = int(app_settings.RETRY_WINDOW)
    first = min((job.first_attempt_at or now) for job in batch)
    if now + timedelta(seconds=wait) <= first + timedelta(seconds=window):
        delivery.defer_batch(batch, until=now + timedelta(seconds=wait), rate_limited=True, note=str(exc))
        logger.info("run %s: %d jobs rate limited, again in %.1f s", batch[0].run_id, len(batch), wait)
        return None
    error = RATE_LIMIT_EXHAUSTED.format(wait=wait, window=window, first=first.isoformat(), error=exc)
    return [
        decide.record_cluster_failure(
            run_id=job.run_id,
            cluster=candidate(job),
            judge=client.name,
            error=error,
            key=job.review_key(),
            failure=ClusterReview.Failure.RATE_LIMITED,
        )
        for job in batch
    ]
