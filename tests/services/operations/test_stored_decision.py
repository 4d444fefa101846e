"""A dry run stores each cluster's ``merging.Decision`` whole on its review; applying the dry
run writes those stored decisions again (re-checked), never rebuilt from other columns. A review
stored before decisions were kept still applies, from its columns; a stored decision of another
format is refused with a clear error."""

from __future__ import annotations

import uuid
from dataclasses import replace

import pytest
from django.test import TestCase

from iris_consolidation.embeddings import LOCAL_MODEL_NAME, get_embedder
from iris_consolidation.exceptions import StoredDecisionInvalid
from iris_consolidation.llm.base import Action, Spend
from iris_consolidation.llm.rules import RuleJudge
from iris_consolidation.models import ClusterReview, ConsolidationRun, Truth
from iris_consolidation.services.operations import dry_runs
from iris_consolidation.services.pipeline import merging
from iris_consolidation.services.queue import dispatch, execution
from tests.conftest import vector_at
from tests.services.operations.test_apply_as_previewed import previewed  # noqa: F401 (the LLM dry run)

TEA = ("Drinks green tea every morning", "drinks green tea every morning.")


def _apply(dry: ConsolidationRun) -> ConsolidationRun:
    with TestCase.captureOnCommitCallbacks(execute=True):
        run, _ = dry_runs.start_application(dry_run_id=dry.pk, actor="operator", send=dispatch.send_jobs)
    run.refresh_from_db()
    return run


def _unpaid(decision: merging.Decision, run_id: uuid.UUID) -> merging.Decision:
    """``decision`` as an application writes it again: in its run, no model asked."""
    assert decision.verdict is not None
    verdict = replace(decision.verdict, llm_calls=0, attempts=0, latency_ms=0, tokens=0, cost=0.0, spend=Spend())
    return replace(decision, run_id=run_id, verdict=verdict, spend=Spend(), asked_model=False)


@pytest.mark.django_db
def test_the_application_writes_the_dry_runs_stored_decisions_again(previewed):  # noqa: F811
    dry = previewed["dry"]
    stored = {r.key: merging.Decision.from_json(r.decision) for r in dry.reviews.all()}
    reviews = {r.key: r for r in dry.reviews.all()}

    assert all(d.to_json() == reviews[k].decision for k, d in stored.items())  # round trip from the column
    assert [(d.spend.prompt_tokens, d.spend.cost) for d in stored.values()] == [
        (reviews[k].prompt_tokens, reviews[k].cost) for k in stored
    ]
    assert sum(d.spend.calls for d in stored.values()) == dry.llm_calls == 2  # the judge's call, a second look
    # Every accepted action was previewed: the decision to apply is the stored one, spend and all.
    assert {r.key: dry_runs.previewed_decision(r) for r in reviews.values()} == stored
    answers = sorted(a.second_look for d in stored.values() for a in d.accepted if a.second_look)
    assert answers == ["scripted confirm", "scripted confirm"]

    run = _apply(dry)

    written = {r.key: merging.Decision.from_json(r.decision) for r in run.reviews.all()}
    assert written == {k: _unpaid(d, run.pk) for k, d in stored.items()}
    assert (run.llm_calls, run.cost, run.merged, run.superseded) == (0, 0.0, 3, 1)


@pytest.fixture
def rules_previewed(user_factory, run_factory):
    """Two spellings of one statement, and a finished dry run (rule judge) that would merge them."""
    user = user_factory("alice")
    for n, content in enumerate(TEA):
        Truth.objects.create(
            user=user, content=content, embedding=vector_at(1.0 - 0.04 * n, axis=3), embedding_model=LOCAL_MODEL_NAME
        )
    run = run_factory(dry_run=True, user_id=user.pk)
    dry = execution.run_sync(run=run, client=RuleJudge(), embedder=get_embedder())
    assert dry.merged == 1
    return {"user": user, "dry": dry}


@pytest.mark.django_db
def test_a_review_stored_before_decisions_were_kept_applies_from_its_columns(rules_previewed):
    dry = rules_previewed["dry"]
    preview = dry.reviews.get(outcome=ClusterReview.Outcome.PREVIEW)
    kept = merging.Decision.from_json(preview.decision)
    ClusterReview.objects.filter(pk=preview.pk).update(decision=None)

    run = _apply(dry)

    assert (run.merged, run.retired, run.rejected, run.failed) == (1, 2, 0, 0)
    assert list(Truth.objects.filter(user=rules_previewed["user"]).values_list("content", flat=True)) == [TEA[0]]
    written = merging.Decision.from_json(run.reviews.get().decision)  # stored from now on
    assert written.accepted == kept.accepted and written.judge == kept.judge == "rules"


@pytest.mark.django_db
def test_a_stored_decision_of_another_format_is_refused_and_nothing_is_written(rules_previewed):
    dry = rules_previewed["dry"]
    preview = dry.reviews.get(outcome=ClusterReview.Outcome.PREVIEW)
    ClusterReview.objects.filter(pk=preview.pk).update(decision={**preview.decision, "format": 99})
    run, _ = dry_runs.start_application(dry_run_id=dry.pk, actor="operator", execution="in_process", send=None)

    with pytest.raises(StoredDecisionInvalid, match=r"cannot be read: format 99, not 1\."):
        dry_runs.apply_review(run_id=run.pk, review_id=preview.pk, embedder=get_embedder())

    assert not run.reviews.exists()
    assert Truth.objects.filter(user=rules_previewed["user"]).count() == 2


SNAPSHOT = tuple(
    {"alias": f"t{n}", "id": n, "content": c, "created_at": "2026-01-01T00:00:00+00:00",
     "updated_at": "2026-01-01T00:00:00+00:00", "protected": False}
    for n, c in enumerate(("Has a cat", "Has a cat.", "Owns a cat"), start=1)
)
FIRST = Action(action="merge", ids=("t1", "t2"), content="Has a cat", reason="one statement")
SECOND = Action(action="merge", ids=("t1", "t3"), content="Has a cat", reason="the same pet")


def _preview(applied: list[dict[str, object]]) -> ClusterReview:
    decision = merging.Decision(
        run_id=uuid.uuid4(), user_id=1, key="k", snapshot=SNAPSHOT, similarities={}, judge="llm",
        accepted=(FIRST, SECOND), prepass=1,
    )
    return ClusterReview(decision=decision.to_json(), applied_actions=applied, snapshot=list(SNAPSHOT))


def test_only_the_stored_actions_the_preview_applied_are_written_again():
    """The dry run refused the pre-pass merge (past its cap, say): only the judge's merge was previewed."""
    preview = _preview([{**SECOND.as_wire(), "stage": "judge", "truth_ids": {"t1": 1, "t3": 3}}])

    found = dry_runs.previewed_decision(preview)

    assert (found.accepted, found.prepass) == ((SECOND,), 0)


def test_a_preview_whose_record_differs_from_its_stored_decision_applies_what_it_shows():
    edited = {**FIRST.as_wire(), "content": "Has a dog", "stage": "prepass"}
    preview = _preview([edited])

    found = dry_runs.previewed_decision(preview)

    assert [a.content for a in found.accepted] == ["Has a dog"] and found.prepass == 1
