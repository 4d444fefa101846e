"""Reads that span models: users to consolidate, lineage, undo steps, run reviews.

Selectors return querysets, ids or small frozen dataclasses; they never write.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.contenttypes.models import ContentType
from django.core.cache.backends.dummy import DummyCache
from django.core.cache.backends.locmem import LocMemCache
from django.core.exceptions import ValidationError
from django.db import connection
from django.db.models import (
    Case,
    Count,
    Exists,
    IntegerField,
    Model,
    OuterRef,
    Prefetch,
    Q,
    QuerySet,
    Value,
    When,
)
from django.db.models.expressions import RawSQL
from django.utils import timezone
from django_q.brokers import Broker, get_broker
from django_q.models import Schedule
from django_q.status import Stat

from .choices import WEEKLY_SCHEDULE
from .conf import app_settings
from .exceptions import UnknownUser
from .llm.base import truth_names, with_truth_numbers
from .models import (
    ClusterReview,
    ConsolidationJob,
    ConsolidationRun,
    LineageEvent,
    Origin,
    RetiredReason,
    RunId,
    ScheduleLock,
    Truth,
    TruthChange,
)

UNKNOWN_USER = "No user has the id or username {value!r}. Check the value, e.g. with export_truths."


# --- users: only through the user model's own API (AUTH_USER_MODEL may be any model) ----


def user_name_lookup(prefix: str = "user") -> str:
    """ORM path from a model's ``prefix`` foreign key to the user's ``USERNAME_FIELD``,
    e.g. ``"user__username"``, or ``"user__email"`` for a user model keyed by email."""
    return f"{prefix}__{get_user_model().USERNAME_FIELD}"


def user_search_fields(prefix: str = "user") -> list[str]:
    """Admin search paths for a model's users: their ``USERNAME_FIELD`` and, where the
    user model has one, its email field (``get_email_field_name()``)."""
    User = get_user_model()
    names = [User.USERNAME_FIELD]
    email = User.get_email_field_name() if hasattr(User, "get_email_field_name") else None
    if email and email not in names and any(f.name == email for f in User._meta.get_fields()):
        names.append(email)
    return [f"{prefix}__{name}" for name in names]


def username_max_length() -> int | None:
    """``max_length`` of the user model's ``USERNAME_FIELD`` (150 for Django's user)."""
    User = get_user_model()
    return getattr(User._meta.get_field(User.USERNAME_FIELD), "max_length", None)


def named_users(ids: Iterable[int]) -> list[str]:
    """``"<natural key> (#<id>)"`` per id, in the given order, through ``get_username()``;
    an id no user has reads ``"#<id> (no such user)"``."""
    ids = list(ids)
    users = get_user_model()._default_manager.in_bulk(ids)
    return [f"{users[pk].get_username()} (#{pk})" if pk in users else f"#{pk} (no such user)" for pk in ids]


def get_user(*, value: str | int) -> Model:
    """The user whose primary key or natural key (``USERNAME_FIELD``) is ``value``.

    A primary key wins over a natural key of the same text. Raises ``UnknownUser``.
    """
    User = get_user_model()
    text = str(value).strip()
    try:
        pk = User._meta.pk.to_python(text)
    except (ValidationError, ValueError, TypeError):
        pk = None
    if pk is not None:
        user = User._default_manager.filter(pk=pk).first()
        if user is not None:
            return user
    try:
        return User._default_manager.get_by_natural_key(text)
    except User.DoesNotExist:
        raise UnknownUser(UNKNOWN_USER.format(value=text)) from None


def list_user_ids_to_consolidate(*, user_id: int | None, max_generation: int, min_truths: int = 2) -> list[int]:
    """Ids of users with at least ``min_truths`` consolidatable truths, ascending (or just
    ``user_id``). Two make a cluster; one is enough when a per-truth stage runs (noise,
    decay, prune: a user with a single truth still has it decayed, pruned, noise-checked)."""
    qs = Truth.objects.consolidatable(max_generation=max_generation)
    if user_id is not None:
        qs = qs.filter(user_id=user_id)
    counts = qs.values("user_id").annotate(n=Count("id")).filter(n__gte=min_truths).order_by("user_id")
    return list(counts.values_list("user_id", flat=True))


# --- lineage -----------------------------------------------------------------------

#: Deepest walk of a lineage, in steps. Merges stop at generation 5 (MAX_GENERATION),
#: but chains of supersedes keep a truth's generation, so the walk has its own bound.
LINEAGE_MAX_DEPTH = 64

_WALK_SQL = """
WITH RECURSIVE walk(id, next_id, depth) AS (
    SELECT e.id, e.{step_from}, 1 FROM {table} e
    WHERE e.{step_to} = %s AND e.action IN ('merge', 'supersede')
  UNION
    SELECT e.id, e.{step_from}, w.depth + 1 FROM {table} e
    JOIN walk w ON e.{step_to} = w.next_id
    WHERE e.action IN ('merge', 'supersede') AND w.depth < %s
)
SELECT id FROM walk
"""


@dataclass(frozen=True, kw_only=True)
class LineageGraph:
    """A truth's lineage as recorded facts (no formatting).

    ``ancestry``: merge and supersede events into ``root`` and, transitively, into its
    sources, down to generation 0. ``forward``: merge and supersede events out of
    ``root`` and onwards (what it became). ``undos``: undo events touching any truth
    of either. Events are ordered oldest first and carry ``source``, ``result`` and
    ``review`` (with ``review.run``) already loaded. Every truth belongs to
    ``root``'s user.
    """

    root: Truth
    ancestry: tuple[LineageEvent, ...]
    forward: tuple[LineageEvent, ...]
    undos: tuple[LineageEvent, ...]


def _walk(*, root: Truth, backwards: bool, max_depth: int) -> list[LineageEvent]:
    table = connection.ops.quote_name(LineageEvent._meta.db_table)
    sql = _WALK_SQL.format(
        table=table,
        step_to="result_id" if backwards else "source_id",
        step_from="source_id" if backwards else "result_id",
    )
    return list(
        LineageEvent.objects.filter(pk__in=RawSQL(sql, [root.pk, max_depth]))
        # Never show another user's truth, even if a row were to link across users.
        .filter(source__user_id=root.user_id, result__user_id=root.user_id)
        .select_related("source", "result", "review", "review__run")
        .defer("source__embedding", "result__embedding", "review__raw_response", "review__decision")
        .order_by("created_at", "id")
    )


def get_lineage(*, truth: Truth, max_depth: int = LINEAGE_MAX_DEPTH) -> LineageGraph:
    """The lineage of ``truth``: ancestors to generation 0, descendants, undos.

    Queries: three, whatever the size (two recursive CTEs and one for undo events).
    ``max_depth`` bounds each walk in steps (cycles can only appear after undos and
    are cut there). Reads only.
    """
    ancestry = _walk(root=truth, backwards=True, max_depth=max_depth)
    forward = _walk(root=truth, backwards=False, max_depth=max_depth)
    ids = {truth.pk}
    for event in (*ancestry, *forward):
        ids.update((event.source_id, event.result_id))
    undos = list(
        LineageEvent.objects.filter(action=LineageEvent.Action.UNDO)
        .filter(Q(source_id__in=ids) | Q(result_id__in=ids))
        .filter(source__user_id=truth.user_id, result__user_id=truth.user_id)
        .select_related("source", "result")
        .defer("source__embedding", "result__embedding")
        .order_by("created_at", "id")
    )
    return LineageGraph(root=truth, ancestry=tuple(ancestry), forward=tuple(forward), undos=tuple(undos))


# --- undo --------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class UndoStep:
    """One consolidation step into ``truth`` that is still in force.

    ``events``: the merge or supersede events of one review whose sources are still
    retired into ``truth``. ``creates_truth``: whether that review made ``truth``
    (a merge result), in which case undoing it retires ``truth``.
    """

    truth: Truth
    review: ClusterReview | None
    events: tuple[LineageEvent, ...]
    creates_truth: bool

    @property
    def source_ids(self) -> tuple[int, ...]:
        return tuple(sorted(e.source_id for e in self.events))

    @property
    def reasoning(self) -> str:
        """The review's reasoning with truth numbers for its call's aliases ("" without a review)."""
        if self.review is None:
            return ""
        return with_truth_numbers(self.review.reasoning, truth_names(self.review.snapshot))

    @property
    def action(self) -> str:
        """merge or supersede; ``restore`` for a noise or prune retirement (no events)."""
        return self.events[0].action if self.events else "restore"


def list_undo_steps(*, truth: Truth) -> list[UndoStep]:
    """The steps into ``truth`` that an undo could reverse, latest first (one query).

    A step is in force while its sources are still retired into ``truth``; the
    latest one is the only one an undo of ``truth`` may reverse.
    """
    events = (
        LineageEvent.objects.filter(result_id=truth.pk)
        .filter(action__in=[LineageEvent.Action.MERGE, LineageEvent.Action.SUPERSEDE])
        .filter(source__superseded_by_id=truth.pk, source__retired_at__isnull=False)
        .exclude(source__retired_reason=RetiredReason.UNDONE)
        .select_related("source", "review")
        .defer("source__embedding", "review__raw_response", "review__decision")
        .order_by("-created_at", "-id")
    )
    grouped: dict[int | None, list[LineageEvent]] = {}
    for event in events:
        grouped.setdefault(event.review_id, []).append(event)
    steps = []
    for group in grouped.values():
        review = group[0].review
        if review is not None:
            creates = truth.pk not in {int(row["id"]) for row in review.snapshot}
        else:
            creates = truth.origin == Origin.CONSOLIDATED and all(e.action == LineageEvent.Action.MERGE for e in group)
        steps.append(UndoStep(truth=truth, review=review, events=tuple(group), creates_truth=creates))
    return steps


def has_consolidation_history(*, truth: Truth) -> bool:
    """Whether any merge or supersede ever led into ``truth`` (undone or not)."""
    return (
        LineageEvent.objects.filter(result_id=truth.pk)
        .exclude(action=LineageEvent.Action.UNDO)
        .exists()
    )


# --- runs and reviews --------------------------------------------------------------


#: The run page lists changes first, then what stopped them, and the kept clusters last:
#: an operator deciding whether to trust a pass reads what it did.
REVIEW_ORDER = (
    ClusterReview.Outcome.APPLIED,
    ClusterReview.Outcome.PREVIEW,
    ClusterReview.Outcome.REJECTED,
    ClusterReview.Outcome.FAILED,
    ClusterReview.Outcome.STALE,
    ClusterReview.Outcome.KEPT,
)


def list_run_reviews(*, run: ConsolidationRun, outcome: str | None = None) -> QuerySet[ClusterReview]:
    """The run's reviews in ``REVIEW_ORDER`` of outcome, then oldest first, each with
    ``undo_events`` prefetched (one extra query).

    ``outcome``: one of ``ClusterReview.Outcome`` to filter by, or None for all.
    """
    reviews = ClusterReview.objects.filter(run=run).select_related("user").defer("raw_response", "decision")
    if outcome:
        reviews = reviews.filter(outcome=outcome)
    rank = Case(
        *(When(outcome=value, then=Value(i)) for i, value in enumerate(REVIEW_ORDER)),
        default=Value(len(REVIEW_ORDER)),
        output_field=IntegerField(),
    )
    return reviews.order_by(rank, "created_at", "id").prefetch_related(
        Prefetch(
            "events",
            queryset=LineageEvent.objects.filter(action=LineageEvent.Action.UNDO).order_by("created_at", "id"),
            to_attr="undo_events",
        )
    )


def count_reviews_by_outcome(*, run: ConsolidationRun) -> dict[str, int]:
    """``{outcome: count}`` of the run's reviews (one query)."""
    rows = ClusterReview.objects.filter(run=run).values("outcome").annotate(n=Count("id")).order_by()
    return {row["outcome"]: row["n"] for row in rows}


