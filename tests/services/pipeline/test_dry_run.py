"""A dry run judges and records, and changes no truth."""

from __future__ import annotations

import pytest

from iris_consolidation.embeddings import LOCAL_MODEL_NAME, LocalEmbedder
from iris_consolidation.llm import get_judge_client
from iris_consolidation.llm.rules import RuleJudge
from iris_consolidation.models import ClusterReview, ConsolidationRun, LineageEvent, Truth
from iris_consolidation.services.queue import execution
from tests import llm_stub
from tests.conftest import vector_at
from tests.helpers import truth_state

pytestmark = pytest.mark.django_db


@pytest.fixture(scope="module")
def embedder() -> LocalEmbedder:
    return LocalEmbedder()


@pytest.fixture
def duplicates(truth_factory):
    a = truth_factory("Works as a nurse", embedding=vector_at(1.0))
    b = truth_factory("works as a nurse.", user=a.user, embedding=vector_at(0.99))
    c = truth_factory("Likes tea", user=a.user, embedding=vector_at(0.2, towards=2))
    return a, b, c


def test_dry_run_changes_no_truth(duplicates, run_factory, embedder):
    before = truth_state(with_decay=True)

    run = execution.run_sync(run=run_factory(dry_run=True), client=RuleJudge(), embedder=embedder)

    assert truth_state(with_decay=True) == before
    assert LineageEvent.objects.count() == 0
    assert (run.status, run.clusters_found, run.merged, run.retired) == (ConsolidationRun.Status.DONE, 1, 1, 2)


def test_dry_run_records_its_reviews_as_previews(duplicates, run_factory, embedder):
    a, b, _ = duplicates

    run = execution.run_sync(run=run_factory(dry_run=True), client=RuleJudge(), embedder=embedder)

    review = ClusterReview.objects.get()
    assert run.dry_run and review.run_id == run.pk
    assert (review.outcome, review.applied) == (ClusterReview.Outcome.PREVIEW, False)
    assert review.applied_actions == [
        {
            "action": "merge",
            "ids": ["t1", "t2"],
            "content": "Works as a nurse",
            "reason": review.actions[0]["reason"],
            "truth_ids": {"t1": a.pk, "t2": b.pk},
            "stage": "judge",
        }
    ]
    assert [row["content"] for row in review.snapshot] == ["Works as a nurse", "works as a nurse."]
    assert review.reasoning.startswith("t1+t2: Same statement")


def test_dry_run_with_the_llm_judge_previews_a_supersede(llm_server, truth_factory, run_factory, embedder):
    old = truth_factory("Lives in Lisbon", embedding=vector_at(1.0))
    # The newer statement says the state changed, as the validator requires of a supersede.
    new = truth_factory("Now lives in Berlin", user=old.user, embedding=vector_at(0.9))
    llm_server.script = [
        llm_stub.verdict([{"action": "supersede", "old": ["t1"], "new": "t2", "reason": "moved"}], "moved in May")
    ]
    before = truth_state(with_decay=True)

    run = execution.run_sync(run=run_factory(dry_run=True), client=get_judge_client(), embedder=embedder)

    assert truth_state(with_decay=True) == before
    review = ClusterReview.objects.get()
    assert (review.outcome, review.reasoning, review.model) == ("preview", "moved in May", "openai/stub-judge")
    assert review.applied_actions[0]["truth_ids"] == {"t1": old.pk, "t2": new.pk}
    assert (run.superseded, run.retired, run.llm_calls, run.tokens) == (1, 1, 1, 70)


def _without_embeddings(state: dict) -> dict:
    return {
        pk: {k: v for k, v in row.items() if k not in ("embedding", "embedding_model")} for pk, row in state.items()
    }


def test_dry_run_stores_missing_embeddings_and_nothing_else(truth_factory, run_factory, embedder):
    """Clustering runs in pgvector, so a dry run caches the embeddings it computes;
    every other column of every truth stays as it was."""
    a = truth_factory("Works as a nurse")
    truth_factory("works as a nurse.", user=a.user)
    before = truth_state(with_decay=True)

    run = execution.run_sync(run=run_factory(dry_run=True), client=RuleJudge(), embedder=embedder)

    after = truth_state(with_decay=True)
    assert run.embedded == 2 and run.merged == 1
    assert set(Truth.objects.values_list("embedding_model", flat=True)) == {LOCAL_MODEL_NAME}
    assert _without_embeddings(after) == _without_embeddings(before)


def test_a_real_run_after_a_dry_run_applies_what_the_dry_run_previewed(duplicates, run_factory, embedder):
    a, b, _ = duplicates
    execution.run_sync(run=run_factory(dry_run=True), client=RuleJudge(), embedder=embedder)

    run = execution.run_sync(run=run_factory(), client=RuleJudge(), embedder=embedder)

    assert (run.merged, run.retired) == (1, 2)
    assert {r.outcome for r in ClusterReview.objects.all()} == {"preview", "applied"}
    assert not Truth.objects.filter(pk__in=[a.pk, b.pk]).exists()
