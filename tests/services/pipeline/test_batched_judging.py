"""Several clusters per judge call (wire contract v2), against the scripted stub server:
calls counted, one user per call, a bad entry isolated to its cluster, usage recorded."""

from __future__ import annotations

import json

import pytest

from iris_consolidation.models import ClusterReview, Origin, Truth
from iris_consolidation.services.pipeline import judging
from tests import llm_stub
from tests.conftest import vector_at
from tests.helpers import merge_dict
from tests.incremental_support import make_pairs, run_pass

pytestmark = pytest.mark.django_db


def _live(user) -> set[str]:
    return set(Truth.objects.filter(user=user).values_list("content", flat=True))


def test_a_multi_user_pass_packs_each_users_clusters_and_never_mixes_users(
    llm_server, truth_factory, user_factory, settings
):
    settings.IRIS_CONSOLIDATION_CLUSTERS_PER_CALL = 3
    alice, bob = user_factory("alice"), user_factory("bob")
    make_pairs(truth_factory, alice, 5, prefix="alice")
    make_pairs(truth_factory, bob, 2, prefix="bob", start=5)

    run = run_pass()

    requests = llm_server.chat_requests()
    # alice: 5 clusters in calls of 3 + 2; bob: 2 clusters in one call.
    assert [len(llm_server.clusters_of(r)) for r in requests] == [3, 2, 2]
    for request in requests:
        owners = {t["content"].split()[0] for t in llm_server.truths_of(request)}
        assert len(owners) == 1
        aliases = [t["id"] for t in llm_server.truths_of(request)]
        assert len(aliases) == len(set(aliases))
    assert (run.clusters_found, run.llm_calls, run.model_clusters, run.kept, run.failed) == (7, 3, 7, 7, 0)
    assert sum(run.reviews.values_list("llm_calls", flat=True)) == 3


def test_one_call_judges_each_cluster_on_its_own_verdict(llm_server, truth_factory, user_factory):
    user = user_factory()
    make_pairs(truth_factory, user, 2)
    llm_server.script = [
        llm_stub.clusters_reply(
            [
                {"id": "c1", "actions": [merge_dict(["t1", "t2"], "fact 0 a and b")], "reasoning": "one fact"},
                {"id": "c2", "actions": [], "reasoning": "two facts"},
            ]
        )
    ]

    run = run_pass()

    assert len(llm_server.chat_requests()) == 1
    assert _live(user) == {"fact 0 a and b", "fact 1 a", "fact 1 b"}
    assert sorted(run.reviews.values_list("outcome", "reasoning")) == [("applied", "one fact"), ("kept", "two facts")]
    second = run.reviews.get(outcome="kept")
    assert [row["alias"] for row in second.snapshot] == ["t3", "t4"]


def test_a_cluster_missing_from_the_reply_is_asked_again_alone_and_never_taken_as_keep(
    llm_server, truth_factory, user_factory
):
    user = user_factory()
    make_pairs(truth_factory, user, 3)
    llm_server.script = [
        llm_stub.clusters_reply(
            [
                {"id": "c1", "actions": [merge_dict(["t1", "t2"], "fact 0 a and b")], "reasoning": "one"},
                {"id": "c3", "actions": [], "reasoning": "distinct"},
            ]
        ),
        llm_stub.clusters_reply(
            [{"id": "c1", "actions": [merge_dict(["t3", "t4"], "fact 1 a and b")], "reasoning": "x"}]
        ),
    ]

    run = run_pass()

    requests = llm_server.chat_requests()
    assert [[t["id"] for t in llm_server.truths_of(r)] for r in requests] == [
        ["t1", "t2", "t3", "t4", "t5", "t6"],
        ["t3", "t4"],
    ]
    assert _live(user) == {"fact 0 a and b", "fact 1 a and b", "fact 2 a", "fact 2 b"}
    assert (run.merged, run.kept, run.failed, run.llm_calls) == (2, 1, 0, 2)


def test_a_cluster_missing_every_time_fails_alone_with_nothing_written(llm_server, truth_factory, user_factory):
    user = user_factory()
    make_pairs(truth_factory, user, 2)

    def handler(payload):
        clusters = llm_server.clusters_of({"json": payload})
        entries = [
            {
                "id": c["id"],
                "actions": [merge_dict([t["id"] for t in c["truths"]], "fact 0 a and b")],
                "reasoning": "ok",
            }
            for c in clusters
            if c["truths"][0]["content"].startswith("fact 0")
        ]
        return llm_stub.clusters_reply(entries)

    llm_server.handler = handler

    run = run_pass()

    assert _live(user) == {"fact 0 a and b", "fact 1 a", "fact 1 b"}
    failed = run.reviews.get(outcome=ClusterReview.Outcome.FAILED)
    assert {row["content"] for row in failed.snapshot} == {"fact 1 a", "fact 1 b"}
    assert failed.failed_members == ["t3", "t4"]
    assert failed.failure == ClusterReview.Failure.INVALID_REPLY
    assert (run.merged, run.failed) == (1, 1)


