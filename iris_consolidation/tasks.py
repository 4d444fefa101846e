"""django-q2 entry points (thin doors) and the two helpers that start queued runs.

Tasks take primitive arguments (ids), claim their job row, call one service and return
a small dict: each claims its job rows, calls one function of ``services/run/`` through
``services/queue/workers`` and records the jobs' end. Phase 1: ``user_job`` per user, or
``user_jobs`` for several small users planned together (each on its own job), which
creates a job per cluster and sends a ``cluster_jobs`` task per batch of up to
``CLUSTERS_PER_CALL`` of them (one model call), all in the run's group
``iris_consolidation:run:<id>``; ``apply_job`` per verdict of an applied dry run.
Messages are sent by ``services/queue/dispatch.py`` only. ``scheduled_consolidation`` is the weekly schedule's
task, ``recover_jobs`` the minutely sweep. A delivery that ends in an exception (a
timeout included) is counted as a fault on its job, which is re-queued by this app,
never by broker redelivery, and the exception goes on to django-q2, which records it.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

from django.core.signals import setting_changed
from django.dispatch import receiver
from django.utils.dateparse import parse_datetime
from django_q.brokers import get_broker
from django_q.exceptions import TimeoutException

from .embeddings import Embedder, LocalEmbedder, MultilingualEmbedder, get_embedder
from .llm import get_judge_client
from .models import ConsolidationJob, ConsolidationRun
from .services.queue import delivery, dispatch, recovery, scheduling, workers
from .services.queue.delivery import worker_name
from .services.run import lifecycle
from .services.run.jobs import ensure_apply_job, ensure_user_job

logger = logging.getLogger(__name__)

TIMED_OUT = "Timed out after {seconds} s ({setting})."
CRASHED = "{kind}: {error}"


def enqueue_run(run: ConsolidationRun) -> int:
    """Start ``run`` (``lifecycle.start_run``) and enqueue its phase 1 tasks (``user_job``
    per large user, ``user_jobs`` per batch of small ones); returns the count of users.

    The tasks are sent when the current transaction commits. A run with no user to
    consolidate is finished at once.
    """
    return len(lifecycle.start_run(run, send=dispatch.send_jobs))


@functools.cache
def _worker_embedder() -> Embedder:
    embedder = get_embedder()
    if isinstance(embedder, LocalEmbedder | MultilingualEmbedder):
        return type(embedder)(threads=1)  # one thread per queue worker
    return embedder


@receiver(setting_changed)
def _clear_worker_embedder(*, setting: str, **kwargs: object) -> None:
    if setting.startswith("IRIS_CONSOLIDATION_"):
        _worker_embedder.cache_clear()


def _broker_idle() -> bool:
    """Whether the broker's queue holds no task ready to be fetched."""
    try:
        return int(get_broker().queue_size() or 0) == 0
    except Exception:  # an unreachable broker says nothing about lost messages
        logger.exception("could not read the broker's queue size")
        return False


def _settle(run_id: Any) -> None:
    """Recover the run's stalled jobs and refresh its status (after every delivery)."""
    recovery.recover(broker_idle=_broker_idle, run_id=run_id)


def _run_claimed(job: ConsolidationJob | list[ConsolidationJob], work: Callable[[], Any]) -> Any:
    """Run ``work`` for the claimed job(s); a timeout or an error is a fault on each."""
    claimed = job if isinstance(job, list) else [job]
    try:
        result = work()
    except TimeoutException:
        kind = claimed[0].kind
        setting = f"IRIS_CONSOLIDATION_{kind.upper()}_JOB_TIMEOUT"
        for each in claimed:
            seconds = dispatch.timeout_of(kind, user_id=each.user_id)
            _fault(each, TIMED_OUT.format(seconds=seconds, setting=setting))
        raise
    except Exception as exc:
        for each in claimed:
            _fault(each, CRASHED.format(kind=type(exc).__name__, error=exc))
        raise
    _settle(claimed[0].run_id)
    return result


def _fault(job: ConsolidationJob, error: str) -> None:
    try:
        delivery.record_fault(job, error=error)
        _settle(job.run_id)
    except BaseException:  # the lease expiry will recover the job; keep the first error
        logger.exception("run %s: could not record a fault on job %s", job.run_id, job.key)


def user_job(run_id: str, user_id: int) -> dict[str, Any]:
    """Task: phase 1 for one user, then send its cluster tasks."""
    job = delivery.claim(ensure_user_job(run_id, int(user_id)).pk, worker=worker_name())
    if job is None:
        return {"user_id": user_id, "skipped": True}
    return _run_claimed(job, lambda: workers.work_user_job(job, embedder=_worker_embedder()))


