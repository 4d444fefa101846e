"""Cancel a queued run that no worker has started: its jobs and the run fail with a note.

Only a run none of whose jobs has been taken by a worker can be cancelled: such a run
has written nothing (no embedding, no stage, no verdict), so nothing is half-applied.
A run a worker has started is refused; it finishes, and its changes can be undone.
"""

from __future__ import annotations

from typing import Any

from django.db import transaction

from ...exceptions import CancelRefused
from ...models import ConsolidationJob, ConsolidationRun
from . import lifecycle

#: The run's note (and each job's error) after a cancel; ``is_cancelled`` looks for it.
CANCELLED = "Cancelled by {actor} before any worker took a job; nothing was applied."
CANCEL_MARK = "Abandoned: Cancelled by "
NOT_IN_PROGRESS = "Run {run} is {status}: only a run waiting for a worker can be cancelled."
NOT_QUEUED = "Run {run} runs in one process ({mode}); only a queued run can be cancelled."
STARTED = (
    "Run {run} has started: a worker took {count} of its jobs, so cancelling now could leave it half applied. "
    "Let it finish, then undo what it changed."
)


def cancel_waiting_run(*, run_id: Any, actor: str) -> int:
    """Fail every job of queued run ``run_id`` and the run itself, if no worker has taken
    any of its jobs (all queued or waiting, never delivered); returns how many jobs.

    Raises ``CancelRefused`` (and changes nothing) for a finished run, an in-process run,
    or one a worker has started. The run row and its jobs are locked while checking, so
    a worker that claims a job meanwhile either sees it failed or makes this refuse."""
    with transaction.atomic():
        run = ConsolidationRun.objects.select_for_update().get(pk=run_id)
        short = str(run.pk)[:8]
        if run.status not in (ConsolidationRun.Status.PENDING, ConsolidationRun.Status.RUNNING):
            raise CancelRefused(NOT_IN_PROGRESS.format(run=short, status=run.get_status_display().lower()))
        if run.execution != ConsolidationRun.Execution.QUEUED:
            raise CancelRefused(NOT_QUEUED.format(run=short, mode=run.get_execution_display().lower()))
        run_jobs = list(ConsolidationJob.objects.select_for_update().filter(run=run))
        taken = [
            j for j in run_jobs
            if j.deliveries or j.status not in (ConsolidationJob.Status.QUEUED, ConsolidationJob.Status.WAITING)
        ]
        if taken:
            raise CancelRefused(STARTED.format(run=short, count=len(taken)))
        return lifecycle.abandon_run(run.pk, reason=CANCELLED.format(actor=actor))


def is_cancelled(run: ConsolidationRun) -> bool:
    """Whether ``run`` ended by ``cancel_waiting_run`` (from its note)."""
    return run.status == ConsolidationRun.Status.FAILED and CANCEL_MARK in (run.notes or "")
