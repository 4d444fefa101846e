"""A queued run end to end on a real ``qcluster``: phase 1 a task per user beside small
users sharing tasks (``IRIS_CONSOLIDATION_PHASE1_USERS_PER_TASK``), in the same process.

    .venv/bin/python benchmarks/queued_trial.py                          # 200 users of 100 truths
    .venv/bin/python benchmarks/queued_trial.py --users 1000 --per-user 20 --rounds 2

The truths are the real facts of the team's data folder (``IRIS_SHARED_DIR``/data, every
``*.truths.jsonl``), dealt out in turn to ``--users`` users of ``--per-user`` truths each
(consecutive facts to a user, the pool dealt again when it runs out). They are embedded
once by the local model before any run, so the runs time the queue, phase 1's clustering
and stages, and phase 2 with the rule judge (``--arms report``: the clusters are counted,
not judged, so a run is phase 1 alone). Each run is a dry run over the full window
(``create_run(dry_run=True, full=True)``): truths are left as they were, so every run
sees the same data. One ``manage.py qcluster`` (``--workers`` workers, ORM broker) runs
every run; only this process's setting changes between them, as the grouping happens
when the run is started. ``--rounds`` alternates the two settings (per user first) that
many times.

Seconds are the run's own timestamps: ``started_at`` to the last phase 1 job's
``finished_at`` (phase 1; phase 2 tasks queued meanwhile run between phase 1 tasks) and to
``finished_at`` (end to end). The data lives in a throwaway database on the project's
server, dropped at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")

from benchmarks.queue_rate import _admin, _server_url  # noqa: E402

SHARED = Path(os.environ.get("IRIS_SHARED_DIR") or ROOT.parent / "shared")


def _facts() -> list[str]:
    """Every fact of the data folder's truths files, in file order."""
    facts = []
    for path in sorted((SHARED / "data").glob("*.truths.jsonl")):
        with path.open() as lines:
            facts += [json.loads(line)["content"] for line in lines if line.strip()]
    if not facts:
        raise SystemExit(f"no *.truths.jsonl under {SHARED / 'data'}; set IRIS_SHARED_DIR")
    return facts


