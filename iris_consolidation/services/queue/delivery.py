"""One delivery of a job: claim it, then defer it, continue it, count a fault or finish it.

Every delivery first *claims* its row (``select_for_update``) and every change is one
short transaction on it, so the outcome does not depend on the broker: a message
delivered twice finds its job done, a worker killed mid-task leaves a running job
whose lease runs out (``recovery.recover`` re-queues it).

Job life: queued -> running -> done | failed. Two detours are not failures: *waiting*
(a provider's 429 or the jobs-per-minute limit; a django-q2 ``Schedule`` re-queues the
job at ``not_before``) and *queued again* after a fault (a timeout, a dead worker or an
unexpected error; ``JOB_ATTEMPTS`` faults fail the job). A cluster job's verdict is
applied by ``merging.record_review`` under the review key ``job.review_key()``, unique
per run, so it is applied once whatever the deliveries.

Lock order, everywhere: job rows, then the run row, then truth rows.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Sequence
from datetime import datetime, timedelta

from django.db import transaction
from django.utils import timezone

from ...conf import app_settings
from ...models import ClusterReview, ConsolidationJob, ConsolidationRun
from ..run import decide
from ..run.jobs import PHASE2, candidate, create_cluster_jobs
from ..run.plan import UserPlan, count_user_plans
from . import dispatch

logger = logging.getLogger(__name__)

Job = ConsolidationJob
Status = ConsolidationJob.Status

#: Seconds past a task's timeout before its running job counts as lost. django-q2's
#: guard kills a worker 3 s past the timeout; the rest covers a guard cycle and clocks.
LEASE_MARGIN = 10
#: A waiting job delivered this early (a duplicate message) is left to its schedule.
EARLY_TOLERANCE = timedelta(seconds=1)

WORKER_LOST = "The worker running this job stopped before finishing it (killed, or past its timeout)."
GAVE_UP = "Gave up after {faults} failed deliveries (IRIS_CONSOLIDATION_JOB_ATTEMPTS={attempts}); last: {error}"
PHASE1_FAILED = "Phase 1 failed for user {user_id}: {error}"
#: The note a user job carries while its phase 1 goes on across deliveries.
PHASE1_CONTINUES = (
    "Phase 1 continues in a new delivery: {embedded} truths embedded in the last, {pending} left to embed."
)


def worker_name() -> str:
    """``host:pid`` of this process, stored on the jobs it claims."""
    return f"{socket.gethostname()}:{os.getpid()}"


def _close(job: Job, status: str, *, error: str, now: datetime) -> None:
    """Save ``job`` (row locked by the caller) as finished with ``status`` and ``error``."""
    job.status = status
    job.error = error
    job.continues = False
    job.finished_at = now
    job.lease_until = None
    job.save()


def fail_locked(job: Job, error: str, now: datetime) -> None:
    """Fail ``job`` (row locked by the caller): a cluster gets a failed review, counted once;
    a user's failure is noted on the run.

    If a delivery recorded the cluster's review before dying, that review stands (the
    key is taken) and the job is done, or failed, as the review says.
    """
    if job.kind in PHASE2:
        job.review = decide.record_cluster_failure(
            run_id=job.run_id, cluster=candidate(job), judge="", error=error, key=job.review_key()
        )
        if job.review.outcome != ClusterReview.Outcome.FAILED:
            _close(job, Status.DONE, error="", now=now)
            return
        error = job.review.error
    else:
        ConsolidationRun.objects.filter(pk=job.run_id).add_note(PHASE1_FAILED.format(user_id=job.user_id, error=error))
    _close(job, Status.FAILED, error=error, now=now)
    logger.warning("run %s: job %s failed: %s", job.run_id, job.key, error)


def count_fault(job: Job, error: str, now: datetime) -> bool:
    """Count a lost delivery on ``job`` (row locked); returns True if it still may run."""
    job.faults += 1
    job.error = error
    job.continues = False
    attempts = max(1, int(app_settings.JOB_ATTEMPTS))
    if job.faults >= attempts:
        fail_locked(job, GAVE_UP.format(faults=job.faults, attempts=attempts, error=error), now)
        return False
    return True


def requeue_locked(job: Job, now: datetime) -> None:
    """Queue ``job`` (row locked) again now and send its task on commit."""
    job.status = Status.QUEUED
    job.lease_until = None
    job.dispatched_at = now
    job.save()
    dispatch.send(job)


def claim(job_id: int, *, worker: str = "", now: datetime | None = None) -> Job | None:
    """Take ``job_id`` for this delivery; returns the job, or None if there is nothing to do.

    Nothing to do: the job is finished, another worker holds it (unexpired lease), or it
    waits for a later time (a duplicate message; its schedule will send it). A running
    job whose lease expired was lost with its worker: that counts as a fault, and at
    ``JOB_ATTEMPTS`` faults the job fails instead. The returned job's ``deliveries`` is
    this delivery's token for ``defer_batch`` and ``record_fault``.
    """
    now = now or timezone.now()
    with transaction.atomic():
        job = Job.objects.select_for_update().get(pk=job_id)
        return _take(job, worker=worker, now=now, timeout=None)


def claim_batch(job_ids: Sequence[int], *, worker: str = "", timeout: int, now: datetime | None = None) -> list[Job]:
    """``claim`` for the jobs of one task (phase 1 of several small users), in one
    transaction: returns those taken, in ``job_ids``' order, each with a lease of
    ``timeout`` seconds (the task's) plus ``LEASE_MARGIN``. Queries: one lock, one update
    per job taken."""
    now = now or timezone.now()
    with transaction.atomic():
        locked = {job.pk: job for job in Job.objects.select_for_update().filter(pk__in=job_ids).order_by("pk")}
        taken = (_take(locked[pk], worker=worker, now=now, timeout=timeout) for pk in job_ids if pk in locked)
        return [job for job in taken if job is not None]


def _take(job: Job, *, worker: str, now: datetime, timeout: int | None) -> Job | None:
    """``claim``'s decision and write for ``job`` (row locked by the caller); ``timeout``
    None: the job's own (``dispatch.timeout_of``)."""
    if job.status in (Status.DONE, Status.FAILED):
        return None
    if job.status == Status.RUNNING:
        if job.lease_until is not None and job.lease_until > now:
            return None
        if not count_fault(job, WORKER_LOST, now):
            return None
    if job.status == Status.WAITING and job.not_before is not None and job.not_before > now + EARLY_TOLERANCE:
        return None
    if timeout is None:
        timeout = dispatch.timeout_of(job.kind, user_id=job.user_id)
    job.status = Status.RUNNING
    job.deliveries += 1
    job.worker = worker[:200]
    job.started_at = now
    job.lease_until = now + timedelta(seconds=timeout + LEASE_MARGIN)
    job.first_attempt_at = job.first_attempt_at or now
    job.not_before = None
    job.save()
    return job


def _lock_own(job: Job) -> Job | None:
    """Re-read ``job`` under lock if this delivery still holds it, else None."""
    locked = Job.objects.select_for_update().get(pk=job.pk)
    if locked.status != Status.RUNNING or locked.deliveries != job.deliveries:
        return None
    return locked


def _lock_held(jobs: Sequence[Job]) -> list[Job]:
    """Those of ``jobs`` this delivery still holds, re-read under lock in id order (the
    lock order of job rows); call inside a transaction."""
    return [locked for job in sorted(jobs, key=lambda j: j.pk) if (locked := _lock_own(job)) is not None]


def defer_batch(batch: list[Job], *, until: datetime, rate_limited: bool = False, note: str = "") -> int:
    """Put the cluster jobs of one batch task back to wait until ``until`` (not a failure),
    sent again together then (one scheduled task, so the batch stays one model call).

    ``rate_limited`` counts a provider's 429, else our own jobs-per-minute limit. Returns
    how many jobs this delivery still held and put back to wait.
    """
    with transaction.atomic():
        held = _lock_held(batch)
        for locked in held:
            locked.status = Status.WAITING
            locked.not_before = until
            locked.lease_until = None
            locked.dispatched_at = timezone.now()
            if rate_limited:
                locked.rate_limited += 1
            else:
                locked.throttled += 1
            if note:
                locked.error = note
            locked.save()
        dispatch.send_batch_at(held, until)
    return len(held)


def continue_later(job: Job, *, note: str, now: datetime | None = None) -> bool:
    """This delivery did part of ``job`` (phase 1 embedding, committed) and the rest
    goes to a new delivery, sent now: queued again, not a fault. ``note`` says how far
    it got (the job ``continues``; shown on the run page and by ``consolidation_status``).
    Returns False if this delivery no longer holds the job."""
    now = now or timezone.now()
    with transaction.atomic():
        locked = _lock_own(job)
        if locked is None:
            return False
        locked.error = note
        locked.continues = True
        requeue_locked(locked, now)
    return True


def release(jobs: Sequence[Job], *, now: datetime | None = None) -> int:
    """Hand the user jobs this delivery holds but did not start back to the queue, sent
    again together (``dispatch.send_user_jobs``): not a fault. For a phase 1 task of
    several users that ran out of time. Returns how many were still held."""
    now = now or timezone.now()
    with transaction.atomic():
        held = _lock_held(jobs)
        for locked in held:
            locked.status = Status.QUEUED
            locked.lease_until = None
            locked.dispatched_at = now
            locked.save()
        dispatch.send_user_jobs(held)
    return len(held)


def record_fault(job: Job, *, error: str, now: datetime | None = None) -> str:
    """A delivery of ``job`` ended without finishing it (timeout, unexpected error).

    Re-queues the job now, or fails it at ``JOB_ATTEMPTS`` faults. Returns "requeued",
    "failed" or "ignored" (this delivery no longer held the job).
    """
    now = now or timezone.now()
    with transaction.atomic():
        locked = _lock_own(job)
        if locked is None:
            return "ignored"
        if not count_fault(locked, error, now):
            return "failed"
        requeue_locked(locked, now)
    logger.warning("run %s: job %s re-queued after a fault: %s", job.run_id, job.key, error)
    return "requeued"


def finish_user_job(job: Job, plan: UserPlan, *, now: datetime | None = None) -> int:
    """Phase 1 is done for ``job``: create the cluster jobs, count the user on the run,
    mark the job done and send the cluster tasks on commit, all in one transaction.

    Returns how many cluster jobs were created (0 if another delivery got here first).
    """
    return finish_user_jobs([(job, plan)], now=now)[job.pk]


def finish_user_jobs(
    done: Sequence[tuple[Job, UserPlan]], *, now: datetime | None = None
) -> dict[int, int]:
    """``finish_user_job`` for the user jobs of one task (one run's), in one transaction:
    the jobs locked in one query, every user's cluster jobs created in one insert, the
    users counted on the run in one update, the jobs marked done in one update. Each
    user's cluster tasks are sent on commit, a batch of its own clusters at a time.

    Returns ``{job id: cluster jobs created}`` (0 for a job another delivery finished).
    """
    now = now or timezone.now()
    created: dict[int, int] = {job.pk: 0 for job, _ in done}
    if not done:
        return created
    with transaction.atomic():
        locked = {j.pk: j for j in Job.objects.select_for_update().filter(pk__in=list(created)).order_by("pk")}
        still_open = [
            (job, plan) for job, plan in done if locked[job.pk].status not in (Status.DONE, Status.FAILED)
        ]
        if not still_open:
            return created
        run_id = still_open[0][0].run_id
        jobs = create_cluster_jobs(run_id, [c for _, plan in still_open for c in plan.clusters], now=now)
        count_user_plans(run_id=run_id, plans=[plan for _, plan in still_open])
        Job.objects.filter(pk__in=[job.pk for job, _ in still_open]).update(
            status=Status.DONE, error="", continues=False, finished_at=now, lease_until=None
        )
        by_user: dict[int, list[Job]] = {}
        for cluster_job in jobs:
            by_user.setdefault(cluster_job.user_id, []).append(cluster_job)
        for job, _ in still_open:
            created[job.pk] = len(by_user.get(job.user_id, []))
            # One task per batch of the user's clusters: one model call judges them all.
            for batch in dispatch.batches(by_user.get(job.user_id, [])):
                dispatch.send_batch(batch)
    return created


def finish_cluster_job(job: Job, review: ClusterReview, *, now: datetime | None = None) -> None:
    """``review`` is recorded for ``job``: mark the job done (failed if the review is)."""
    now = now or timezone.now()
    with transaction.atomic():
        locked = Job.objects.select_for_update().get(pk=job.pk)
        if locked.status in (Status.DONE, Status.FAILED):
            return
        failed = review.outcome == ClusterReview.Outcome.FAILED
        locked.review = review
        _close(locked, Status.FAILED if failed else Status.DONE, error=review.error if failed else "", now=now)
