"""Benchmark of phase 1 (embed + greedy clustering) for one user with many truths.

    .venv/bin/python benchmarks/phase1.py                       # 10,000 and 100,000 truths
    .venv/bin/python benchmarks/phase1.py --sizes 10000 --modes excluded

Two modes, each timed through the product's own phase 1 (``services.pipeline.consolidation.plan_user``):

- ``excluded``: the truths already carry embeddings from the local model's name, so phase 1
  embeds nothing and only clusters. The vectors are synthetic unit vectors: ``--grouped``
  (default 30%) of the truths fall in planted groups of 2-4 members whose cosine similarity
  to the group's first member is 0.79-0.97; the rest are random (cosine about 0 +- 0.05 to
  anything). Clusters found should equal the planted groups: a check of the HNSW search's
  recall at the default threshold 0.75.
- ``included``: the truths have no embedding; phase 1 embeds every one with the local
  all-MiniLM-L6-v2 model (batched, written with bulk_update) and then clusters. The texts are
  synthetic sentences from templates, with the same share of planted restatements.

Each measurement runs in its own child process, so ``ru_maxrss`` (peak resident memory of
the process, from ``resource.getrusage``) is that of phase 1 alone, model included. Setting
up the data (insert, HNSW index build) happens in another child and is timed apart.
Queries are counted with ``connection.execute_wrapper``.

The benchmark never touches the project's data: it creates a template database
``iris_bench_template`` (migrated once) and, per measurement, a database ``iris_bench``
copied from it, on the same server as the project (the embedded one, or DATABASE_URL's),
and drops both at the end (``--keep`` keeps them).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

TEMPLATE_DB = "iris_bench_template"
BENCH_DB = "iris_bench"
BENCH_USER = "bench-user"
DIMS = 384


def _setup_django(database: str | None = None) -> None:
    import django
    from django.conf import settings

    if database is not None:
        settings.DATABASES["default"]["NAME"] = database  # before the first connection
    django.setup()


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


# --- synthetic data --------------------------------------------------------------

_NAMES = (
    "Asha Bruno Carmen Dara Emeka Farah Goran Hana Ines Jonas Kenji Lena Mateo Nadia Omar Priya Quinn "
    "Rosa Samir Tove Uma Viktor Wen Xavier Yara Zoltan Alma Bao Cyrus Delia Esme Felix Greta Hugo Ilse "
    "Joao Kira Luca Mira Nils Olga Pavel Rhea Sven Talia Ugo Vera Wim Ximena Yusuf Zara"
).split()
_CITIES = (
    "Lisbon Berlin Nairobi Osaka Lyon Porto Krakow Quito Hanoi Austin Leeds Bergen Cusco Dakar Gdansk "
    "Hobart Izmir Jaipur Kyoto Lima Malmo Nantes Oslo Perth Riga Seville Tartu Utrecht Varna Wuhan"
).split()
_PETS = "dog cat parrot rabbit tortoise hamster ferret goldfish horse gecko".split()
_FOODS = (
    "ramen paella dumplings lasagne tacos falafel pho risotto curry sushi pierogi goulash couscous empanadas moussaka"
).split()
_HOBBIES = (
    "rock climbing pottery chess birdwatching sailing knitting running photography gardening "
    "woodworking salsa dancing kayaking"
).split(" ")
_JOBS = (
    "nurse architect plumber teacher pharmacist journalist electrician accountant chef pilot "
    "librarian paramedic translator carpenter veterinarian"
).split()
_LANGS = "Spanish Japanese German Swahili Portuguese Korean Polish Turkish Dutch Italian".split()
_MONTHS = "January February March April May June July August September October November December".split()
_RELS = "sister brother mother father cousin aunt uncle grandmother neighbour colleague".split()
_DAYS = "Monday Tuesday Wednesday Thursday Friday Saturday Sunday".split()

# Each fact has paraphrase templates; restatements reuse the first one with case/punctuation changes.
_FACTS: list[tuple[list[str], dict[str, list[Any]]]] = [
    (
        ["Has a {pet} named {name}", "Owns a {pet} called {name}", "{name} is the name of their {pet}"],
        {"pet": _PETS, "name": _NAMES},
    ),
    (
        ["Works as a {job} in {city}", "Is employed as a {job} in {city}", "Has a job as a {job} in {city}"],
        {"job": _JOBS, "city": _CITIES},
    ),
    (
        [
            "Loves eating {food} with their {rel} {name}",
            "Enjoys {food} with their {rel} {name}",
            "Often shares {food} with their {rel} {name}",
        ],
        {"food": _FOODS, "rel": _RELS, "name": _NAMES},
    ),
    (
        [
            "Goes {hobby} every {day} with {name}",
            "Does {hobby} with {name} on {day}s",
            "Spends {day}s {hobby} with {name}",
        ],
        {"hobby": _HOBBIES, "day": _DAYS, "name": _NAMES},
    ),
    (
        [
            "Visited {city} in {month} {year}",
            "Travelled to {city} in {month} {year}",
            "Took a trip to {city} in {month} {year}",
        ],
        {"city": _CITIES, "month": _MONTHS, "year": list(range(1995, 2026))},
    ),
    (
        [
            "Is learning {lang} to talk with their {rel} {name}",
            "Studies {lang} so they can speak with {name}",
            "Takes {lang} lessons for their {rel} {name}",
        ],
        {"lang": _LANGS, "rel": _RELS, "name": _NAMES},
    ),
    (
        [
            "Was born in {city} in {year}",
            "Their birthplace is {city}, {year}",
            "Came into the world in {city} in {year}",
        ],
        {"city": _CITIES, "year": list(range(1940, 2010))},
    ),
    (
        [
            "Their {rel} {name} lives in {city}",
            "{name}, their {rel}, lives in {city}",
            "Has a {rel} called {name} in {city}",
        ],
        {"rel": _RELS, "name": _NAMES, "city": _CITIES},
    ),
]


def _restate(text: str, rng: random.Random) -> str:
    """Same words, other spelling: what the rule judge can prove equal."""
    choice = rng.randrange(3)
    if choice == 0:
        return text.lower() + "."
    if choice == 1:
        return text + "!"
    return text.upper()[0] + text[1:] + "."


def synthetic_texts(n: int, *, grouped: float, seed: int) -> tuple[list[str], int]:
    """``n`` sentences; ``grouped`` of them in planted groups of 2-4 (paraphrases or restatements).

    Returns the texts in creation order and the number of planted groups.
    """
    rng = random.Random(seed)
    texts: list[str] = []
    groups = 0
    while len(texts) < n:
        templates, slots = rng.choice(_FACTS)
        values = {k: rng.choice(v) for k, v in slots.items()}
        first = templates[0].format(**values)
        if rng.random() < grouped / 3.0 and len(texts) + 2 <= n:
            size = min(rng.randint(2, 4), n - len(texts))
            members = [first]
            for _ in range(size - 1):
                if rng.random() < 0.5:
                    members.append(_restate(first, rng))
                else:
                    members.append(rng.choice(templates[1:]).format(**values))
            texts.extend(members)
            groups += 1
        else:
            texts.append(first)
    return texts[:n], groups


def synthetic_vectors(n: int, *, grouped: float, seed: int) -> tuple[Any, int]:
    """``n`` unit vectors (float32, n x 384) with planted groups; returns (vectors, groups).

    A member of a group is ``cos(t) * c + sin(t) * u`` with ``c`` the group's first vector,
    ``u`` a random unit vector orthogonal to it and ``cos(t)`` in [0.79, 0.97].
    """
    import numpy as np

    rng = np.random.default_rng(seed)
    vectors = rng.standard_normal((n, DIMS)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    i = 0
    groups = 0
    while i < n:
        if rng.random() < grouped / 3.0 and i + 2 <= n:
            size = min(int(rng.integers(2, 5)), n - i)
            centre = vectors[i]
            for j in range(i + 1, i + size):
                noise = vectors[j] - centre * float(vectors[j] @ centre)
                noise /= np.linalg.norm(noise)
                cos = float(rng.uniform(0.79, 0.97))
                vectors[j] = cos * centre + np.sqrt(1.0 - cos * cos) * noise
            i += size
            groups += 1
        else:
            i += 1
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors, groups


# --- child processes -------------------------------------------------------------


def child_setup(args: argparse.Namespace) -> dict[str, Any]:
    """Insert ``n`` truths of one user into the bench database (HNSW index rebuilt once)."""
    _setup_django(BENCH_DB)
    from datetime import timedelta

    from django.contrib.auth import get_user_model
    from django.db import connection
    from django.utils import timezone

    from iris_consolidation.embeddings import LOCAL_MODEL_NAME
    from iris_consolidation.models import Truth

    started = time.monotonic()
    user = get_user_model().objects.create(username=BENCH_USER)
    if args.mode == "excluded":
        vectors, groups = synthetic_vectors(args.n, grouped=args.grouped, seed=args.seed)
        texts = [f"Synthetic truth number {i}" for i in range(args.n)]
    else:
        vectors, groups = None, 0
        texts, groups = synthetic_texts(args.n, grouped=args.grouped, seed=args.seed)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = %s AND indexdef ILIKE %s",
            [Truth._meta.db_table, "%hnsw%"],
        )
        hnsw = cursor.fetchall()
        for name, _ in hnsw:
            cursor.execute(f'DROP INDEX "{name}"')
    base = timezone.now() - timedelta(days=365)
    batch = 2000
    for start in range(0, args.n, batch):
        rows = []
        for i in range(start, min(start + batch, args.n)):
            fields: dict[str, Any] = {}
            if vectors is not None:
                fields = {"embedding": vectors[i], "embedding_model": LOCAL_MODEL_NAME}
            rows.append(
                Truth(
                    user=user, content=texts[i], created_at=base + timedelta(seconds=i), source=f"bench:{i}", **fields
                )
            )
        Truth.all_objects.bulk_create(rows)
    insert_seconds = time.monotonic() - started
    started = time.monotonic()
    with connection.cursor() as cursor:
        cursor.execute("SET maintenance_work_mem = '1GB'")
        for _, definition in hnsw:
            cursor.execute(definition)
        cursor.execute(f"ANALYZE {Truth._meta.db_table}")
    return {
        "planted_groups": groups,
        "insert_seconds": round(insert_seconds, 2),
        "index_seconds": round(time.monotonic() - started, 2),
    }


def child_phase1(args: argparse.Namespace) -> dict[str, Any]:
    """Run phase 1 for the bench user and measure it."""
    _setup_django(BENCH_DB)
    from django.contrib.auth import get_user_model
    from django.db import connection

    from iris_consolidation.embeddings import get_embedder
    from iris_consolidation.models import ConsolidationRun
    from iris_consolidation.services.pipeline import consolidation

    user = get_user_model().objects.get(username=BENCH_USER)
    run = consolidation.create_run(trigger="command", mode="dry_run", user_id=user.pk, judge="bench")
    embedder = get_embedder()
    queries = 0

    def count(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        nonlocal queries
        queries += 1
        return execute(sql, params, many, context)

    rss_before = _rss_mb()
    load_before = os.getloadavg()[0]
    started = time.monotonic()
    with connection.execute_wrapper(count):
        clusters = consolidation.plan_user(run_id=run.pk, user_id=user.pk, embedder=embedder)
    seconds = time.monotonic() - started
    run = ConsolidationRun.objects.get(pk=run.pk)
    sizes = [len(c.member_ids) for c in clusters]
    return {
        "seconds": round(seconds, 2),
        "embed_seconds": round(run.embed_seconds, 2),
        "cluster_seconds": round(run.cluster_seconds, 2),
        "embedded": run.embedded,
        "truths_per_second": round(args.n / seconds, 1),
        "queries": queries,
        "clusters": len(clusters),
        "clustered_truths": sum(sizes),
        "rss_before_mb": round(rss_before, 1),
        "peak_rss_mb": round(_rss_mb(), 1),
        # 1-minute load average before and after: on 2 cores, above ~2 means other work competed.
        "load": f"{load_before:.1f}-{os.getloadavg()[0]:.1f}",
    }


def _child(kind: str, mode: str, n: int, args: argparse.Namespace) -> dict[str, Any]:
    cmd = [
        sys.executable,
        __file__,
        "--child",
        kind,
        "--mode",
        mode,
        "--n",
        str(n),
        "--grouped",
        str(args.grouped),
        "--seed",
        str(args.seed),
    ]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        sys.stderr.write(done.stdout + done.stderr)
        raise SystemExit(f"benchmark child {kind} {mode} {n} failed (exit {done.returncode})")
    return json.loads(done.stdout.strip().splitlines()[-1])


# --- the parent ------------------------------------------------------------------


def _admin(sql: str) -> None:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(sql)


def _prepare_template() -> None:
    from django.core.management import call_command
    from django.db import connection, connections

    _admin(f'DROP DATABASE IF EXISTS "{BENCH_DB}" WITH (FORCE)')
    _admin(f'DROP DATABASE IF EXISTS "{TEMPLATE_DB}" WITH (FORCE)')
    _admin(f'CREATE DATABASE "{TEMPLATE_DB}"')
    home = connection.settings_dict["NAME"]
    connections.close_all()
    connection.settings_dict["NAME"] = TEMPLATE_DB
    call_command("migrate", verbosity=0)
    connections.close_all()
    connection.settings_dict["NAME"] = home


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--modes", nargs="+", choices=["excluded", "included"], default=["excluded", "included"])
    parser.add_argument("--grouped", type=float, default=0.3, help="Share of truths in planted groups.")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--keep", action="store_true", help="Keep the bench databases.")
    parser.add_argument("--json", help="Also write the results to this file.")
    parser.add_argument("--child", choices=["setup", "phase1"], help=argparse.SUPPRESS)
    parser.add_argument("--mode", help=argparse.SUPPRESS)
    parser.add_argument("--n", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.child:
        result = (child_setup if args.child == "setup" else child_phase1)(args)
        print(json.dumps(result))
        return

    _setup_django()
    from django.db import connection, connections

    print(
        f"server: {connection.vendor} {connection.settings_dict.get('HOST') or ''} "
        f"(bench databases {TEMPLATE_DB}, {BENCH_DB}); cpus: {os.cpu_count()}",
        flush=True,
    )
    _prepare_template()
    results = []
    try:
        for n in args.sizes:
            for mode in args.modes:
                _admin(f'DROP DATABASE IF EXISTS "{BENCH_DB}" WITH (FORCE)')
                _admin(f'CREATE DATABASE "{BENCH_DB}" TEMPLATE "{TEMPLATE_DB}"')
                connections.close_all()
                print(f"\n== {n:,} truths, embedding {mode}", flush=True)
                setup = _child("setup", mode, n, args)
                print(
                    f"   setup: insert {setup['insert_seconds']} s, HNSW index {setup['index_seconds']} s, "
                    f"planted groups {setup['planted_groups']:,}",
                    flush=True,
                )
                measured = _child("phase1", mode, n, args)
                row = {"n": n, "mode": mode, **setup, **measured}
                results.append(row)
                print(
                    f"   phase 1: {row['seconds']} s (embed {row['embed_seconds']} s, cluster "
                    f"{row['cluster_seconds']} s), {row['truths_per_second']:,} truths/s, "
                    f"{row['queries']:,} queries, {row['clusters']:,} clusters "
                    f"({row['clustered_truths']:,} truths), peak RSS {row['peak_rss_mb']} MB "
                    f"(before phase 1: {row['rss_before_mb']} MB), load average {row['load']}",
                    flush=True,
                )
    finally:
        if not args.keep:
            connections.close_all()
            _admin(f'DROP DATABASE IF EXISTS "{BENCH_DB}" WITH (FORCE)')
            _admin(f'DROP DATABASE IF EXISTS "{TEMPLATE_DB}" WITH (FORCE)')

    print(
        "\n| truths | embedding | phase 1 s | embed s | cluster s | truths/s | queries | clusters | planted "
        "| peak RSS MB | load |"
    )
    print("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for r in results:
        print(
            f"| {r['n']:,} | {r['mode']} | {r['seconds']} | {r['embed_seconds']} | {r['cluster_seconds']} | "
            f"{r['truths_per_second']:,} | {r['queries']:,} | {r['clusters']:,} | {r['planted_groups']:,} | "
            f"{r['peak_rss_mb']} | {r['load']} |"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