def get_review_undo_events(*, review: ClusterReview) -> list[LineageEvent]:
    """Undo events that reversed (part of) ``review``, oldest first."""
    return list(review.events.filter(action=LineageEvent.Action.UNDO).order_by("created_at", "id"))


def get_application(*, run: ConsolidationRun) -> ConsolidationRun | None:
    """The run that applied the dry run ``run``'s verdicts, if any."""
    return run.applications.order_by("created_at").first()


def list_previews(*, run: ConsolidationRun) -> QuerySet[ClusterReview]:
    """Dry run ``run``'s previewed clusters (outcome preview), in the order they were
    recorded, with their users (what applying it applies; ``dry_runs.stale_previews``)."""
    previews = ClusterReview.objects.filter(run=run, outcome=ClusterReview.Outcome.PREVIEW)
    return previews.select_related("user").order_by("id")


def list_application_refusals(*, application: ConsolidationRun) -> QuerySet[ClusterReview]:
    """The reviews of ``application`` (the run that applied a dry run) where something was
    refused or failed: an action refused (stale member, cap, an invariant) or a failed
    cluster, in the order they were recorded."""
    return (
        ClusterReview.objects.filter(run=application)
        .filter(~Q(rejections=[]) | ~Q(error=""))
        .defer("raw_response", "decision")
        .order_by("id")
    )


