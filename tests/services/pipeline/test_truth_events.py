"""Change events: one audit row per change, one ``truth_changed`` signal after commit.

These tests use real transactions (``transaction=True``): the signal must wait for a
real COMMIT, which the default per-test transaction would never reach.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection, transaction

from iris_consolidation.embeddings import get_embedder
from iris_consolidation.exceptions import UndoRefused
from iris_consolidation.llm import get_judge_client
from iris_consolidation.models import Truth, TruthChange
from iris_consolidation.services.operations import transfer, undo
from iris_consolidation.services.pipeline import truth_events
from iris_consolidation.services.queue import execution
from iris_consolidation.signals import truth_changed
from tests.conftest import vector_at

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def received() -> Iterator[list[dict[str, Any]]]:
    """Every ``truth_changed`` sent, with whether a transaction was still open then."""
    calls: list[dict[str, Any]] = []

    def receiver(sender: Any, **kwargs: Any) -> None:
        calls.append({**kwargs, "in_transaction": connection.in_atomic_block})

    truth_changed.connect(receiver, dispatch_uid="test-truth-events")
    yield calls
    truth_changed.disconnect(dispatch_uid="test-truth-events")


def _duplicates(truth_factory: Any) -> tuple[Truth, Truth]:
    a = truth_factory("Has a dog named Rex", embedding=vector_at(1.0))
    b = truth_factory("has a dog named Rex.", embedding=vector_at(0.95))
    return a, b


def test_merge_sends_one_signal_per_changed_truth_after_commit(truth_factory, run_factory, received):
    a, b = _duplicates(truth_factory)
    run = run_factory()

    execution.run_sync(run=run, client=get_judge_client("rules"), embedder=get_embedder())

    merged = Truth.objects.get(origin="consolidated")
    assert sorted((c["action"], c["truth"].pk) for c in received) == sorted(
        [("created", merged.pk), ("retired", a.pk), ("retired", b.pk)]
    )
    assert not any(c["in_transaction"] for c in received)
    review = run.reviews.get()
    assert all(c["review"] == review and c["reason"] for c in received)
    rows = TruthChange.objects.filter(run=run)
    assert sorted(rows.values_list("action", "truth_id")) == sorted(
        [("created", merged.pk), ("retired", a.pk), ("retired", b.pk)]
    )
    assert {c["change"].pk for c in received} == set(rows.values_list("pk", flat=True))


def test_rolled_back_merge_sends_no_signal_and_leaves_no_audit_row(truth_factory, run_factory, received):
    a, b = _duplicates(truth_factory)
    run = run_factory()

    with pytest.raises(RuntimeError), transaction.atomic():
        execution.run_sync(run=run, client=get_judge_client("rules"), embedder=get_embedder())
        assert Truth.objects.filter(origin="consolidated").count() == 1  # the merge happened inside
        raise RuntimeError("the caller's transaction fails after the merge")

    assert received == []
    assert not TruthChange.objects.exists()
    assert set(Truth.objects.values_list("pk", flat=True)) == {a.pk, b.pk}


def test_restoration_and_undo_are_recorded_and_signalled_after_commit(truth_factory, received):
    source = truth_factory("Lives in Lisbon")
    merged = truth_factory("Lives in Lisbon, Portugal", origin="consolidated")

    with transaction.atomic():
        truth_events.record_changes(
            [
                truth_events.Change(truth=source, action=truth_events.RESTORED, reason="merge undone"),
                truth_events.Change(truth=merged, action=truth_events.UNDONE, reason="merge undone"),
            ],
            actor="admin:alice",
        )
        assert received == []  # nothing before COMMIT

    assert [(c["action"], c["truth"].pk, c["actor"]) for c in received] == [
        ("restored", source.pk, "admin:alice"),
        ("undone", merged.pk, "admin:alice"),
    ]
    assert list(TruthChange.objects.order_by("id").values_list("action", "actor")) == [
        ("restored", "admin:alice"),
        ("undone", "admin:alice"),
    ]


def test_undo_records_and_signals_restored_sources_and_the_undone_truth(truth_factory, run_factory, received):
    a, b = _duplicates(truth_factory)
    run = execution.run_sync(run=run_factory(), client=get_judge_client("rules"), embedder=get_embedder())
    merged, review = Truth.objects.get(origin="consolidated"), run.reviews.get()
    received.clear()
    before = TruthChange.objects.count()

    undo.undo_consolidation(truth_id=merged.pk, actor="admin:alice", reason="Two different dogs.")

    rows = TruthChange.objects.order_by("id")[before:]
    assert sorted((r.action, r.truth_id, r.actor, r.reason, r.review_id, r.run_id) for r in rows) == sorted(
        [
            ("restored", a.pk, "admin:alice", "Two different dogs.", review.pk, run.pk),
            ("restored", b.pk, "admin:alice", "Two different dogs.", review.pk, run.pk),
            ("undone", merged.pk, "admin:alice", "Two different dogs.", review.pk, run.pk),
        ]
    )
    assert sorted((c["action"], c["truth"].pk) for c in received) == sorted(
        [("restored", a.pk), ("restored", b.pk), ("undone", merged.pk)]
    )
    assert not any(c["in_transaction"] for c in received)
    assert all(c["review"] == review and c["reason"] == "Two different dogs." for c in received)
    assert {c["change"].pk for c in received} == {r.pk for r in rows}


def test_refused_undo_records_and_signals_nothing(truth_factory, run_factory, received):
    _duplicates(truth_factory)
    execution.run_sync(run=run_factory(), client=get_judge_client("rules"), embedder=get_embedder())
    merged = Truth.objects.get(origin="consolidated")
    undo.undo_consolidation(truth_id=merged.pk, actor="admin:alice", reason="Two different dogs.")
    received.clear()
    before = list(TruthChange.objects.values_list("pk", flat=True))

    with pytest.raises(UndoRefused) as again:
        undo.undo_consolidation(truth_id=merged.pk, actor="admin:alice", reason="Once more.")
    with pytest.raises(UndoRefused) as no_reason:
        undo.undo_consolidation(truth_id=merged.pk, actor="admin:alice", reason="  ")

    assert str(again.value) == undo.ALREADY_UNDONE.format(truth=merged.pk)
    assert str(no_reason.value) == undo.REASON_REQUIRED
    assert received == []
    assert list(TruthChange.objects.values_list("pk", flat=True)) == before


def test_unknown_change_action_is_refused(truth_factory):
    truth = truth_factory("Likes jazz")

    with pytest.raises(ValueError, match="Unknown truth change"):
        truth_events.record_changes([truth_events.Change(truth=truth, action="deleted")])

    assert not TruthChange.objects.exists()


def test_import_records_and_signals_one_creation_per_truth(tmp_path, received):
    path = tmp_path / "two.truths.jsonl"
    lines = [
        {
            "user": "ana",
            "content": "Plays chess",
            "origin": "promoted",
            "created_at": "2026-01-01T00:00:00Z",
            "source": "s:1",
        },
        {
            "user": "ana",
            "content": "Speaks Greek",
            "origin": "user",
            "created_at": "2026-01-02T00:00:00Z",
            "source": "s:2",
        },
    ]
    path.write_text("\n".join(json.dumps(line) for line in lines))

    transfer.load_truths(path, create_users=True)
    transfer.load_truths(path, create_users=True)  # idempotent: nothing new, no new event

    assert sorted(c["truth"].content for c in received) == ["Plays chess", "Speaks Greek"]
    assert {c["action"] for c in received} == {"created"}
    assert TruthChange.objects.filter(action="created", actor="import").count() == 2


def test_audit_rows_cannot_be_edited_or_deleted(truth_factory):
    truth = truth_factory("Likes jazz")
    (row,) = truth_events.record_changes([truth_events.Change(truth=truth, action=truth_events.CREATED)])

    row.reason = "rewritten"
    with pytest.raises(ValueError, match="append-only"):
        row.save()
    with pytest.raises(ValueError, match="append-only"):
        row.delete()
    assert TruthChange.objects.get().reason == ""
