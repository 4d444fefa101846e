"""Record the product's model requests on the demo sample, for a model to answer.

    .venv/bin/python samples/record_demo.py OUT.requests.jsonl [--recorded samples/demo.recorded.jsonl]

Runs ``make demo``'s steps (migrate, load the sample, a dry run, then a pass) on a fresh
embedded PostgreSQL in a temporary folder, with the LLM judge at the default settings
talking through litellm to a replay server on 127.0.0.1 (``evaluation.replay``). Every call
the recordings given with ``--recorded`` do not answer wholly (all of them without
``--recorded``) is written to OUT as ``{"key": ..., "messages": [...]}``, one call a line,
identical calls once. A judge call with no recording is answered "keep" and a second look
"withdraw", so the first round records the judge's requests; a second round, with the
judge's replies given, records the second looks they lead to; repeat until OUT is empty.
Nothing outside the temporary folder and OUT is written.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "samples" / "demo.truths.jsonl"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="where to write the unanswered requests (JSON lines)")
    parser.add_argument("--recorded", type=Path, nargs="*", default=[], help="recordings that answer calls already")
    parser.add_argument("--key-prefix", default="demo", help="the requests' keys are PREFIX-1, PREFIX-2, ...")
    args = parser.parse_args()

    pgdata = Path(tempfile.mkdtemp(prefix="iris-record-demo-"))
    os.environ["IRIS_EMBEDDED_PGDATA"] = str(pgdata)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
    os.environ["OPENAI_API_KEY"] = "recorder-not-a-secret"
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()
    from django.conf import settings
    from django.core.management import call_command

    from iris_consolidation.evaluation.replay import Recordings, ReplayServer, load_recordings

    recordings = load_recordings(args.recorded) if args.recorded else Recordings()
    try:
        with ReplayServer(recordings, second_looks="withdraw") as server:
            settings.IRIS_CONSOLIDATION_JUDGE = "llm"
            settings.IRIS_CONSOLIDATION_MODEL = "openai/demo-recorder"
            settings.IRIS_CONSOLIDATION_LLM_API_BASE = server.url
            call_command("migrate", verbosity=0)
            call_command("load_truths", str(SAMPLE), *_create_users_flag())
            call_command("consolidate_truths", dry_run=True, verbosity=0)
            call_command("consolidate_truths", sync=True, verbosity=0)
            stats, unanswered = server.stats, server.unanswered
    finally:
        _stop_server(pgdata)
    seen: set[str] = set()
    lines = []
    for messages in unanswered:
        text = json.dumps(messages, ensure_ascii=False, sort_keys=True)
        if text not in seen:
            seen.add(text)
            lines.append(
                json.dumps({"key": f"{args.key_prefix}-{len(lines) + 1}", "messages": messages}, ensure_ascii=False)
            )
    args.out.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    print(
        f"judge calls {stats.judge_calls} (clusters matched {stats.matched}, missed {stats.missed}); "
        f"second looks {stats.second_look_calls} ({dict(stats.second_looks)}); other calls {stats.other_calls}; "
        f"{len(lines)} request(s) to answer written to {args.out}"
    )
    return 0


def _create_users_flag() -> list[str]:
    """``--create-users`` where ``load_truths`` has it (the sample's users do not exist yet)."""
    from iris_consolidation.management.commands.load_truths import Command

    parser = Command().create_parser("manage.py", "load_truths")
    return ["--create-users"] if any("--create-users" in a.option_strings for a in parser._actions) else []


def _stop_server(pgdata: Path) -> None:
    """Stop the embedded PostgreSQL this script started in ``pgdata`` (a fast shutdown)."""
    pidfile = pgdata / "postmaster.pid"
    if pidfile.is_file():
        try:
            os.kill(int(pidfile.read_text().splitlines()[0]), signal.SIGINT)
        except (OSError, ValueError):
            pass


if __name__ == "__main__":
    raise SystemExit(main())
