"""Queued runs as durable job rows: claim, finish, defer, fault, recover, retry, run status.

Every run has one ``ConsolidationJob`` per phase 1 user task and per phase 2 cluster
task (or, for the application of a dry run, per verdict applied), whoever executes it:
django-q2 workers, or the process that started it (``execution.run_sync``). django-q2 carries the messages; the rows carry the state. Every delivery first
*claims* its row (``select_for_update``) and every change is one short transaction on
it, so the outcome does not depend on the broker: a message delivered twice finds its
job done, a worker killed mid-task leaves a running job whose lease runs out and
``recover`` re-queues it, a message lost with a worker (the Redis broker never
redelivers) is sent again once the broker's queue is empty.

Job life: queued -> running -> done | failed. Two detours are not failures: *waiting*
(a provider's 429 or the jobs-per-minute limit; a django-q2 ``Schedule`` re-queues the
job at ``not_before``) and *queued again* after a fault (a timeout, a dead worker or an
unexpected error; ``JOB_ATTEMPTS`` faults fail the job). A cluster job's verdict is
applied by ``merging.record_review`` under the review key ``job.review_key()``, unique
per run, so it is applied once whatever the deliveries.

The run's status is derived from its jobs (``refresh_run``): running while any job is
queued, running or waiting; then done (nothing failed), partial (some failed, some
clusters judged) or failed (nothing judged).

Lock order, everywhere: job rows, then the run row, then truth rows.
"""

from __future__ import annotations

import hashlib
import logging
import os
import socket
from collections import Counter
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.db.models import Count
from django.utils import timezone

from ...conf import app_settings
from ...exceptions import ApplyRefused
from ...models import ClusterReview, ConsolidationJob, ConsolidationRun, ScheduleLock
from ..operations import dry_runs
from ..pipeline import consolidation
from ..pipeline.clustering import CandidateCluster
from . import dispatch

logger = logging.getLogger(__name__)

Job = ConsolidationJob
Status = ConsolidationJob.Status
ACTIVE = (Status.QUEUED, Status.RUNNING, Status.WAITING)

#: Kinds of job that end in a review (phase 2): a judged cluster or an applied verdict.
PHASE2 = (Job.Kind.CLUSTER, Job.Kind.APPLY)

#: Seconds past a task's timeout before its running job counts as lost. django-q2's
#: guard kills a worker 3 s past the timeout; the rest covers a guard cycle and clocks.
LEASE_MARGIN = 10
#: Seconds a queued job may be out of the broker's queue (fetched by a worker) before
#: it is sent again, and a waiting job may stay past its time before recovery sends it.
LOST_MESSAGE_GRACE = 30
#: A waiting job delivered this early (a duplicate message) is left to its schedule.
EARLY_TOLERANCE = timedelta(seconds=1)

WORKER_LOST = "The worker running this job stopped before finishing it (killed, or past its timeout)."
GAVE_UP = "Gave up after {faults} failed deliveries (IRIS_CONSOLIDATION_JOB_ATTEMPTS={attempts}); last: {error}"
ABANDONED = "Abandoned: {reason}"
PHASE1_FAILED = "Phase 1 failed for user {user_id}: {error}"


def user_job_key(user_id: int) -> str:
    """Key of a run's phase 1 job for one user."""
    return f"user:{user_id}"


def cluster_job_key(member_ids: Iterable[int]) -> str:
    """Key of a run's phase 2 job for one cluster: a hash of its member ids (any order)."""
    digest = hashlib.sha256(",".join(str(i) for i in sorted(member_ids)).encode()).hexdigest()
    return f"cluster:{digest[:40]}"


def apply_job_key(preview_id: int) -> str:
    """Key of an application's job for one previewed review of the dry run."""
    return f"apply:{preview_id}"


def candidate(job: Job) -> CandidateCluster:
    """The cluster a phase 2 job judges."""
    return CandidateCluster(user_id=job.user_id, member_ids=tuple(job.member_ids), similarities=tuple(job.similarities))


def worker_name() -> str:
    """``host:pid`` of this process, stored on the jobs it claims."""
    return f"{socket.gethostname()}:{os.getpid()}"


# --- creating jobs -------------------------------------------------------------------


def start_queued_run(run: ConsolidationRun, *, now: datetime | None = None) -> list[int]:
    """Start ``run``: one phase 1 job per user, sent on commit (unless the run executes
    in process, ``execution.run_sync``, which then runs them itself).

    Returns the user ids. Transaction: one, around the run's start and its jobs. A run
    with no user to consolidate is finished at once.
    """
    now = now or timezone.now()
    with transaction.atomic():
        user_ids = consolidation.start_run(run)
        created = Job.objects.bulk_create(
            Job(run=run, kind=Job.Kind.USER, key=user_job_key(u), user_id=u, dispatched_at=now) for u in user_ids
        )
        for job in created:
            dispatch.send(job)
        refresh_run(run.pk, now=now)
    return user_ids


