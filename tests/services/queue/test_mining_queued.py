"""LoCoMo speakers with their sessions queued under one real ``qcluster``, every model call
answered after 2 s: the run ends done with no failed job, and the mined truths are added.

Four speakers of 29 sessions each: one at a time, a user's mining alone (58 s at 2 s a
call) plus relocation, promotion and noise would overrun its 60 s phase-1 task, which
would be retried from the start; their calls run MINING_CONCURRENCY at once instead, and
each such user has a task of its own. Reads ../shared/data (skips without it)."""

from __future__ import annotations

import json
import re
import time
from io import StringIO

import pytest
from django.core.management import call_command

from iris_consolidation.models import ConsolidationJob, ConsolidationRun, Truth
from tests import llm_stub
from tests.qcluster import wait_until
from tests.services.pipeline.test_stage_forecast import stage_of

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

SPEAKERS = ("locomo:conv-42:Joanna", "locomo:conv-42:Nate", "locomo:conv-43:John", "locomo:conv-43:Tim")
LATENCY = 2.0
SAYS = re.compile(r"\bI(?:'m| am| have| love| like| work| live| want| went| started|'ve)\b")


def plausible(payload):
    """A model that answers after ``LATENCY`` s: it keeps every cluster and noise candidate,
    names no note and no rule, and mines one fact per session (the person's first "I ..."
    statement of some length)."""
    stage = stage_of(payload)
    if stage == "mine":
        data = llm_stub.StubLLMServer.data_of({"json": payload})
        said = [m for m in data["session"]["messages"]
                if m["role"] == "user" and SAYS.search(m["content"]) and len(m["content"]) >= 40]
        truths = [{"content": said[0]["content"][:200], "kind": "fact", "confidence": "high",
                   "evidence": [said[0]["id"]], "reason": "stated"}] if said else []
        reply = llm_stub.text(json.dumps({"truths": truths}))
    elif stage == "noise":
        reply = llm_stub.noise_results([{"id": c["id"], "verdict": "keep", "reason": "matters"}
                                        for c in llm_stub.candidates_of(payload)])
    elif stage in ("relocate", "promote"):
        reply = llm_stub.text(json.dumps({"notes": []} if stage == "relocate" else {"rules": []}))
    else:
        reply = llm_stub.verdict()
    reply.delay = LATENCY
    return reply


def test_speakers_queued_with_a_slow_model_end_done_with_their_mined_truths(
    qcluster, llm_server, shared_dir, tmp_path
):
    data = shared_dir / "data"
    truths, sessions = tmp_path / "t.truths.jsonl", tmp_path / "s.sessions.jsonl"
    for source, target in ((data / "locomo_observations.truths.jsonl", truths),
                           (data / "locomo_sessions.jsonl", sessions)):
        lines = [line for line in source.read_text().splitlines() if json.loads(line)["user"] in SPEAKERS]
        target.write_text("\n".join(lines) + "\n")
    call_command("load_truths", str(truths), "--create-users", stdout=StringIO())
    call_command("load_sessions", str(sessions), stdout=StringIO())
    before = Truth.objects.count()
    llm_server.handler = plausible
    worker = qcluster(
        IRIS_CONSOLIDATION_JUDGE="llm", IRIS_CONSOLIDATION_MODEL="openai/stub-judge",
        IRIS_CONSOLIDATION_LLM_API_BASE=llm_server.url, OPENAI_API_KEY="test-key-not-secret",
        IRIS_CONSOLIDATION_JOBS_PER_MINUTE="60", Q_WORKERS="2",
    )
    out = StringIO()
    began = time.monotonic()
    call_command("consolidate_truths", "--full", stdout=out)
    run_id = re.fullmatch(r"Dispatched batch: (\S+)\n", out.getvalue()).group(1)

    run = wait_until(
        lambda: ConsolidationRun.objects.filter(pk=run_id, finished_at__isnull=False).first(),
        timeout=900, interval=1.0, what=f"run {run_id} to finish; worker log:\n{worker.log}",
    )
    seconds = time.monotonic() - began

    jobs = ConsolidationJob.objects.filter(run_id=run_id)
    assert (run.status, run.failed) == (ConsolidationRun.Status.DONE, 0), worker.log
    assert not jobs.filter(status="failed").exists()
    user_jobs = jobs.filter(kind="user")
    assert user_jobs.count() == 4 and sum(user_jobs.values_list("faults", flat=True)) == 0
    mine = run.stage_results.filter(stage="mine")
    assert sorted(r.findings[0]["sessions"].__len__() for r in mine) == [29, 29, 29, 29]
    added = sum(r.applied for r in mine)
    assert added > 0 and Truth.all_objects.filter(source__startswith="session:").count() == added
    assert Truth.all_objects.count() >= before + added
    print(f"queued trial: {seconds:.1f} s end to end, {run.llm_calls} calls ({run.stage_calls} of the stages), "
          f"{added} truths mined")
