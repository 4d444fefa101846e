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
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.db.models import Count
from django.utils import timezone

from ... import run_settings, selectors
from ...choices import judge_identity
from ...conf import app_settings
from ...models import ClusterReview, ConsolidationJob, ConsolidationRun, ScheduleLock
from ...run_settings import validate_threshold
from ..hygiene import mining, stages
from ..pipeline import incremental
from . import inventory
from .jobs import PHASE2, create_apply_jobs, create_user_jobs

logger = logging.getLogger(__name__)

Job = ConsolidationJob
Status = ConsolidationJob.Status
ACTIVE = (Status.QUEUED, Status.RUNNING, Status.WAITING)

ABANDONED = "Abandoned: {reason}"


def create_run(
    *,
    trigger: str,
    dry_run: bool = False,
    execution: str = ConsolidationRun.Execution.QUEUED,
    threshold: float | None = None,
    user_id: int | None = None,
    judge: str = "",
    since: str | None = None,
    full: bool = False,
    source_run: ConsolidationRun | None = None,
    notes: str = "",
    only: str | Sequence[str] | None = None,
) -> ConsolidationRun:
    """Create a pending run: the one constructor of every run (command, schedule,
    admin, the application of a dry run, whose ``source_run`` is the dry run).

    ``threshold`` defaults to the live settings' (else the Django setting's);
    ``since``/``full`` choose the window (``incremental.resolve_window``; default:
    the per-user cursor). ``only`` names the stages to run (``run_settings.parse_only``;
    None: every stage in its configured mode). The live settings in force, with the
    stage modes, are stored on the run. ``dry_run``: judge and record, change no truth.
    ``execution`` says who runs the jobs (``Execution``: the workers, or the process
    that calls ``execution.run_sync``, which also sets it). Raises ``InvalidThreshold``,
    ``InvalidWindow`` or ``InvalidInput`` (an unknown stage); nothing is written then.
    """
    effective = run_settings.get_effective_settings()
    value = validate_threshold(effective.similarity_threshold if threshold is None else threshold)
    window = incremental.resolve_window(since=since, full=full, user_id=user_id)
    stored = effective.as_dict()
    stored["stage_modes"] = run_settings.narrow(effective.stage_modes, run_settings.parse_only(only))
    # Before ``--only`` narrowed them: prune reads whether decay is configured at all.
    stored["configured_stage_modes"] = dict(effective.stage_modes)
    judge_kind, judge_model = judge_identity(judge)
    run = ConsolidationRun(
        trigger=trigger, dry_run=dry_run, execution=execution, threshold=value, user_filter_id=user_id, judge=judge,
        judge_kind=judge_kind, judge_model=judge_model,
        effective_settings=stored, source_run=source_run, notes=notes,
    )
    incremental.apply_window(run, window)
    run.save(force_insert=True)
    return run


def users_to_cover(run: ConsolidationRun) -> list[int]:
    """The ids of the users a pass covers: users with two consolidatable truths (a
    cluster needs two), or with one when a stage that works truth by truth
    (``run_settings.PER_TRUTH``: noise, decay, prune) is on, and, when the mine stage is
    on, users with their own session messages in the run's mining window; within the
    run's allowlist."""
    user_ids = selectors.list_user_ids_to_consolidate(
        user_id=run.user_filter_id, max_generation=app_settings.MAX_GENERATION,
        min_truths=1 if run_settings.per_truth_stages_on(run) else 2,
    )
    if run_settings.run_modes(run)["mine"] != "off":
        # Users with sessions to mine may have no truth yet.
        user_ids = sorted(set(user_ids) | set(mining.user_ids_to_mine(run)))
    allowed = run_settings.allowed_user_ids(run)
    if allowed:
        user_ids = [pk for pk in user_ids if pk in set(allowed)]
    return user_ids


def start_run(
    run: ConsolidationRun,
    *,
    previews: Sequence[ClusterReview] | None = None,
    now: datetime | None = None,
    send: Callable[[Sequence[ConsolidationJob]], None] | None = None,
) -> list[int]:
    """Start ``run`` (the one start of every run): mark it running, create its first
    jobs and hand them to ``send`` (the queue's ``dispatch.send_jobs``, which sends
    them on commit; None: the caller executes them in process, ``execution.run_sync``).
    Returns the ids of the users it covers (stored as ``users``).

    A pass covers ``users_to_cover``, captures the inventory's "before" and gets one
    phase 1 job per user. The application of a dry run (``previews``, the dry run's
    preview reviews) covers the previews' users, counted as planned at once
    (``users_done``: no phase 1), its ``clusters_found`` are the previews, and it gets
    one apply job per preview. Transaction: one, around the start and the jobs. A run
    with nothing to do is finished at once.
    """
    now = now or timezone.now()
    with transaction.atomic():
        run.started_at = now
        run.status = ConsolidationRun.Status.RUNNING
        fields = ["users", "status", "started_at"]
        if previews is None:
            user_ids = users_to_cover(run)
        else:
            user_ids = sorted({p.user_id for p in previews})
            run.users_done, run.clusters_found = len(user_ids), len(previews)
            fields += ["users_done", "clusters_found"]
        run.users = len(user_ids)
        run.save(update_fields=fields)
        if previews is None:
            inventory.capture_before(run)
            jobs = create_user_jobs(run, user_ids, now=now)
        else:
            jobs = create_apply_jobs(run, previews, now=now)
        if send is not None:
            send(jobs)
        refresh_run(run.pk, now=now)
    return user_ids


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
    (``close_run``: prune, checkpoint, cursors, inventory) and the lock released.
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
            close_run(run, held_users=held.values_list("user_id", flat=True))
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


def close_run(run: ConsolidationRun, *, held_users: Iterable[int] = ()) -> None:
    """What every finished run does when its job rows say it is finished
    (``lifecycle.refresh_run``, the one finish rule): run the prune stage for the planned
    users (not ``held_users``; never for a failed run), write the checkpoint (``done``
    real runs only), move the users' cursors over what was fully judged and applied
    (never those of ``held_users``, e.g. whose phase 1 failed), complete the inventory.

    ``run`` is locked and its ``status``/``finished_at`` set by the caller, who saves
    ``checkpoint`` and ``inventory`` in the same transaction.
    """
    held = set(held_users)
    if run.status != ConsolidationRun.Status.FAILED:
        # The stage after the merges (prune), for every user whose phase 1 ran.
        planned = run.user_passes.order_by("user_id").values_list("user_id", flat=True)
        for user_id in planned:
            if user_id not in held:
                stages.run_at(stages.When.AFTER_MERGES, run, user_id)
    incremental.write_checkpoint(run)
    incremental.advance_cursors(run, held_users=held)
    inventory.complete(run)
