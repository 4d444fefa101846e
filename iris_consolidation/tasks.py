"""django-q2 entry points (thin) and the helpers that enqueue them.

Tasks take primitive arguments (ids), call one service and return a small dict.
Phase 1: ``plan_user`` per user, which enqueues ``consolidate_cluster`` per cluster,
all in the run's group ``iris_consolidation:run:<id>``.
"""

from __future__ import annotations

import logging
from typing import Any

from django_q.tasks import async_task

from .conf import app_settings
from .embeddings import get_embedder
from .exceptions import JudgeRateLimited
from .llm import get_judge_client
from .models import ConsolidationRun
from .services import consolidation
from .services.clustering import CandidateCluster

logger = logging.getLogger(__name__)


def group_name(run_id: Any) -> str:
    """The django-q2 group of a run's tasks."""
    return f"iris_consolidation:run:{run_id}"


def enqueue_run(run: ConsolidationRun) -> int:
    """Start ``run`` and enqueue one ``plan_user`` task per user; returns the count.

    A run with no user to consolidate is finished at once.
    """
    user_ids = consolidation.start_run(run)
    for user_id in user_ids:
        async_task(
            plan_user,
            str(run.pk),
            user_id,
            task_name=f"iris:plan:{str(run.pk)[:8]}:user{user_id}",
            group=group_name(run.pk),
            timeout=app_settings.USER_JOB_TIMEOUT,
        )
    consolidation.finish_run_if_complete(run.pk)
    return len(user_ids)


def enqueue_cluster(run_id: Any, cluster: CandidateCluster) -> None:
    """Enqueue phase 2 for one cluster."""
    async_task(
        consolidate_cluster,
        str(run_id),
        cluster.as_task_args(),
        task_name=f"iris:cluster:{str(run_id)[:8]}:{cluster.seed_id}",
        group=group_name(run_id),
        timeout=app_settings.CLUSTER_JOB_TIMEOUT,
    )


def plan_user(run_id: str, user_id: int) -> dict[str, int]:
    """Task: phase 1 for one user, then enqueue its clusters."""
    from .embeddings import LocalEmbedder

    embedder = get_embedder()
    if isinstance(embedder, LocalEmbedder):
        embedder = LocalEmbedder(threads=1)  # one onnxruntime thread per queue worker
    clusters = consolidation.plan_user(run_id=run_id, user_id=user_id, embedder=embedder)
    for cluster in clusters:
        enqueue_cluster(run_id, cluster)
    consolidation.finish_run_if_complete(run_id)
    return {"user_id": user_id, "clusters": len(clusters)}


def consolidate_cluster(run_id: str, cluster: dict[str, Any]) -> dict[str, Any]:
    """Task: phase 2 for one cluster; the run is finished by its last cluster."""
    candidate = CandidateCluster(
        user_id=int(cluster["user_id"]),
        member_ids=tuple(cluster["member_ids"]),
        similarities=tuple(cluster["similarities"]),
    )
    try:
        review = consolidation.consolidate_cluster(
            run_id=run_id, cluster=candidate, client=get_judge_client(), embedder=get_embedder()
        )
    except JudgeRateLimited:
        raise
    consolidation.finish_run_if_complete(run_id)
    return {"review_id": review.pk, "outcome": review.outcome}


def enqueue_users(user_ids: list[int], *, mode: str, trigger: str, judge: str = "") -> list[ConsolidationRun]:
    """Create one run per user (``mode`` queued or dry_run) and enqueue each; return the runs.

    Used by the admin's "consolidate the users of the selected truths" actions: the
    request only creates the runs and queues their phase 1 tasks.
    """
    runs = []
    for user_id in sorted(set(user_ids)):
        run = consolidation.create_run(trigger=trigger, mode=mode, user_id=user_id, judge=judge)
        enqueue_run(run)
        runs.append(run)
    return runs


def enqueue_application(run: ConsolidationRun, review_ids: list[int]) -> int:
    """Enqueue one ``apply_review`` task per preview review of ``run.source_run``; returns the count."""
    for review_id in review_ids:
        async_task(
            apply_review,
            str(run.pk),
            review_id,
            task_name=f"iris:apply:{str(run.pk)[:8]}:review{review_id}",
            group=group_name(run.pk),
            timeout=app_settings.CLUSTER_JOB_TIMEOUT,
        )
    consolidation.finish_run_if_complete(run.pk)
    return len(review_ids)


def apply_review(run_id: str, review_id: int) -> dict[str, Any]:
    """Task: apply one previewed verdict of a dry run; the run is finished by its last review."""
    from .embeddings import LocalEmbedder
    from .services import dry_runs

    embedder = get_embedder()
    if isinstance(embedder, LocalEmbedder):
        embedder = LocalEmbedder(threads=1)  # one onnxruntime thread per queue worker
    review = dry_runs.apply_review(run_id=run_id, review_id=review_id, embedder=embedder)
    consolidation.finish_run_if_complete(run_id)
    return {"review_id": review.pk, "outcome": review.outcome}


def scheduled_pass() -> dict[str, Any]:
    """Task for the schedule: start an incremental pass if the live settings say so.

    Honours ``enabled``, the interval and "scheduled passes dry-run only"
    (``services/live_settings.start_scheduled_pass``); returns what it decided.
    """
    from .services import live_settings

    run, decision = live_settings.start_scheduled_pass()
    return {"run_id": str(run.pk) if run else None, "mode": decision.mode if run else None, "reason": decision.reason}