def start_application_run(run: ConsolidationRun, previews: list[ClusterReview], *, now: datetime | None = None) -> int:
    """Start ``run``, the application of a dry run: one apply job per preview review,
    sent on commit; no phase 1 (the clusters are the dry run's). Returns the job count.

    The run's ``users``/``users_done`` count the previews' users, ``clusters_found``
    the previews. Finished like any run, by its jobs (``refresh_run``).
    """
    now = now or timezone.now()
    with transaction.atomic():
        users = len({p.user_id for p in previews})
        ConsolidationRun.objects.filter(pk=run.pk).update(
            status=ConsolidationRun.Status.RUNNING,
            started_at=now,
            users=users,
            users_done=users,
            clusters_found=len(previews),
        )
        run.refresh_from_db()
        created = Job.objects.bulk_create(
            Job(
                run=run,
                kind=Job.Kind.APPLY,
                key=apply_job_key(p.pk),
                user_id=p.user_id,
                dispatched_at=now,
                **_apply_job_fields(p),
            )
            for p in previews
        )
        for job in created:
            dispatch.send(job)
        refresh_run(run.pk, now=now)
    return len(created)

def start_application(*, dry_run_id: Any, actor: str) -> tuple[ConsolidationRun, list[int]]:
    """Create and start the run that applies dry run ``dry_run_id``; return it and the
    preview review ids.

    The run is made like any run (``consolidation.create_run``: the live settings in
    force, e.g. the retirement cap, are stored on it) with one apply job per preview,
    sent when the transaction commits (``start_application_run``); it is finished,
    recovered and retried by its jobs like any run. Transaction: one, locking the dry
    run's row, so two clicks make one application. Raises ``ApplyRefused``
    (``NOT_A_DRY_RUN``, ``NOT_FINISHED``, ``NOTHING_TO_APPLY``, ``ALREADY_APPLIED``)
    and writes nothing then.
    """
    with transaction.atomic():
        dry = ConsolidationRun.objects.select_for_update().get(pk=dry_run_id)
        previews = list(dry.reviews.filter(outcome=ClusterReview.Outcome.PREVIEW).order_by("id"))
        refusal = dry_runs.apply_refusal(
            run=dry, application=dry.applications.order_by("created_at").first(), previews=len(previews)
        )
        if refusal is not None:
            raise ApplyRefused(refusal)
        run = consolidation.create_run(
            trigger=ConsolidationRun.Trigger.ADMIN,
            mode=ConsolidationRun.Mode.QUEUED,
            threshold=dry.threshold,
            judge=dry.judge,
            user_id=dry.user_filter_id,
            source_run=dry,
            notes=f"Applies the verdicts of dry run {dry.pk}; requested by {actor}.",
        )
        start_application_run(run, previews)
    logger.info("run %s applies dry run %s (%d clusters)", run.pk, dry.pk, len(previews))
    return run, [p.pk for p in previews]


def ensure_user_job(run_id: Any, user_id: int) -> Job:
    """The run's phase 1 job for ``user_id``, created if a caller queued the task itself."""
    job, _ = Job.objects.get_or_create(
        run_id=run_id,
        key=user_job_key(user_id),
        defaults={"kind": Job.Kind.USER, "user_id": user_id, "dispatched_at": timezone.now()},
    )
    return job


def ensure_cluster_job(run_id: Any, cluster: CandidateCluster) -> Job:
    """The run's phase 2 job for ``cluster``, created if a caller queued the task itself."""
    job, _ = Job.objects.get_or_create(
        run_id=run_id,
        key=cluster_job_key(cluster.member_ids),
        defaults={
            "kind": Job.Kind.CLUSTER,
            "user_id": cluster.user_id,
            "member_ids": list(cluster.member_ids),
            "similarities": list(cluster.similarities),
            "dispatched_at": timezone.now(),
        },
    )
    return job


def _apply_job_fields(preview: ClusterReview) -> dict[str, Any]:
    """An apply job's preview and its cluster as the dry run saw it (members, seed first,
    and their cosine similarities), so that a failure is recorded like a cluster's."""
    rows = [row for row in preview.snapshot or () if row.get("id") is not None]
    sims = preview.similarities or {}
    return {
        "preview": preview,
        "member_ids": [row["id"] for row in rows],
        "similarities": [float(sims.get(row.get("alias"), 0.0)) for row in rows],
    }


