"""The queue as operators see it: workers alive (django-q2's heartbeat), jobs by status, runs
waiting for a worker, and what ``consolidation_status`` shows.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.core.cache.backends.dummy import DummyCache
from django.core.cache.backends.locmem import LocMemCache
from django.db.models import (
    Count,
    Q,
)
from django.utils import timezone
from django_q.brokers import Broker, get_broker
from django_q.models import Schedule
from django_q.status import Stat

from ..choices import WEEKLY_SCHEDULE
from ..conf import app_settings
from ..models import (
    ConsolidationJob,
    ConsolidationRun,
    RunId,
    ScheduleLock,
)

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


# --- what consolidation_status shows ------------------------------------------


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
