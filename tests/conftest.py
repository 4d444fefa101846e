"""Shared fixtures: network guard, sync queue, factories, controlled vectors, the LLM stub."""

from __future__ import annotations

import ipaddress
import os
import socket
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")  # live_server + Playwright's sync API

from tests.llm_stub import StubLLMServer  # noqa: E402

# The team's shared/ folder sits beside the repository (CI lays it out so); a worktree
# elsewhere points at it with IRIS_SHARED_DIR.
SHARED = Path(os.environ.get("IRIS_SHARED_DIR") or Path(__file__).resolve().parent.parent.parent / "shared")
NO_SHARED = f"needs the team's shared folder at {SHARED} (absent in a user's clone)"

_real_connect = socket.socket.connect
_real_connect_ex = socket.socket.connect_ex


def _check_address(sock: socket.socket, address: Any) -> None:
    if sock.family == getattr(socket, "AF_UNIX", None):
        return
    host = address[0] if isinstance(address, tuple) else address
    try:
        if ipaddress.ip_address(host).is_loopback:
            return
    except ValueError:
        if host in ("localhost",):
            return
    raise RuntimeError(f"Test tried to reach {address!r}: tests may only talk to 127.0.0.1 / ::1.")


@pytest.fixture(autouse=True)
def _no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any connection to a non-loopback address fails the test."""

    def connect(self: socket.socket, address: Any) -> Any:
        _check_address(self, address)
        return _real_connect(self, address)

    def connect_ex(self: socket.socket, address: Any) -> Any:
        _check_address(self, address)
        return _real_connect_ex(self, address)

    monkeypatch.setattr(socket.socket, "connect", connect)
    monkeypatch.setattr(socket.socket, "connect_ex", connect_ex)


@pytest.fixture(autouse=True)
def q_sync(monkeypatch: pytest.MonkeyPatch) -> None:
    """django-q2 runs tasks in process (Conf is frozen at import; patch it, as django-q2's tests do)."""
    from django_q.conf import Conf

    monkeypatch.setattr(Conf, "SYNC", True)


@pytest.fixture(autouse=True, scope="session")
def _faiss_on_one_thread() -> None:
    """faiss (phase 1's approximate path) on one OpenMP thread for the whole session.

    Its results do not depend on the thread count, and OpenMP's idle threads spin while
    they wait for work: on a machine whose cores are busy with other processes (a shared
    machine, CI), a search of many small steps then takes several times as long with two
    threads as with one. faiss is an optional dependency: without it nothing is done.
    """
    try:
        import faiss
    except ImportError:
        return
    faiss.omp_set_num_threads(1)


@pytest.fixture(scope="session")
def _maintenance_connection(django_db_setup: Any, django_db_blocker: Any) -> Iterator[Any]:
    """An autocommit connection of its own to the test database (VACUUM cannot run in
    the test's transaction), opened on first use."""
    import psycopg
    from django.db import connection

    holder: dict[str, Any] = {}

    def get() -> Any:
        if "conn" not in holder:
            with django_db_blocker.unblock():
                holder["conn"] = psycopg.connect(database_url(connection.settings_dict), autocommit=True)
                # A lock the test holds (DDL in its transaction) fails the VACUUM instead of hanging the test.
                holder["conn"].execute("SET lock_timeout = '5s'")
        return holder["conn"]

    yield get
    if "conn" in holder:
        holder["conn"].close()


@pytest.fixture(autouse=True)
def _vacuumed_truths(request: pytest.FixtureRequest) -> Iterator[None]:
    """Clear the dead rows earlier tests left in the truth table before a test searches
    its HNSW index.

    Each test's rows are rolled back, but their entries stay in the HNSW index until
    a VACUUM, and tests reuse the same few controlled vectors: hundreds of dead
    duplicates then crowd the approximate search and a true neighbour is missed now
    and then. Production has autovacuum and real, varied embeddings. Only a query
    ordered by cosine distance (``<=>``: ``TruthQuerySet.nearest``, used by the API's
    search and mining's duplicate check) reads that index (phase 1 runs in memory), so a
    database test gets its VACUUM just before its first such query, from a connection of
    its own: VACUUM cannot run in the test's transaction, and beside it VACUUM still
    removes every row of a rolled-back test (rows of an aborted transaction are dead to
    every snapshot) and their index entries (``INDEX_CLEANUP ON``: never skipped for a
    few dead rows); ``TRUNCATE OFF`` because shortening the file would wait 5 s for the
    test's lock. A transactional test gets its VACUUM before it starts: its queries may
    come from other processes and threads (qcluster workers, the live server).
    """
    from pytest_django.fixtures import validate_django_db

    marker = request.node.get_closest_marker("django_db")
    if {"transactional_db", "live_server"} & set(request.fixturenames) or (
        marker is not None and validate_django_db(marker)[0]  # (transaction, reset_sequences, ...)
    ):
        request.getfixturevalue("_maintenance_connection")().execute(f'VACUUM "{_truth_table()}"')
        yield
        return
    if marker is None and "db" not in request.fixturenames:
        yield
        return
    from django.db import connection

    get = request.getfixturevalue("_maintenance_connection")
    vacuumed = False

    def vacuum_before_the_first_search(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        nonlocal vacuumed
        if not vacuumed and "<=>" in sql:
            vacuumed = True
            get().execute(f'VACUUM (INDEX_CLEANUP ON, TRUNCATE OFF) "{_truth_table()}"')
        return execute(sql, params, many, context)

    with connection.execute_wrapper(vacuum_before_the_first_search):
        yield


def _truth_table() -> str:
    from iris_consolidation.models import Truth

    return Truth._meta.db_table


class Clock:
    """``time.monotonic`` moved forward by hand: ``advance(seconds)`` is a wait that takes
    no time (see the ``clock`` fixture)."""

    def __init__(self, monotonic: Any) -> None:
        self._monotonic, self.skipped = monotonic, 0.0

    def __call__(self) -> float:
        return self._monotonic() + self.skipped

    def advance(self, seconds: float) -> None:
        self.skipped += seconds


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    """``time.monotonic`` for this test reads the real clock plus every ``advance``: a
    deadline in the code under test (an embedding share of a task's timeout) passes
    without a real wait. Code that took ``monotonic`` by name at import (``threading``,
    pytest's timing) keeps the real clock.
    """
    import time

    fake = Clock(time.monotonic)
    monkeypatch.setattr(time, "monotonic", fake)
    return fake


@pytest.fixture
def shared_dir() -> Path:
    """The team's shared/ folder; tests that need it skip in a user's clone."""
    if not SHARED.is_dir():
        pytest.skip(NO_SHARED)
    return SHARED


# --- factories -------------------------------------------------------------------

def unit_vector(*components: float, dims: int = 384) -> np.ndarray:
    """A unit vector whose first components are ``components`` (the rest 0)."""
    v = np.zeros(dims, dtype=np.float32)
    v[: len(components)] = components
    return v / np.linalg.norm(v)


def vector_at(similarity: float, *, axis: int = 0, towards: int = 1, dims: int = 384) -> np.ndarray:
    """A unit vector with cosine similarity ``similarity`` to the basis vector ``axis``."""
    v = np.zeros(dims, dtype=np.float32)
    v[axis] = similarity
    v[towards] = float(np.sqrt(max(0.0, 1 - similarity**2)))
    return v


@pytest.fixture
def user_factory(django_user_model: Any) -> Any:
    counter = {"n": 0}

    def make(username: str | None = None, **kwargs: Any) -> Any:
        counter["n"] += 1
        return django_user_model.objects.create(username=username or f"user{counter['n']}", **kwargs)

    return make


@pytest.fixture
def truth_factory(user_factory: Any) -> Any:
    """``truth_factory(content, user=..., embedding=..., **fields)``; times increase per call.
    ``held_since`` defaults to ``created_at`` (the host wrote the truth when it was stated)."""
    from django.utils import timezone

    from iris_consolidation.models import Truth

    state: dict[str, Any] = {"n": 0, "user": None, "t0": timezone.now() - timedelta(days=30)}

    def make(content: str = "Likes tea", *, user: Any = None, embedding: Any = None, **fields: Any) -> Truth:
        state["n"] += 1
        if user is None:
            state["user"] = state["user"] or user_factory()
            user = state["user"]
        fields.setdefault("created_at", state["t0"] + timedelta(minutes=state["n"]))
        # A factory truth was written by the host when it was stated: held since then.
        fields.setdefault("held_since", fields["created_at"])
        if embedding is not None:
            fields.setdefault("embedding_model", "all-MiniLM-L6-v2-onnx-int8")
        return Truth.objects.create(user=user, content=content, embedding=embedding, **fields)

    return make


@pytest.fixture
def run_factory() -> Any:
    from iris_consolidation.services.run import lifecycle

    def make(
        execution: str = "in_process", threshold: float = 0.75, user_id: int | None = None, **kwargs: Any
    ) -> Any:
        return lifecycle.create_run(
            trigger="command", execution=execution, threshold=threshold, user_id=user_id, **kwargs
        )

    return make


# --- the LLM stub ------------------------------------------------------------------

@pytest.fixture
def llm_server(settings: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[StubLLMServer]:
    """A scripted OpenAI-compatible server on 127.0.0.1, with the LLM judge pointed at it."""
    server = StubLLMServer().start()
    monkeypatch.setenv("OPENAI_API_KEY", "test-key-not-secret")
    settings.IRIS_CONSOLIDATION_JUDGE = "llm"
    settings.IRIS_CONSOLIDATION_MODEL = "openai/stub-judge"
    settings.IRIS_CONSOLIDATION_LLM_API_BASE = server.url
    settings.IRIS_CONSOLIDATION_LLM_TIMEOUT = 5.0
    yield server
    server.stop()


# --- a real django-q2 worker ------------------------------------------------------------


def database_url(db: dict[str, Any]) -> str:
    """A ``DATABASE_URL`` for the connection ``db`` (the test database): a unix socket
    folder (the embedded server) goes in ``?host=``, a network host in the netloc."""
    from urllib.parse import quote

    user = quote(db.get("USER") or "", safe="")
    password = db.get("PASSWORD") or ""
    auth = f"{user}:{quote(password, safe='')}@" if password else (f"{user}@" if user else "")
    host = db.get("OPTIONS", {}).get("host") or db.get("HOST") or ""
    port = f":{db['PORT']}" if db.get("PORT") else ""
    if host.startswith("/"):
        return f"postgres://{auth}{port and 'localhost' + port}/{db['NAME']}?host={host}"
    return f"postgres://{auth}{host}{port}/{db['NAME']}"


@pytest.fixture
def qcluster(transactional_db: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Any]:
    """Start real ``python manage.py qcluster`` workers on the test database: ``qcluster(**env)``.

    Use it in ``@pytest.mark.django_db(transaction=True)`` tests: the worker is another
    process and sees committed rows only. The worker reaches the test database through
    ``DATABASE_URL`` (so ``project/settings.py`` picks the plain postgresql backend) and
    the broker of the settings (ORM unless REDIS_URL); ``env`` adds variables (e.g. ``IRIS_CONSOLIDATION_JUDGE``),
    as ``override_settings`` cannot reach another process. In this test process
    ``async_task`` queues instead of running inline (``q_sync`` is turned off). Each
    worker runs in its own process group and is stopped at teardown, before the test
    database is flushed.
    """
    from django.db import connection
    from django_q.conf import Conf

    from tests.qcluster import QCluster

    monkeypatch.setattr(Conf, "SYNC", False)
    url = database_url(connection.settings_dict)
    started: list[Any] = []

    def start(**env: str) -> Any:
        environment = {
            **os.environ,  # REDIS_URL, if set, picks the same broker as this process
            "DATABASE_URL": url,
            "Q_WORKERS": "1",
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",
            "PYTHONUNBUFFERED": "1",
            **env,
        }
        worker = QCluster(environment, tmp_path / f"qcluster-{len(started)}.log")
        started.append(worker)
        return worker

    yield start
    for worker in started:
        worker.stop()


@pytest.fixture
def failed_run(truth_factory, settings, django_capture_on_commit_callbacks):
    """A queued run whose only cluster failed (the judge could not be built): for the retry
    command and the admin's retry."""
    from iris_consolidation import tasks
    from iris_consolidation.services.run import lifecycle

    truth_factory("Works as a nurse", embedding=vector_at(1.0))
    truth_factory("Works as a nurse.", embedding=vector_at(0.95))
    settings.IRIS_CONSOLIDATION_JOB_ATTEMPTS = 1
    settings.IRIS_CONSOLIDATION_JUDGE = "nonexistent"
    run = lifecycle.create_run(trigger="command")
    with pytest.raises(Exception, match="Unknown judge"), django_capture_on_commit_callbacks(execute=True):
        tasks.enqueue_run(run)
    run.refresh_from_db()
    assert (run.status, run.failed) == ("failed", 1)
    settings.IRIS_CONSOLIDATION_JUDGE = "rules"
    return run
