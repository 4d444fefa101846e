"""Phase 1 of a run for a batch of users (``plan_users``, ``build_user_plans``; one user is
a batch of one: ``plan_user``): embed the truths lacking a vector, run the stages before
judging and build the candidate clusters; ``estimate`` is the same for a run not made;
``count_user_plans`` counts planned users on the run.

A batch of small users (the queue's shared tasks, a run in process) is planned in a few
queries: each user is planned as ``build_user_plan`` plans one, with the same stages in
the same order and the same results, but what every user's pass reads is read for the
batch at once, and what it writes is written at once.

Reads for the whole batch: the run; per user its consolidatable count and what its
pass knows beforehand (``passes.PassFacts``), in one query; its stage results already
recorded (a second delivery); its live truths and their vectors, in one query
(``vectors.users_vectors``); and its cursor. Writes for the whole batch: the stage
results in one insert, the users' ``UserPass`` rows in one upsert; the run's counters
are the caller's (``count_user_plans``). Measured on 150 MSC users of
about 21 truths (``benchmarks/phase1.py --msc``): 9 queries a user one by one, about 0.3
in a batch.

Each user is still isolated: its clusters are its own (every read is split by user, every
cluster built from one user's rows), and its stages run in a savepoint of the batch's
transaction, so a user whose pass raises leaves nothing written and is reported in
``BatchPlan.failed`` while the others go on. Users the batch cannot take this way are
planned one by one with ``build_user_plan``: every user of a run whose judge is an LLM
(a stage may call the model, which must not run inside the batch's transaction), a user
with session messages (mining may add truths, which the batch's reads would miss), and
users with more than ``ONE_TRANSACTION_UP_TO`` consolidatable truths.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import operator
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
from django.contrib.auth import get_user_model
from django.db import DatabaseError, connection, models, transaction
from django.db.models import Count, Exists, F, JSONField, OuterRef, Subquery
from django.db.models.functions import Coalesce

from ...conf import app_settings
from ...embeddings import Embedder
from ...models import (
    EMBEDDING_DIMENSIONS,
    ConsolidationRun,
    LineageEvent,
    SessionMessage,
    StageResult,
    Truth,
)
from ..hygiene import passes, stages
from ..pipeline import clustering, forecast, incremental, vectors
from . import lifecycle

logger = logging.getLogger(__name__)

NO_VECTORS = (np.zeros(0, dtype=np.int64), np.zeros((0, EMBEDDING_DIMENSIONS), dtype=np.float32))


#: Users of at most this many consolidatable truths have phase 1's writes after embedding
#: committed in one transaction (``build_user_plan``); larger ones commit as they go, so
#: that the run's row is not locked for a long clustering.
ONE_TRANSACTION_UP_TO = 5_000


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
    # The stages share one read of the user's truths and stage results (``passes.user_pass``);
    # a small user's results are written in one insert, in the transaction below.
    facts = passes.PassFacts(recorded=run.user_recorded, undone=run.user_undone, messages=run.user_messages)
    with passes.user_pass(run, user_id, buffered=small, facts=facts) as shared:
        # The stages that may call a model (mine; relocate and promote below) run outside
        # the transaction that follows: no network call while it holds the run's row.
        stages.run_at(stages.When.FIRST, run, user_id, shared=shared, embedder=embedder)
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
            stages.run_at(stages.When.BEFORE_CLUSTERING, run, user_id, shared=shared)
            started = time.monotonic()
            positions = [row.position for row in shared.consolidatable()]
            seed_filter, seeds = incremental.begin_user_pass(run=run, user_id=user_id, positions=positions)
            # Both candidate arms (embedding, Jaccard), interleaved; each in its stage mode.
            clusters = stages.candidate_clusters(run, user_id, seed_filter=seed_filter, shared=shared)
            cluster_seconds = time.monotonic() - started
            if small and offline_after:
                # No model call in relocate or promote: they may run in the same transaction.
                stages.run_at(stages.When.AFTER_CLUSTERING, run, user_id, shared=shared)
            shared.flush()
        # After the clusters are built (the order of a pass's stages): a truth relocated here leaves its
        # cluster stale for phase 2, which re-reads every member under a lock.
        if not (small and offline_after):
            stages.run_at(stages.When.AFTER_CLUSTERING, run, user_id, shared=shared)
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
    ``passes.PassFacts``: ``recorded``, ``undone``, ``messages``. ``user`` and ``run``: an
    id, or an ``OuterRef`` to the annotated row (a run, for one user; a user, for a batch:
    ``build_user_plans``)."""
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
    judge's, its second looks, and the stages' requests, built and counted: ``forecast``;
    mining's novelty check and change pairs, which depend on its replies, expected:
    ``StageRecorder.expect``);
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
        run = lifecycle.create_run(
            trigger="command", dry_run=True, threshold=threshold, user_id=user_id, judge="", since=since, full=full
        )
        for uid in lifecycle.start_run(run):
            mark = recorder.mark() if recorder is not None else (0, 0)
            plan = build_user_plan(run_id=run.pk, user_id=uid, embedder=embedder)
            # What the mining replies would add, unknown here: a novelty check, change pairs to judge.
            pairs = recorder.expect(mark) if recorder is not None else 0
            total = total + forecast.forecast_user(user_id=uid, clusters=plan.clusters, model=model,
                                                   mined_pairs=pairs)
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
    """Phase 1 for one user, a batch of one (``plan_users``): embed missing embeddings,
    build clusters, count them on the run; returns the clusters.

    Writes embeddings and the run's counters (not truths' content). Raises the user's
    error (``EmbeddingError`` if the embedder fails, a stage's).
    """
    batch = plan_users(run_id=run_id, user_ids=[user_id], embedder=embedder)
    if user_id in batch.failed:
        raise batch.failed[user_id]
    return batch.plans[user_id].clusters