def ensure_apply_job(run_id: Any, preview_id: int) -> Job:
    """The application run's job for preview review ``preview_id``, created if a caller
    queued the task itself (``start_application_run`` creates them all)."""
    preview = ClusterReview.objects.get(pk=preview_id)
    job, _ = Job.objects.get_or_create(
        run_id=run_id,
        key=apply_job_key(preview_id),
        defaults={
            "kind": Job.Kind.APPLY,
            "user_id": preview.user_id,
            "dispatched_at": timezone.now(),
            **_apply_job_fields(preview),
        },
    )
    return job


# --- one delivery --------------------------------------------------------------------


def _fail_locked(job: Job, error: str, now: datetime) -> None:
    """Fail ``job`` (row locked by the caller): a cluster gets a failed review, counted once.

    If a delivery recorded the cluster's review before dying, that review stands (the
    key is taken) and the job is done, or failed, as the review says.
    """
    if job.kind in PHASE2:
        job.review = consolidation.record_cluster_failure(
            run_id=job.run_id, cluster=candidate(job), judge="", error=error, key=job.review_key()
        )
        if job.review.outcome != ClusterReview.Outcome.FAILED:
            job.status = Status.DONE
            job.error = ""
            job.finished_at = now
            job.lease_until = None
            job.save()
            return
        error = job.review.error
    else:
        run = ConsolidationRun.objects.select_for_update().get(pk=job.run_id)
        note = PHASE1_FAILED.format(user_id=job.user_id, error=error)
        run.notes = f"{run.notes}\n{note}".strip()
        run.save(update_fields=["notes"])
    job.status = Status.FAILED
    job.error = error
    job.finished_at = now
    job.lease_until = None
    job.save()
    logger.warning("run %s: job %s failed: %s", job.run_id, job.key, error)


def _count_fault(job: Job, error: str, now: datetime) -> bool:
    """Count a lost delivery on ``job`` (row locked); returns True if it still may run."""
    job.faults += 1
    job.error = error
    job.continues = False
    attempts = max(1, int(app_settings.JOB_ATTEMPTS))
    if job.faults >= attempts:
        _fail_locked(job, GAVE_UP.format(faults=job.faults, attempts=attempts, error=error), now)
        return False
    return True


def claim(job_id: int, *, worker: str = "", now: datetime | None = None) -> Job | None:
    """Take ``job_id`` for this delivery; returns the job, or None if there is nothing to do.

    Nothing to do: the job is finished, another worker holds it (unexpired lease), or it
    waits for a later time (a duplicate message; its schedule will send it). A running
    job whose lease expired was lost with its worker: that counts as a fault, and at
    ``JOB_ATTEMPTS`` faults the job fails instead. The returned job's ``deliveries`` is
    this delivery's token for ``defer`` and ``record_fault``.
    """
    now = now or timezone.now()
    with transaction.atomic():
        job = Job.objects.select_for_update().get(pk=job_id)
        if job.status in (Status.DONE, Status.FAILED):
            return None
        if job.status == Status.RUNNING:
            if job.lease_until is not None and job.lease_until > now:
                return None
            if not _count_fault(job, WORKER_LOST, now):
                return None
        if job.status == Status.WAITING and job.not_before is not None and job.not_before > now + EARLY_TOLERANCE:
            return None
        job.status = Status.RUNNING
        job.deliveries += 1
        job.worker = worker[:200]
        job.started_at = now
        job.lease_until = now + timedelta(seconds=dispatch.timeout_of(job.kind, user_id=job.user_id) + LEASE_MARGIN)
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


def defer(job: Job, *, until: datetime, rate_limited: bool = False, note: str = "") -> bool:
    """Put the cluster job ``job`` back to wait until ``until`` (not a failure) and
    schedule its task then (``defer_batch`` of one).

    ``rate_limited`` counts a provider's 429, else our own jobs-per-minute limit. Returns
    False if this delivery no longer holds the job (nothing changed).
    """
    return defer_batch([job], until=until, rate_limited=rate_limited, note=note) == 1


def defer_batch(batch: list[Job], *, until: datetime, rate_limited: bool = False, note: str = "") -> int:
    """``defer`` for the cluster jobs of one batch task, sent again together at ``until``
    (one scheduled task, so the batch stays one model call). Returns how many jobs this
    delivery still held and put back to wait."""
    held = []
    with transaction.atomic():
        for job in sorted(batch, key=lambda j: j.pk):  # lock order: job rows by id
            locked = _lock_own(job)
            if locked is None:
                continue
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
            held.append(locked)
        dispatch.send_batch_at(held, until)
    return len(held)