@dataclass(frozen=True, kw_only=True)
class RunProgress:
    """A run with its jobs counted by status (queued, running, waiting, done, failed) and
    the phase 1 progress of its large users (``(user id, note)``)."""

    run: ConsolidationRun
    jobs: dict[str, int]
    phase1: tuple[tuple[int, str], ...] = ()


@dataclass(frozen=True, kw_only=True)
class ConsolidationStatus:
    """What ``consolidation_status`` shows: the last run, the next scheduled one, the runs
    in flight with their jobs, runs counted by status, and the no-overlap lock."""

    last_run: ConsolidationRun | None
    next_due: datetime | None
    cron: str
    in_flight: tuple[RunProgress, ...]
    runs_by_status: dict[str, int]
    lock_run_id: RunId | None = None
    lock_expires_at: datetime | None = None
    #: The workers and jobs (``get_queue_overview``), and the runs in flight that wait
    #: for a worker (``is_waiting_for_worker``).
    queue: Any = None
    waiting_for_worker: frozenset[Any] = frozenset()


def get_run_progress(*, run: ConsolidationRun) -> RunProgress:
    """``run``, its jobs counted by status, and its large users' phase 1 progress."""
    jobs = ConsolidationJob.objects.in_run(run.pk)
    return RunProgress(
        run=run,
        jobs=jobs.counts_by_status(),
        phase1=tuple(jobs.phase1_progress()),
    )


