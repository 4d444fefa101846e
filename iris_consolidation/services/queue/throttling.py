"""A rate limit shared by every worker on every machine, kept in the database.

A sliding-window log: the limit's row (``RateLimitWindow``) holds the start times of
the calls inside the current window. ``acquire`` locks the row, forgets starts older
than the window, and either records a new start (at most ``limit`` in any ``period``
seconds) or says how long to wait for room. Times come from PostgreSQL's clock
(``clock_timestamp()``), one clock for all machines. Nothing lives in process memory,
so a limit holds across qcluster processes, hosts and restarts.
"""

from __future__ import annotations

from django.db import connection, transaction

from ...models import RateLimitWindow

#: The limit cluster (judge) tasks share (IRIS_CONSOLIDATION_JOBS_PER_MINUTE).
CLUSTER_JOBS = "cluster-jobs"
#: Seconds a start stays counted beyond the period: the time between taking a start
#: and the request reaching the provider (a worker's first litellm call spends about
#: 0.4 s setting up its client, measured here), so the provider never sees more than
#: ``limit`` calls in a period.
START_MARGIN = 1.0


def _database_clock() -> float:
    with connection.cursor() as cursor:
        cursor.execute("SELECT extract(epoch FROM clock_timestamp())")
        return float(cursor.fetchone()[0])


def acquire(*, name: str, limit: int, period: float, now: float | None = None) -> float:
    """Take one start under the limit ``name``; returns 0.0 if taken, else seconds to wait.

    ``limit`` starts per ``period`` seconds in any window; ``limit <= 0`` means no limit.
    ``now`` (epoch seconds) defaults to the database clock. A start stays counted for
    ``period + START_MARGIN`` seconds. Transaction: one short one holding the limit's
    row lock; no network call inside it.
    """
    if limit <= 0:
        return 0.0
    period += START_MARGIN
    RateLimitWindow.objects.get_or_create(name=name)
    with transaction.atomic():
        window = RateLimitWindow.objects.select_for_update().get(name=name)
        # Read the clock after the lock: another worker may have waited on it.
        moment = _database_clock() if now is None else now
        starts = [t for t in window.starts if t > moment - period]
        if len(starts) < limit:
            starts.append(moment)
            wait = 0.0
        else:
            # Room appears when the oldest of the last ``limit`` starts leaves the window.
            wait = max(0.001, starts[len(starts) - limit] + period - moment)
        window.starts = starts
        window.save(update_fields=["starts"])
    return wait


def charge(*, name: str, count: int, now: float | None = None) -> None:
    """Record ``count`` starts under the limit ``name`` now, without waiting: model calls a
    task made beyond the one start it took (a reply split and asked again), so the window
    counts every call the provider saw."""
    if count <= 0:
        return
    RateLimitWindow.objects.get_or_create(name=name)
    with transaction.atomic():
        window = RateLimitWindow.objects.select_for_update().get(name=name)
        moment = _database_clock() if now is None else now
        window.starts = [*window.starts, *([moment] * count)]
        window.save(update_fields=["starts"])


def recent_starts(*, name: str) -> list[float]:
    """Start times (epoch seconds) the limit ``name`` currently remembers."""
    window = RateLimitWindow.objects.filter(name=name).first()
    return list(window.starts) if window else []
