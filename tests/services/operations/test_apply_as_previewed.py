"""Applying a dry run made by the LLM judge (through litellm, to the scripted server on
127.0.0.1) applies exactly what its preview showed: a pre-pass merge, a model's merge that
names the pre-pass keeper, and two actions with signals that the second look confirmed.

The application asks no model: it replays the preview's accepted actions with their
second-look answers and re-checks only freshness and the invariants. Before, it validated
the verdict again with the rule judge's settings, so the confirmed actions were refused
(``names_differ``, ``supersede_outcome``) and the model's merge naming the keeper was
refused as ``already_used``.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.test import TestCase

from iris_consolidation import review_display, selectors
from iris_consolidation.embeddings import get_embedder
from iris_consolidation.llm import get_judge_client
from iris_consolidation.models import ClusterReview, ConsolidationRun, RetiredReason, Truth
from iris_consolidation.services.operations import dry_runs
from iris_consolidation.services.pipeline import validation
from iris_consolidation.services.queue import dispatch, execution
from tests import llm_stub
from tests.conftest import vector_at

pytestmark = pytest.mark.django_db

TEA = ("Drinks green tea every morning", "drinks green tea every morning.", "Drinks green tea every morning with honey")
HOME = ("Plans to move to Berlin", "Lives in Berlin")
CHESS = ("Plays chess with Marco", "Plays chess with Luca")
HONEY = "Drinks green tea every morning with honey"
BOTH_PARTNERS = "Plays chess with Marco and Luca"


def _judge(payload: dict[str, Any]) -> llm_stub.Reply:
    """The model: merge the tea cluster (naming the pre-pass keeper) into the honey truth,
    supersede the plan to move by its outcome (no change word: a signal), merge the chess partners
    (different names: a signal)."""
    entries = []
    for cluster in llm_stub.StubLLMServer.clusters_of({"json": payload}):
        alias = {t["content"]: t["id"] for t in cluster["truths"]}
        actions: list[dict[str, Any]] = []
        if HONEY in alias:
            ids = [t["id"] for t in cluster["truths"]]
            actions.append({"action": "merge", "ids": ids, "content": HONEY, "reason": "the same habit, with honey"})
        elif HOME[1] in alias:
            old, new = [alias[HOME[0]]], alias[HOME[1]]
            actions.append({"action": "supersede", "old": old, "new": new, "reason": "the plan was carried out"})
        elif CHESS[1] in alias:
            ids = [alias[CHESS[0]], alias[CHESS[1]]]
            actions.append({"action": "merge", "ids": ids, "content": BOTH_PARTNERS, "reason": "one habit"})
        entries.append({"id": cluster["id"], "actions": actions, "reasoning": "scripted"})
    return llm_stub.clusters_reply(entries)


@pytest.fixture
def previewed(llm_server, user_factory, truth_factory, run_factory):
    """Three clusters of one user and a finished LLM dry run over them, every second look
    confirmed: would merge 3 (one by the pre-pass), would supersede 1."""
    llm_server.handler = _judge
    llm_server.second_looks = "confirm"
    user = user_factory("alice")
    truths: dict[str, Truth] = {}
    for axis, group in ((3, TEA), (5, HOME), (7, CHESS)):
        for n, content in enumerate(group):
            truths[content] = truth_factory(content, user=user, embedding=vector_at(1.0 - 0.02 * n, axis=axis))
    dry = execution.run_sync(
        run=run_factory(dry_run=True, user_id=user.pk, only="semantic"),
        client=get_judge_client(),
        embedder=get_embedder(),
    )
    return {"user": user, "truths": truths, "dry": dry, "server": llm_server}


def _apply(dry: ConsolidationRun) -> ConsolidationRun:
    """Apply ``dry`` as the admin does (the test queue runs the apply jobs when the
    request's transaction commits)."""
    with TestCase.captureOnCommitCallbacks(execute=True):
        run, _ = dry_runs.start_application(dry_run_id=dry.pk, actor="operator", send=dispatch.send_jobs)
    run.refresh_from_db()
    return run


def _stage_actions(run: ConsolidationRun) -> list[tuple[str, str, tuple[str, ...]]]:
    """Every applied (or previewed) action of ``run``: stage, kind, and whether it carries a second look."""
    rows = []
    for review in run.reviews.order_by("key"):
        for entry in review.applied_actions:
            rows.append((entry["stage"], entry["action"], bool(entry.get("second_look"))))
    return sorted(rows)


def test_the_dry_run_previews_a_prepass_merge_a_keeper_merge_and_two_confirmed_signals(previewed):
    dry = previewed["dry"]

    assert (dry.merged, dry.superseded, dry.rejected, dry.failed) == (3, 1, 0, 0)
    assert _stage_actions(dry) == [
        ("judge", "merge", False),  # names the pre-pass keeper; no signal
        ("judge", "merge", True),  # names_differ, confirmed
        ("judge", "supersede", True),  # supersede_outcome, confirmed
        ("prepass", "merge", False),
    ]
    assert Truth.objects.filter(user=previewed["user"]).count() == 7  # nothing written
    calls = previewed["server"].chat_requests()
    (judge,) = [c for c in calls if not llm_stub.is_second_look_call(c["json"])]
    assert len(llm_stub.StubLLMServer.clusters_of(judge)) == 3  # one batch: the three clusters in one call
    assert len(calls) == 2  # and one second look for its two flagged actions


def test_applying_an_llm_dry_run_does_exactly_what_it_previewed(previewed):
    dry, truths, server = previewed["dry"], previewed["truths"], previewed["server"]
    calls_before = len(server.chat_requests())

    run = _apply(dry)

    assert len(server.chat_requests()) == calls_before  # no model is asked again
    assert (run.merged, run.superseded, run.rejected, run.stale, run.failed) == (dry.merged, dry.superseded, 0, 0, 0)
    assert run.retired == dry.retired == 7  # the pre-pass result, retired into the honey merge, counts too
    assert _stage_actions(run) == _stage_actions(dry)
    assert all(not r.rejections for r in run.reviews.all())
    assert review_display.application_refusals(selectors.list_application_refusals(application=run)) == []
    live = set(Truth.objects.filter(user=previewed["user"]).values_list("content", flat=True))
    assert live == {HONEY, HOME[1], BOTH_PARTNERS}
    # The model's merge named the pre-pass keeper: it acted on the pre-pass's merged truth.
    honey = Truth.objects.get(user=previewed["user"], content=HONEY, origin="consolidated")
    prepass_result = Truth.all_objects.get(superseded_by=honey, origin="consolidated")
    assert prepass_result.content == TEA[0] and honey.generation == 2
    assert set(Truth.all_objects.filter(superseded_by=prepass_result).values_list("pk", flat=True)) == {
        truths[TEA[0]].pk,
        truths[TEA[1]].pk,
    }
    lisbon = Truth.all_objects.get(pk=truths[HOME[0]].pk)
    assert lisbon.retired_reason == RetiredReason.SUPERSEDED and lisbon.superseded_by_id == truths[HOME[1]].pk


def test_an_action_the_second_look_confirmed_keeps_its_answer_when_applied(previewed):
    run = _apply(previewed["dry"])

    (entry,) = [e for r in run.reviews.all() for e in r.applied_actions if e["action"] == "supersede"]
    assert entry["second_look"] == "scripted confirm"
    assert [s["code"] for s in entry["signals"]] == [validation.Code.SUPERSEDE_OUTCOME]
    assert run.reviews.filter(outcome=ClusterReview.Outcome.APPLIED).count() == 3


def test_an_invariant_still_refuses_on_apply_whatever_the_second_look_said(previewed):
    """A previewed action is replayed, not trusted: one altered to lose a name is refused."""
    chess = next(r for r in previewed["dry"].reviews.all() if r.applied_actions[0].get("content") == BOTH_PARTNERS)
    chess.applied_actions = [{**chess.applied_actions[0], "content": "Plays chess with Marco"}]
    chess.save(update_fields=["applied_actions"])

    run = _apply(previewed["dry"])

    refusals = review_display.application_refusals(selectors.list_application_refusals(application=run))
    assert [r.code for r in refusals] == [validation.Code.LOST_DETAIL]
    assert "'luca'" in refusals[0].reason and refusals[0].action.startswith("Merge #")
    assert (run.merged, run.superseded, run.rejected) == (2, 1, 1)
    assert Truth.objects.filter(user=previewed["user"], content__in=CHESS).count() == 2
    assert not Truth.objects.filter(user=previewed["user"], content=HOME[0]).exists()  # the supersede applied


def test_a_keeper_merge_is_not_applied_when_its_prepass_merge_went_stale(previewed):
    """The model judged the pre-pass merge's result; with that merge refused as stale, the
    model's merge naming its keeper is refused too, and both are listed."""
    dry, truths = previewed["dry"], previewed["truths"]
    run, _ = dry_runs.start_application(
        dry_run_id=dry.pk, actor="operator", execution="in_process", send=dispatch.send_jobs
    )
    changed = truths[TEA[1]]
    changed.content = "drinks green tea every morning, cold."
    changed.save()

    run = execution.apply_sync(run=run, embedder=get_embedder())

    refusals = review_display.application_refusals(selectors.list_application_refusals(application=run))
    assert [r.code for r in refusals] == [validation.Code.STALE_MEMBER] * 2
    assert f"#{changed.pk} changed or was retired" in refusals[0].reason
    assert "stands for the result of a pre-pass merge that was not applied" in refusals[1].reason
    assert (run.merged, run.superseded, run.stale) == (1, 1, 1)  # the chess merge and the supersede
    tea = Truth.objects.filter(user=previewed["user"], pk__in=[t.pk for c, t in truths.items() if c in TEA])
    assert tea.count() == 3  # every tea truth stays as it was
