"""A run's life on its job rows: one start, one finish rule, one failure.

Every run has one ``ConsolidationJob`` per phase 1 user (small users are planned
several to a task, each on its own job) and per phase 2 cluster task (or, for the
application of a dry run, per verdict applied), whoever executes it: django-q2 workers,
or the process that started it (``execution.run_sync``). django-q2 carries the
messages; the rows carry the state (``delivery``, ``recovery``).

- ``start_run`` starts every run: a pass (one phase 1 job per user) or the application
  of a dry run (one apply job per preview), sent on commit;
- ``refresh_run`` derives the run's status from its jobs: running while any job is
  queued, running or waiting; then done (nothing failed), partial (some failed, some
  clusters judged) or failed (nothing judged), and closes it;
- ``fail_run`` fails a run and its unfinished jobs (its holder died, or the process
  executing it stopped), under the same locks, with its inventory completed.

Lock order, everywhere: job rows, then the run row, then truth rows.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.db.models import Count
from django.utils import timezone

from ...conf import app_settings
from ...exceptions import ApplyRefused
from ...models import ClusterReview, ConsolidationJob, ConsolidationRun, ScheduleLock
from ..operations import dry_runs
from ..pipeline import consolidation, inventory
from . import dispatch
from .creation import create_apply_jobs, create_user_jobs
from .delivery import PHASE2

logger = logging.getLogger(__name__)

Job = ConsolidationJob
Status = ConsolidationJob.Status
ACTIVE = (Status.QUEUED, Status.RUNNING, Status.WAITING)

ABANDONED = "Abandoned: {reason}"


def start_run(
    run: ConsolidationRun, *, previews: Sequence[ClusterReview] | None = None, now: datetime | None = None
) -> list[int]:
    """Start ``run`` (the one start of every run): mark it running
    (``consolidation.start_run``) and create its first jobs, sent on commit unless the
    run executes in process (``execution.run_sync``, which then runs them itself).

    A pass gets one phase 1 job per user (small users' jobs sent several to a task,
    ``dispatch.send_user_jobs``); the application of a dry run (``previews``,
    the dry run's preview reviews) one apply job per preview and no phase 1. Returns
    the user ids. Transaction: one, around the start and the jobs. A run with nothing
    to do is finished at once.
    """
    now = now or timezone.now()
    with transaction.atomic():
        user_ids = consolidation.start_run(run, previews=previews, now=now)
        if previews is None:
            # Small users share phase 1 tasks (``dispatch.user_batches``), each with its own job.
            dispatch.send_user_jobs(create_user_jobs(run, user_ids, now=now))
        else:
            for job in create_apply_jobs(run, previews, now=now):
                dispatch.send(job)
        refresh_run(run.pk, now=now)
    return user_ids


def start_application(
    *,
    dry_run_id: Any,
    actor: str,
    review_ids: Sequence[int] | None = None,
    trigger: str = ConsolidationRun.Trigger.ADMIN,
    execution: str = ConsolidationRun.Execution.QUEUED,
) -> tuple[ConsolidationRun, list[int]]:
    """Create and start the run that applies dry run ``dry_run_id``; return it and the
    preview review ids it applies.

    ``review_ids`` chooses some of the dry run's previewed clusters (None: every one); a
    dry run is applied once, whole or in part. The run is made like any run
    (``consolidation.create_run``) and carries the dry run's stored settings
    (``application_settings``); it is started like any run (``start_run`` with the
    previews) and finished, recovered and retried by its jobs like any run. ``execution``
    in process: its jobs are left for ``execution.apply_sync``. Transaction: one, locking
    the dry run's row, so two clicks make one application. Raises ``ApplyRefused``
    (``dry_runs.apply_refusal``'s and ``dry_runs.choose_previews``' reasons; every preview
    stale counts only for a whole application) and writes nothing then.
    """
    with transaction.atomic():
        dry = ConsolidationRun.objects.select_for_update().get(pk=dry_run_id)
        previews = list(dry.reviews.filter(outcome=ClusterReview.Outcome.PREVIEW).order_by("id"))
        stale = len(dry_runs.stale_previews(previews)) if dry.dry_run and review_ids is None else 0
        refusal = dry_runs.apply_refusal(
            run=dry, application=dry.applications.order_by("created_at").first(), previews=len(previews), stale=stale
        )
        if refusal is not None:
            raise ApplyRefused(refusal)
        chosen = dry_runs.choose_previews(run=dry, previews=previews, review_ids=review_ids)
        run = consolidation.create_run(
            trigger=trigger,
            execution=execution,
            threshold=dry.threshold,
            judge=dry.judge,
            user_id=dry.user_filter_id,
            source_run=dry,
            notes=f"Applies {_scope(chosen, previews)} of dry run {dry.pk}; requested by {actor}.",
        )
        run.effective_settings = application_settings(dry=dry, current=run.effective_settings or {})
        run.save(update_fields=["effective_settings"])
        start_run(run, previews=chosen)
    logger.info("run %s applies dry run %s (%d of %d clusters)", run.pk, dry.pk, len(chosen), len(previews))
    return run, [p.pk for p in chosen]


def _scope(chosen: Sequence[ClusterReview], previews: Sequence[ClusterReview]) -> str:
    if len(chosen) == len(previews):
        return "the verdicts"
    return f"the verdicts of {len(chosen)} of {len(previews)} previewed clusters"


#: The stored settings an application takes from its dry run: what the preview was judged under.
FROM_DRY_RUN = ("similarity_threshold", "risk_policy")


def application_settings(*, dry: ConsolidationRun, current: dict[str, Any]) -> dict[str, Any]:
    """The settings stored on the application of dry run ``dry``: ``current`` (the live
    settings now, as ``create_run`` stored them) with the dry run's ``FROM_DRY_RUN``, and the
    lower of the two retirement caps: applying a preview never loosens a cap set since.
    Stage modes stay ``current``'s (an application runs no stage). Pure."""
    previewed = dry.effective_settings or {}
    stored = {**current, **{k: previewed[k] for k in FROM_DRY_RUN if k in previewed}}
    caps = [int(c) for c in (current.get("max_retirements_per_run"), previewed.get("max_retirements_per_run"))
            if c is not None]
    if caps:
        stored["max_retirements_per_run"] = min(caps)
    return stored


def _finished_status(by_kind: Counter[tuple[str, str]]) -> str:
    """The status of a run none of whose jobs is active: done (no job failed), partial
    (some failed, some cluster was judged) or failed (none was; for a run without
    clusters: no user was planned)."""
    failures = sum(by_kind[(kind, Status.FAILED)] for kind in Job.Kind.values)
    if not failures:
        return ConsolidationRun.Status.DONE
    # Success is a judged (or applied) cluster; a run without any succeeds by planning.
    clusters = sum(n for (kind, _), n in by_kind.items() if kind in PHASE2)
    if not clusters:
        successes = by_kind[(Job.Kind.USER, Status.DONE)]
    else:
        successes = sum(by_kind[(kind, Status.DONE)] for kind in PHASE2)
    return ConsolidationRun.Status.PARTIAL if successes else ConsolidationRun.Status.FAILED


def refresh_run(run_id: Any, *, now: datetime | None = None) -> str:
    """Derive the run's status from its jobs; returns it.

    While a job is active the run is running and its schedule lock (if it holds one) is
    renewed. Once none is: ``_finished_status``; ``finished_at`` is set, the run closed
    (``consolidation.close_run``: checkpoint, cursors, inventory) and the lock released.
    A finished run stays as it is.
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
            run.status = _finished_status(by_kind)
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


def fail_run(
    run_id: Any, *, note: str, now: datetime | None = None, status: str = ConsolidationRun.Status.FAILED
) -> int:
    """Fail run ``run_id`` and its unfinished jobs with ``note`` (appended to the run's
    notes: those already there say what happened before); returns how many jobs.
    ``status`` is the run's end: failed, or cancelled (``cancel.cancel_waiting_run``:
    its jobs are closed as failed with the note, and its run is never retried).

    The one failure of a run: its process stopped (``consolidate_truths``: the embedder
    failed, Ctrl-C, a closed pipe) or its holder died (``abandon_run``). One transaction
    that locks the jobs, then the run (the lock order), so no delivery or
    ``refresh_run`` sees the jobs failed and the run still running. Truths are
    untouched: nothing half-done is ever written. No checkpoint and no cursor move;
    the inventory is completed for the report.
    """
    now = now or timezone.now()
    with transaction.atomic():
        active = list(Job.objects.select_for_update().in_run(run_id).active().order_by("pk"))
        run = ConsolidationRun.objects.select_for_update().get(pk=run_id)
        for job in active:
            job.status = Status.FAILED
            job.error = note
            job.continues = False
            job.finished_at = now
            job.lease_until = None
            job.save()
        ConsolidationRun.objects.filter(pk=run_id).add_note(note)
        run.refresh_from_db(fields=["notes"])
        run.status, run.finished_at = status, now
        inventory.complete(run)
        run.save(update_fields=["status", "finished_at", "inventory"])
    logger.warning("run %s %s: %s", run_id, status, note)
    return len(active)


def abandon_run(run_id: Any, *, reason: str, now: datetime | None = None) -> int:
    """``fail_run`` for a run whose holder died (``reason``); returns how many jobs."""
    return fail_run(run_id, note=ABANDONED.format(reason=reason), now=now)
