"""What a dead worker or a lost message left behind, sent again; failed jobs retried.

``recover`` is the minutely sweep (``tasks.recover_jobs``) and runs after every
delivery for its run: a message lost with a worker (the Redis broker never
redelivers) is sent again once the broker's queue is empty, a running job whose lease
ran out counts as a fault. ``retry_failed`` is ``retry_consolidation``'s.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.utils import timezone

from ...exceptions import RetryRefused
from ...models import ClusterReview, ConsolidationJob, ConsolidationRun
from ..run.jobs import PHASE2
from ..run.lifecycle import refresh_run
from . import dispatch
from .cancel import history_time
from .delivery import WORKER_LOST, count_fault, requeue_locked

logger = logging.getLogger(__name__)

Job = ConsolidationJob
Status = ConsolidationJob.Status

#: Seconds a queued job may be out of the broker's queue (fetched by a worker) before
#: it is sent again, and a waiting job may stay past its time before recovery sends it.
LOST_MESSAGE_GRACE = 30
#: A cancelled run's refusal: its jobs were closed unrun, not failed.
CANCELLED_NOT_RETRIED = (
    "Run {run} was cancelled before any worker took a job: nothing of it failed, so there is nothing to retry. "
    "Start a new run instead."
)
#: The line a retry adds to the run's history.
RETRIED = (
    "Retried by {actor} at {when}: re-queued {count} failed job(s), each judged again on its members as they are now."
)


def _recover_lost(job_id: int, now: datetime) -> Any:
    """A running job past its lease (row locked here): a fault, re-queued unless it fails.
    Returns its run id, or None if the job moved on meanwhile."""
    with transaction.atomic():
        job = Job.objects.select_for_update().get(pk=job_id)
        if job.status != Status.RUNNING or job.lease_until is None or job.lease_until >= now:
            return None
        # A lost job of a run executed in process: that process died; the queue takes over.
        ConsolidationRun.objects.filter(pk=job.run_id).update(execution=ConsolidationRun.Execution.QUEUED)
        if count_fault(job, WORKER_LOST, now):
            requeue_locked(job, now)
        return job.run_id


def recover(*, broker_idle: Callable[[], bool], run_id: Any = None, now: datetime | None = None) -> dict[str, int]:
    """Send again what a dead worker or a lost message left behind; refresh the runs.

    - running jobs past their lease: a fault each (re-queued, or failed at JOB_ATTEMPTS);
    - waiting jobs well past ``not_before`` (their schedule did not fire): sent again;
    - queued jobs sent more than ``LOST_MESSAGE_GRACE`` s ago, if ``broker_idle()`` says
      the broker's queue is empty: their message was lost with a worker (Redis never
      redelivers; the ORM broker would, but only after its ``retry``). A duplicate is
      harmless: the claim sees the job done.
    Only ``run_id``'s jobs if given. Returns counts by kind of recovery.
    """
    now = now or timezone.now()
    grace = now - timedelta(seconds=LOST_MESSAGE_GRACE)
    jobs = Job.objects.active()
    if run_id is not None:
        jobs = jobs.in_run(run_id)
    result = {"lost": 0, "overdue": 0, "resent": 0}
    touched: set[Any] = set()
    for job_id in jobs.filter(status=Status.RUNNING, lease_until__lt=now).values_list("id", flat=True):
        lost_run = _recover_lost(job_id, now)
        if lost_run is not None:
            touched.add(lost_run)
            result["lost"] += 1
    resend = list(jobs.filter(status=Status.WAITING, not_before__lt=grace, dispatched_at__lt=grace))
    result["overdue"] = len(resend)
    queued = jobs.filter(status=Status.QUEUED, dispatched_at__lt=grace)
    if queued.exists() and broker_idle():
        lost = list(queued)
        result["resent"] = len(lost)
        resend += lost
    for job in resend:
        with transaction.atomic():
            if Job.objects.filter(pk=job.pk, status=job.status).update(dispatched_at=now):
                dispatch.send(job)
                touched.add(job.run_id)
    if result["lost"] or result["overdue"] or result["resent"]:
        logger.warning("recovered jobs %s", result)
    runs = (
        {run_id}
        if run_id is not None
        else set(
            # Every started run is made of job rows, whoever executes them.
            ConsolidationRun.objects.filter(
                status=ConsolidationRun.Status.RUNNING, finished_at__isnull=True, jobs__isnull=False
            )
            .distinct()
            .values_list("id", flat=True)
        )
    )
    for rid in runs | touched:
        refresh_run(rid, now=now)
    return result


def retry_failed(run_id: Any, *, actor: str = "retry_consolidation", now: datetime | None = None) -> int:
    """Re-queue the failed jobs of a run (``retry_consolidation``, the admin's retry);
    returns how many, and adds ``RETRIED`` (naming ``actor``) to the run's history.

    Each goes to a new round: a fresh retry window and fault count, and a new review key,
    so the cluster is judged again on its members as they are now (re-read, re-validated,
    freshness re-checked at write). The failed reviews stay as history; the run's
    ``failed`` and ``clusters_done`` counters drop by them and the run is running again,
    on the queue whoever executed it before. Raises ``RetryRefused`` (and changes
    nothing) for a cancelled run.
    """
    now = now or timezone.now()
    with transaction.atomic():
        failed = list(Job.objects.select_for_update().in_run(run_id).filter(status=Status.FAILED))
        run = ConsolidationRun.objects.select_for_update().get(pk=run_id)
        if run.status == ConsolidationRun.Status.CANCELLED:
            raise RetryRefused(CANCELLED_NOT_RETRIED.format(run=str(run.pk)[:8]))
        if not failed:
            return 0
        keys = [j.review_key() for j in failed if j.kind in PHASE2]
        run.execution = ConsolidationRun.Execution.QUEUED
        run.save(update_fields=["execution"])
        recorded = ClusterReview.objects.filter(run=run, key__in=keys, outcome=ClusterReview.Outcome.FAILED).count()
        for job in failed:
            job.round += 1
            job.faults = 0
            job.first_attempt_at = None
            job.not_before = None
            job.finished_at = None
            job.review = None
            job.error = ""
            job.continues = False
            requeue_locked(job, now)
        run.failed = max(0, run.failed - recorded)
        run.clusters_done = max(0, run.clusters_done - recorded)
        run.status = ConsolidationRun.Status.RUNNING
        run.finished_at = None
        run.save(update_fields=["failed", "clusters_done", "status", "finished_at"])
        ConsolidationRun.objects.filter(pk=run.pk).add_note(
            RETRIED.format(actor=actor, when=history_time(now), count=len(failed))
        )
    logger.info("run %s: %d failed jobs re-queued", run_id, len(failed))
    return len(failed)
