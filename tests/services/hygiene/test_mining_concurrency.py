"""Mining within its time: a user's mining calls run at once (MINING_CONCURRENCY), a call
that fails in transport is asked again alone, and a user mined by a model gets a phase-1
task of its own."""

from __future__ import annotations

import json
import threading
import time
from datetime import timedelta

import pytest
from django.utils import timezone

from iris_consolidation.embeddings import get_embedder
from iris_consolidation.llm import get_judge_client
from iris_consolidation.models import ConsolidationJob, Truth
from iris_consolidation.services.hygiene import stages
from iris_consolidation.services.queue import dispatch
from iris_consolidation.services.run import lifecycle
from tests import llm_stub
from tests.services.hygiene.test_mining import make_session

pytestmark = pytest.mark.django_db

SESSIONS = 6


class Miner:
    """Answers each mining call after ``delay`` seconds (or once ``together`` calls are in
    flight at once: a barrier, which fails the call after 10 s) with the session's first
    message of the person as a truth; counts calls in flight; ``fail`` names sessions (their
    message) whose calls fail with a 500 that many times first."""

    def __init__(self, *, delay: float = 0.0, together: int = 0, fail: dict[str, int] | None = None):
        self.delay, self.fail = delay, dict(fail or {})
        self.barrier = threading.Barrier(together, timeout=10) if together else None
        self.lock = threading.Lock()
        self.in_flight = self.most = 0
        self.asked: list[str] = []

    def __call__(self, payload):
        data = llm_stub.StubLLMServer.data_of({"json": payload})
        first = next(m for m in data["session"]["messages"] if m["role"] == "user")
        with self.lock:
            self.asked.append(first["content"])
            self.in_flight += 1
            self.most = max(self.most, self.in_flight)
            failing = self.fail.get(first["content"], 0)
            if failing:
                self.fail[first["content"]] = failing - 1
        if self.barrier:
            self.barrier.wait()
        time.sleep(self.delay)
        with self.lock:
            self.in_flight -= 1
        if failing:
            return llm_stub.error(500)
        return llm_stub.text(json.dumps({"truths": [{"content": first["content"], "kind": "fact", "confidence": "high",
                                                     "evidence": [first["id"]], "reason": "said"}]}))


def statement(day):
    return f"I ran a marathon in city number {day}"


@pytest.fixture
def ana(user_factory):
    user = user_factory("ana")
    for day in range(SESSIONS, 0, -1):
        make_session(user, f"s{day}", at=timezone.now() - timedelta(days=day), messages=[("user", statement(day))])
    return user


def started(run):
    run.started_at = timezone.now()
    run.save(update_fields=["started_at"])
    return run


def _mine(run_factory, user):
    run = started(run_factory(full=True))
    return stages.run_mine(run, user.pk, embedder=get_embedder(), client=get_judge_client("llm"))


def test_a_users_mining_calls_run_at_once_up_to_the_limit(llm_server, ana, run_factory, settings):
    settings.IRIS_CONSOLIDATION_MINING_CONCURRENCY = 3
    miner = Miner(together=3)  # each call answers once three are in flight: two rounds of three
    llm_server.handler = miner

    result = _mine(run_factory, ana)

    assert miner.most == 3 and len(miner.asked) == SESSIONS
    assert result.applied == SESSIONS and result.findings[0]["errors"] == []


def test_one_at_a_time_when_the_limit_is_one(llm_server, ana, run_factory, settings):
    settings.IRIS_CONSOLIDATION_MINING_CONCURRENCY = 1
    miner = Miner(delay=0.1)
    llm_server.handler = miner

    result = _mine(run_factory, ana)

    assert miner.most == 1 and result.applied == SESSIONS


def test_a_call_that_fails_is_asked_again_alone_and_the_rest_are_kept(llm_server, ana, run_factory, settings):
    settings.IRIS_CONSOLIDATION_MINING_CONCURRENCY = 4
    miner = Miner(fail={statement(3): 1})
    llm_server.handler = miner

    result = _mine(run_factory, ana)

    assert miner.asked.count(statement(3)) == 2 and len(miner.asked) == SESSIONS + 1
    assert result.applied == SESSIONS and result.findings[0]["errors"] == []
    assert Truth.objects.filter(user=ana, content=statement(3)).exists()


def test_a_call_that_fails_twice_is_an_error_of_its_session_only(llm_server, ana, run_factory, settings):
    miner = Miner(fail={statement(3): 2})
    llm_server.handler = miner

    result = _mine(run_factory, ana)

    assert miner.asked.count(statement(3)) == 2
    assert result.applied == SESSIONS - 1
    (error,) = result.findings[0]["errors"]
    assert error.startswith("session s3: ")
    assert not Truth.objects.filter(user=ana, content=statement(3)).exists()


def test_a_user_mined_by_a_model_gets_a_phase_one_task_of_its_own(llm_server, ana, user_factory, truth_factory,
                                                                  settings):
    settings.IRIS_CONSOLIDATION_PHASE1_USERS_PER_TASK = 50
    others = [user_factory(f"u{i}") for i in range(3)]
    for user in others:
        truth_factory("Likes tea", user=user)
        truth_factory("Likes coffee", user=user)
    run = lifecycle.create_run(trigger="command", full=True, judge=get_judge_client().name)
    user_ids = lifecycle.start_run(run)  # makes a phase 1 job per user
    jobs = list(ConsolidationJob.objects.filter(run=run, kind="user").order_by("pk"))

    groups = [[job.user_id for job in group] for group in dispatch.user_batches(jobs)]

    assert [ana.pk] in groups
    assert sorted(pk for group in groups if group != [ana.pk] for pk in group) == sorted(u.pk for u in others)
    assert len(groups) == 2

    settings.IRIS_CONSOLIDATION_JUDGE = "rules"  # the rules mine offline: quick, batched as before
    rules_run = lifecycle.create_run(trigger="command", full=True, judge="rules")
    rules_jobs = ConsolidationJob.objects.bulk_create(
        ConsolidationJob(run=rules_run, kind="user", user_id=pk, key=f"user:{pk}") for pk in user_ids
    )
    assert len(dispatch.user_batches(rules_jobs)) == 1
