"""The jobs-per-minute limit kept in the database, with a controlled clock."""

from __future__ import annotations

import threading

import pytest
from django.db import connection

from iris_consolidation.services.queue import throttling

pytestmark = pytest.mark.django_db

SPAN = 60 + throttling.START_MARGIN  # how long a start stays counted with period 60


def test_limit_allows_that_many_starts_then_says_how_long_to_wait():
    waits = [throttling.acquire(name="t", limit=3, period=60, now=1000.0 + i) for i in range(4)]

    assert waits[:3] == [0.0, 0.0, 0.0]
    assert waits[3] == pytest.approx(1000.0 + SPAN - 1003.0)
    assert throttling.recent_starts(name="t") == [1000.0, 1001.0, 1002.0]


def test_a_start_leaves_the_window_after_the_period_and_margin():
    for i in range(3):
        throttling.acquire(name="t", limit=3, period=60, now=1000.0 + i)

    assert throttling.acquire(name="t", limit=3, period=60, now=1000.0 + SPAN - 0.01) > 0
    assert throttling.acquire(name="t", limit=3, period=60, now=1000.0 + SPAN + 0.01) == 0.0
    assert throttling.recent_starts(name="t") == [1001.0, 1002.0, 1000.0 + SPAN + 0.01]


def test_limits_are_kept_apart_by_name():
    throttling.acquire(name="a", limit=1, period=60, now=1000.0)

    assert throttling.acquire(name="b", limit=1, period=60, now=1000.0) == 0.0
    assert throttling.acquire(name="a", limit=1, period=60, now=1000.0) > 0


def test_zero_limit_means_no_limit():
    assert all(throttling.acquire(name="t", limit=0, period=60, now=1000.0) == 0.0 for _ in range(50))
    assert throttling.recent_starts(name="t") == []


@pytest.mark.django_db(transaction=True)
def test_concurrent_connections_never_take_more_than_the_limit():
    """Eight threads, each on its own database connection, race for 5 starts."""
    results: list[float] = []
    lock = threading.Lock()

    def worker() -> None:
        try:
            for _ in range(3):
                wait = throttling.acquire(name="race", limit=5, period=60)
                with lock:
                    results.append(wait)
        finally:
            connection.close()

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    assert len(results) == 24
    assert results.count(0.0) == 5
    assert all(0 < w <= SPAN for w in results if w)
