"""The orchestrator used by the command, the tasks and the admin.

A run goes: ``create_run`` -> for each user ``plan_user`` (phase 1: embed, cluster)
-> for each batch of a user's clusters ``consolidate_batch`` (phase 2: one judge call,
validate and record per cluster; ``consolidate_cluster`` is a batch of one) ->
``close_run``. The steps run as job rows (``services/queue/``: ``lifecycle``, ``delivery``), executed by
django-q2 workers (``tasks.py``) or in the starting process (``queue/execution.run_sync``);
the jobs say when the run is finished (``lifecycle.refresh_run``). A dry run goes through the
same steps and records its reviews, but ``merging.record_review`` writes no truth.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from django.db import connection, transaction
from django.db.models import Count, Exists, F, OuterRef, Subquery
from django.db.models.functions import Coalesce
from django.utils import timezone

from ... import run_settings, selectors
from ...choices import MergeProtection, judge_identity
from ...conf import app_settings
from ...embeddings import Embedder
from ...llm.base import JudgeClient, Spend
from ...models import (
    ClusterReview,
    ConsolidationJob,
    ConsolidationRun,
    LineageEvent,
    SessionMessage,
    StageResult,
    Truth,
)
from ...run_settings import validate_threshold
from ..hygiene import mining, stages
from . import clustering, forecast, incremental, inventory, judging, merging, vectors, verdict_cache

logger = logging.getLogger(__name__)

#: Users of at most this many consolidatable truths have phase 1's writes after embedding
#: committed in one transaction (``build_user_plan``); larger ones commit as they go, so
#: that the run's row is not locked for a long clustering.
ONE_TRANSACTION_UP_TO = 5_000
STALE_CLUSTER = "Fewer than two members of this cluster are still live; nothing to judge."
LLM_TIER_STOPPED = (
    "LLM judge unavailable: stopped for this user earlier in the run; the pre-pass was applied, "
    "the rest waits for the next run."
)
MIXED_USERS = "A batch of clusters must hold one user's clusters only."
NOTE_LLM_STOPPED = "LLM judge stopped for user {user_id} (pre-pass applied, the rest waits for the next run): {error}"


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
    run: ConsolidationRun, *, previews: Sequence[ClusterReview] | None = None, now: datetime | None = None
) -> list[int]:
    """Mark ``run`` running and return the ids of the users it covers (stored as ``users``).

    A pass covers ``users_to_cover`` and captures the inventory's "before". The
    application of a dry run (``previews``, the dry run's preview reviews) covers the
    previews' users, counted as planned at once (``users_done``: no phase 1), and its
    ``clusters_found`` are the previews. The caller creates the jobs
    (``queue.lifecycle.start_run``, the start of every run).
    """
    run.started_at = now or timezone.now()
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
    return user_ids


@dataclass(frozen=True, kw_only=True)
class UserPlan:
    """Phase 1's result for one user: the clusters and the figures the run counts.

    ``complete`` False: embedding reached its deadline, so clustering was left for
    another call (``clusters`` is empty), with ``pending`` truths still to embed (maybe
    0: the next call only clusters).
    """

    user_id: int
    clusters: list[clustering.CandidateCluster]
    truths: int
    embedded: int
    embed_seconds: float
    cluster_seconds: float
    #: Dry runs only: the forecast of the user's judge spend (``forecast.Forecast.as_dict``).
    forecast: dict[str, Any] | None = None
    complete: bool = True
    pending: int = 0
    #: Truths that could seed a cluster in this pass (``incremental.begin_user_pass``).
    seeds: int = 0


def build_user_plan(
    *, run_id: Any, user_id: int, embedder: Embedder, embed_deadline: float | None = None
) -> UserPlan:
    """Phase 1 for one user without counting it on the run: embed missing embeddings,
    build clusters. Writes embeddings, and adds each committed batch of embeddings to
    the run's ``embedded`` and ``embed_seconds`` as it goes (the progress of a large
    user). ``embed_deadline`` (``time.monotonic()`` seconds) stops embedding after the
    batch that reaches it: the plan is then not ``complete`` (no clusters), and the
    caller runs phase 1 again later (the queue does, in a new delivery). Raises
    ``EmbeddingError`` if the embedder fails."""
    run = _run_for_user(run_id, user_id=user_id, model_name=embedder.model_name)
    embedded, embed_seconds = 0, 0.0
    if run.user_unembedded:
        embedded, embed_seconds = embed_user(run, user_id=user_id, embedder=embedder, deadline=embed_deadline)
    truths = run.user_truths
    if embed_deadline is not None and time.monotonic() >= embed_deadline:
        return incomplete_plan(
            user_id=user_id, truths=truths, embedded=embedded, embed_seconds=embed_seconds, embedder=embedder
        )
    small = truths <= ONE_TRANSACTION_UP_TO
    # The stages share one read of the user's truths and stage results (``stages.user_pass``);
    # a small user's results are written in one insert, in the transaction below.
    facts = stages.PassFacts(recorded=run.user_recorded, undone=run.user_undone, messages=run.user_messages)
    with stages.user_pass(run, user_id, buffered=small, facts=facts) as shared:
        # The stages that may call a model (mine; relocate and promote below) run outside
        # the transaction that follows: no network call while it holds the run's row.
        stages.run_at(stages.When.FIRST, run, user_id, embedder=embedder)
        offline_after = not stages.calls_model_after_clustering(run)
        # A small user's writes from here on (stage results, the pass's cursor bounds) are
        # committed once: a commit costs a flush to disk (about 3 ms here), several times
        # the clustering of 100 truths. A large user's are not held in one transaction,
        # which would lock the run's row for the whole clustering.
        with transaction.atomic() if small else contextlib.nullcontext():
            if small:
                commit_without_waiting()
            # Stages before clustering (noise, decay), each timed in its StageResult; after the
            # embedding, so that an embedder that fails leaves every truth as it was.
            stages.run_at(stages.When.BEFORE_CLUSTERING, run, user_id)
            started = time.monotonic()
            positions = [(row[8], row[0]) for row in shared.consolidatable()]
            seed_filter, seeds = incremental.begin_user_pass(run=run, user_id=user_id, positions=positions)
            # Both candidate arms (embedding, Jaccard), interleaved; each in its stage mode.
            clusters = stages.candidate_clusters(run, user_id, seed_filter=seed_filter)
            cluster_seconds = time.monotonic() - started
            if small and offline_after:
                # No model call in relocate or promote: they may run in the same transaction.
                stages.run_at(stages.When.AFTER_CLUSTERING, run, user_id)
            shared.flush()
        # After the clusters are built (the order of a pass's stages): a truth relocated here leaves its
        # cluster stale for phase 2, which re-reads every member under a lock.
        if not (small and offline_after):
            stages.run_at(stages.When.AFTER_CLUSTERING, run, user_id)
    return finished_plan(
        run, user_id=user_id, clusters=clusters, truths=truths + shared.mined, embedded=embedded,
        embed_seconds=embed_seconds, cluster_seconds=cluster_seconds, seeds=seeds,
    )


def finished_plan(
    run: ConsolidationRun, *, user_id: int, clusters: list[clustering.CandidateCluster], truths: int,
    embedded: int, embed_seconds: float, cluster_seconds: float, seeds: int,
) -> UserPlan:
    """The plan of a user whose phase 1 is done, with a dry run's forecast of its judge
    spend (``forecast.forecast_user``)."""
    user_forecast = None
    if run.dry_run:
        user_forecast = forecast.forecast_user(user_id=user_id, clusters=clusters, model=run.judge_model).as_dict()
    return UserPlan(
        user_id=user_id, clusters=clusters, truths=truths, embedded=embedded, embed_seconds=embed_seconds,
        cluster_seconds=cluster_seconds, forecast=user_forecast, seeds=seeds,
    )


def incomplete_plan(
    *, user_id: int, truths: int, embedded: int, embed_seconds: float, embedder: Embedder
) -> UserPlan:
    """The plan of a user whose embedding stopped at the deadline: no clusters, not
    ``complete``, with how many truths still lack an embedding (one query)."""
    return UserPlan(
        user_id=user_id, clusters=[], truths=truths, embedded=embedded, embed_seconds=embed_seconds,
        cluster_seconds=0.0, complete=False, pending=vectors.missing_embeddings(user_id=user_id, embedder=embedder),
    )


def embed_user(
    run: ConsolidationRun, *, user_id: int, embedder: Embedder, deadline: float | None
) -> tuple[int, float]:
    """Embed the user's truths that lack a vector, adding each committed batch to the
    run's ``embedded`` and ``embed_seconds``: (truths embedded, seconds). Raises
    ``EmbeddingError``."""

    def count_batch(count: int, seconds: float) -> None:
        ConsolidationRun.objects.filter(pk=run.pk).update(
            embedded=F("embedded") + count, embed_seconds=F("embed_seconds") + seconds
        )

    started = time.monotonic()
    embedded = vectors.embed_missing(user_id=user_id, embedder=embedder, deadline=deadline, on_batch=count_batch)
    return embedded, time.monotonic() - started


def _run_for_user(run_id: Any, *, user_id: int, model_name: str) -> ConsolidationRun:
    """The run, with what ``build_user_plan`` first asks about ``user_id`` in the same
    query (``pass_facts``, each as ``user_<name>``). Raises
    ``ConsolidationRun.DoesNotExist``."""
    facts = pass_facts(user=user_id, run=OuterRef("pk"), model_name=model_name)
    return ConsolidationRun.objects.annotate(**{f"user_{name}": value for name, value in facts.items()}).get(
        pk=run_id
    )


def pass_facts(*, user: Any, run: Any, model_name: str) -> dict[str, Any]:
    """What a user's pass asks first, as annotations: ``truths`` (consolidatable truths),
    ``unembedded`` (a live truth lacks an embedding of ``model_name``), and the
    ``stages.PassFacts``: ``recorded``, ``undone``, ``messages``. ``user`` and ``run``: an
    id, or an ``OuterRef`` to the annotated row (a run, for one user; a user, for a batch:
    ``batch_plan``)."""
    truths = Truth.objects.filter(user_id=user)
    consolidatable = truths.consolidatable(max_generation=app_settings.MAX_GENERATION).order_by()
    return {
        "truths": Coalesce(Subquery(consolidatable.values("user_id").annotate(n=Count("id")).values("n")), 0),
        "unembedded": Exists(truths.missing_embedding(model_name=model_name)),
        "recorded": Exists(StageResult.objects.filter(run_id=run, user_id=user)),
        "undone": Exists(LineageEvent.objects.filter(action=LineageEvent.Action.UNDO, result__user_id=user)),
        "messages": Exists(SessionMessage.objects.filter(session__user_id=user)),
    }


def estimate(
    *,
    embedder: Embedder,
    threshold: float | None = None,
    user_id: int | None = None,
    since: str | None = None,
    full: bool = False,
) -> forecast.Forecast:
    """Phase 1 of the run these options would make, and its forecast of every call (the
    judge's, its second looks, and the stages' requests, built and counted: ``forecast``);
    writes nothing and calls no model.

    The judge is the configured one (``JUDGE``; the LLM judge at ``MODEL``), never built:
    no API key is read. Raises ``InvalidThreshold``, ``InvalidWindow`` or
    ``EmbeddingError`` like a real run.
    """
    model = app_settings.MODEL if app_settings.JUDGE == "llm" else ""
    total = forecast.Forecast(model=model, per_call=max(1, int(app_settings.CLUSTERS_PER_CALL)),
                              stages_forecast=True)
    # With a model, the stages' requests are built and counted (``forecast.StageRecorder``), never sent.
    with transaction.atomic(), (forecast.recording(model) if model else contextlib.nullcontext()) as recorder:
        run = create_run(
            trigger="command", dry_run=True, threshold=threshold, user_id=user_id, judge="", since=since, full=full
        )
        for uid in start_run(run):
            plan = build_user_plan(run_id=run.pk, user_id=uid, embedder=embedder)
            total = total + forecast.forecast_user(user_id=uid, clusters=plan.clusters, model=model)
        transaction.set_rollback(True)
    return replace(total, **recorder.forecast()) if recorder is not None else total


def commit_without_waiting() -> None:
    """Let the current transaction commit without waiting for its WAL flush
    (``synchronous_commit`` off for it only). A crash right after may lose it, never
    corrupt it, and any later ordinary commit (the job's, the run's counters) flushes it
    first: so a pass whose job was recorded done is on disk, and one that was lost runs
    again. On this machine a flush took 3-5 ms under load, the most of a small user's
    pass."""
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL synchronous_commit TO OFF")


def count_user_plan(*, run_id: Any, plan: UserPlan) -> None:
    """``count_user_plans`` for one user."""
    count_user_plans(run_id=run_id, plans=[plan])


def count_user_plans(*, run_id: Any, plans: Sequence[UserPlan]) -> None:
    """Add planned users to the run's counters (callers make it happen once per user); a
    dry run's forecasts add the users' (under the run's row lock). Embeddings were counted
    batch by batch in ``build_user_plan``. Queries: one update (two with a forecast),
    none for no plan."""
    if not plans:
        return
    counters = {
        "users_done": F("users_done") + len(plans),
        "truths": F("truths") + sum(plan.truths for plan in plans),
        "seeds": F("seeds") + sum(plan.seeds for plan in plans),
        "clusters_found": F("clusters_found") + sum(len(plan.clusters) for plan in plans),
        "cluster_seconds": F("cluster_seconds") + sum(plan.cluster_seconds for plan in plans),
    }
    forecasts = [forecast.Forecast.from_dict(plan.forecast) for plan in plans if plan.forecast is not None]
    with transaction.atomic():
        if forecasts:
            run = ConsolidationRun.objects.select_for_update().only("forecast").get(pk=run_id)
            counters["forecast"] = sum(forecasts, forecast.Forecast.from_dict(run.forecast)).as_dict()
        ConsolidationRun.objects.filter(pk=run_id).update(**counters)


def plan_user(*, run_id: Any, user_id: int, embedder: Embedder) -> list[clustering.CandidateCluster]:
    """Phase 1 for one user: embed missing embeddings, build clusters, count them on the run.

    Writes embeddings and the run's counters (not truths' content). Raises
    ``EmbeddingError`` if the embedder fails.
    """
    plan = build_user_plan(run_id=run_id, user_id=user_id, embedder=embedder)
    count_user_plan(run_id=run_id, plan=plan)
    return plan.clusters


def snapshot_members(by_alias: dict[str, Truth], request: Any) -> tuple[dict[str, Any], ...]:
    """The members as the judge saw them, one dict per alias, for ``ReviewDraft.snapshot``.

    ``merging.record_review`` re-checks freshness against ``content`` and ``updated_at``
    (ISO 8601) here, so every draft must be built from this function.
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