#: The note a user job carries while its phase 1 goes on across deliveries.
PHASE1_CONTINUES = "Phase 1 continues in a new delivery: {embedded} truths embedded in the last, {pending} left to embed."


def continue_later(job: Job, *, note: str, now: datetime | None = None) -> bool:
    """This delivery did part of ``job`` (phase 1 embedding, committed) and the rest
    goes to a new delivery, sent now: queued again, not a fault. ``note`` says how far
    it got (shown on the run page and by ``consolidation_status``). Returns False if
    this delivery no longer holds the job."""
    now = now or timezone.now()
    with transaction.atomic():
        locked = _lock_own(job)
        if locked is None:
            return False
        locked.status = Status.QUEUED
        locked.lease_until = None
        locked.dispatched_at = now
        locked.error = note
        locked.continues = True
        locked.save()
        dispatch.send(locked)
    return True


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
        if not _count_fault(locked, error, now):
            return "failed"
        locked.status = Status.QUEUED
        locked.lease_until = None
        locked.dispatched_at = now
        locked.save()
        dispatch.send(locked)
    logger.warning("run %s: job %s re-queued after a fault: %s", job.run_id, job.key, error)
    return "requeued"


def finish_user_job(job: Job, plan: consolidation.UserPlan, *, now: datetime | None = None) -> int:
    """Phase 1 is done for ``job``: create the cluster jobs, count the user on the run,
    mark the job done and send the cluster tasks on commit, all in one transaction.

    Returns how many cluster jobs were created (0 if another delivery got here first).
    """
    now = now or timezone.now()
    with transaction.atomic():
        locked = Job.objects.select_for_update().get(pk=job.pk)
        if locked.status in (Status.DONE, Status.FAILED):
            return 0
        created = Job.objects.bulk_create(
            Job(
                run_id=job.run_id,
                kind=Job.Kind.CLUSTER,
                key=cluster_job_key(c.member_ids),
                user_id=c.user_id,
                member_ids=list(c.member_ids),
                similarities=list(c.similarities),
                dispatched_at=now,
            )
            for c in plan.clusters
        )
        consolidation.count_user_plan(run_id=job.run_id, plan=plan)
        locked.status = Status.DONE
        locked.finished_at = now
        locked.lease_until = None
        locked.error = ""
        locked.continues = False
        locked.save()
        # One task per batch of the user's clusters: one model call judges them all.
        for batch in consolidation.batches(created):
            dispatch.send_batch(batch)
    return len(created)


def finish_cluster_job(job: Job, review: ClusterReview, *, now: datetime | None = None) -> None:
    """``review`` is recorded for ``job``: mark the job done (failed if the review is)."""
    now = now or timezone.now()
    with transaction.atomic():
        locked = Job.objects.select_for_update().get(pk=job.pk)
        if locked.status in (Status.DONE, Status.FAILED):
            return
        failed = review.outcome == ClusterReview.Outcome.FAILED
        locked.status = Status.FAILED if failed else Status.DONE
        locked.review = review
        locked.error = review.error if failed else ""
        locked.finished_at = now
        locked.lease_until = None
        locked.save()


# --- runs ----------------------------------------------------------------------------


def refresh_run(run_id: Any, *, now: datetime | None = None) -> str:
    """Derive the run's status from its jobs; returns it.

    While a job is active the run is running and its schedule lock (if it holds one) is
    renewed. Once none is: done (no job failed), partial (some failed, some cluster was
    judged) or failed (none was; for a run without clusters: no user was planned);
    ``finished_at`` is set, the run closed (``consolidation.close_run``: checkpoint,
    cursors, inventory) and the lock released. A finished run stays as it is.
    """
    now = now or timezone.now()
    with transaction.atomic():
        run = ConsolidationRun.objects.select_for_update().get(pk=run_id)
        if run.finished_at is not None or run.started_at is None:
            return run.status
        rows = Job.objects.in_run(run_id).values_list("kind", "status").annotate(n=Count("id")).order_by()
        by_kind = Counter({(kind, status): n for kind, status, n in rows})
        active = any(by_kind[(kind, s)] for kind in Job.Kind.values for s in ACTIVE)
        if active:
            if run.status != ConsolidationRun.Status.RUNNING:
                run.status = ConsolidationRun.Status.RUNNING
                run.save(update_fields=["status"])
        else:
            failures = sum(by_kind[(kind, Status.FAILED)] for kind in Job.Kind.values)
            # Success is a judged (or applied) cluster; a run without any succeeds by planning.
            clusters = sum(n for (kind, _), n in by_kind.items() if kind in PHASE2)
            successes = (
                sum(by_kind[(kind, Status.DONE)] for kind in PHASE2) if clusters else by_kind[(Job.Kind.USER, Status.DONE)]
            )
            if not failures:
                run.status = ConsolidationRun.Status.DONE
            elif successes:
                run.status = ConsolidationRun.Status.PARTIAL
            else:
                run.status = ConsolidationRun.Status.FAILED
            run.finished_at = now
            held = Job.objects.in_run(run_id).filter(kind=Job.Kind.USER, status=Status.FAILED)
            consolidation.close_run(run, held_users=held.values_list("user_id", flat=True))
            run.save(update_fields=["status", "finished_at", "checkpoint", "inventory"])
            logger.info("run %s finished: %s", run_id, run.status)
    # The lock row is written after the run's transaction: scheduling takes the lock
    # row before run rows, so holding a run row while waiting for it could deadlock.
    lock = ScheduleLock.objects.filter(run_id=run_id)
    if active:
        lock.update(expires_at=now + timedelta(seconds=int(app_settings.SCHEDULE_LOCK_TTL)))
    else:
        lock.update(run=None, expires_at=None)
    return run.status