@dataclass(kw_only=True)
class BatchPlan:
    """What ``build_user_plans`` did for each user of the batch.

    ``plans``: ``{user_id: UserPlan}`` of the users planned (a plan not
    ``complete`` stopped embedding at the deadline); ``failed``: ``{user_id: the
    exception}`` of users whose phase 1 raised (nothing of their pass is written);
    ``not_started``: users left alone because the deadline had passed before their turn.
    """

    plans: dict[int, UserPlan] = field(default_factory=dict)
    failed: dict[int, Exception] = field(default_factory=dict)
    not_started: list[int] = field(default_factory=list)


@dataclass(frozen=True, kw_only=True)
class _Facts:
    truths: int
    unembedded: bool
    pass_facts: passes.PassFacts


def build_user_plans(
    *, run_id: Any, user_ids: Sequence[int], embedder: Embedder, embed_deadline: float | None = None
) -> BatchPlan:
    """Phase 1 for each of ``user_ids`` without counting them on the run (see the module
    docstring): embed missing embeddings, build clusters, as ``build_user_plan`` does for
    one. ``embed_deadline`` (``time.monotonic()`` seconds): no user's embedding starts
    after it (those users are ``not_started``), and the user embedding when it passes
    gets a plan that is not ``complete``. Raises ``ConsolidationRun.DoesNotExist``; a
    user's own error (``EmbeddingError``, a stage's) is in ``failed``, not raised.
    Queries for a batch of users with nothing to embed: about six in all, plus two
    a user (its savepoint)."""
    run = ConsolidationRun.objects.get(pk=run_id)
    batch = BatchPlan()
    facts = _facts_of(run, user_ids, model_name=embedder.model_name)
    together: list[int] = []
    embedding: dict[int, tuple[int, float]] = {}
    for user_id in user_ids:
        if embed_deadline is not None and time.monotonic() >= embed_deadline and facts[user_id].unembedded:
            batch.not_started.append(user_id)
            continue
        alone = (
            run.judge_kind == ConsolidationRun.JudgeKind.LLM
            or facts[user_id].pass_facts.messages
            or facts[user_id].truths > ONE_TRANSACTION_UP_TO
        )
        try:
            if alone:
                batch.plans[user_id] = build_user_plan(
                    run_id=run.pk, user_id=user_id, embedder=embedder, embed_deadline=embed_deadline
                )
                continue
            if facts[user_id].unembedded:
                embedded, seconds = embed_user(
                    run, user_id=user_id, embedder=embedder, deadline=embed_deadline
                )
                embedding[user_id] = (embedded, seconds)
                if embed_deadline is not None and time.monotonic() >= embed_deadline:
                    batch.plans[user_id] = incomplete_plan(
                        user_id=user_id, truths=facts[user_id].truths, embedded=embedded, embed_seconds=seconds,
                        embedder=embedder,
                    )
                    continue
        except Exception as exc:  # one user's failure is its own
            logger.exception("run %s: phase 1 of user %s failed in a batch", run.pk, user_id)
            batch.failed[user_id] = exc
            continue
        together.append(user_id)
    if together:
        try:
            planned = _plan_together(run, together, facts, embedder=embedder, batch=batch, embedding=embedding)
            batch.plans.update(planned)
        except DatabaseError:
            # The batch's transaction was rolled back (a user's pass broke it, or another
            # delivery recorded a result meanwhile): each user again, on its own.
            logger.exception("run %s: phase 1 of a batch of %d users failed; planning them one by one",
                             run.pk, len(together))
            _plan_alone(run, together, embedder=embedder, batch=batch, embedding=embedding)
    return batch


