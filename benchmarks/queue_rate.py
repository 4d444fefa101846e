"""Measure the LLM call rate of a queued run under IRIS_CONSOLIDATION_JOBS_PER_MINUTE.

Two ``manage.py qcluster`` processes (one worker each, as two machines would run them)
share the limit through the database. The judge is the scripted OpenAI-compatible stub
(``tests/llm_stub.py``) on 127.0.0.1, which timestamps every call; nothing leaves the
machine. The run's data lives in a throwaway database on the same server, dropped at
the end.

    python benchmarks/queue_rate.py                      # 30 clusters, 10/min, ORM broker
    python benchmarks/queue_rate.py --broker redis       # Redis at REDIS_URL or 127.0.0.1:6379
    python benchmarks/queue_rate.py --llm-timeout 5      # short judge timeout: waits in the worker

It prints the calls, the most calls seen in any 60-second window (which must not
exceed the limit) and the sustained rate after the first window's burst.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from urllib.parse import quote

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")


def _server_url(dbname: str) -> str:
    """A DATABASE_URL for ``dbname`` on the project's server (embedded unless DATABASE_URL)."""
    import environ

    if os.environ.get("DATABASE_URL"):
        cfg = environ.Env.db_url_config(os.environ["DATABASE_URL"])
        host, port = cfg.get("HOST") or "", cfg.get("PORT") or ""
        auth = quote(cfg.get("USER") or "") + (f":{quote(cfg['PASSWORD'])}" if cfg.get("PASSWORD") else "")
        socket = cfg.get("OPTIONS", {}).get("host", "")
        if not host and socket:  # a unix socket folder (the embedded server's) stays in ?host=
            return f"postgres://{auth}@/{dbname}?host={quote(socket)}" + (f"&port={port}" if port else "")
        return f"postgres://{auth}@{host}{':' + str(port) if port else ''}/{dbname}"
    from project.embedded_db.base import ensure_server

    pgdata = os.environ.get("IRIS_EMBEDDED_PGDATA", str(ROOT / ".pgdata"))
    ensure_server(pgdata)
    return f"postgres://postgres@/{dbname}?host={quote(pgdata)}"


def _admin(sql: str) -> None:
    import psycopg

    with psycopg.connect(_server_url("postgres"), autocommit=True) as conn:
        conn.execute(sql)


