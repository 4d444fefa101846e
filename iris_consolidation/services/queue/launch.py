"""An operator's run from start to end: the service behind ``consolidate_truths``.

``launch`` reads the options as the operator typed them, then forecasts (``estimate``),
queues the run, or executes it in this process (``execution.run_sync``), and closes the
run on any error so none is left "running" forever. It raises ``LaunchFailed`` with a
code the command maps to its exit status; it never prints (the caller's ``progress``
shows what happens).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from django.core.exceptions import ImproperlyConfigured
from django.db import connection

from ... import run_settings, selectors
from ...embeddings import Embedder, ReportingEmbedder, get_embedder
from ...exceptions import ApplyRefused, EmbeddingError, InvalidInput, LaunchFailed
from ...llm import get_judge_client
from ...llm.base import JudgeClient
from ...models import ConsolidationRun
from ..operations import dry_runs
from ..pipeline import forecast
from ..run import lifecycle, plan
from . import dispatch, execution
from .execution import ProgressCallback

STOPPED = "Stopped by an error: run {run_id} is marked failed ({error})."
BAD_RUN_ID = "{value!r} is not a run id; give the UUID printed by consolidate_truths or shown in the admin."
UNKNOWN_RUN = "No consolidation run has the id {value}."
CLIENT_QUEUED = (
    "A judge given in code runs here only: add --sync or --dry-run (a queued run's workers use the settings)."
)
INTERRUPTED = (
    "Interrupted: run {run_id} is marked failed. Clusters applied before the interrupt stay applied "
    "(each in its own transaction); the rest are unchanged and the next run picks them up."
)


@dataclass(frozen=True, kw_only=True)
class Launched:
    """What ``launch`` did: the run (None for an estimate), whether it was queued, the
    estimate's forecast, and the seconds an in-process run took."""

    run: ConsolidationRun | None = None
    queued: bool = False
    estimate: forecast.Forecast | None = None
    seconds: float = 0.0


def launch(
    *,
    user: str | None = None,
    threshold: str | None = None,
    since: str | None = None,
    full: bool = False,
    only: str | None = None,
    sync: bool = False,
    dry_run: bool = False,
    estimate: bool = False,
    progress: ProgressCallback | None = None,
    client: JudgeClient | None = None,
) -> Launched:
    """Start a run as ``consolidate_truths`` does; returns what was done.

    ``user`` is an id or a username ("" is an unknown user, None every user);
    ``threshold`` the text of a cosine similarity threshold. ``estimate`` forecasts
    phase 1 only and writes nothing. Otherwise a run is created with the configured judge
    and queued (sent when the transaction commits), or, with ``sync`` or ``dry_run``,
    executed here: ``progress("start", 0, 0, run)`` first, then ``run_sync``'s events.
    ``client`` judges instead of the configured judge (a run in this process only: a queued
    run's workers build theirs from the settings), e.g. a replay of recorded verdicts.

    Raises ``LaunchFailed``: ``not_started`` for bad input or configuration (nothing
    written), ``embedding`` or ``interrupted`` for a run stopped here (marked failed).
    Any other error fails the run with ``STOPPED`` in its notes and propagates.
    """
    try:
        # An empty --user is an unknown user, not "every user".
        user_id = selectors.get_user(value=user).pk if user is not None else None
        value = run_settings.validate_threshold(threshold) if threshold is not None else None
        if estimate:
            forecasted = plan.estimate(
                embedder=get_embedder(), threshold=value, user_id=user_id, since=since, full=full
            )
            return Launched(estimate=forecasted)
        here = sync or dry_run
        if client is not None and not here:
            raise InvalidInput(CLIENT_QUEUED)
        client = client or get_judge_client()
        run = lifecycle.create_run(
            trigger=ConsolidationRun.Trigger.COMMAND, dry_run=dry_run,
            execution=ConsolidationRun.Execution.IN_PROCESS if here else ConsolidationRun.Execution.QUEUED,
            threshold=value, user_id=user_id, judge=client.name, since=since, full=full, only=only,
        )
    except (InvalidInput, ImproperlyConfigured, EmbeddingError) as exc:
        raise LaunchFailed(str(exc), code=LaunchFailed.NOT_STARTED) from exc
    if not here:
        lifecycle.start_run(run, send=dispatch.send_jobs)
        return Launched(run=run, queued=True)
    if progress:
        progress("start", 0, 0, run)
    started = time.monotonic()
    run = _run_here(
        run, work=lambda: execution.run_sync(run=run, client=client, embedder=_embedder(progress), progress=progress)
    )
    return Launched(run=run, seconds=time.monotonic() - started)