def get_consolidation_status() -> ConsolidationStatus:
    """The queue's state for operators; reads only (two queries per run in flight)."""
    weekly = Schedule.objects.filter(name=WEEKLY_SCHEDULE).order_by("id").first()
    counts = dict(ConsolidationRun.objects.values_list("status").annotate(n=Count("id")).order_by())
    lock = ScheduleLock.objects.filter(name=ScheduleLock.SCHEDULED_RUNS).first()
    in_flight = tuple(
        get_run_progress(run=run) for run in ConsolidationRun.objects.in_progress().order_by("created_at")
    )
    queue = get_queue_overview()
    return ConsolidationStatus(
        last_run=ConsolidationRun.objects.order_by("-created_at").first(),
        next_due=weekly.next_run if weekly is not None else None,
        cron=weekly.cron if weekly is not None else app_settings.SCHEDULE_CRON,
        in_flight=in_flight,
        runs_by_status={status: int(counts.get(status, 0)) for status in ConsolidationRun.Status.values},
        lock_run_id=lock.run_id if lock is not None else None,
        lock_expires_at=lock.expires_at if lock is not None and lock.run_id else None,
        queue=queue,
        waiting_for_worker=frozenset(
            p.run.pk for p in in_flight if is_waiting_for_worker(run=p.run, overview=queue)
        ),
    )


# --- the truth admin's history, dates and user picker -----------------------