def _plan_alone(
    run: ConsolidationRun, user_ids: Sequence[int], *, embedder: Embedder, batch: BatchPlan,
    embedding: dict[int, tuple[int, float]],
) -> None:
    """Plan each of ``user_ids`` on its own (``build_user_plan``) into ``batch``, after their
    batch's transaction broke; a user's embedding done before that (``embedding``) stays its."""
    for user_id in user_ids:
        batch.failed.pop(user_id, None)
        try:
            plan = build_user_plan(run_id=run.pk, user_id=user_id, embedder=embedder)
            embedded, seconds = embedding.get(user_id, (plan.embedded, plan.embed_seconds))
            batch.plans[user_id] = dataclasses.replace(plan, embedded=embedded, embed_seconds=seconds)
        except Exception as exc:  # one user's failure is its own
            logger.exception("run %s: phase 1 of user %s failed", run.pk, user_id)
            batch.failed[user_id] = exc


def plan_users(*, run_id: Any, user_ids: Sequence[int], embedder: Embedder) -> BatchPlan:
    """``build_user_plans``, then the planned users counted on the run in one update
    (``count_user_plans``): ``plan_user`` for a batch."""
    batch = build_user_plans(run_id=run_id, user_ids=user_ids, embedder=embedder)
    count_user_plans(run_id=run_id, plans=list(batch.plans.values()))
    return batch


def _facts_of(run: ConsolidationRun, user_ids: Sequence[int], *, model_name: str) -> dict[int, _Facts]:
    """What ``pass_facts`` asks about one user, for every user of the batch
    in one query. A user id with no user row gets no truths and no facts."""
    facts = pass_facts(user=OuterRef("pk"), run=run.pk, model_name=model_name)
    # Prefixed: a user has a ``truths`` relation of its own.
    annotations = {f"pass_{name}": value for name, value in facts.items()}
    rows = get_user_model().objects.filter(pk__in=list(user_ids)).annotate(**annotations).values_list(
        "pk", *annotations
    )
    found = {
        pk: _Facts(truths=n, unembedded=unembedded,
                   pass_facts=passes.PassFacts(recorded=recorded, undone=undone, messages=messages))
        for pk, n, unembedded, recorded, undone, messages in rows
    }
    none = _Facts(truths=0, unembedded=False, pass_facts=passes.PassFacts(recorded=False, undone=False, messages=False))
    return {user_id: found.get(user_id, none) for user_id in user_ids}