def _load(users: int, per_user: int) -> int:
    """Create ``users`` users of ``per_user`` embedded truths; returns the truths made."""
    from datetime import timedelta

    from django.contrib.auth import get_user_model
    from django.utils import timezone

    from iris_consolidation.embeddings import get_embedder
    from iris_consolidation.models import Truth

    facts = _facts()
    needed = users * per_user
    texts = [facts[i % len(facts)] for i in range(needed)]
    unique = sorted(set(texts))
    embedder = get_embedder()
    began = time.monotonic()
    vectors = dict(zip(unique, embedder.embed(unique), strict=True))
    print(f"embedded {len(unique)} distinct facts in {time.monotonic() - began:.1f} s", flush=True)
    people = get_user_model().objects.bulk_create(get_user_model()(username=f"trial{i}") for i in range(users))
    t0 = timezone.now() - timedelta(days=30)
    rows = [
        Truth(
            user=people[i // per_user], content=text, embedding=vectors[text], embedding_model=embedder.model_name,
            created_at=t0 + timedelta(seconds=i),
        )
        for i, text in enumerate(texts)
    ]
    Truth.objects.bulk_create(rows, batch_size=2000)
    return len(rows)


def _one_run(per_task: int, *, arms: str, cluster: subprocess.Popen[bytes], log: Path) -> dict[str, Any]:
    """Start a dry run with ``PHASE1_USERS_PER_TASK`` = ``per_task`` and the candidate arms
    (``LEXICAL``, ``SEMANTIC``) in mode ``arms``, and wait for it."""
    from django.test import override_settings

    from iris_consolidation import tasks
    from iris_consolidation.conf import app_settings
    from iris_consolidation.models import ConsolidationJob
    from iris_consolidation.services.queue import dispatch
    from iris_consolidation.services.run import lifecycle

    arm_modes = {"IRIS_CONSOLIDATION_LEXICAL": arms, "IRIS_CONSOLIDATION_SEMANTIC": arms}
    with override_settings(IRIS_CONSOLIDATION_PHASE1_USERS_PER_TASK=per_task, **arm_modes):
        run = lifecycle.create_run(trigger="command", dry_run=True, full=True)
        tasks.enqueue_run(run)
        jobs = list(ConsolidationJob.objects.in_run(run.pk).filter(kind="user").order_by("id"))
        phase1_tasks = len(dispatch.user_batches(jobs))
    while True:
        run.refresh_from_db()
        if run.finished_at is not None:
            break
        if cluster.poll() is not None:
            raise SystemExit(f"the qcluster stopped ({cluster.returncode}); its log:\n{log.read_text()[-3000:]}")
        time.sleep(0.2)
    user_jobs = ConsolidationJob.objects.in_run(run.pk).filter(kind="user")
    clusters_by_user = Counter(ConsolidationJob.objects.in_run(run.pk).filter(kind="cluster").values_list(
        "user_id", flat=True))
    per_call = max(1, int(app_settings.CLUSTERS_PER_CALL))
    last_plan = max(user_jobs.values_list("finished_at", flat=True))
    return {
        "per_task": per_task,
        "status": run.status,
        "users": run.users_done,
        "clusters": run.clusters_found,
        "phase1_tasks": phase1_tasks,
        "phase2_tasks": sum(-(-n // per_call) for n in clusters_by_user.values()),
        "phase1_s": (last_plan - run.started_at).total_seconds(),
        "total_s": (run.finished_at - run.started_at).total_seconds(),
        "faults": sum(user_jobs.values_list("faults", flat=True)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--users", type=int, default=200)
    parser.add_argument("--per-user", type=int, default=100)
    parser.add_argument("--batched", type=int, default=50, help="PHASE1_USERS_PER_TASK of the batched runs")
    parser.add_argument("--workers", type=int, default=2, help="workers of the one qcluster")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument(
        "--arms", choices=["apply", "report"], default="apply",
        help="mode of the candidate arms: apply (clusters judged by the rule judge) or report (phase 1 only)",
    )
    args = parser.parse_args()

    dbname = f"iris_trial_{uuid.uuid4().hex[:8]}"
    _admin(f'CREATE DATABASE "{dbname}"')
    env = {k: v for k, v in os.environ.items() if not k.startswith("IRIS_CONSOLIDATION_")}
    env.update(DATABASE_URL=_server_url(dbname), Q_NAME=f"iristrial{uuid.uuid4().hex[:6]}", Q_WORKERS=str(args.workers))
    os.environ.update(env)
    cluster = None
    try:
        import django

        django.setup()
        import logging

        from django.core.management import call_command

        logging.getLogger("django-q").setLevel(logging.WARNING)  # one line per task sent otherwise

        call_command("migrate", verbosity=0)
        truths = _load(args.users, args.per_user)
        log = Path(tempfile.mkdtemp()) / "qcluster.log"
        with log.open("wb") as out:
            cluster = subprocess.Popen([sys.executable, "manage.py", "qcluster"], cwd=ROOT, env=env, stdout=out,
                                       stderr=subprocess.STDOUT)
        time.sleep(8)  # let the cluster come up
        print(f"{truths} truths, {args.users} users of {args.per_user}; one qcluster, {args.workers} workers, ORM")
        print("users/task  phase1 tasks  phase2 tasks  clusters  phase 1 s  end to end s  faults  status")
        for _ in range(args.rounds):
            for per_task in (1, args.batched):
                r = _one_run(per_task, arms=args.arms, cluster=cluster, log=log)
                print(f"{r['per_task']:>10}  {r['phase1_tasks']:>12}  {r['phase2_tasks']:>12}  {r['clusters']:>8}  "
                      f"{r['phase1_s']:>9.1f}  {r['total_s']:>12.1f}  {r['faults']:>6}  {r['status']}", flush=True)
    finally:
        if cluster is not None:
            cluster.terminate()
            try:
                cluster.wait(timeout=20)
            except subprocess.TimeoutExpired:
                cluster.kill()
        from django.db import connections

        connections.close_all()
        _admin(f'DROP DATABASE IF EXISTS "{dbname}" WITH (FORCE)')


if __name__ == "__main__":
    main()
