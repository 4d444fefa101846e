"""A run executed in the process that started it: the same job rows, claimed and run
here one at a time instead of by django-q2 workers.

``run_sync`` is what ``consolidate_truths --sync``/``--dry-run`` and the tests use. It
starts the run like a queued one (``lifecycle.start_run``), marks it executed in
process (so ``dispatch`` sends nothing), then runs phase 1 (small users in batches, as
the queue's shared tasks do), then each user's cluster jobs, ``CLUSTERS_PER_CALL`` at a
time, through the workers' functions (``workers.work_user_jobs``, ``work_user_job``,
``work_cluster_jobs``): same review keys, same review drafts, same 429 handling
(the job waits until the provider's time, within ``RETRY_WINDOW``, then a failed review
with the cluster's members), same finish rule (``lifecycle.refresh_run``). The jobs-per-minute
limit is not applied: one process judges one cluster at a time.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

from django.utils import timezone

from ...embeddings import Embedder
from ...llm.base import JudgeClient
from ...models import ClusterReview, ConsolidationJob, ConsolidationRun
from ..run import lifecycle
from ..run.jobs import candidate
from . import delivery, dispatch, workers
from .delivery import worker_name

Job = ConsolidationJob

ProgressCallback = Callable[[str, int, int, Any], None]


def _run_job(
    job: Job,
    work: Callable[[Job, Callable[[], datetime]], dict[str, Any]],
    *,
    sleep: Callable[[float], None],
    clock: Callable[[], datetime],
) -> Job:
    """Claim ``job`` and run ``work`` on it until it is finished; a waiting job (429) is
    slept for until its ``not_before``. Exceptions propagate (the caller fails the run)."""
    while True:
        now = clock()
        job.refresh_from_db()
        if job.status in (Job.Status.DONE, Job.Status.FAILED):
            return job
        if job.status == Job.Status.WAITING and job.not_before is not None and job.not_before > now:
            sleep((job.not_before - now).total_seconds())
            now = max(clock(), job.not_before)
        claimed = delivery.claim(job.pk, worker=worker_name(), now=now)
        if claimed is None:
            return job
        work(claimed, clock)


def _run_batch(
    batch: list[Job],
    work: Callable[[list[Job], Callable[[], datetime]], list[dict[str, Any]]],
    *,
    sleep: Callable[[float], None],
    clock: Callable[[], datetime],
) -> list[Job]:
    """``_run_job`` for the cluster jobs of one batch, claimed and judged together (one
    model call); jobs that wait (429) are slept for and run again together."""
    while True:
        now = clock()
        for job in batch:
            job.refresh_from_db()
        open_jobs = [j for j in batch if j.status not in (Job.Status.DONE, Job.Status.FAILED)]
        if not open_jobs:
            return batch
        due = [j.not_before for j in open_jobs if j.status == Job.Status.WAITING and j.not_before is not None]
        if due and max(due) > now:
            sleep((max(due) - now).total_seconds())
            now = max(clock(), max(due))
        claimed = [c for c in (delivery.claim(j.pk, worker=worker_name(), now=now) for j in open_jobs) if c]
        if not claimed:
            return batch
        work(claimed, clock)


def _plan_batches(jobs: list[Job], *, embedder: Embedder) -> set[int]:
    """Phase 1 of the small users among ``jobs`` as the queue's shared tasks plan them
    (``dispatch.user_batches``, ``workers.work_user_jobs``): the ids of the users done.
    A user left for later (embedding past its share, not started) is not among them: the
    caller plans it alone. Raises the first user's error (the caller fails the run)."""
    done: set[int] = set()
    for group in dispatch.user_batches(jobs):
        if len(group) == 1:
            continue
        claimed = delivery.claim_batch([job.pk for job in group], worker=worker_name(),
                                       timeout=dispatch.timeout_of(Job.Kind.USER))
        if not claimed:
            continue
        results, failed = workers.work_user_jobs(claimed, embedder=embedder)
        if failed:
            raise next(iter(failed.values()))
        done.update(r["user_id"] for r in results if "clusters" in r)
    return done


