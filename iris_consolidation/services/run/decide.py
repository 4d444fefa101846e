"""Phase 2 of a run: a batch of one user's clusters judged in one model call
(``decide_batch``; ``decide_cluster`` is a batch of one), each validated and recorded as
one review by ``merging.record_review``; ``record_cluster_failure`` records a cluster that
got no verdict. A dry run goes through the same steps and records its reviews, but
``merging.record_review`` writes no truth.

A run goes: ``lifecycle.create_run`` -> ``lifecycle.start_run`` -> for each user
``plan.plan_user`` (phase 1) -> for each batch of a user's clusters ``decide_batch``
(phase 2) -> ``lifecycle.refresh_run``, which closes the run when its jobs say it is
finished. The queue (``services/queue/``) carries the steps as job rows, executed by
django-q2 workers (``tasks.py``) or in the starting process (``queue.execution.run_sync``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ... import run_settings
from ...choices import MergeProtection
from ...embeddings import Embedder
from ...llm.base import JudgeClient, Spend
from ...models import ClusterReview, ConsolidationJob, ConsolidationRun, Truth
from ..hygiene import novelty
from ..pipeline import clustering, judging, merging, verdict_cache

logger = logging.getLogger(__name__)

STALE_CLUSTER = "Fewer than two members of this cluster are still live; nothing to judge."
LLM_TIER_STOPPED = (
    "LLM judge unavailable: stopped for this user earlier in the run; the pre-pass was applied, "
    "the rest waits for the next run."
)
MIXED_USERS = "A batch of clusters must hold one user's clusters only."
NOTE_LLM_STOPPED = "LLM judge stopped for user {user_id} (pre-pass applied, the rest waits for the next run): {error}"


def snapshot_members(by_alias: dict[str, Truth], request: Any) -> tuple[dict[str, Any], ...]:
    """The members as the judge saw them, one dict per alias, for ``merging.Decision.snapshot``.

    ``merging.record_review`` re-checks freshness against ``content`` and ``updated_at``
    (ISO 8601) here, so every decision must be built from this function.
    """
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
            **({"changes": request.member(alias).changes} if request.member(alias).changes else {}),
        }
        for alias, t in by_alias.items()
    )


def llm_tier_stopped(*, run_id: Any, user_id: int) -> bool:
    """Whether the model tier of ``run_id`` was stopped for ``user_id``: one of the
    user's clusters found the model unreachable (transport, auth, quota). A review a
    retry put aside (``retry_consolidation``) stops nothing: the retry asks again."""
    Failure = ClusterReview.Failure
    unavailable = ClusterReview.objects.filter(
        run_id=run_id, user_id=user_id, failure__in=[Failure.UNAVAILABLE, Failure.LLM_STOPPED]
    )
    if not unavailable.exists():
        return False
    return unavailable.exclude(
        key__in=ConsolidationJob.objects.in_run(run_id).retried_review_keys(user_id=user_id)
    ).exists()


def decide_cluster(
    *,
    run_id: Any,
    cluster: clustering.CandidateCluster,
    client: JudgeClient,
    embedder: Embedder,
    key: str | None = None,
) -> Any:
    """Phase 2 for one cluster: ``decide_batch`` of one. Returns the ``ClusterReview``."""
    keys = [key] if key is not None else None
    return decide_batch(run_id=run_id, clusters=[cluster], client=client, embedder=embedder, keys=keys)[0]


@dataclass(frozen=True, kw_only=True)
class _Prepared:
    """A cluster of a batch, read and aliased, waiting for its judgement."""

    index: int
    request: Any
    by_alias: dict[str, Truth]
    decision_args: dict[str, Any]


def budget_check(run: ConsolidationRun, client: JudgeClient) -> Callable[[Spend], bool] | None:
    """``may_call(spent)`` for ``judging.judge_batch`` under the run's cap in USD
    (``run_settings.max_cost``), or None when the run has no cap.

    A call may start while the run's recorded cost plus ``spent`` (this batch's, not
    yet recorded) is below the cap. A model with no price in litellm's map cannot be
    held to a cap, so no call is made for it then (its clusters are deferred).
    """
    cap = run_settings.max_cost(run)
    if cap is None or not getattr(client, "calls_model", False):
        return None
    priced = getattr(client, "price_known", lambda: True)()

    def may_call(spent: Spend) -> bool:
        if not priced or spent.unpriced:
            return False
        recorded = ConsolidationRun.objects.filter(pk=run.pk).values_list("cost", flat=True).first() or 0.0
        return recorded + spent.cost < cap

    return may_call


def decide_batch(
    *,
    run_id: Any,
    clusters: Sequence[clustering.CandidateCluster],
    client: JudgeClient,
    embedder: Embedder,
    keys: Sequence[str] | None = None,
    before_model: Callable[[], None] | None = None,
) -> list[Any]:
    """Phase 2 for several clusters of ONE user: judge them in one model call (outside
    any transaction), validate each, record one review each. Returns the reviews in order.

    ``before_model`` runs right before the judge's first model call, if one is made
    (``judging.judge_batch``): the queue's rate limit counts model calls, not jobs.

    For a judge that calls a model, the deterministic pre-pass runs first and the
    model's failures are isolated per cluster (``judging.judge_batch``); once the
    model is found unreachable, later clusters of the same user in this run get the
    pre-pass only, and the run's notes say so. A cluster judged "keep" before in the
    same state is answered from the verdict cache without a call. Under a cost cap
    (``budget_check``) the clusters left when the budget is spent are recorded as
    deferred. Raises ``ValueError`` if the clusters are not all one user's, and
    ``JudgeRateLimited`` (nothing recorded for the clusters still to judge) so the
    caller can wait and try again. ``keys`` name the reviews (one per run and key); by
    default each is derived from the cluster's members, retired ones included, so that
    a second delivery finds the review it wrote after its merge retired the sources;
    queued jobs pass stable ones.
    """
    if len({c.user_id for c in clusters}) > 1:
        raise ValueError(MIXED_USERS)
    run = ConsolidationRun.objects.get(pk=run_id)
    reviews: dict[int, Any] = {}
    prepared: list[_Prepared] = []
    next_alias = 1
    changes = novelty.mined_changes(run.pk, clusters[0].user_id) if clusters else {}
    for index, cluster in enumerate(clusters):
        members = list(Truth.all_objects.filter(pk__in=cluster.member_ids))
        key = keys[index] if keys is not None else judging.cluster_key(members)
        existing = run.reviews.filter(key=key).first()
        if existing is not None:
            reviews[index] = existing
            continue
        truths = [t for t in members if t.is_live]
        # Aliases unique across the call (wire contract v2): t1.. for the first cluster, on from there.
        item = _prepare(run, index, cluster, truths, key=key, judge=client.name, first_alias=next_alias,
                        changes=changes)
        next_alias += len(truths)
        answered = _answer_without_model(run, item, truths, client=client, embedder=embedder)
        if answered is not None:
            reviews[index] = answered
        else:
            prepared.append(item)
    if prepared:
        reviews.update(
            _judge_prepared(run, prepared, user_id=clusters[0].user_id, client=client, embedder=embedder,
                            before_model=before_model)
        )
    return [reviews[i] for i in range(len(clusters))]


def _prepare(
    run: ConsolidationRun, index: int, cluster: clustering.CandidateCluster, truths: list[Truth], *, key: str,
    judge: str, first_alias: int, changes: dict[int, int] | None = None,
) -> _Prepared:
    """The judge's request for a cluster's live ``truths`` (aliases from ``first_alias``)
    and the fields its review decision will carry."""
    request, by_alias = judging.build_request(truths, first_alias=first_alias, changes=changes)
    sims = dict(zip(cluster.member_ids, cluster.similarities, strict=True))
    decision_args: dict[str, Any] = {
        "run_id": run.pk,
        "user_id": cluster.user_id,
        "key": key,
        "snapshot": snapshot_members(by_alias, request),
        "similarities": {alias: sims.get(t.pk, 0.0) for alias, t in by_alias.items()},
        "judge": judge,
    }
    return _Prepared(index=index, request=request, by_alias=by_alias, decision_args=decision_args)


def _answer_without_model(
    run: ConsolidationRun, item: _Prepared, truths: list[Truth], *, client: JudgeClient, embedder: Embedder
) -> Any | None:
    """The review of a cluster that needs no judge, recorded, or None: fewer than two
    live members (stale), or judged "keep" before in exactly this state (the verdict cache)."""
    if len(truths) < 2:
        # Changed since planning (retired elsewhere, say): nothing to judge, and no
        # judge failed, so the run is not partial for it.
        decision = merging.Decision(**item.decision_args, stale_reason=STALE_CLUSTER)
        return merging.record_review(decision=decision, dry_run=run.dry_run)
    user_id = item.decision_args["user_id"]
    cached = verdict_cache.use_cached_keep(user_id=user_id, request=item.request, client=client, run_id=run.pk)
    if cached is None:
        return None
    # Judged "keep" before in exactly this state, by this model and prompt: no call.
    return _record(run, item, judging.Judgement(verdict=cached), embedder=embedder, stopped=False)


def _judge_prepared(
    run: ConsolidationRun, prepared: list[_Prepared], *, user_id: int, client: JudgeClient, embedder: Embedder,
    before_model: Callable[[], None] | None,
) -> dict[int, Any]:
    """Judge the prepared clusters of one user in one call (``judging.judge_batch``) and
    record each; a model found unavailable is noted on the run. Returns reviews by index."""
    stopped = getattr(client, "calls_model", True) and llm_tier_stopped(run_id=run.pk, user_id=user_id)
    judgements = judging.judge_batch(
        requests=[p.request for p in prepared],
        client=client,
        model_allowed=not stopped,
        may_call=budget_check(run, client),
        before_model=before_model,
        risk_policy=run_settings.risk_policy(run),
    )
    unavailable = next((j for j in judgements if j.unavailable), None)
    if unavailable is not None:
        logger.warning("run %s: judge unavailable for user %s: %s", run.pk, user_id, unavailable.error)
        note = NOTE_LLM_STOPPED.format(user_id=user_id, error=unavailable.error)
        ConsolidationRun.objects.filter(pk=run.pk).add_note(note)
    reviews = {}
    for item, judgement in zip(prepared, judgements, strict=True):
        settled = not (judgement.accepted or judgement.failed or judgement.error or judgement.unsettled)
        if settled and judgement.verdict is not None:
            verdict_cache.store_keep(user_id=user_id, request=item.request, client=client, verdict=judgement.verdict)
        reviews[item.index] = _record(run, item, judgement, embedder=embedder, stopped=stopped)
    return reviews


def _record(
    run: ConsolidationRun, item: _Prepared, judgement: judging.Judgement, *, embedder: Embedder, stopped: bool
) -> Any:
    """Embed the merged contents (real runs) and record ``judgement`` as the item's review
    (``stopped``: the model tier was stopped for this user before this batch)."""
    request = item.request
    error, failure = judgement.error, failure_of(judgement)
    if stopped and judgement.failed:
        error, failure = LLM_TIER_STOPPED, ClusterReview.Failure.LLM_STOPPED
    if judgement.deferred:
        error, failure = "", ClusterReview.Failure.NONE
    embeddings: dict[str, Any] = {}
    aliases = request.aliases()
    new_contents = [
        a.content.strip()
        for a in judgement.accepted
        if a.action == "merge"
        and MergeProtection.of_members(request.member(i) for i in a.ids if i in aliases).needs_embedding
    ]
    if new_contents and not run.dry_run:
        new_vectors = embedder.embed(new_contents)
        embeddings = dict(zip(new_contents, new_vectors, strict=True))
    decision = merging.Decision(
        **item.decision_args,
        verdict=judgement.verdict,
        accepted=judgement.accepted,
        rejections=judgement.rejections,
        prepass=judgement.prepass,
        failed=judgement.failed,
        error=error,
        failure=failure,
        deferred_reason=judgement.error if judgement.deferred else "",
        embeddings=embeddings,
        spend=judgement.spend,
        asked_model=judgement.asked_model,
    )
    return merging.record_review(decision=decision, dry_run=run.dry_run, embedding_model=embedder.model_name)


def failure_of(judgement: judging.Judgement) -> str:
    """The ``ClusterReview.Failure`` of a judgement with an error (blank without one)."""
    if not judgement.error:
        return ClusterReview.Failure.NONE
    if judgement.unavailable:
        return ClusterReview.Failure.UNAVAILABLE
    return ClusterReview.Failure.INVALID_REPLY


def record_cluster_failure(
    *,
    run_id: Any,
    cluster: clustering.CandidateCluster,
    judge: str,
    error: str,
    key: str,
    failure: str = ClusterReview.Failure.JOB_FAULT,
) -> Any:
    """Record a failed review for a cluster that got no verdict (timeouts, rate limits past
    the retry window, lost workers; ``failure`` says which kind); its truths stay as they
    were. Idempotent per key."""
    run = ConsolidationRun.objects.get(pk=run_id)
    truths = list(Truth.all_objects.filter(pk__in=cluster.member_ids))
    request, by_alias = judging.build_request(truths)
    sims = dict(zip(cluster.member_ids, cluster.similarities, strict=True))
    decision = merging.Decision(
        run_id=run.pk,
        user_id=cluster.user_id,
        key=key,
        snapshot=snapshot_members(by_alias, request),
        similarities={alias: sims.get(t.pk, 0.0) for alias, t in by_alias.items()},
        judge=judge,
        error=error,
        failure=failure,
    )
    return merging.record_review(decision=decision, dry_run=run.dry_run)