def apply_dry_run(
    *, run_id: str, sync: bool = False, actor: str = "command", progress: ProgressCallback | None = None
) -> Launched:
    """Apply dry run ``run_id`` (its UUID, as text) as ``consolidate_truths --apply`` does:
    queue the application (``dry_runs.start_application``, every preview), or with ``sync``
    execute it here (``execution.apply_sync``: ``progress("start", 0, 0, run)`` first, then
    one "cluster" event per preview applied).

    Raises ``LaunchFailed``: ``not_started`` with ``BAD_RUN_ID``, ``UNKNOWN_RUN`` or the
    reason ``dry_runs.apply_refusal`` gives (not a dry run, unfinished, already applied,
    nothing to apply, every preview stale); nothing is written then. ``embedding`` or
    ``interrupted`` for an application stopped here (marked failed, as ``launch``).
    """
    value = str(run_id).strip()
    try:
        pk = uuid.UUID(value)
    except ValueError:
        raise LaunchFailed(BAD_RUN_ID.format(value=value), code=LaunchFailed.NOT_STARTED) from None
    if not ConsolidationRun.objects.filter(pk=pk).exists():
        raise LaunchFailed(UNKNOWN_RUN.format(value=value), code=LaunchFailed.NOT_STARTED)
    execution_mode = ConsolidationRun.Execution.IN_PROCESS if sync else ConsolidationRun.Execution.QUEUED
    try:
        run, _ = dry_runs.start_application(
            dry_run_id=pk, actor=actor, trigger=ConsolidationRun.Trigger.COMMAND, execution=execution_mode,
            send=dispatch.send_jobs,
        )
    except ApplyRefused as exc:
        raise LaunchFailed(str(exc), code=LaunchFailed.NOT_STARTED) from exc
    if not sync:
        return Launched(run=run, queued=True)
    if progress:
        progress("start", 0, 0, run)
    started = time.monotonic()
    run = _run_here(run, work=lambda: execution.apply_sync(run=run, embedder=get_embedder(), progress=progress))
    return Launched(run=run, seconds=time.monotonic() - started)


def _embedder(progress: ProgressCallback | None) -> Embedder:
    """The configured embedder; with ``progress``, one that reports its truths as "embed" events
    (a large user's embedding is most of its pass)."""
    embedder = get_embedder()
    if progress:
        return ReportingEmbedder(embedder, lambda done, total: progress("embed", done, total, None))
    return embedder


def _run_here(run: ConsolidationRun, *, work: Callable[[], ConsolidationRun]) -> ConsolidationRun:
    """``work()`` (executing ``run`` in this process), failing the run on any error (see ``launch``)."""
    try:
        return work()
    except EmbeddingError as exc:
        lifecycle.fail_run(run.pk, note=str(exc))
        raise LaunchFailed(str(exc), code=LaunchFailed.EMBEDDING) from exc
    except KeyboardInterrupt as exc:
        # Ctrl-C: a transaction it cut short was rolled back; the connection may be mid-query,
        # so close it and close the run on a fresh one (no run is left "running" forever).
        if not connection.in_atomic_block:
            connection.close()
        message = INTERRUPTED.format(run_id=run.pk)
        lifecycle.fail_run(run.pk, note=message)
        raise LaunchFailed(message, code=LaunchFailed.INTERRUPTED) from exc
    except Exception as exc:
        # Any other error (a closed pipe, `... --sync | head`; a bug) fails the run too,
        # with its jobs, instead of leaving it "running" forever; the error propagates.
        if not connection.in_atomic_block:
            connection.close()  # it may be mid-query; the run is closed on a fresh one
        lifecycle.fail_run(run.pk, note=STOPPED.format(run_id=run.pk, error=f"{type(exc).__name__}: {exc}"))
        raise