def run_sync(
    *,
    run: ConsolidationRun,
    client: JudgeClient,
    embedder: Embedder,
    progress: ProgressCallback | None = None,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], datetime] = timezone.now,
) -> ConsolidationRun:
    """Run every job of ``run`` in this process; returns the refreshed run.

    ``progress(stage, i, n, payload)`` is called with stage "user" (payload: user id),
    "clusters" (payload: list of clusters) and "cluster" (payload: the review).
    ``sleep``/``clock`` wait out a rate-limited judge (tests pass a pair that agree).
    Raises what phase 1 raises (e.g. ``EmbeddingError``); the caller fails the run
    (``lifecycle.fail_run``).
    """
    ConsolidationRun.objects.filter(pk=run.pk).update(execution=ConsolidationRun.Execution.IN_PROCESS)
    run.execution = ConsolidationRun.Execution.IN_PROCESS
    user_ids = lifecycle.start_run(run)
    user_jobs = {j.user_id: j for j in Job.objects.in_run(run.pk).filter(kind=Job.Kind.USER)}

    def work_user(job: Job, _clock: Callable[[], datetime]) -> dict[str, Any]:
        return workers.work_user_job(job, embedder=embedder)

    def work_clusters(batch: list[Job], now: Callable[[], datetime]) -> list[dict[str, Any]]:
        return workers.work_cluster_jobs(
            batch, client=client, embedder=embedder, sleep=sleep, clock=now, throttled=False
        )

    planned = _plan_batches([user_jobs[user_id] for user_id in user_ids], embedder=embedder)
    for i, user_id in enumerate(user_ids, start=1):
        if progress:
            progress("user", i, len(user_ids), user_id)
        if user_id not in planned:
            _run_job(user_jobs[user_id], work_user, sleep=sleep, clock=clock)
        cluster_jobs = list(
            Job.objects.in_run(run.pk).filter(kind=Job.Kind.CLUSTER, user_id=user_id).order_by("id")
        )
        if progress:
            progress("clusters", i, len(user_ids), [candidate(j) for j in cluster_jobs])
        done = 0
        for batch in dispatch.batches(cluster_jobs):
            for finished in _run_batch(batch, work_clusters, sleep=sleep, clock=clock):
                done += 1
                if progress:
                    review = ClusterReview.objects.filter(pk=finished.review_id).first()
                    progress("cluster", done, len(cluster_jobs), review)
    lifecycle.refresh_run(run.pk)
    run.refresh_from_db()
    return run


def apply_sync(
    *,
    run: ConsolidationRun,
    embedder: Embedder,
    progress: ProgressCallback | None = None,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], datetime] = timezone.now,
) -> ConsolidationRun:
    """Run every apply job of ``run`` (the application of a dry run, started in process by
    ``dry_runs.start_application``) in this process, one preview at a time, through the
    workers' function (``workers.work_apply_job``); returns the refreshed run.

    ``progress("cluster", i, n, review)`` is called after each. Raises what applying
    raises (e.g. ``EmbeddingError``); the caller fails the run (``lifecycle.fail_run``).
    """

    def apply(job: Job, _clock: Callable[[], datetime]) -> dict[str, Any]:
        return workers.work_apply_job(job, embedder=embedder)

    jobs = list(Job.objects.in_run(run.pk).filter(kind=Job.Kind.APPLY).order_by("id"))
    for i, job in enumerate(jobs, start=1):
        finished = _run_job(job, apply, sleep=sleep, clock=clock)
        if progress:
            progress("cluster", i, len(jobs), ClusterReview.objects.filter(pk=finished.review_id).first())
    lifecycle.refresh_run(run.pk)
    run.refresh_from_db()
    return run
