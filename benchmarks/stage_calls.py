"""The forecast of every call against the calls a pass makes: LoCoMo speakers with their sessions.

Usage (from the repository root, with the project's venv):

    python benchmarks/stage_calls.py [--speakers 4] [--model openai/gpt-4o-mini] [--delay 0]

In a fresh database on the project's PostgreSQL (embedded unless DATABASE_URL): the truths
and sessions of the first ``--speakers`` LoCoMo speakers of ../shared/data (read there,
never copied into the repository; filtered into a temporary folder), loaded with
``load_truths`` and ``load_sessions``. A local OpenAI-compatible server answers every call
plausibly and counts it: the judge keeps every cluster; mining states one fact per session
(the first of the person's messages that says "I ... " at some length, high confidence, that
message as evidence); noise keeps every candidate; relocation and promotion name none.
``--delay`` seconds before each answer (a model's latency).

Then, with the LLM judge at ``--model`` pointed at that server and the default stages:
``consolidate_truths --estimate --full`` (must make no call), then ``consolidate_truths
--sync --full``; prints the forecast line, the calls counted per kind, and the forecast's
``model_calls`` against them (and the judge's part alone: the forecast before every stage
was counted). ``--cap USD``: ``MAX_COST_PER_RUN`` for the pass.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from io import StringIO
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")

from benchmarks.queue_rate import _admin, _server_url  # noqa: E402

SHARED = Path(os.environ.get("IRIS_SHARED_DIR") or ROOT.parent / "shared")
I_SAID = re.compile(r"\bI(?:'m| am| have| love| like| work| live| want| went| started|'ve)\b")


def _kind(payload: dict[str, Any]) -> str:
    from iris_consolidation.llm import hygiene as prompts

    system, last = (_text(payload["messages"][i]["content"]) for i in (0, -1))
    if "<candidates>" in last:
        return "noise"
    if "<checks>" in last:
        return "second look"
    return {prompts.MINING_SYSTEM: "mine", prompts.RELOCATE_SYSTEM: "relocate",
            prompts.PROMOTE_SYSTEM: "promote"}.get(system, "judge")


def _text(content: Any) -> str:
    """A message's text: a string, or the text of its content blocks (a cacheable prompt)."""
    return content if isinstance(content, str) else "".join(block.get("text", "") for block in content)


def _between(text: str, start: str, end: str) -> dict[str, Any]:
    return json.loads(text[text.index(start) + len(start): text.rindex(end)])


def _answer(kind: str, payload: dict[str, Any]) -> str:
    """A plausible reply of ``kind`` to ``payload`` (see the module docstring)."""
    last = _text(payload["messages"][-1]["content"])
    if kind == "judge":
        clusters = json.loads(last[last.index("{"): last.rindex("}") + 1])["clusters"]
        return json.dumps({"clusters": [{"id": c["id"], "actions": [], "reasoning": "distinct facts"}
                                        for c in clusters]})
    if kind == "noise":
        candidates = json.loads(last[last.index("{"): last.rindex("}") + 1])["candidates"]
        return json.dumps({"results": [{"id": c["id"], "verdict": "keep", "reason": "still matters"}
                                       for c in candidates]})
    if kind == "second look":
        checks = _between(last, "<checks>", "</checks>")["checks"]
        return json.dumps({"checks": [{"id": c["id"], "verdict": "confirm", "reason": "fine"} for c in checks]})
    if kind == "mine":
        session = _between(last, "<data>", "</data>")["session"]
        said = [m for m in session["messages"] if m["role"] == "user" and I_SAID.search(m["content"])
                and len(m["content"]) >= 40]
        truths = [{"content": said[0]["content"][:200], "kind": "fact", "confidence": "high",
                   "evidence": [said[0]["id"]], "reason": "stated by the person"}] if said else []
        return json.dumps({"truths": truths})
    return json.dumps({"notes": []} if kind == "relocate" else {"rules": []})


def _server(delay: float) -> Any:
    from iris_consolidation.evaluation.chat_server import ChatServer, Response, completion

    class Counting(ChatServer):
        def __init__(self) -> None:
            super().__init__()
            self.counts: Counter[str] = Counter()
            self.lock = threading.Lock()

        def respond(self, path: str, payload: dict[str, Any], headers: dict[str, str]) -> Response:
            kind = _kind(payload)
            with self.lock:
                self.counts[kind] += 1
            if delay:
                time.sleep(delay)
            usage = {"prompt_tokens": 600, "completion_tokens": 80, "total_tokens": 680}
            return Response(completion(_answer(kind, payload), model=payload.get("model", "m"), usage=usage))

    return Counting().start()