def _most_in_window(times: list[float], seconds: float) -> int:
    return max((sum(1 for u in times[i:] if u - t < seconds) for i, t in enumerate(times)), default=0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--clusters", type=int, default=30)
    parser.add_argument("--limit", type=int, default=10, help="IRIS_CONSOLIDATION_JOBS_PER_MINUTE")
    parser.add_argument("--clusters-processes", type=int, default=2, help="qcluster processes, one worker each")
    parser.add_argument("--broker", choices=["orm", "redis"], default="orm")
    parser.add_argument("--llm-timeout", type=float, default=60.0, help="IRIS_CONSOLIDATION_LLM_TIMEOUT")
    args = parser.parse_args()

    dbname = f"iris_bench_{uuid.uuid4().hex[:8]}"
    url = _server_url(dbname)
    _admin(f'CREATE DATABASE "{dbname}"')
    name = f"irisbench{uuid.uuid4().hex[:6]}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("IRIS_CONSOLIDATION_")}
    env.update(
        DATABASE_URL=url,
        Q_NAME=name,
        Q_WORKERS="1",
        OPENAI_API_KEY="bench-key-not-secret",
        IRIS_CONSOLIDATION_JUDGE="llm",
        IRIS_CONSOLIDATION_MODEL="openai/stub-judge",
        IRIS_CONSOLIDATION_JOBS_PER_MINUTE=str(args.limit),
        IRIS_CONSOLIDATION_LLM_TIMEOUT=str(args.llm_timeout),
    )
    if args.broker == "redis":
        env["REDIS_URL"] = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
    from tests import llm_stub

    stub = llm_stub.StubLLMServer().start()
    env["IRIS_CONSOLIDATION_LLM_API_BASE"] = stub.url
    os.environ.update(env)
    calls: list[float] = []
    lock = threading.Lock()

    def reply(payload: dict) -> llm_stub.Reply:
        with lock:
            calls.append(time.time())
        truths = llm_stub.StubLLMServer.truths_of({"json": payload})
        action = {
            "action": "merge",
            "ids": [t["id"] for t in truths],
            "content": truths[0]["content"],
            "reason": "same",
        }
        return llm_stub.verdict([action])

    stub.handler = reply
    clusters: list[subprocess.Popen[bytes]] = []
    try:
        import django

        django.setup()
        from django.core.management import call_command

        call_command("migrate", verbosity=0)
        run = _prepare(args.clusters)
        logs = [tempfile.TemporaryFile() for _ in range(args.clusters_processes)]
        for log in logs:
            clusters.append(
                subprocess.Popen(
                    [sys.executable, "manage.py", "qcluster"], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT
                )
            )
        time.sleep(8)  # let both clusters come up
        from iris_consolidation import tasks

        started = time.time()
        tasks.enqueue_run(run)
        while True:
            run.refresh_from_db()
            if run.finished_at is not None:
                break
            time.sleep(1)
        times = sorted(calls)
        span = times[-1] - times[0] if len(times) > 1 else 0.0
        from iris_consolidation.models import ConsolidationJob

        workers = sorted(set(ConsolidationJob.objects.filter(run=run, kind="cluster").values_list("worker", flat=True)))
        print(f"broker={args.broker} limit={args.limit}/min processes={args.clusters_processes}", end=" ")
        print(f"llm_timeout={args.llm_timeout}")
        print(f"run {run.pk}: {run.status}, {run.clusters_done}/{run.clusters_found} clusters, {run.failed} failed")
        print(f"calls={len(times)} first-to-last={span:.1f}s run_seconds={time.time() - started:.1f}")
        print(f"most calls in any 60 s window={_most_in_window(times, 60.0)} (limit {args.limit})")
        if span and len(times) > args.limit:
            # The first window's burst aside: calls per minute from the first call to the last.
            print(f"sustained rate={(len(times) - args.limit) / span * 60:.2f} calls/min")
        print(f"workers={len(workers)}: {', '.join(workers)}")
        print("call offsets (s):", " ".join(f"{t - times[0]:.1f}" for t in times))
    finally:
        for process in clusters:
            process.kill()
            process.wait()
        stub.stop()
        from django.db import connections

        connections.close_all()
        _admin(f'DROP DATABASE IF EXISTS "{dbname}" WITH (FORCE)')


def _prepare(count: int):  # type: ignore[no-untyped-def]
    """``count`` clusters of two paraphrases over 5 users, on separate axes; a queued run."""
    import numpy as np
    from django.contrib.auth import get_user_model

    from iris_consolidation.models import Truth
    from iris_consolidation.services.run import lifecycle

    users = [get_user_model().objects.create(username=f"bench{i}") for i in range(5)]
    for i in range(count):
        for k, (a, b) in enumerate(((1.0, 0.0), (0.95, 0.31))):
            vector = np.zeros(384, dtype=np.float32)
            vector[2 * i], vector[2 * i + 1] = a, b
            word = "abcdefghijklmnopqrstuvwxyz"[i // 26] + "abcdefghijklmnopqrstuvwxyz"[i % 26]
            Truth.objects.create(
                user=users[i % 5],
                content=f"likes tea variety {word}" + ("." if k else ""),
                embedding=vector / np.linalg.norm(vector),
                embedding_model="all-MiniLM-L6-v2-onnx-int8",
            )
    return lifecycle.create_run(trigger="command", judge="llm:openai/stub-judge")


if __name__ == "__main__":
    main()
