"""Cancel a queued run that no worker has started: the run ends "cancelled", its jobs
are closed, and a note in its history says who cancelled it, when, and what did not run.

Only a run none of whose jobs has been taken by a worker can be cancelled: such a run
has written nothing (no embedding, no stage, no verdict), so nothing is half-applied.
A run a worker has started is refused; it finishes, and its changes can be undone.
A cancelled run is not failed: nothing of it is offered for retry (``recovery.retry_failed``
refuses it).
"""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.utils import timezone

from ...exceptions import CancelRefused
from ...models import ConsolidationJob, ConsolidationRun
from ..run import lifecycle

#: The run's note in its history (and each job's error) after a cancel.
CANCELLED = (
    "Cancelled by {actor} at {when}: its {count} queued job(s) will not run; no worker had taken any, "
    "so nothing was applied."
)
NOT_IN_PROGRESS = "Run {run} is {status}: only a run waiting for a worker can be cancelled."
NOT_QUEUED = "Run {run} runs in one process ({mode}); only a queued run can be cancelled."
STARTED = (
    "Run {run} has started: a worker took {count} of its jobs, so cancelling now could leave it half applied. "
    "Let it finish, then undo what it changed."
)


def cancel_waiting_run(*, run_id: Any, actor: str) -> int:
    """Cancel queued run ``run_id`` if no worker has taken any of its jobs (all queued or
    waiting, never delivered): the run's status becomes "cancelled", its jobs are closed
    (``lifecycle.fail_run``) and the note ``CANCELLED`` goes to its history; returns how
    many jobs.

    Raises ``CancelRefused`` (and changes nothing) for a finished run, an in-process run,
    or one a worker has started. The run row and its jobs are locked while checking, so
    a worker that claims a job meanwhile either sees it failed or makes this refuse."""
    with transaction.atomic():
        run = ConsolidationRun.objects.select_for_update().get(pk=run_id)
        run_jobs = list(ConsolidationJob.objects.select_for_update().filter(run=run))
        refusal = _refusal(run, run_jobs)
        if refusal:
            raise CancelRefused(refusal)
        now = timezone.now()
        note = CANCELLED.format(actor=actor, when=history_time(now), count=len(run_jobs))
        return lifecycle.fail_run(run.pk, note=note, now=now, status=ConsolidationRun.Status.CANCELLED)


def cancel_refusal(run: ConsolidationRun) -> str:
    """Why ``run`` cannot be cancelled now ("" when it can), without locking: what the
    confirmation page says; ``cancel_waiting_run`` checks again under its locks."""
    return _refusal(run, list(ConsolidationJob.objects.filter(run=run)))


def _refusal(run: ConsolidationRun, run_jobs: list[ConsolidationJob]) -> str:
    short = str(run.pk)[:8]
    if run.status not in (ConsolidationRun.Status.PENDING, ConsolidationRun.Status.RUNNING):
        return NOT_IN_PROGRESS.format(run=short, status=run.get_status_display().lower())
    if run.execution != ConsolidationRun.Execution.QUEUED:
        return NOT_QUEUED.format(run=short, mode=run.get_execution_display().lower())
    taken = [
        j for j in run_jobs
        if j.deliveries or j.status not in (ConsolidationJob.Status.QUEUED, ConsolidationJob.Status.WAITING)
    ]
    return STARTED.format(run=short, count=len(taken)) if taken else ""


def history_time(moment: Any) -> str:
    """``moment`` as a run's history writes it: local time to the second, with its zone."""
    return timezone.localtime(moment).strftime("%Y-%m-%d %H:%M:%S %Z")


def is_cancelled(run: ConsolidationRun) -> bool:
    """Whether ``run`` ended by ``cancel_waiting_run``."""
    return run.status == ConsolidationRun.Status.CANCELLED
