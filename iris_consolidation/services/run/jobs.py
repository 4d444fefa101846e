"""A run's job rows: their keys, and their creation (phase 1 user jobs, phase 2 cluster
jobs, apply jobs).

A key is unique per run (``ConsolidationJob`` constraint ``job_once_per_run_and_key``),
so a task delivered twice finds the job it made the first time. Rows are created in bulk
by the run's start (``lifecycle.start_run``) and by the end of a user's phase 1
(``queue.delivery.finish_user_jobs``); ``ensure_*`` create one when a caller queued a
task itself. Nothing here sends a message (``queue.dispatch`` does).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from django.utils import timezone

from ...models import ClusterReview, ConsolidationJob, ConsolidationRun
from ..pipeline.clustering import CandidateCluster

Job = ConsolidationJob

#: Kinds of job that end in a review (phase 2): a judged cluster or an applied verdict.
PHASE2 = (Job.Kind.CLUSTER, Job.Kind.APPLY)


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


def candidate(job: ConsolidationJob) -> CandidateCluster:
    """The cluster a phase 2 job judges."""
    return CandidateCluster(user_id=job.user_id, member_ids=tuple(job.member_ids), similarities=tuple(job.similarities))


def create_user_jobs(run: ConsolidationRun, user_ids: Iterable[int], *, now: datetime) -> list[Job]:
    """One phase 1 job per user of ``run`` (one query)."""
    return Job.objects.bulk_create(
        Job(run=run, kind=Job.Kind.USER, key=user_job_key(u), user_id=u, dispatched_at=now) for u in user_ids
    )


def create_cluster_jobs(run_id: Any, clusters: Sequence[CandidateCluster], *, now: datetime) -> list[Job]:
    """One phase 2 job per cluster (one query)."""
    return Job.objects.bulk_create(
        Job(
            run_id=run_id,
            kind=Job.Kind.CLUSTER,
            key=cluster_job_key(c.member_ids),
            user_id=c.user_id,
            member_ids=list(c.member_ids),
            similarities=list(c.similarities),
            dispatched_at=now,
        )
        for c in clusters
    )


def create_apply_jobs(run: ConsolidationRun, previews: Sequence[ClusterReview], *, now: datetime) -> list[Job]:
    """One apply job per preview review of the dry run ``run`` applies (one query)."""
    return Job.objects.bulk_create(
        Job(run=run, kind=Job.Kind.APPLY, key=apply_job_key(p.pk), user_id=p.user_id, dispatched_at=now,
            **_apply_job_fields(p))
        for p in previews
    )


def ensure_user_job(run_id: Any, user_id: int) -> Job:
    """The run's phase 1 job for ``user_id``, created if a caller queued the task itself."""
    job, _ = Job.objects.get_or_create(
        run_id=run_id,
        key=user_job_key(user_id),
        defaults={"kind": Job.Kind.USER, "user_id": user_id, "dispatched_at": timezone.now()},
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
    queued the task itself (``lifecycle.start_run`` creates them all)."""
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
