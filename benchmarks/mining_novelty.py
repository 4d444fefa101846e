"""Does mining add only what is new? LoCoMo speakers: earlier truths stored, later sessions mined.

Usage (from the repository root, with the project's venv):

    python benchmarks/mining_novelty.py capture OUT.requests.jsonl [--sessions 10] [--users ...]
    python benchmarks/mining_novelty.py replay REPLIES.jsonl [REPLIES.jsonl ...] [--unanswered OUT.requests.jsonl]
        [--passes 2]

In a fresh database on the project's PostgreSQL (embedded unless DATABASE_URL): for each
speaker (``--users``, LoCoMo users of ../shared/data, read there and never copied into the
repository), the last ``--sessions`` sessions are loaded with ``load_sessions`` and the
speaker's observations stated before the first of them with ``load_truths``: the memory a
user has when those sessions arrive.

``capture``: a pass ``--only mine`` against a local server that answers every mining call
with no truth and writes each request (``{"id", "messages"}``, nothing else) to OUT, for a
model to answer (``/work/recordings``'s contract).

``replay``: the default pass (``consolidate_truths --sync --full``) with the LLM judge
answered by ``evaluation.replay`` from the recordings: the reply files given (``{"id",
"reply"}`` lines, joined to their requests file ``<name>.requests.jsonl`` beside them, or
recording files with ``messages``) and the handed LoCoMo judge recording. Prints each mined
truth with its outcome after the pass and the 5 stored truths nearest to it (cosine
similarity), for a reader to judge which restate it; ``--unanswered`` writes the requests
the recordings could not answer (the judge calls that hold a mined truth, or with
``--all-groups`` every one; second looks; mining's novelty checks), for the next recording.
``--passes 2`` runs a default pass after it, whose window holds no session: it proposes
what the cap carried (``IRIS_CONSOLIDATION_MAX_NEW_TRUTHS`` in the environment lowers the cap).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import uuid
from io import StringIO
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")

from benchmarks.queue_rate import _admin, _server_url  # noqa: E402

SHARED = Path(os.environ.get("IRIS_SHARED_DIR") or ROOT.parent / "shared")
#: How mining's novelty check's system prompt begins (``llm/hygiene.CHECK_SYSTEM``).
CHECK_OPENING = "You check truths proposed"
#: The skips of a proposal the report shows (restatements, the cap's, the novelty check's).
SKIPS = ("already", "near-duplicate", "restates", "cap reached", "not checked", "novelty check")
USERS = [
    "locomo:conv-26:Caroline",
    "locomo:conv-26:Melanie",
    "locomo:conv-30:Gina",
    "locomo:conv-30:Jon",
    "locomo:conv-42:Joanna",
    "locomo:conv-42:Nate",
]


def _files(folder: Path, users: list[str], last: int, stored: str = "before") -> tuple[Path, Path]:
    """Each user's last ``last`` sessions and the observations stated before them (``stored``
    "before") or all of them ("all": those of the mined sessions too), in ``folder``."""
    data = SHARED / "data"
    sessions = [json.loads(line) for line in (data / "locomo_sessions.jsonl").read_text().splitlines()]
    truths = [json.loads(line) for line in (data / "locomo_observations.truths.jsonl").read_text().splitlines()]
    kept_sessions, kept_truths = [], []
    for user in users:
        own = sorted((s for s in sessions if s["user"] == user), key=lambda s: s["started_at"])[-last:]
        start = own[0]["started_at"]
        kept_sessions += own
        kept_truths += [t for t in truths if t["user"] == user and (stored == "all" or t["created_at"] < start)]
    truths_path, sessions_path = folder / "t.truths.jsonl", folder / "s.sessions.jsonl"
    truths_path.write_text("".join(json.dumps(t) + "\n" for t in kept_truths))
    sessions_path.write_text("".join(json.dumps(s) + "\n" for s in kept_sessions))
    return truths_path, sessions_path


def _setup(args: argparse.Namespace, env: dict[str, str]) -> str:
    dbname = f"iris_mining_{uuid.uuid4().hex[:8]}"
    _admin(f'CREATE DATABASE "{dbname}"')
    os.environ.update(DATABASE_URL=_server_url(dbname), **env)
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    truths, sessions = _files(Path(tempfile.mkdtemp()), args.users, args.sessions, args.stored)
    call_command("load_truths", str(truths), "--create-users", stdout=StringIO())
    call_command("load_sessions", str(sessions), stdout=StringIO())
    return dbname


def _drop(dbname: str) -> None:
    from django.db import connections

    connections.close_all()
    _admin(f'DROP DATABASE IF EXISTS "{dbname}" WITH (FORCE)')


def capture(args: argparse.Namespace) -> None:
    from iris_consolidation.evaluation.chat_server import ChatServer, Response, completion

    class Capturing(ChatServer):
        def __init__(self) -> None:
            super().__init__()
            self.requests: list[list[dict[str, Any]]] = []
            self.lock = threading.Lock()

        def respond(self, path: str, payload: dict[str, Any], headers: dict[str, str]) -> Response:
            with self.lock:
                self.requests.append(payload["messages"])
            usage = {"prompt_tokens": 600, "completion_tokens": 10, "total_tokens": 610}
            return Response(completion('{"truths": []}', model=payload.get("model", "m"), usage=usage))

    server = Capturing().start()
    dbname = _setup(
        args,
        dict(
            IRIS_CONSOLIDATION_JUDGE="llm",
            IRIS_CONSOLIDATION_MODEL="openai/gpt-4o-mini",
            IRIS_CONSOLIDATION_LLM_API_BASE=server.url,
            OPENAI_API_KEY="local-not-secret",
        ),
    )
    try:
        from django.core.management import call_command

        from iris_consolidation.evaluation.replay import write_requests

        call_command("consolidate_truths", "--sync", "--full", "--only", "mine", stdout=StringIO())
        out = Path(args.out)
        # The request order is the threads'; sort by the data so that ids are stable.
        written = write_requests(out, sorted(server.requests, key=lambda m: m[-1]["content"]))
        print(f"{written} requests -> {out}")
    finally:
        server.stop()
        _drop(dbname)


def _recording_rows(path: Path) -> list[dict[str, Any]]:
    """Recording rows (``messages`` and ``reply``) of a replies file joined to its requests."""
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    if rows and "messages" in rows[0]:
        return rows
    requests_path = path.with_name(path.name.replace(".replies.jsonl", ".requests.jsonl"))
    requests = {r["id"]: r["messages"] for r in map(json.loads, requests_path.read_text().splitlines())}
    out = []
    for row in rows:
        messages = requests[row["id"]]
        system = messages[0]["content"]
        contract = (
            "mine"
            if "chat sessions" in system
            else "check"
            if system.startswith(CHECK_OPENING)
            else ("second_look" if "<checks>" in messages[-1]["content"] else "judge")
        )
        out.append({"set": "h38m", "contract": contract, "messages": messages, "reply": row["reply"]})
    return out


def replay(args: argparse.Namespace) -> None:
    folder = Path(tempfile.mkdtemp())
    recording = folder / "all.jsonl"
    rows = [r for p in args.replies for r in _recording_rows(Path(p))]
    handed = SHARED / "eval" / "recorded" / "locomo.jsonl"
    recording.write_text("".join(json.dumps(r) + "\n" for r in rows))
    dbname = _setup(args, {})
    try:
        from django.core.management import call_command

        from iris_consolidation.evaluation.replay import replaying, write_requests
        from iris_consolidation.models import Truth

        stored = {t.pk: t for t in Truth.all_objects.all()}
        with replaying([recording, handed], second_looks=args.second_looks) as (_, server):
            # The first pass mines every session; a later one (the default, cursor pass) has no
            # session in its window: it proposes what the cap carried, and judges what changed.
            for n in range(args.passes):
                out = StringIO()
                try:
                    call_command("consolidate_truths", "--sync", *(["--full"] if n == 0 else []), stdout=out)
                except Exception as exc:  # a failed cluster exits non-zero; the figures still count
                    print("pass:", exc)
                print(f"pass {n + 1}:", next(line for line in out.getvalue().splitlines()
                                              if line.startswith("Summary:")))
            print("replay:", server.stats)
            if args.unanswered:
                # The judge's, the second look's and the novelty check's (relocation's calls, in
                # report mode, are not needed).
                mined = _mined_contents()
                asked = [
                    m for m in server.unanswered
                    if ("<truths>" in m[-1]["content"]
                        and (args.all_groups or any(t in m[-1]["content"] for t in mined)))
                    or "<checks>" in m[-1]["content"]
                    or str(m[0]["content"]).startswith(CHECK_OPENING)
                ]
                written = write_requests(Path(args.unanswered), asked)
                print(f"{written} unanswered requests -> {args.unanswered}")
        _report(stored_ids=set(stored))
    finally:
        _drop(dbname)


def _mined_contents() -> set[str]:
    """The texts of the truths mining added in the pass, as the judge's JSON quotes them."""
    from iris_consolidation.models import StageResult

    return {
        json.dumps(f["content"], ensure_ascii=False)
        for result in StageResult.objects.filter(stage="mine")
        for f in result.findings[1:]
        if f.get("outcome") == "added"
    }