@dataclass(frozen=True, kw_only=True)
class TruthHistory:
    """Everything recorded about one truth, each list oldest first.

    ``changes``: its ``TruthChange`` audit rows (with ``review`` and ``run`` loaded);
    ``events``: lineage events into or out of it (merge, supersede, undo; with
    ``source``, ``result`` and ``review`` loaded); ``edits``: the admin's ``LogEntry``
    rows for it (with ``user`` loaded).
    """

    truth: Truth
    changes: tuple[Any, ...]
    events: tuple[LineageEvent, ...]
    edits: tuple[Any, ...]


def get_truth_history(*, truth: Truth) -> TruthHistory:
    """The history of ``truth`` (three queries); reads only."""
    # Here, not at the top: only the admin's history reads it, and a host project may
    # leave django.contrib.admin out of INSTALLED_APPS (its models cannot load then).
    from django.contrib.admin.models import LogEntry

    changes = (
        TruthChange.objects.filter(truth_id=truth.pk)
        .select_related("review", "run")
        # The snapshot names a review's aliases: rows recorded with them are shown with truth numbers.
        .defer("review__raw_response", "review__decision")
        .order_by("created_at", "id")
    )
    events = (
        LineageEvent.objects.filter(Q(source_id=truth.pk) | Q(result_id=truth.pk))
        .filter(source__user_id=truth.user_id, result__user_id=truth.user_id)
        .select_related("source", "result", "review")
        .defer("source__embedding", "result__embedding", "review__raw_response", "review__decision")
        .order_by("created_at", "id")
    )
    edits = (
        LogEntry.objects.filter(
            content_type=ContentType.objects.get_for_model(Truth, for_concrete_model=False),
            object_id=str(truth.pk),
        )
        .select_related("user")
        .order_by("action_time", "id")
    )
    return TruthHistory(truth=truth, changes=tuple(changes), events=tuple(events), edits=tuple(edits))


def get_made_at(*, truth: Truth) -> datetime | None:
    """When ``truth``'s row was made: its first audit row, else the first merge or
    supersede into it (one or two queries), else None (a truth older than the audit).

    ``Truth.created_at`` is when the user last stated it (a consolidated truth takes
    its newest source's date, which supersede compares), so it is not this.
    """
    audit = TruthChange.objects.filter(truth_id=truth.pk).order_by("created_at", "id")
    first = audit.values_list("created_at", flat=True).first()
    if first is not None:
        return first
    return (
        LineageEvent.objects.filter(result_id=truth.pk)
        .exclude(action=LineageEvent.Action.UNDO)
        .order_by("created_at", "id")
        .values_list("created_at", flat=True)
        .first()
    )


#: Most usernames the truth list's user filter suggests at once.
USER_SUGGESTIONS = 20


def list_usernames_with_truths(*, term: str, limit: int = USER_SUGGESTIONS) -> list[str]:
    """Usernames (``USERNAME_FIELD``) of users who have truths, containing ``term``
    (case-insensitive), sorted, at most ``limit`` (one query)."""
    User = get_user_model()
    field = User.USERNAME_FIELD
    users = User.objects.filter(Exists(Truth.all_objects.filter(user_id=OuterRef("pk"))))
    if term.strip():
        users = users.filter(**{f"{field}__icontains": term.strip()})
    return [str(name) for name in users.order_by(field).values_list(field, flat=True)[:limit]]


def list_allowed_usernames(*, settings: Any) -> list[str]:
    """Usernames of the live settings record's allowed users, sorted (one query)."""
    field = get_user_model().USERNAME_FIELD
    return sorted(str(n) for n in settings.allowed_users.values_list(field, flat=True))


def get_users_by_username(*, names: list[str]) -> tuple[list[Model], list[str]]:
    """The users named ``names`` (by ``USERNAME_FIELD``) and the names that match no
    user, in the order given (one query; none if ``names`` is empty)."""
    if not names:
        return [], []
    User = get_user_model()
    field = User.USERNAME_FIELD
    found = {str(getattr(u, field)): u for u in User.objects.filter(**{f"{field}__in": names})}
    return [found[n] for n in names if n in found], [n for n in names if n not in found]


# --- workers and jobs: the console's queue view ------------------------------

