"""The orchestrator used by the command, the tasks and the admin.

A run goes: ``create_run`` -> for each user ``plan_user`` (phase 1: embed, cluster)
-> for each cluster ``consolidate_cluster`` (phase 2: judge, validate, record) ->
``finish_run_if_complete``. ``run_sync`` chains them in this process; the queued path
(``tasks.py``) runs the same functions as django-q2 tasks. A dry run goes through the
same steps and records its reviews, but ``merging.record_review`` writes no truth.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from .. import selectors
from ..conf import app_settings
from ..embeddings import Embedder
from ..exceptions import InvalidThreshold, JudgeRateLimited, JudgeResponseInvalid, JudgeUnavailable
from ..llm.base import JudgeClient
from ..models import ConsolidationRun, Truth
from . import clustering, judging, merging, validation

logger = logging.getLogger(__name__)

BAD_THRESHOLD = "The threshold must be a number in (0, 1], e.g. 0.75; got {value!r}."
STALE_CLUSTER = "Fewer than two members of this cluster are still live; nothing to judge."


def validate_threshold(value: Any) -> float:
    """``value`` as a float in (0, 1]; raises ``InvalidThreshold`` otherwise."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise InvalidThreshold(BAD_THRESHOLD.format(value=value)) from None
    if not (0.0 < number <= 1.0):
        raise InvalidThreshold(BAD_THRESHOLD.format(value=value))
    return number


def create_run(
    *, trigger: str, mode: str, threshold: float | None = None, user_id: int | None = None, judge: str = ""
) -> ConsolidationRun:
    """Create a pending run. ``threshold`` defaults to the setting; raises ``InvalidThreshold``."""
    value = validate_threshold(app_settings.SIMILARITY_THRESHOLD if threshold is None else threshold)
    return ConsolidationRun.objects.create(
        trigger=trigger, mode=mode, threshold=value, user_filter_id=user_id, judge=judge
    )


def start_run(run: ConsolidationRun) -> list[int]:
    """Mark ``run`` running and return the ids of the users it covers (stored as ``users``)."""
    user_ids = selectors.list_user_ids_to_consolidate(
        user_id=run.user_filter_id, max_generation=app_settings.MAX_GENERATION
    )
    run.users = len(user_ids)
    run.status = ConsolidationRun.Status.RUNNING
    run.started_at = timezone.now()
    run.save(update_fields=["users", "status", "started_at"])
    return user_ids


@dataclass(frozen=True, kw_only=True)
class UserPlan:
    """Phase 1's result for one user: the clusters and the figures the run counts."""

    user_id: int
    clusters: list[clustering.CandidateCluster]
    truths: int
    embedded: int
    embed_seconds: float
    cluster_seconds: float


def build_user_plan(*, run_id: Any, user_id: int, embedder: Embedder) -> UserPlan:
    """Phase 1 for one user without counting it on the run: embed missing embeddings,
    build clusters. Writes embeddings only. Raises ``EmbeddingError`` if the embedder fails."""
    run = ConsolidationRun.objects.get(pk=run_id)
    started = time.monotonic()
    embedded = clustering.embed_missing(user_id=user_id, embedder=embedder)
    embed_seconds = time.monotonic() - started
    started = time.monotonic()
    clusters = clustering.find_clusters(user_id=user_id, threshold=run.threshold)
    cluster_seconds = time.monotonic() - started
    truths = Truth.objects.for_user(user_id).consolidatable(max_generation=app_settings.MAX_GENERATION).count()
    return UserPlan(
        user_id=user_id,
        clusters=clusters,
        truths=truths,
        embedded=embedded,
        embed_seconds=embed_seconds,
        cluster_seconds=cluster_seconds,
    )


def count_user_plan(*, run_id: Any, plan: UserPlan) -> None:
    """Add one planned user to the run's counters (callers make it happen once)."""
    ConsolidationRun.objects.filter(pk=run_id).update(
        users_done=F("users_done") + 1,
        truths=F("truths") + plan.truths,
        embedded=F("embedded") + plan.embedded,
        clusters_found=F("clusters_found") + len(plan.clusters),
        embed_seconds=F("embed_seconds") + plan.embed_seconds,
        cluster_seconds=F("cluster_seconds") + plan.cluster_seconds,
    )