def _report(*, stored_ids: set[int]) -> None:
    """Every proposal of the pass (added, or skipped as known or a restatement) with its
    outcome and the 5 stored truths nearest to it, and the mined truths' state after it."""
    import numpy as np

    from iris_consolidation.embeddings import get_embedder
    from iris_consolidation.models import ClusterReview, StageResult, Truth

    results = StageResult.objects.filter(stage="mine").select_related("user").order_by("user_id", "id")
    counts: dict[str, int] = {}
    checks = 0
    for result in results:
        checks += int(result.findings[0].get("checks") or 0)
        stored = list(Truth.all_objects.filter(pk__in=stored_ids, user_id=result.user_id).order_by("pk"))
        matrix = np.array([np.asarray(t.embedding, dtype=np.float32) for t in stored])
        proposals = [
            f
            for f in result.findings[1:]
            if f.get("outcome") == "added"
            or f.get("why", "").startswith(SKIPS)
        ]
        vectors = get_embedder().embed([f["content"] for f in proposals]) if proposals else []
        for f, vector in zip(proposals, vectors, strict=True):
            kind = "added" if f["outcome"] == "added" else f["why"].split(" ")[0]
            kind += "-by-check" if "novelty check" in f.get("why", "") + f.get("reason", "") else ""
            counts[kind] = counts.get(kind, 0) + 1
            state = ""
            if f.get("truth_id"):
                truth = Truth.all_objects.get(pk=f["truth_id"])
                state = " live" if truth.retired_at is None else f" retired ({truth.retired_reason}"
                state += (
                    f" by #{truth.superseded_by_id})"
                    if truth.retired_at and truth.superseded_by_id
                    else (")" if truth.retired_at else "")
                )
            change = f" changes #{f['changes']}" if f.get("changes") else ""
            print(f"\n[{result.user.username}] run {result.run_id} {kind}{state}{change} #{f.get('truth_id')}: "
                  f"{f['content']!r}")
            if kind != "added":
                print(f"    why: {f['why']}")
            if f.get("changes") and f.get("truth_id"):
                old = Truth.all_objects.get(pk=f["changes"])
                print(f"    changed #{old.pk}: retired {old.retired_reason} by #{old.superseded_by_id}"
                      if old.retired_at else f"    changed #{old.pk}: live", repr(old.content))
                # Every review of the pair's truths, in the order they were recorded.
                reviews = ClusterReview.objects.filter(members__in=[old.pk, f["truth_id"]]).distinct()
                for review in reviews.order_by("pk"):
                    members = sorted(review.members.values_list("pk", flat=True))
                    print(f"    review #{review.pk} {review.outcome} members {members}: applied "
                          f"{[(a['action'], a.get('truth_ids')) for a in review.applied_actions]} "
                          f"refused {[r.get('code') for r in review.rejections]}")
            sims = matrix @ np.asarray(vector, dtype=np.float32)
            for i in np.argsort(-sims)[:5]:
                other = Truth.all_objects.get(pk=stored[i].pk)
                live = "live" if other.retired_at is None else f"retired:{other.retired_reason}"
                print(f"    {sims[i]:.3f} #{other.pk} ({live}) {other.content}")
    print("\nproposals by outcome:", counts, "novelty check calls:", checks)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("capture", "replay"):
        p = sub.add_parser(name)
        p.add_argument("--users", nargs="*", default=USERS)
        p.add_argument("--sessions", type=int, default=10, help="each user's last N sessions are mined")
        p.add_argument(
            "--stored",
            choices=("before", "all"),
            default="before",
            help="the observations stored: those stated before the mined sessions, or all",
        )
    sub.choices["capture"].add_argument("out")
    sub.choices["replay"].add_argument("replies", nargs="+")
    sub.choices["replay"].add_argument("--unanswered", default=None)
    sub.choices["replay"].add_argument(
        "--all-groups",
        action="store_true",
        help="--unanswered writes every judge call missed, not only those holding a mined truth",
    )
    sub.choices["replay"].add_argument(
        "--passes", type=int, default=1, help="passes to run: the later ones add what the cap carried"
    )
    sub.choices["replay"].add_argument(
        "--second-looks",
        default="withdraw",
        choices=("confirm", "withdraw"),
        help="the answer to a second look with no recording",
    )
    args = parser.parse_args()
    if not (SHARED / "data" / "locomo_sessions.jsonl").exists():
        raise SystemExit(f"no LoCoMo data under {SHARED / 'data'}; set IRIS_SHARED_DIR")
    {"capture": capture, "replay": replay}[args.command](args)


if __name__ == "__main__":
    main()