def _speakers_files(count: int, folder: Path, named: list[str] | None) -> tuple[Path, Path, list[str]]:
    """The truths and sessions of ``named`` users, else the first ``count`` speakers, written to ``folder``."""
    truths = (SHARED / "data" / "locomo_observations.truths.jsonl").read_text().splitlines()
    users: list[str] = []
    for line in truths:
        user = json.loads(line)["user"]
        if user not in users:
            users.append(user)
    chosen = set(named) if named else set(users[:count])
    sessions = (SHARED / "data" / "locomo_sessions.jsonl").read_text().splitlines()
    truths_path, sessions_path = folder / "t.truths.jsonl", folder / "s.sessions.jsonl"
    truths_path.write_text("\n".join(line for line in truths if json.loads(line)["user"] in chosen) + "\n")
    sessions_path.write_text("\n".join(line for line in sessions if json.loads(line)["user"] in chosen) + "\n")
    return truths_path, sessions_path, sorted(chosen)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--speakers", type=int, default=4)
    parser.add_argument("--users", nargs="*", default=None,
                        help="these LoCoMo users (e.g. locomo:conv-42:Nate) instead of the first --speakers")
    parser.add_argument("--model", default="openai/gpt-4o-mini", help="priced in litellm's local map")
    parser.add_argument("--delay", type=float, default=0.0)
    parser.add_argument("--cap", type=float, default=None, help="MAX_COST_PER_RUN of the pass (USD)")
    args = parser.parse_args()
    if not (SHARED / "data" / "locomo_sessions.jsonl").exists():
        raise SystemExit(f"no LoCoMo data under {SHARED / 'data'}; set IRIS_SHARED_DIR")

    dbname = f"iris_stages_{uuid.uuid4().hex[:8]}"
    _admin(f'CREATE DATABASE "{dbname}"')
    server = _server(args.delay)
    os.environ.update(
        DATABASE_URL=_server_url(dbname), IRIS_CONSOLIDATION_JUDGE="llm", IRIS_CONSOLIDATION_MODEL=args.model,
        IRIS_CONSOLIDATION_LLM_API_BASE=server.url, OPENAI_API_KEY="local-not-secret",
    )
    try:
        import django

        django.setup()
        from django.core.management import call_command
        from django.test import override_settings

        from iris_consolidation.models import ConsolidationRun

        call_command("migrate", verbosity=0)
        folder = Path(tempfile.mkdtemp())
        truths, sessions, users = _speakers_files(args.speakers, folder, args.users)
        call_command("load_truths", str(truths), "--create-users", stdout=StringIO())
        call_command("load_sessions", str(sessions), stdout=StringIO())
        print("speakers:", ", ".join(users))

        out = StringIO()
        started = time.monotonic()
        call_command("consolidate_truths", "--estimate", "--full", stdout=out)
        line = out.getvalue().strip().splitlines()[-1]
        print(f"estimate ({time.monotonic() - started:.1f} s, {sum(server.counts.values())} calls made):")
        print(" ", line)
        forecast_calls = int(re.search(r"model_calls=(\d+)", line).group(1))
        judge_only = int(re.search(r" calls=(\d+) at", line).group(1)) + int(re.search(r"~(\d+) second", line).group(1))

        out = StringIO()
        started = time.monotonic()
        with override_settings(IRIS_CONSOLIDATION_MAX_COST_PER_RUN=args.cap):
            try:
                call_command("consolidate_truths", "--sync", "--full", "-v", "2", stdout=out)
            except Exception as exc:  # a failed cluster exits non-zero; the figures still count
                print("pass:", exc)
        seconds = time.monotonic() - started
        summary = next(s for s in out.getvalue().splitlines() if s.startswith("Summary:"))
        made = sum(server.counts.values())
        print(f"pass ({seconds:.1f} s): {made} calls: {dict(sorted(server.counts.items()))}")
        print(" ", summary)
        run = ConsolidationRun.objects.order_by("-created_at").first()
        if args.cap is not None:
            print(f"  cap ${args.cap:.6f}: run cost ${run.cost:.6f}, stage deferrals "
                  f"{ {k: v.get('deferred', 0) for k, v in run.inventory['stages'].items() if v.get('deferred')} }"
                  f", clusters deferred {run.deferred}")
        for stage_line in out.getvalue().splitlines():
            if "deferred" in stage_line and not stage_line.startswith("Summary"):
                print(" ", stage_line.strip())
        print(f"forecast model_calls={forecast_calls} against {made} made: {100 * (forecast_calls - made) / made:+.1f}%"
              f" (the judge's part alone: {judge_only}, {100 * (judge_only - made) / made:+.1f}%)")
    finally:
        server.stop()
        from django.db import connections

        connections.close_all()
        _admin(f'DROP DATABASE IF EXISTS "{dbname}" WITH (FORCE)')


if __name__ == "__main__":
    main()