def _plan_together(
    run: ConsolidationRun, user_ids: list[int], facts: dict[int, _Facts], *, embedder: Embedder, batch: BatchPlan,
    embedding: dict[int, tuple[int, float]],
) -> dict[int, UserPlan]:
    """Plan ``user_ids`` (embedded, small, offline) from reads made for them all, in one
    transaction with a savepoint per user; fill ``batch``. ``embedding``: (truths embedded,
    seconds) of the users embedded just before. Returns the plans of the users planned
    (written only if the whole batch commits; a user that raised is in ``batch.failed``).
    Raises ``DatabaseError`` if the batch's transaction breaks (nothing of it is written)."""
    rows, user_vectors = _rows_and_vectors_of(user_ids)
    recorded = [user_id for user_id in user_ids if facts[user_id].pass_facts.recorded]
    results: dict[int, dict[str, StageResult]] = defaultdict(dict)
    for result in StageResult.objects.filter(run=run, user_id__in=recorded) if recorded else ():
        results[result.user_id][result.stage] = result
    recorded_stages = {user_id: set(results[user_id]) for user_id in user_ids}
    cursors = incremental.cursors_of(user_ids)
    pending: list[StageResult] = []
    user_passes = []
    plans: dict[int, UserPlan] = {}
    with transaction.atomic():
        commit_without_waiting()
        for user_id in user_ids:
            shared = passes.UserPass(
                run_id=run.pk, user_id=user_id, buffered=True, results=results[user_id],
                facts=facts[user_id].pass_facts, _rows=rows.get(user_id, []),
                vectors=user_vectors.get(user_id, NO_VECTORS),
            )
            try:
                # A dry run's stages write nothing but the results buffered here: no savepoint.
                with transaction.atomic() if not run.dry_run else contextlib.nullcontext():
                    plan, user_pass = _plan_one(run, shared, truths=facts[user_id].truths,
                                                cursor=cursors.get(user_id), embedder=embedder,
                                                embedding=embedding.get(user_id, (0, 0.0)))
            except Exception as exc:  # one user's failure is its own; its savepoint is rolled back
                if run.dry_run and isinstance(exc, DatabaseError):
                    raise  # no savepoint: the transaction is broken (``build_user_plans`` plans each alone)
                logger.exception("run %s: phase 1 of user %s failed in a batch", run.pk, user_id)
                batch.failed[user_id] = exc
                continue
            # A second delivery re-records the arms' results (one by one, ``flush`` keeps the
            # row already there): the batch leaves out what the user had recorded before.
            pending += [r for r in shared.pending if r.stage not in recorded_stages[user_id]]
            user_passes.append(user_pass)
            plans[user_id] = plan
        _insert_results(pending)
        incremental.record_user_passes(user_passes)
    return plans


def _plan_one(
    run: ConsolidationRun, shared: passes.UserPass, *, truths: int, cursor: Any, embedder: Embedder,
    embedding: tuple[int, float],
) -> tuple[UserPlan, Any]:
    """One user's stages and clusters in the batch (``build_user_plan``'s order): the plan
    and its unsaved ``UserPass`` row."""
    user_id = shared.user_id
    # The pass was read with the batch's (``_rows_and_vectors_of``); its results are written with theirs.
    stages.run_at(stages.When.FIRST, run, user_id, shared=shared, embedder=embedder)
    stages.run_at(stages.When.BEFORE_CLUSTERING, run, user_id, shared=shared)
    started = time.monotonic()
    user_pass = incremental.user_pass_row(
        run, user_id, cursor=cursor, positions=[row.position for row in shared.consolidatable()]
    )
    shared.seed_bound = incremental.pass_bound(user_pass)
    # The pass's seed bound stands for the seed filter: the arms read seeds from the pass.
    clusters = stages.candidate_clusters(run, user_id, shared=shared)
    cluster_seconds = time.monotonic() - started
    stages.run_at(stages.When.AFTER_CLUSTERING, run, user_id, shared=shared)
    plan = finished_plan(
        run, user_id=user_id, clusters=clusters, truths=truths + shared.mined, embedded=embedding[0],
        embed_seconds=embedding[1],
        cluster_seconds=cluster_seconds, seeds=user_pass.seeds,
    )
    return plan, user_pass


def _rows_and_vectors_of(
    user_ids: Sequence[int],
) -> tuple[dict[int, list[passes.PassRow]], dict[int, tuple[np.ndarray, np.ndarray]]]:
    """``passes.UserPass.rows`` and ``UserPass.vectors`` of every user of the batch, in one
    query: each live truth's row and its embedding in pgvector's binary form
    (``vectors.users_vectors``). For users of at most ``vectors.FETCH_ROWS`` truths in all
    (``dispatch.user_batches`` keeps a task's users under it). One query instead of two
    saved 0.18 ms a user of 100 truths (1.08 against 1.26 ms, median of five rounds of 500
    users, 4 December 2026)."""
    rows: dict[int, list[passes.PassRow]] = defaultdict(list)
    owners: list[int] = []
    ids: list[int] = []
    raws: list[Any] = []
    read = passes.pass_rows(Truth.objects.filter(user_id__in=list(user_ids)), by_user=True)
    read = read.annotate(raw=vectors.binary_embedding()).values_list("user_id", *passes.PASS_FIELDS, "raw")
    # In PostgreSQL's binary format where it gives the ORM's values: the rows' part took 0.4
    # ms a user of 100 truths against 1.2 through the ORM (3 December 2026).
    for row in passes.read_rows(read):
        rows[row[0]].append(passes.PassRow._make(row[1:-1]))
        if row[-1] is not None:
            owners.append(row[0])
            ids.append(row[1])
            raws.append(row[-1])
    return rows, vectors.users_vectors(owners, ids, raws)