def consolidate_cluster(
    *,
    run_id: Any,
    cluster: clustering.CandidateCluster,
    client: JudgeClient,
    embedder: Embedder,
    key: str | None = None,
) -> Any:
    """Phase 2 for one cluster: ``consolidate_batch`` of one. Returns the ``ClusterReview``."""
    keys = [key] if key is not None else None
    return consolidate_batch(run_id=run_id, clusters=[cluster], client=client, embedder=embedder, keys=keys)[0]


@dataclass(frozen=True, kw_only=True)
class _Prepared:
    """A cluster of a batch, read and aliased, waiting for its judgement."""

    index: int
    request: Any
    by_alias: dict[str, Truth]
    draft_args: dict[str, Any]


def budget_check(run: ConsolidationRun, client: JudgeClient) -> Callable[[Spend], bool] | None:
    """``may_call(spent)`` for ``judging.decide_batch`` under the run's cap in USD
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


def consolidate_batch(
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
    (``judging.decide_batch``): the queue's rate limit counts model calls, not jobs.

    For a judge that calls a model, the deterministic pre-pass runs first and the
    model's failures are isolated per cluster (``judging.decide_batch``); once the
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
    for index, cluster in enumerate(clusters):
        members = list(Truth.all_objects.filter(pk__in=cluster.member_ids))
        key = keys[index] if keys is not None else judging.cluster_key(members)
        existing = run.reviews.filter(key=key).first()
        if existing is not None:
            reviews[index] = existing
            continue
        truths = [t for t in members if t.is_live]
        # Aliases unique across the call (wire contract v2): t1.. for the first cluster, on from there.
        item = _prepare(run, index, cluster, truths, key=key, judge=client.name, first_alias=next_alias)
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
    judge: str, first_alias: int,
) -> _Prepared:
    """The judge's request for a cluster's live ``truths`` (aliases from ``first_alias``)
    and the fields its review draft will carry."""
    request, by_alias = judging.build_request(truths, first_alias=first_alias)
    sims = dict(zip(cluster.member_ids, cluster.similarities, strict=True))
    draft_args: dict[str, Any] = {
        "run_id": run.pk,
        "user_id": cluster.user_id,
        "key": key,
        "snapshot": snapshot_members(by_alias, request),
        "similarities": {alias: sims.get(t.pk, 0.0) for alias, t in by_alias.items()},
        "judge": judge,
    }
    return _Prepared(index=index, request=request, by_alias=by_alias, draft_args=draft_args)


def _answer_without_model(
    run: ConsolidationRun, item: _Prepared, truths: list[Truth], *, client: JudgeClient, embedder: Embedder
) -> Any | None:
    """The review of a cluster that needs no judge, recorded, or None: fewer than two
    live members (stale), or judged "keep" before in exactly this state (the verdict cache)."""
    if len(truths) < 2:
        # Changed since planning (retired elsewhere, say): nothing to judge, and no
        # judge failed, so the run is not partial for it.
        draft = merging.ReviewDraft(**item.draft_args, stale_reason=STALE_CLUSTER)
        return merging.record_review(draft=draft, dry_run=run.dry_run)
    user_id = item.draft_args["user_id"]
    cached = verdict_cache.use_cached_keep(user_id=user_id, request=item.request, client=client, run_id=run.pk)
    if cached is None:
        return None
    # Judged "keep" before in exactly this state, by this model and prompt: no call.
    return _record(run, item, judging.Judgement(verdict=cached), embedder=embedder, stopped=False)


def _judge_prepared(
    run: ConsolidationRun, prepared: list[_Prepared], *, user_id: int, client: JudgeClient, embedder: Embedder,
    before_model: Callable[[], None] | None,
) -> dict[int, Any]:
    """Judge the prepared clusters of one user in one call (``judging.decide_batch``) and
    record each; a model found unavailable is noted on the run. Returns reviews by index."""
    stopped = getattr(client, "calls_model", True) and llm_tier_stopped(run_id=run.pk, user_id=user_id)
    judgements = judging.decide_batch(
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
    draft = merging.ReviewDraft(
        **item.draft_args,
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
    return merging.record_review(draft=draft, dry_run=run.dry_run, embedding_model=embedder.model_name)


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
    llm_calls: int = 0,
    failure: str = ClusterReview.Failure.JOB_FAULT,
) -> Any:
    """Record a failed review for a cluster that got no verdict (timeouts, rate limits past
    the retry window, lost workers; ``failure`` says which kind); its truths stay as they
    were. Idempotent per key."""
    run = ConsolidationRun.objects.get(pk=run_id)
    truths = list(Truth.all_objects.filter(pk__in=cluster.member_ids))
    request, by_alias = judging.build_request(truths)
    sims = dict(zip(cluster.member_ids, cluster.similarities, strict=True))
    draft = merging.ReviewDraft(
        run_id=run.pk,
        user_id=cluster.user_id,
        key=key,
        snapshot=snapshot_members(by_alias, request),
        similarities={alias: sims.get(t.pk, 0.0) for alias, t in by_alias.items()},
        judge=judge,
        error=error,
        failure=failure,
        llm_calls=llm_calls,
    )
    return merging.record_review(draft=draft, dry_run=run.dry_run)


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


def batches(clusters: Sequence[Any], size: int | None = None) -> list[list[Any]]:
    """``clusters`` (one user's, in order; clusters or their jobs) in batches of ``size``
    (default ``CLUSTERS_PER_CALL``): what one phase 2 task, and one model call, carries."""
    size = max(1, int(size or app_settings.CLUSTERS_PER_CALL))
    return [list(clusters[i : i + size]) for i in range(0, len(clusters), size)]