#: Seconds a queued job may wait before its run counts as waiting for a worker when the
#: workers' heartbeat cannot be read (``heartbeat_visible``): a live worker polls the ORM
#: broker every second or so, so this is generous. With the heartbeat visible a run
#: waits as soon as no qcluster is alive.
WORKER_GRACE_SECONDS = 30
#: A qcluster's status once it stopped (django-q2's ``Conf.STOPPED``): its last heartbeat, not a live worker.
STOPPED = "Stopped"


@dataclass(frozen=True, kw_only=True)
class WorkerCluster:
    """One running ``qcluster`` as django-q2 reports it (``django_q.status.Stat``)."""

    cluster_id: str
    host: str
    status: str
    workers: int
    uptime_seconds: float


@dataclass(frozen=True, kw_only=True)
class QueueOverview:
    """What the workers are doing, for the run list and ``consolidation_status``.

    ``clusters``: the live qclusters, from the heartbeat django-q2's sentinel saves every
    half second with a 3 s expiry (``Stat.get_all``); ``heartbeat``: whether that
    heartbeat can be read here at all (``heartbeat_visible``: False when django-q2 keeps
    it in a per-process cache, so no worker could ever be seen); ``jobs``: jobs of runs
    in progress by status (queued, running, waiting) plus failed jobs of any run but a
    cancelled one (what "retry failed clusters" would re-queue); ``done_last_hour``:
    jobs of queued runs that workers finished in the last hour (throughput; in-process
    jobs are no worker's). No job timestamp says whether a worker is alive: a cancel
    closes jobs too, and an idle worker touches none.
    """

    clusters: tuple[WorkerCluster, ...]
    heartbeat: bool
    jobs: dict[str, int]
    done_last_hour: int

    @property
    def worker_seen(self) -> bool:
        """Whether a live qcluster reports its heartbeat."""
        return bool(self.clusters)

    @property
    def no_worker(self) -> bool:
        """Whether it is known that no worker runs: the heartbeat is readable and none beats."""
        return self.heartbeat and not self.clusters


def heartbeat_visible() -> bool:
    """Whether the workers' heartbeat (django-q2's cluster statistics) reaches this process.

    A broker with a store of its own (Redis) shares it; the ORM broker keeps it in the
    Django cache ``Q_CLUSTER["cache"]`` (default "default"), which reaches other
    processes unless it is a per-process one (local memory) or none (dummy).
    """
    try:
        broker = get_broker()
    except Exception:  # a broker that cannot be built shows no heartbeat
        return False
    if type(broker).get_stats is not Broker.get_stats:
        return True
    return broker.cache is not None and not isinstance(broker.cache, (LocMemCache, DummyCache))


def _django_q_clusters() -> tuple[WorkerCluster, ...]:
    try:
        stats = Stat.get_all()
    except Exception:  # a broker or cache that cannot be reached reports no cluster
        return ()
    return tuple(
        WorkerCluster(
            cluster_id=str(s.cluster_id),
            host=str(s.host),
            status=str(s.status),
            workers=len(s.workers or ()),
            uptime_seconds=s.uptime() if s.tob else 0.0,
        )
        for s in stats
        if str(s.status) != STOPPED
    )


def get_queue_overview(*, now: datetime | None = None) -> QueueOverview:
    """Workers alive (their heartbeat), jobs waiting, running and failed, throughput (one
    query plus django-q2's statistics); reads only."""
    now = now or timezone.now()
    status = ConsolidationJob.Status
    in_flight = Q(run__status__in=[ConsolidationRun.Status.PENDING, ConsolidationRun.Status.RUNNING])
    by_workers = Q(run__execution=ConsolidationRun.Execution.QUEUED)
    row = ConsolidationJob.objects.aggregate(
        queued=Count("id", filter=in_flight & Q(status=status.QUEUED)),
        running=Count("id", filter=in_flight & Q(status=status.RUNNING)),
        waiting=Count("id", filter=in_flight & Q(status=status.WAITING)),
        # A cancelled run's jobs were closed unrun: not failures, nothing to retry.
        failed=Count("id", filter=Q(status=status.FAILED) & ~Q(run__status=ConsolidationRun.Status.CANCELLED)),
        # Workers' throughput: in-process jobs beside "no worker seen" read as a contradiction.
        done_last_hour=Count(
            "id", filter=by_workers & Q(status=status.DONE, finished_at__gte=now - timedelta(hours=1))
        ),
    )
    return QueueOverview(
        clusters=_django_q_clusters(),
        heartbeat=heartbeat_visible(),
        jobs={name: int(row[name]) for name in ("queued", "running", "waiting", "failed")},
        done_last_hour=int(row["done_last_hour"]),
    )


