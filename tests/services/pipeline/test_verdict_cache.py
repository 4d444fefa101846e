"""The verdict cache: "keep" verdicts keyed by member content, prompt version and model."""

from __future__ import annotations

import pytest

from iris_consolidation.llm import litellm_client
from iris_consolidation.llm.base import JudgeRequest, Verdict
from iris_consolidation.models import VerdictCacheEntry
from iris_consolidation.services.pipeline import verdict_cache
from tests import llm_stub
from tests.helpers import judge_request
from tests.incremental_support import make_pairs, run_pass

pytestmark = pytest.mark.django_db


def _request(*contents: str, protected: bool = False) -> JudgeRequest:
    """Members t1, t2, ...; ``protected``: t1 is."""
    return judge_request(*contents, t1={"protected": protected})


class _Judge:
    """A judge that counts its calls and always keeps; ``prompt_version`` as given."""

    name = "counting"

    def __init__(self, prompt_version: str = "v1") -> None:
        self.prompt_version = prompt_version
        self.calls = 0

    def judge(self, request: JudgeRequest) -> Verdict:
        self.calls += 1
        return Verdict(actions=(), reasoning="distinct facts", model=self.name, prompt_version=self.prompt_version)


def _judge(*, request: JudgeRequest, client: _Judge, user_id: int) -> Verdict:
    """What ``consolidate_cluster`` does around the judge: the cache, else a call and a store."""
    cached = verdict_cache.use_cached_keep(user_id=user_id, request=request, client=client)
    if cached is not None:
        return cached
    verdict = client.judge(request)
    verdict_cache.store_keep(user_id=user_id, request=request, client=client, verdict=verdict)
    return verdict


def test_cache_is_invalidated_by_a_prompt_version_change(llm_server, truth_factory, user_factory, monkeypatch):
    make_pairs(truth_factory, user_factory(), 3)
    run_pass(full=True)
    cached = run_pass(full=True)
    assert (cached.llm_calls, cached.cache_hits) == (0, 3)

    monkeypatch.setattr(litellm_client, "PROMPT_VERSION", "judge-test-bumped")
    bumped = run_pass(full=True)

    assert (bumped.llm_calls, bumped.cache_hits) == (1, 0)  # three clusters of one user, one call
    assert len(llm_server.chat_requests()) == 2
    assert set(bumped.reviews.values_list("prompt_version", flat=True)) == {"judge-test-bumped"}


def test_cache_is_invalidated_by_a_model_change(llm_server, truth_factory, user_factory, settings):
    make_pairs(truth_factory, user_factory(), 2)
    run_pass(full=True)

    settings.IRIS_CONSOLIDATION_MODEL = "openai/another-judge"
    other = run_pass(full=True)

    assert (other.llm_calls, other.cache_hits) == (1, 0)
    assert {r["json"]["model"] for r in llm_server.chat_requests()[1:]} == {"another-judge"}


def test_cache_is_invalidated_by_any_member_change(user_factory):
    user = user_factory()
    judge = _Judge()
    _judge(request=_request("Has a cat", "Owns a cat"), client=judge, user_id=user.pk)

    _judge(request=_request("Has a cat", "Owns a cat"), client=judge, user_id=user.pk)
    assert judge.calls == 1
    _judge(request=_request("Has a cat", "Owns two cats"), client=judge, user_id=user.pk)
    _judge(
        request=_request("Has a cat", "Owns a cat", protected=True), client=judge, user_id=user.pk
    )

    assert judge.calls == 3
    assert VerdictCacheEntry.objects.count() == 3


def test_cached_keep_is_reused_only_for_the_same_user(user_factory):
    alice, bob = user_factory(), user_factory()
    judge = _Judge()

    _judge(request=_request("Likes tea", "Enjoys tea"), client=judge, user_id=alice.pk)
    _judge(request=_request("Likes tea", "Enjoys tea"), client=judge, user_id=bob.pk)

    assert judge.calls == 2


def test_merge_verdicts_are_not_cached(llm_server, truth_factory, user_factory):
    make_pairs(truth_factory, user_factory(), 1)
    llm_server.script = [
        llm_stub.verdict([{"action": "merge", "ids": ["t1", "t2"], "content": "fact 0 a and b", "reason": "same"}])
    ]

    run = run_pass(full=True)

    assert run.merged == 1
    assert not VerdictCacheEntry.objects.exists()


def test_judge_without_a_prompt_version_is_never_cached(user_factory):
    user = user_factory()
    judge = _Judge(prompt_version="")

    _judge(request=_request("a", "b"), client=judge, user_id=user.pk)
    _judge(request=_request("a", "b"), client=judge, user_id=user.pk)

    assert judge.calls == 2 and not VerdictCacheEntry.objects.exists()


def test_cache_hit_keeps_the_original_reasoning_and_costs_nothing(user_factory):
    user = user_factory()
    judge = _Judge()
    _judge(request=_request("x", "y"), client=judge, user_id=user.pk)

    hit = _judge(request=_request("x", "y"), client=judge, user_id=user.pk)

    assert (hit.actions, hit.llm_calls, hit.tokens, hit.cost) == ((), 0, 0, 0.0)
    assert "distinct facts" in hit.reasoning and (hit.model, hit.prompt_version) == ("counting", "v1")
    assert VerdictCacheEntry.objects.get().hits == 1