def test_an_action_naming_a_sibling_clusters_truth_is_a_foreign_id(llm_server, truth_factory, user_factory):
    user = user_factory()
    make_pairs(truth_factory, user, 2)
    llm_server.script = [
        llm_stub.clusters_reply(
            [
                {"id": "c1", "actions": [merge_dict(["t1", "t3"], "fact 0 a; fact 1 a")], "reasoning": "across"},
                {"id": "c2", "actions": [merge_dict(["t3", "t4"], "fact 1 a and b")], "reasoning": "same"},
            ]
        )
    ]

    run = run_pass()

    assert _live(user) == {"fact 0 a", "fact 0 b", "fact 1 a and b"}
    rejected = run.reviews.get(outcome=ClusterReview.Outcome.REJECTED)
    assert {row["content"] for row in rejected.snapshot} == {"fact 0 a", "fact 0 b"}
    assert rejected.rejections[0]["code"] == "unknown_id"  # not one of this cluster's aliases
    assert run.reviews.filter(outcome=ClusterReview.Outcome.APPLIED).count() == 1


def test_a_truncated_batch_is_split_until_each_cluster_gets_its_verdict(llm_server, truth_factory, user_factory):
    user = user_factory()
    make_pairs(truth_factory, user, 4)

    def handler(payload):
        clusters = llm_server.clusters_of({"json": payload})
        if len(clusters) > 1:
            return llm_stub.text('{"clusters": [{"id": "c1", "actions": [', finish_reason="length")
        return llm_stub.verdict([], "alone")

    llm_server.handler = handler

    run = run_pass()

    sizes = [len(llm_server.clusters_of(r)) for r in llm_server.chat_requests()]
    # 4 (twice: the client's retry), each half of 2 (twice), then the 4 clusters alone.
    assert sizes == [4, 4, 2, 2, 1, 1, 2, 2, 1, 1]
    assert (run.kept, run.failed, run.llm_calls) == (4, 0, 10)
    assert set(run.reviews.values_list("reasoning", flat=True)) == {"alone"}


def test_cached_and_uncached_prompt_tokens_are_recorded_from_the_usage_block(llm_server, truth_factory, user_factory):
    user = user_factory()
    make_pairs(truth_factory, user, 2)
    usage = {
        "prompt_tokens": 1200,
        "completion_tokens": 90,
        "total_tokens": 1290,
        "prompt_tokens_details": {"cached_tokens": 1000},
    }
    llm_server.script = [
        llm_stub.clusters_reply(
            [{"id": "c1", "actions": [], "reasoning": "a"}, {"id": "c2", "actions": [], "reasoning": "b"}],
            usage=usage,
        )
    ]

    run = run_pass()

    assert (run.prompt_tokens, run.cached_tokens, run.completion_tokens, run.tokens) == (1200, 1000, 90, 1290)
    reviews = list(run.reviews.order_by("id"))
    assert sum(r.prompt_tokens for r in reviews) == 1200 and sum(r.cached_tokens for r in reviews) == 1000
    assert sum(r.completion_tokens for r in reviews) == 90
    assert all(r.prompt_tokens > 0 and not r.cost_known for r in reviews)  # stub model: no price
    assert [r.llm_calls for r in reviews] == [1, 0]


def test_the_system_prompt_is_sent_cacheable_to_a_model_litellm_says_caches(llm_server, truth_factory, user_factory):
    from iris_consolidation.llm.litellm_client import LiteLLMJudge

    judge = LiteLLMJudge(model="openai/gpt-4o-mini", api_base=llm_server.url, timeout=5.0, attempts=1)
    plain = LiteLLMJudge(model="openai/stub-judge", api_base=llm_server.url, timeout=5.0, attempts=1)

    assert judge._cacheable() is True and plain._cacheable() is False
    request, _ = judging.build_request(
        [truth_factory("Likes tea", embedding=None), truth_factory("Enjoys tea", embedding=None)]
    )
    judge.judge(request)

    system = llm_server.chat_requests()[0]["json"]["messages"][0]
    text = system["content"] if isinstance(system["content"], str) else system["content"][0]["text"]
    assert "ONE person" in text
    assert json.dumps(system).count("cache_control") == 1


def test_a_rule_judge_pass_makes_no_call_and_counts_nothing_sent(truth_factory, user_factory):
    user = user_factory()
    truth_factory("Has a dog named Rex", user=user, embedding=vector_at(1.0))
    truth_factory("has a dog named Rex.", user=user, embedding=vector_at(0.95))

    run = run_pass()

    assert (run.merged, run.llm_calls, run.model_clusters, run.prompt_tokens) == (1, 0, 0, 0)
    assert Truth.objects.filter(user=user, origin=Origin.CONSOLIDATED).count() == 1
