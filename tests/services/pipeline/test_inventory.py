"""The inventory report stored on every run."""

from __future__ import annotations

import os

import pytest
from django.db import connection

from iris_consolidation.embeddings import get_embedder
from iris_consolidation.llm import get_judge_client
from iris_consolidation.models import Truth
from iris_consolidation.services.queue import execution
from iris_consolidation.services.run import inventory
from tests.conftest import vector_at
from tests.incremental_support import make_pairs, run_pass

pytestmark = pytest.mark.django_db


def _rules_pass(run_factory, **kwargs):
    run = run_factory(**kwargs)
    return execution.run_sync(run=run, client=get_judge_client("rules"), embedder=get_embedder())


def test_report_counts_before_and_after_by_kind_and_origin(truth_factory, user_factory, run_factory):
    user = user_factory()
    truth_factory("Has a dog named Rex", user=user, embedding=vector_at(1.0), score=0.4)
    truth_factory("has a dog named Rex.", user=user, embedding=vector_at(0.95), score=0.7)
    truth_factory("Prefers tea", user=user, kind="preference", embedding=vector_at(1.0, axis=5, towards=6))
    truth_factory("Born in Porto", user=user, origin="user", embedding=vector_at(1.0, axis=7, towards=8))

    run = _rules_pass(run_factory)

    report = run.inventory
    assert report["before"] == {
        "live": 4,
        "by_kind": {"fact": 3, "preference": 1},
        "by_origin": {"promoted": 3, "user": 1},
    }
    assert report["after"] == {
        "live": 3,
        "by_kind": {"fact": 2, "preference": 1},
        "by_origin": {"consolidated": 1, "promoted": 1, "user": 1},
    }
    (change,) = report["changes"]
    assert (change["action"], change["size"], change["score"], change["applied"]) == ("merge", 2, 0.7, True)
    assert change["reason"].startswith("Same statement")


@pytest.fixture
def exact_vector_search():
    """Plan neighbour queries without the HNSW index for this test's transaction.

    HNSW is approximate: with the dead index entries earlier tests leave behind, it
    once missed one of these twelve pairs. This test is about ranking, not recall.
    """
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_indexscan = off")


def test_most_significant_changes_are_the_biggest_merges_up_to_ten(
    truth_factory, user_factory, run_factory, exact_vector_search
):
    user = user_factory()
    for k in range(12):
        size = 3 if k == 7 else 2
        for i in range(size):
            truth_factory(
                f"Visited city number {k}" + "." * i,
                user=user,
                embedding=vector_at(1.0 - i * 0.01, axis=2 * k, towards=2 * k + 1),
            )

    run = _rules_pass(run_factory)

    changes = run.inventory["changes"]
    assert run.merged == 12 and len(changes) == inventory.MAX_CHANGES
    assert changes[0]["size"] == 3 and changes[0]["content"] == "Visited city number 7"
    assert [c["size"] for c in changes[1:]] == [2] * 9


def test_dry_run_report_lists_previews_and_projects_the_after_counts(truth_factory, user_factory, run_factory):
    user = user_factory()
    truth_factory("Has a dog named Rex", user=user, embedding=vector_at(1.0))
    truth_factory("has a dog named Rex.", user=user, embedding=vector_at(0.95))

    run = _rules_pass(run_factory, dry_run=True)

    assert run.inventory["before"] == {"live": 2, "by_kind": {"fact": 2}, "by_origin": {"promoted": 2}}
    assert run.inventory["after"] == {
        "live": 1,
        "by_kind": {"fact": 1},
        "by_origin": {"consolidated": 1},
        "projected": True,
    }
    assert Truth.objects.filter(user=user).count() == 2  # nothing changed
    assert [c["applied"] for c in run.inventory["changes"]] == [False]
    assert run.inventory["checkpoint"]["new"] is None


def test_a_dry_runs_projection_equals_the_real_pass_after_it(truth_factory, user_factory, run_factory):
    """Chained merges in one cluster, a protected keeper, a supersede-free cluster: the
    projection counts what the same verdicts then do for real."""
    user = user_factory()
    truth_factory("Has a dog named Rex", user=user, embedding=vector_at(1.0))
    truth_factory("has a dog named Rex.", user=user, embedding=vector_at(0.99))
    truth_factory("Has a dog named Rex!", user=user, embedding=vector_at(0.98))
    truth_factory("Is allergic to peanuts", user=user, origin="user", embedding=vector_at(1.0, axis=2, towards=3))
    truth_factory("is allergic to peanuts.", user=user, embedding=vector_at(0.99, axis=2, towards=3))
    truth_factory("Plays chess", user=user, kind="preference", embedding=vector_at(1.0, axis=4, towards=5))

    dry = _rules_pass(run_factory, dry_run=True)
    real = _rules_pass(run_factory)

    assert dry.inventory["after"]["live"] == real.inventory["after"]["live"] == 3
    assert {k: v for k, v in dry.inventory["after"].items() if k != "projected"} == real.inventory["after"]


def test_report_includes_llm_calls_tokens_and_litellm_cost(llm_server, truth_factory, user_factory, settings):
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import litellm

    settings.IRIS_CONSOLIDATION_MODEL = "openai/gpt-4o-mini"  # priced in litellm's local cost map
    make_pairs(truth_factory, user_factory(), 2)

    run = run_pass()

    prompt_cost, completion_cost = litellm.cost_per_token(model="gpt-4o-mini", prompt_tokens=50, completion_tokens=20)
    llm = run.inventory["llm"]
    # The user's two clusters travel in one call (the stub reports 50 + 20 tokens a call).
    assert (llm["calls"], llm["tokens"], llm["cache_hits"]) == (1, 70, 0)
    assert llm["cost"] == pytest.approx(prompt_cost + completion_cost, rel=1e-6)
    assert llm["cost"] > 0 and llm["cost_known"] is True


def test_unpriced_model_reports_cost_as_unknown(llm_server, truth_factory, user_factory):
    make_pairs(truth_factory, user_factory(), 1)

    run = run_pass()

    assert run.inventory["llm"]["tokens"] == 70
    assert (run.inventory["llm"]["cost"], run.inventory["llm"]["cost_known"]) == (0.0, False)


def test_report_scope_follows_the_user_filter(truth_factory, user_factory, run_factory):
    alice, bob = user_factory(), user_factory()
    truth_factory("a1", user=alice, embedding=vector_at(1.0))
    truth_factory("a2", user=alice, embedding=vector_at(1.0, axis=3, towards=4))
    truth_factory("b1", user=bob, embedding=vector_at(1.0))

    run = _rules_pass(run_factory, user_id=alice.pk)

    assert run.inventory["scope"] == {"users": [alice.pk]}
    assert run.inventory["before"]["live"] == 2
