"""services.operations.undo: restore the sources, retire what was made, record the reversal."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from iris_consolidation.exceptions import ConsolidatedFurther, UndoRefused
from iris_consolidation.llm.base import Action
from iris_consolidation.models import LineageEvent, RetiredReason, Truth
from iris_consolidation.services.operations import undo
from iris_consolidation.signals import truth_changed
from tests import lineage_builder as lb

pytestmark = pytest.mark.django_db


@pytest.fixture
def merged(user_factory):
    user = user_factory("alice")
    a, b, c = lb.originals(user, 3)
    ab = lb.merge([a, b], content="Has a son named Tomas", run=lb.new_run())
    return {"a": a, "b": b, "c": c, "ab": ab}


def _live(pk):
    return Truth.all_objects.get(pk=pk).retired_at is None


def test_undo_restores_sources_and_retires_the_merged_truth(merged):
    a, b, ab = merged["a"], merged["b"], merged["ab"]

    result = undo.undo_consolidation(truth_id=ab.pk, actor="operator", reason="Two different boys called Tomas.")

    assert result.truth_retired is True and result.restored_ids == tuple(sorted([a.pk, b.pk]))
    for source in (a, b):
        source.refresh_from_db()
        assert source.retired_at is None and source.superseded_by_id is None and source.retired_reason == ""
    ab.refresh_from_db()
    assert ab.retired_reason == RetiredReason.UNDONE and ab.superseded_by_id is None
    events = LineageEvent.objects.filter(action="undo").order_by("result_id")
    assert [(e.source_id, e.result_id, e.actor, e.reason) for e in events] == [
        (ab.pk, a.pk, "operator", "Two different boys called Tomas."),
        (ab.pk, b.pk, "operator", "Two different boys called Tomas."),
    ]
    assert all(e.review_id == ab.lineage_in.first().review_id for e in events)
    # the merge itself stays in history
    assert LineageEvent.objects.filter(action="merge", result=ab).count() == 2


def test_undo_refuses_when_the_truth_was_consolidated_further(merged):
    ab, c = merged["ab"], merged["c"]
    abc = lb.merge([ab, c], content="Has a son called Tomas", run=lb.new_run())

    with pytest.raises(ConsolidatedFurther) as refused:
        undo.undo_consolidation(truth_id=ab.pk, actor="operator", reason="wrong")

    assert refused.value.later_truth_id == abc.pk  # the admin's message links it (test_undo_view)
    assert not _live(ab.pk) and _live(abc.pk)
    assert not LineageEvent.objects.filter(action="undo").exists()


def test_undoing_the_later_step_then_the_earlier_one_brings_back_the_originals(merged):
    a, b, c, ab = merged["a"], merged["b"], merged["c"], merged["ab"]
    abc = lb.merge([ab, c], content="Has a son called Tomas", run=lb.new_run())

    undo.undo_consolidation(truth_id=abc.pk, actor="operator", reason="c is about another Tomas.")
    undo.undo_consolidation(truth_id=ab.pk, actor="operator", reason="so is b.")

    assert [_live(t.pk) for t in (a, b, c, ab, abc)] == [True, True, True, False, False]
    assert LineageEvent.objects.filter(action="undo").count() == 4


def test_undo_twice_refuses_and_changes_nothing(merged):
    ab = merged["ab"]
    undo.undo_consolidation(truth_id=ab.pk, actor="operator", reason="wrong")

    with pytest.raises(UndoRefused) as refused:
        undo.undo_consolidation(truth_id=ab.pk, actor="operator", reason="again")

    assert str(refused.value) == undo.ALREADY_UNDONE.format(truth=ab.pk)
    assert LineageEvent.objects.filter(action="undo").count() == 2


def test_undo_of_an_original_refuses(merged):
    c = merged["c"]

    with pytest.raises(UndoRefused) as refused:
        undo.undo_consolidation(truth_id=c.pk, actor="operator", reason="why not")

    assert str(refused.value) == undo.NOTHING_TO_UNDO.format(truth=c.pk)


def test_undo_needs_a_reason(merged):
    with pytest.raises(UndoRefused) as refused:
        undo.undo_consolidation(truth_id=merged["ab"].pk, actor="operator", reason="   ")

    assert str(refused.value) == undo.REASON_REQUIRED
    assert _live(merged["ab"].pk)


def test_undo_of_a_supersede_keeps_the_newer_truth_live(user_factory):
    user = user_factory()
    old = Truth.objects.create(user=user, content="Lives in Lisbon", created_at=timezone.now() - timedelta(days=9))
    new = Truth.objects.create(
        user=user, content="Moved to Berlin in May", created_at=timezone.now() - timedelta(days=2)
    )
    lb.supersede(old, new, run=lb.new_run(), reasoning="t2 is a later state change that replaces t1.")

    result = undo.undo_consolidation(truth_id=new.pk, actor="operator", reason="Still lives in Lisbon.")

    assert result.truth_retired is False and result.action == "supersede"
    assert _live(old.pk) and _live(new.pk)


def test_undo_review_undoes_every_merge_it_applied(user_factory):
    user = user_factory()
    a1, a2 = (Truth.objects.create(user=user, content=text) for text in ("Likes green tea", "likes green tea."))
    b1, b2 = (Truth.objects.create(user=user, content=text) for text in ("Plays chess", "plays chess!"))
    review = lb.judge_and_record(
        [a1, a2, b1, b2],
        [
            Action(action="merge", ids=("t1", "t2"), content="Likes green tea", reason="same"),
            Action(action="merge", ids=("t3", "t4"), content="Plays chess", reason="same"),
        ],
        run=lb.new_run(),
        reasoning="Two pairs of equal statements.",
    )
    assert review.applied and len(review.applied_actions) == 2

    results = undo.undo_review(review_id=review.pk, actor="operator", reason="Keep them apart.")

    assert len(results) == 2 and all(r.truth_retired for r in results)
    assert all(_live(t.pk) for t in (a1, a2, b1, b2))
    assert Truth.objects.filter(user=user).count() == 4


def test_undo_review_of_a_dry_run_refuses(user_factory):
    user = user_factory()
    a, b = lb.originals(user, 2)
    preview = lb.judge_and_record(
        [a, b],
        [Action(action="merge", ids=("t1", "t2"), content="Has a son named Tomas", reason=lb.SAME_SON)],
        run=lb.new_run(dry_run=True),
        reasoning="same",
    )

    with pytest.raises(UndoRefused) as refused:
        undo.undo_review(review_id=preview.pk, actor="operator", reason="x")

    assert str(refused.value) == undo.NOT_APPLIED.format(review=preview.pk)


def test_undo_sends_restored_and_undone_signals_after_commit(merged, django_capture_on_commit_callbacks):
    received = []

    def listener(sender, truth, action, reason, review, **kwargs):
        received.append((truth.pk, action, reason))

    truth_changed.connect(listener)
    try:
        with django_capture_on_commit_callbacks(execute=True):
            undo.undo_consolidation(truth_id=merged["ab"].pk, actor="operator", reason="wrong")
    finally:
        truth_changed.disconnect(listener)

    assert sorted(received) == sorted(
        [
            (merged["a"].pk, "restored", "wrong"),
            (merged["b"].pk, "restored", "wrong"),
            (merged["ab"].pk, "undone", "wrong"),
        ]
    )


def test_the_next_pass_does_not_make_an_undone_merge_again(truth_factory):
    """A fresh user's trial: undoing a rule-judge merge, then running the next pass, merged the
    same two truths again. The pass now leaves the pair apart; a third restatement of one
    of them still merges with it."""
    from io import StringIO

    from django.core.management import call_command

    from iris_consolidation.models import ConsolidationRun, Truth
    from iris_consolidation.services.operations import undo
    from tests.conftest import vector_at

    a = truth_factory("Works as a nurse", embedding=vector_at(1.0))
    b = truth_factory("works as a nurse.", user=a.user, embedding=vector_at(0.99))
    call_command("consolidate_truths", "--sync", "--full", stdout=StringIO())
    merged = Truth.objects.get(user=a.user)
    assert merged.pk not in (a.pk, b.pk)
    undo.undo_consolidation(truth_id=merged.pk, actor="ops", reason="two different jobs")
    assert set(Truth.objects.filter(user=a.user).values_list("pk", flat=True)) == {a.pk, b.pk}

    call_command("consolidate_truths", "--sync", "--full", stdout=StringIO())

    assert set(Truth.objects.filter(user=a.user).values_list("pk", flat=True)) == {a.pk, b.pk}
    assert ConsolidationRun.objects.order_by("-created_at").first().merged == 0
    c = truth_factory("Works as a nurse!", user=a.user, embedding=vector_at(0.995))
    call_command("consolidate_truths", "--sync", "--full", stdout=StringIO())
    live = set(Truth.objects.filter(user=a.user).values_list("pk", flat=True))
    assert b.pk in live and c.pk not in live and len(live) == 2  # c merged with a (the seed); b stays apart


def test_a_truths_reversal_is_chosen_once_for_page_undo_and_message(merged, truth_factory):
    """``reversal_of`` names the kind; the page's title and step and the undo's result follow it."""
    ab = merged["ab"]
    reversal = undo.reversal_of(ab)
    assert (reversal.kind, reversal.title) == ("consolidation", f"Undo the consolidation that made truth #{ab.pk}")
    assert reversal.step.source_ids == tuple(sorted([merged["a"].pk, merged["b"].pk]))
    result = reversal.perform(actor="operator", reason="Two different boys.")
    assert (result.action, result.truth_retired) == ("merge", True)

    noisy = truth_factory("Heartbeat OK at 09:00", retired_at=timezone.now(), retired_reason=RetiredReason.NOISE)
    restore = undo.reversal_of(noisy)
    assert (restore.kind, restore.stage) == (undo.Reversal.RESTORE, "noise")
    assert restore.title == f"Restore truth #{noisy.pk}, retired by the noise stage"