def worker_grace_seconds(overview: QueueOverview) -> int:
    """Seconds a queued job waits before its run counts as waiting for a worker: none when
    the heartbeat says no worker runs, ``WORKER_GRACE_SECONDS`` when it cannot be read."""
    return 0 if overview.heartbeat else WORKER_GRACE_SECONDS


def is_waiting_for_worker(*, run: ConsolidationRun, overview: QueueOverview, now: datetime | None = None) -> bool:
    """Whether ``run`` is in progress with jobs queued while no worker is alive (at once
    when the heartbeat is readable, else past ``WORKER_GRACE_SECONDS``; one query).

    A run in progress with no ``qcluster`` alive used to show "Running" for ever; this
    is what the run page and ``consolidation_status`` say instead.
    """
    if run.status not in (ConsolidationRun.Status.PENDING, ConsolidationRun.Status.RUNNING) or overview.worker_seen:
        return False
    if run.execution != ConsolidationRun.Execution.QUEUED:
        return False  # its jobs run in the process that started it
    now = now or timezone.now()
    return ConsolidationJob.objects.filter(
        run=run,
        status=ConsolidationJob.Status.QUEUED,
        created_at__lte=now - timedelta(seconds=worker_grace_seconds(overview)),
    ).exists()


def _retryable_failed_jobs() -> QuerySet[ConsolidationJob]:
    # A cancelled run's jobs were closed unrun (as failed, with the cancel's note): nothing to retry.
    return ConsolidationJob.objects.filter(status=ConsolidationJob.Status.FAILED).exclude(
        run__status=ConsolidationRun.Status.CANCELLED
    )


def count_failed_jobs(*, run: ConsolidationRun) -> int:
    """Failed jobs of ``run``: what "retry failed clusters" re-queues; 0 for a cancelled run (one query)."""
    if run.status == ConsolidationRun.Status.CANCELLED:
        return 0
    return ConsolidationJob.objects.filter(run=run, status=ConsolidationJob.Status.FAILED).count()


def count_failed_jobs_by_run(*, runs: list[ConsolidationRun]) -> dict[Any, int]:
    """``{run id: failed jobs}`` for ``runs`` (``count_failed_jobs`` for each, in one query)."""
    rows = _retryable_failed_jobs().filter(run__in=runs).values("run_id").annotate(n=Count("id")).order_by()
    return {row["run_id"]: row["n"] for row in rows}


def list_failure_causes(*, run: ConsolidationRun, limit: int = 3) -> list[tuple[str, int, str]]:
    """Why ``run``'s work failed: ``(error, count, "cluster")`` of its failed reviews, the
    commonest ``limit`` first; else ``(error, count, "job")`` of its failed jobs (a phase 1
    that failed). Two queries at most."""
    rows = (
        ClusterReview.objects.filter(run=run, outcome=ClusterReview.Outcome.FAILED)
        .exclude(error="")
        .values("error")
        .annotate(n=Count("id"))
        .order_by("-n", "error")[:limit]
    )
    causes = [(row["error"], row["n"], "cluster") for row in rows]
    if causes or run.status == ConsolidationRun.Status.CANCELLED:
        return causes
    jobs = (
        ConsolidationJob.objects.filter(run=run, status=ConsolidationJob.Status.FAILED)
        .exclude(error="")
        .values("error")
        .annotate(n=Count("id"))
        .order_by("-n", "error")[:limit]
    )
    return [(row["error"], row["n"], "job") for row in jobs]


def count_run_jobs(*, run: ConsolidationRun) -> int:
    """Every job of ``run``, whatever its status (one query)."""
    return ConsolidationJob.objects.filter(run=run).count()