def _insert_results(results: Sequence[StageResult]) -> None:
    """Insert ``results`` with PostgreSQL's ``COPY`` (psycopg 3), else ``bulk_create``.

    A batch's results carry the findings of every user (a decay report lists up to
    ``StageResult.MAX_FINDINGS`` truths each): for 350 results of 530 KB, ``bulk_create``
    took 60 ms here (its ``UNNEST`` arrays are escaped quote by quote in Python) and
    ``COPY`` 14 ms (3 December 2026). The caller leaves out the results a user had
    recorded before the batch read them; a row recorded since (another delivery of the same
    user meanwhile) is an ``IntegrityError``, unlike ``flush``'s insert: the batch is then
    rolled back and planned one user at a time (``build_user_plans``). Execute wrappers
    do not see the ``COPY``."""
    if not results:
        return
    fields = [f for f in StageResult._meta.concrete_fields if not f.primary_key]
    if not vectors.is_psycopg3(connection):
        StageResult.objects.bulk_create(list(results))
        return
    table = connection.ops.quote_name(StageResult._meta.db_table)
    columns = ", ".join(connection.ops.quote_name(f.column) for f in fields)
    prepare = [_copy_preparer(f) for f in fields]
    values_of = operator.attrgetter(*(f.attname for f in fields))
    # psycopg's own errors become Django's (an ``IntegrityError`` on a row already there).
    with connection.cursor() as cursor, connection.wrap_database_errors:
        with cursor.cursor.copy(f"COPY {table} ({columns}) FROM STDIN") as copy:
            for result in results:
                copy.write_row([value if how is None else how(value)
                                for how, value in zip(prepare, values_of(result), strict=True)])


#: Key field classes (exactly these: a subclass may prepare its values in its own way) whose
#: foreign keys ``_copy_preparer`` writes as the target field's values.
_PLAIN_KEYS = (models.AutoField, models.BigAutoField, models.SmallAutoField, models.IntegerField,
               models.BigIntegerField, models.UUIDField)

#: Field classes whose values psycopg writes as Django would prepare them on PostgreSQL
#: (``get_db_prep_save`` returns text, UUIDs and aware datetimes unchanged there; numbers
#: go through ``int`` and ``float``, as its ``get_prep_value`` does).
_AS_IS = (models.CharField, models.TextField, models.BooleanField, models.UUIDField, models.DateTimeField)


def _copy_preparer(field: Any) -> Callable[[Any], Any] | None:
    """How ``field``'s values are written in a text ``COPY``: JSON as the text
    ``json.dumps`` gives (what Django's ``JSONField`` sends, without its adapter, which
    psycopg dumps again), numbers through ``int`` or ``float``, None for a value written
    as is (``_AS_IS``), a foreign key's (not null, to a ``_PLAIN_KEYS`` field) as its target
    field's, else Django's ``get_db_prep_save`` (the user model's key may be a host
    project's own field type). Chosen once per field, not once per value: the batch's
    insert took 0.50-0.52 against 0.57-0.60 ms a user of 100 truths (best of 12, three
    times, on a loaded machine, 4 December 2026)."""
    if isinstance(field, JSONField):
        encoder = field.encoder
        return lambda value: None if value is None else json.dumps(value, cls=encoder)
    if field.many_to_one and not field.null and type(field.target_field) in _PLAIN_KEYS:
        return _copy_preparer(field.target_field)  # its target's value (``ForeignKey.get_db_prep_save``)
    if not field.is_relation:
        if isinstance(field, (models.IntegerField, models.FloatField)):
            number = int if isinstance(field, models.IntegerField) else float
            return number if not field.null else (lambda value: None if value is None else number(value))
        if isinstance(field, _AS_IS):
            return None
    return lambda value: field.get_db_prep_save(value, connection)