def plan_user(*, run_id: Any, user_id: int, embedder: Embedder) -> list[clustering.CandidateCluster]:
    """Phase 1 for one user: embed missing embeddings, build clusters, count them on the run.

    Writes embeddings and the run's counters (not truths' content). Raises
    ``EmbeddingError`` if the embedder fails.
    """
    plan = build_user_plan(run_id=run_id, user_id=user_id, embedder=embedder)
    count_user_plan(run_id=run_id, plan=plan)
    return plan.clusters


def _snapshot(by_alias: dict[str, Truth], request: Any) -> tuple[dict[str, Any], ...]:
    return tuple(
        {
            "alias": alias,
            "id": t.pk,
            "content": t.content,
            "created_at": t.created_at.isoformat(),
            "updated_at": t.updated_at.isoformat(),
            "generation": t.generation,
            "origin": t.origin,
            "pinned": t.pinned,
            "score": t.score,
            "protected": request.member(alias).protected,
        }
        for alias, t in by_alias.items()
    )


def consolidate_cluster(
    *,
    run_id: Any,
    cluster: clustering.CandidateCluster,
    client: JudgeClient,
    embedder: Embedder,
    key: str | None = None,
) -> Any:
    """Phase 2 for one cluster: judge (outside any transaction), validate, record.

    Returns the ``ClusterReview``. A judge failure is recorded as a failed review and
    leaves every truth as it was. Raises ``JudgeRateLimited`` (nothing recorded) so
    the caller can wait and try again. ``key`` names the review (one per run and key);
    by default it is derived from the live members, queued jobs pass a stable one so
    that a second delivery finds the first one's review whatever it changed.
    """
    run = ConsolidationRun.objects.get(pk=run_id)
    truths = list(Truth.objects.filter(pk__in=cluster.member_ids))
    key = key or judging.cluster_key(truths)
    existing = run.reviews.filter(key=key).first()
    if existing is not None:
        return existing
    request, by_alias = judging.build_request(truths)
    sims = dict(zip(cluster.member_ids, cluster.similarities, strict=True))
    draft_args: dict[str, Any] = {
        "run_id": run.pk,
        "user_id": cluster.user_id,
        "key": key,
        "snapshot": _snapshot(by_alias, request),
        "similarities": {alias: sims.get(t.pk, 0.0) for alias, t in by_alias.items()},
        "judge": client.name,
    }
    if len(truths) < 2:
        return merging.record_review(draft=merging.ReviewDraft(**draft_args, error=STALE_CLUSTER), dry_run=run.is_dry_run)
    try:
        verdict = judging.judge_cluster(request=request, client=client)
    except JudgeRateLimited:
        raise
    except (JudgeUnavailable, JudgeResponseInvalid) as exc:
        logger.warning("run %s: judge failed on a cluster of user %s: %s", run.pk, cluster.user_id, exc)
        calls = getattr(exc, "llm_calls", 1 if isinstance(exc, JudgeResponseInvalid) else 0)
        return merging.record_review(
            draft=merging.ReviewDraft(**draft_args, error=f"{type(exc).__name__}: {exc}", llm_calls=calls),
            dry_run=run.is_dry_run,
        )
    result = validation.validate(
        request,
        verdict.actions,
        max_length=app_settings.MAX_CONTENT_LENGTH,
        max_generation=app_settings.MAX_GENERATION,
    )
    embeddings: dict[str, Any] = {}
    new_contents = [
        a.content.strip()
        for a in result.accepted
        if a.action == "merge" and not any(request.member(i).protected for i in a.ids)
    ]
    if new_contents and not run.is_dry_run:
        vectors = embedder.embed(new_contents)
        embeddings = dict(zip(new_contents, vectors, strict=True))
    draft = merging.ReviewDraft(
        **draft_args, verdict=verdict, accepted=result.accepted, rejections=result.rejections, embeddings=embeddings
    )
    return merging.record_review(draft=draft, dry_run=run.is_dry_run, embedding_model=embedder.model_name)