def user_jobs(run_id: str, job_ids: list[int]) -> list[dict[str, Any]]:
    """Task: phase 1 for the jobs of several small users (``dispatch.user_batches``),
    planned together in a few queries (``workers.work_user_jobs``), each user on its own
    job: claimed, done, faulted or failed on its own, its cluster tasks sent when it is
    done.

    A user that raises gets a fault on its job (queued again alone, or failed at
    ``JOB_ATTEMPTS``) and the others are done; the first such error is raised at the end,
    so django-q2 records it. A timeout faults every job the task still holds. A delivery
    again of the task skips the users already done (``delivery.claim_batch``). Embedding
    stops at ``EMBED_SHARE`` of the task's timeout, as for one user; users not started by
    then are queued again together (not a fault).
    """
    timeout = dispatch.timeout_of(ConsolidationJob.Kind.USER)
    claimed = delivery.claim_batch([int(pk) for pk in job_ids], worker=worker_name(), timeout=timeout)
    if not claimed:
        return [{"jobs": list(job_ids), "skipped": True}]
    deadline = time.monotonic() + workers.EMBED_SHARE * timeout
    try:
        results, failed = workers.work_user_jobs(claimed, embedder=_worker_embedder(), embed_deadline=deadline)
    except TimeoutException:
        for job in claimed:  # a job already done is no longer held: its fault is ignored
            _fault(job, TIMED_OUT.format(seconds=timeout, setting="IRIS_CONSOLIDATION_USER_JOB_TIMEOUT"))
        raise
    except Exception as exc:
        for job in claimed:
            _fault(job, CRASHED.format(kind=type(exc).__name__, error=exc))
        raise
    for job in claimed:
        if job.pk in failed:
            exc = failed[job.pk]
            _fault(job, CRASHED.format(kind=type(exc).__name__, error=exc))
    _settle(claimed[0].run_id)
    if failed:
        raise next(iter(failed.values()))
    return results


def cluster_jobs(run_id: str, job_ids: list[int]) -> list[dict[str, Any]]:
    """Task: phase 2 for a batch of one user's cluster jobs, judged in one model call
    (rate-limited as one call); the run is finished by its last job. Jobs another
    delivery holds or finished are left out."""
    worker = worker_name()
    claimed = [job for job in (delivery.claim(int(pk), worker=worker) for pk in job_ids) if job is not None]
    if not claimed:
        return [{"jobs": list(job_ids), "skipped": True}]
    return _run_claimed(
        claimed,
        lambda: workers.work_cluster_jobs(claimed, client=get_judge_client(), embedder=_worker_embedder()),
    )


def enqueue_users(
    user_ids: list[int], *, dry_run: bool, trigger: str, judge: str = ""
) -> list[ConsolidationRun]:
    """Create one run per user (a dry run if ``dry_run``) and enqueue each; return the runs.

    Used by the admin's "consolidate the users of the selected truths" actions: the
    request only creates the runs and queues their phase 1 tasks.
    """
    runs = []
    for user_id in sorted(set(user_ids)):
        run = lifecycle.create_run(trigger=trigger, dry_run=dry_run, user_id=user_id, judge=judge)
        enqueue_run(run)
        runs.append(run)
    return runs


def apply_job(run_id: str, review_id: int) -> dict[str, Any]:
    """Task: apply one previewed verdict of a dry run (its apply job); the run is
    finished by its last job."""
    job = delivery.claim(ensure_apply_job(run_id, int(review_id)).pk, worker=worker_name())
    if job is None:
        return {"review_id": review_id, "skipped": True}
    return _run_claimed(job, lambda: workers.work_apply_job(job, embedder=_worker_embedder()))


def scheduled_consolidation(scheduled_for: str | datetime | None = None) -> dict[str, Any]:
    """Task of the weekly schedule: start the slot's run (``scheduling.start_scheduled_run``:
    live settings, no overlap, catch-up); returns the slot and the run or the skip reason."""
    slot = parse_datetime(scheduled_for) if isinstance(scheduled_for, str) else scheduled_for
    started = scheduling.start_scheduled_run(scheduled_for=slot)
    if started.run is None:
        logger.info("scheduled consolidation skipped: %s", started.skipped)
        return {"slot": started.slot.isoformat(), "skipped": started.skipped}
    return {"slot": started.slot.isoformat(), "run_id": str(started.run.pk), "dry_run": started.run.dry_run}


def recover_jobs() -> dict[str, int]:
    """Task of the minutely sweep: re-queue jobs left by dead workers or lost messages."""
    return recovery.recover(broker_idle=_broker_idle)
