"""Real ``manage.py qcluster`` processes against the test database, on either broker.

``qcluster`` starts worker clusters as subprocesses (their own process group, so a
SIGKILL takes the whole cluster down like a dead machine). They reach the test
database through ``DATABASE_URL`` (built from the test connection; the embedded
server listens on a unix socket in its data folder), the broker chosen by the
``broker`` fixture (``orm`` or ``redis``), and the LLM stub. The test process is set
up the same way (django-q2's frozen ``Conf`` patched), so what it enqueues, a cluster
picks up. Tests using these fixtures commit (``transaction=True``).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from tests.qcluster import QCluster, wait_until  # noqa: F401  (wait_until: re-exported for the tests)

REDIS_URL = os.environ.get("TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
NO_REDIS = (
    f"no Redis server answers at {REDIS_URL}; start one with "
    "`redis-server --bind 127.0.0.1 --port 6379 --daemonize yes --save '' --appendonly no` (CI does)"
)


def database_url() -> str:
    """A ``DATABASE_URL`` for the test database the current connection uses."""
    from django.db import connection

    s = connection.settings_dict
    user = quote(s.get("USER") or "")
    password = f":{quote(s['PASSWORD'])}" if s.get("PASSWORD") else ""
    host, port, name = s.get("HOST") or "", s.get("PORT") or "", s["NAME"]
    if host.startswith("/"):  # a unix socket folder, e.g. the embedded server's data folder
        query = f"?host={quote(host)}" + (f"&port={port}" if port else "")
        return f"postgres://{user}{password}@/{quote(name)}{query}"
    return f"postgres://{user}{password}@{host}{':' + str(port) if port else ''}/{quote(name)}"


class Clusters:
    """Starts qclusters configured like the test process; stops them all at teardown."""

    def __init__(self, *, env: dict[str, str], settings: Any, tmp_path: Path) -> None:
        self.env = env
        self.settings = settings
        self.tmp_path = tmp_path
        self.started: list[QCluster] = []

    def configure(self, **iris: Any) -> None:
        """Set ``IRIS_CONSOLIDATION_<NAME>`` here and for clusters started afterwards."""
        for name, value in iris.items():
            setattr(self.settings, f"IRIS_CONSOLIDATION_{name}", value)
            self.env[f"IRIS_CONSOLIDATION_{name}"] = str(value)

    def start(self, *, workers: int = 2) -> QCluster:
        env = {**self.env, "Q_WORKERS": str(workers)}
        cluster = QCluster(env, self.tmp_path / f"qcluster{len(self.started)}.log")
        self.started.append(cluster)
        return cluster

    def logs(self) -> str:
        return "\n".join(c.log.read_text(errors="replace")[-4000:] for c in self.started)

    def kill_all(self) -> None:
        for cluster in self.started:
            cluster.kill()
            cluster.stop()


@pytest.fixture(params=["orm", "redis"])
def broker(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, str]]:
    """The broker the test process and its clusters share; yields env for the clusters.

    ``redis`` skips when no Redis server answers. Each test gets its own queue name.
    """
    from django_q.conf import Conf

    name = f"iristest{uuid.uuid4().hex[:10]}"
    env = {"Q_NAME": name}
    monkeypatch.setattr(Conf, "SYNC", False)
    monkeypatch.setattr(Conf, "PREFIX", name)
    monkeypatch.setattr(Conf, "CLUSTER_NAME", name)
    if request.param == "redis":
        import redis

        try:
            redis.Redis.from_url(REDIS_URL, socket_connect_timeout=1).ping()
        except redis.RedisError:
            pytest.skip(NO_REDIS)
        monkeypatch.setattr(Conf, "ORM", None)
        monkeypatch.setattr(Conf, "REDIS", REDIS_URL)
        env["REDIS_URL"] = REDIS_URL
    yield env
    if request.param == "redis":
        import redis

        redis.Redis.from_url(REDIS_URL).delete(f"django_q:{name}:q")


@pytest.fixture
def qclusters(
    transactional_db: None, broker: dict[str, str], llm_server: Any, settings: Any, tmp_path: Path
) -> Iterator[Clusters]:
    """A factory of real qcluster processes, stopped before the test database is flushed."""
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("IRIS_CONSOLIDATION_", "DATABASE_URL", "REDIS_URL"))
    }
    env.update(broker)
    env.update(
        {
            "DJANGO_SETTINGS_MODULE": "project.settings",
            "DATABASE_URL": database_url(),
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",
            "OPENAI_API_KEY": "test-key-not-secret",
            "PYTHONUNBUFFERED": "1",
        }
    )
    clusters = Clusters(env=env, settings=settings, tmp_path=tmp_path)
    # The fault scripts below answer, hang or fail per cluster and count calls per cluster:
    # one cluster per call here. Batches of clusters are tested in tests/services/queue/test_batches.py.
    clusters.configure(
        JUDGE="llm", MODEL="openai/stub-judge", LLM_API_BASE=llm_server.url, LLM_TIMEOUT=5.0, JOBS_PER_MINUTE=100000,
        CLUSTERS_PER_CALL=1,
    )
    yield clusters
    clusters.kill_all()  # graceful stops add seconds per cluster and test nothing here


# --- data and a stub judge that merges -----------------------------------------------


def _word(i: int) -> str:
    letters = "abcdefghijklmnopqrstuvwxyz"
    return letters[i // 26 % 26] + letters[i % 26]


@pytest.fixture
def make_pairs(user_factory: Any, truth_factory: Any) -> Callable[..., dict[str, list[Any]]]:
    """``make_pairs(users=U, per_user=P)``: U users with P clusters of two paraphrases each.

    Pair ``i`` is "likes tea variety <word>" and "enjoys drinking the tea variety <word>":
    paraphrases, not equal texts, which the deterministic pre-pass would merge
    without asking the model these tests script. Vectors put each pair on its own axes
    (cosine 0.95 inside a pair, 0 across pairs). Returns the truths keyed by the pair's word.
    """
    from tests.conftest import vector_at

    def make(*, users: int = 1, per_user: int = 1) -> dict[str, list[Any]]:
        pairs: dict[str, list[Any]] = {}
        for u in range(users):
            user = user_factory()
            for p in range(per_user):
                i = u * per_user + p
                word = _word(i)
                axis = 2 * (i % 190)
                pairs[word] = [
                    truth_factory(
                        f"likes tea variety {word}", user=user, embedding=vector_at(1.0, axis=axis, towards=axis + 1)
                    ),
                    truth_factory(
                        f"enjoys drinking the tea variety {word}",
                        user=user,
                        embedding=vector_at(0.95, axis=axis, towards=axis + 1),
                    ),
                ]
        return pairs

    return make


def merge_all(payload: dict[str, Any]) -> Any:
    """A stub reply merging every member of each cluster of the request, their texts joined
    (so that the validator finds every member's words kept)."""
    from iris_consolidation.evaluation.oracle import joined_content
    from tests import llm_stub

    clusters = llm_stub.StubLLMServer.clusters_of({"json": payload})
    return llm_stub.verdict(
        [
            {"action": "merge", "ids": [t["id"] for t in c["truths"]],
             "content": joined_content(t["content"] for t in c["truths"]), "reason": "same fact"}
            for c in clusters
        ],
        reasoning="paraphrases",
    )


def word_of(payload: dict[str, Any]) -> str:
    """The pair word of a recorded request (see ``make_pairs``)."""
    from tests import llm_stub

    return llm_stub.StubLLMServer.truths_of({"json": payload})[0]["content"].rstrip(".").split()[-1]