def abandon_run(run_id: Any, *, reason: str, now: datetime | None = None) -> int:
    """Fail a run's unfinished jobs and the run itself (its holder died); returns how many
    jobs. Truths are untouched: nothing half-done is ever written."""
    now = now or timezone.now()
    note = ABANDONED.format(reason=reason)
    with transaction.atomic():
        active = list(Job.objects.select_for_update().in_run(run_id).active())
        run = ConsolidationRun.objects.select_for_update().get(pk=run_id)
        for job in active:
            job.status = Status.FAILED
            job.error = note
            job.finished_at = now
            job.lease_until = None
            job.save()
        run.status = ConsolidationRun.Status.FAILED
        run.finished_at = now
        run.notes = f"{run.notes}\n{note}".strip()
        run.save(update_fields=["status", "finished_at", "notes"])
    logger.warning("run %s abandoned: %s", run_id, reason)
    return len(active)


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
        with transaction.atomic():
            job = Job.objects.select_for_update().get(pk=job_id)
            if job.status != Status.RUNNING or job.lease_until is None or job.lease_until >= now:
                continue
            touched.add(job.run_id)
            result["lost"] += 1
            # A lost job of a run executed in process: that process died; the queue takes over.
            ConsolidationRun.objects.filter(pk=job.run_id).update(execution=ConsolidationRun.Execution.QUEUED)
            if _count_fault(job, WORKER_LOST, now):
                job.status = Status.QUEUED
                job.lease_until = None
                job.dispatched_at = now
                job.save()
                dispatch.send(job)
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


def retry_failed(run_id: Any, *, now: datetime | None = None) -> int:
    """Re-queue the failed jobs of a run (``retry_consolidation``); returns how many.

    Each goes to a new round: a fresh retry window and fault count, and a new review key,
    so the cluster is judged again on its members as they are now (re-read, re-validated,
    freshness re-checked at write). The failed reviews stay as history; the run's
    ``failed`` and ``clusters_done`` counters drop by them and the run is running again,
    on the queue whoever executed it before.
    """
    now = now or timezone.now()
    with transaction.atomic():
        failed = list(Job.objects.select_for_update().in_run(run_id).filter(status=Status.FAILED))
        run = ConsolidationRun.objects.select_for_update().get(pk=run_id)
        if not failed:
            return 0
        keys = [j.review_key() for j in failed if j.kind in PHASE2]
        run.execution = ConsolidationRun.Execution.QUEUED
        run.save(update_fields=["execution"])
        recorded = ClusterReview.objects.filter(run=run, key__in=keys, outcome=ClusterReview.Outcome.FAILED).count()
        for job in failed:
            job.round += 1
            job.status = Status.QUEUED
            job.faults = 0
            job.first_attempt_at = None
            job.not_before = None
            job.lease_until = None
            job.finished_at = None
            job.review = None
            job.error = ""
            job.continues = False
            job.dispatched_at = now
            job.save()
            dispatch.send(job)
        run.failed = max(0, run.failed - recorded)
        run.clusters_done = max(0, run.clusters_done - recorded)
        run.status = ConsolidationRun.Status.RUNNING
        run.finished_at = None
        run.save(update_fields=["failed", "clusters_done", "status", "finished_at"])
    logger.info("run %s: %d failed jobs re-queued", run_id, len(failed))
    return len(failed)