def record_cluster_failure(
    *, run_id: Any, cluster: clustering.CandidateCluster, judge: str, error: str, key: str, llm_calls: int = 0
) -> Any:
    """Record a failed review for a cluster that got no verdict (timeouts, rate limits past
    the retry window, lost workers); its truths stay as they were. Idempotent per key."""
    run = ConsolidationRun.objects.get(pk=run_id)
    truths = list(Truth.all_objects.filter(pk__in=cluster.member_ids))
    request, by_alias = judging.build_request(truths)
    sims = dict(zip(cluster.member_ids, cluster.similarities, strict=True))
    draft = merging.ReviewDraft(
        run_id=run.pk,
        user_id=cluster.user_id,
        key=key,
        snapshot=_snapshot(by_alias, request),
        similarities={alias: sims.get(t.pk, 0.0) for alias, t in by_alias.items()},
        judge=judge,
        error=error,
        llm_calls=llm_calls,
    )
    return merging.record_review(draft=draft, dry_run=run.is_dry_run)


def finish_run_if_complete(run_id: Any) -> bool:
    """Set the final status once every user is planned and every cluster reviewed.

    Status: ``partial`` if some clusters failed, else ``done``. Returns True if the run
    is (now) finished. Idempotent.
    """
    with transaction.atomic():
        run = ConsolidationRun.objects.select_for_update().get(pk=run_id)
        if run.finished_at is not None:
            return True
        if run.users_done < run.users or run.clusters_done < run.clusters_found:
            return False
        run.status = ConsolidationRun.Status.PARTIAL if run.failed else ConsolidationRun.Status.DONE
        run.finished_at = timezone.now()
        run.save(update_fields=["status", "finished_at"])
        return True


def fail_run(run_id: Any, *, note: str) -> None:
    """Mark a run failed with ``note`` (e.g. the embedder broke); truths are untouched."""
    ConsolidationRun.objects.filter(pk=run_id).update(
        status=ConsolidationRun.Status.FAILED, finished_at=timezone.now(), notes=note
    )


ProgressCallback = Callable[[str, int, int, Any], None]


def run_sync(
    *,
    run: ConsolidationRun,
    client: JudgeClient,
    embedder: Embedder,
    progress: ProgressCallback | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> ConsolidationRun:
    """Run every phase of ``run`` in this process; returns the refreshed run.

    ``progress(stage, i, n, payload)`` is called with stage "user" (payload: user id),
    "clusters" (payload: list of clusters) and "cluster" (payload: the review). A
    rate-limited judge is waited for (the provider's wait, at most the retry window).
    """
    user_ids = start_run(run)
    for i, user_id in enumerate(user_ids, start=1):
        if progress:
            progress("user", i, len(user_ids), user_id)
        clusters = plan_user(run_id=run.pk, user_id=user_id, embedder=embedder)
        if progress:
            progress("clusters", i, len(user_ids), clusters)
        for j, cluster in enumerate(clusters, start=1):
            deadline = time.monotonic() + app_settings.RETRY_WINDOW
            while True:
                try:
                    review = consolidate_cluster(run_id=run.pk, cluster=cluster, client=client, embedder=embedder)
                    break
                except JudgeRateLimited as exc:
                    wait = exc.retry_after if exc.retry_after is not None else 30.0
                    if time.monotonic() + wait > deadline:
                        review = merging.record_review(
                            draft=merging.ReviewDraft(
                                run_id=run.pk,
                                user_id=cluster.user_id,
                                key=f"rate-limited:{cluster.seed_id}",
                                snapshot=(),
                                similarities={},
                                judge=client.name,
                                error=f"Rate limited past the retry window: {exc}",
                            ),
                            dry_run=run.is_dry_run,
                        )
                        break
                    sleep(wait)
            if progress:
                progress("cluster", j, len(clusters), review)
    finish_run_if_complete(run.pk)
    run.refresh_from_db()
    return run
