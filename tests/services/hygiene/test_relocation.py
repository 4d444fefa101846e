"""The relocate stage: the rule, notes with connections, pointer truths, one
transaction that rolls back whole, undo, report mode and dry runs, the model's
classification against the scripted stub."""

from __future__ import annotations

import json

import pytest
from django.utils import timezone

from iris_consolidation.exceptions import UndoRefused
from iris_consolidation.llm import get_judge_client
from iris_consolidation.llm import hygiene as prompts
from iris_consolidation.models import LineageEvent, Note, RetiredReason, Truth, TruthChange
from iris_consolidation.services.hygiene import passes, relocation, stages
from iris_consolidation.services.operations import undo
from tests import llm_stub
from tests.helpers import truth_state

pytestmark = pytest.mark.django_db

RUNBOOK = "Deploy runbook:\n1. Pull main\n2. Run migrations\n3. Restart the workers\n4. Check the queue"
HISTORY = ("Moved from Lisbon to Porto in 2019 for a job at the port authority, then to Berlin in 2021 when "
           "the company opened an office there, and finally to Munich in 2023 after a promotion to lead the "
           "logistics team; kept the flat in Porto, which is rented out to students, and visits twice a year.")


def started(run):
    run.started_at = timezone.now()
    run.save(update_fields=["started_at"])
    return run


@pytest.mark.parametrize(
    ("content", "why"),
    [
        (RUNBOOK, "list"),
        (HISTORY, "length"),
        ("v1.2: added export; v1.3: fixed the import; v2.0: new admin", "changelog"),
        ("2024-01-02 moved desk; 2024-03-05 new laptop", "changelog"),
        ("Has two cats", ""),
        ("Likes tea, coffee and cocoa", ""),
    ],
)
def test_reference_heavy_rule(content, why):
    assert relocation.is_reference_heavy(content, min_chars=280) == why


@pytest.fixture
def heavy(truth_factory):
    runbook = truth_factory(RUNBOOK)
    history = truth_factory(HISTORY, user=runbook.user)
    short = truth_factory("Has two cats", user=runbook.user)
    pinned = truth_factory(RUNBOOK + "\n5. Done", user=runbook.user, pinned=True)
    return {"runbook": runbook, "history": history, "short": short, "pinned": pinned, "user": runbook.user}


def test_report_mode_lists_and_changes_nothing(heavy, run_factory):
    before = truth_state(with_decay=True)
    result = stages.run_relocate(started(run_factory()), heavy["user"].pk, client=None)
    assert (result.mode, result.examined, result.affected, result.applied) == ("report", 3, 2, 0)
    assert [f["truth_id"] for f in result.findings[1:]] == [heavy["runbook"].pk, heavy["history"].pk]
    assert truth_state(with_decay=True) == before and Note.objects.count() == 0


def test_apply_writes_note_pointer_and_retires_with_lineage(heavy, run_factory, settings):
    settings.IRIS_CONSOLIDATION_RELOCATE = "apply"
    run = started(run_factory())
    result = stages.run_relocate(run, heavy["user"].pk, client=None)
    assert (result.affected, result.applied) == (2, 2)
    runbook = Truth.all_objects.get(pk=heavy["runbook"].pk)
    assert runbook.retired_reason == RetiredReason.RELOCATED
    pointer = runbook.superseded_by
    note = Note.objects.get(source_truths=runbook)
    assert note.slug == "deploy-runbook" and note.title == "Deploy runbook:"
    assert pointer.content == "See [[deploy-runbook]]: Deploy runbook:"
    assert (pointer.is_live, pointer.pinned, pointer.source) == (True, True, "note:deploy-runbook")
    assert note.body.startswith("# Deploy runbook:\n\n" + RUNBOOK + "\n\n## Connections\n")
    event = LineageEvent.objects.get(source=runbook)
    assert (event.action, event.result_id, event.actor) == ("relocate", pointer.pk, "hygiene:relocate")
    assert set(TruthChange.objects.filter(run=run).values_list("truth_id", "action")) >= {
        (runbook.pk, "retired"), (pointer.pk, "created")
    }
    run.refresh_from_db()
    assert run.retired == 2
    # A later pass finds nothing more to relocate: pointers are never candidates.
    again = stages.run_relocate(started(run_factory()), heavy["user"].pk, client=None)
    assert again.affected == 0


def test_notes_link_to_related_notes_in_connections(truth_factory, settings):
    a = truth_factory("Deploy runbook for the API:\n- build\n- push\n- migrate")
    b = truth_factory("Deploy runbook for the workers:\n- build\n- push\n- restart", user=a.user)
    first, _ = relocation.relocate(move=relocation.rule_move(a, "list"), run=None)
    second, _ = relocation.relocate(move=relocation.rule_move(b, "list"), run=None)
    assert f"## Connections\n\n- [[{first.slug}]]\n" in second.body
    assert "- (none yet)" in first.body


def test_relocation_rolls_back_whole_when_the_retirement_fails(heavy, monkeypatch):
    before = truth_state(with_decay=True)

    def fail(truth, pointer, *, now):
        raise relocation.RelocationConflict("the retirement failed")

    monkeypatch.setattr(relocation, "_retire", fail)
    with pytest.raises(relocation.RelocationConflict):
        relocation.relocate(move=relocation.rule_move(heavy["runbook"], "list"), run=None)
    assert Note.objects.count() == 0
    assert truth_state(with_decay=True) == before  # no pointer, the truth still live
    assert LineageEvent.objects.count() == 0 and TruthChange.objects.count() == 0


def test_a_truth_changed_meanwhile_is_not_relocated(heavy, settings, run_factory):
    settings.IRIS_CONSOLIDATION_RELOCATE = "apply"
    move = relocation.rule_move(heavy["runbook"], "list")
    Truth.objects.filter(pk=heavy["runbook"].pk).update(pinned=True)
    with pytest.raises(relocation.RelocationConflict):
        relocation.relocate(move=move, run=None)
    assert Note.objects.count() == 0


def test_undo_restores_the_truth_and_retires_the_pointer(heavy):
    _, pointer = relocation.relocate(move=relocation.rule_move(heavy["history"], "length"), run=None)
    plan = undo.reversal_of(Truth.all_objects.get(pk=heavy["history"].pk)).step
    assert (plan.truth.pk, plan.source_ids, plan.action, plan.creates_truth) == (
        pointer.pk, (heavy["history"].pk,), "relocate", True
    )
    result = undo.undo_consolidation(truth_id=pointer.pk, actor="ops", reason="keep it in every prompt")
    assert (result.truth_id, result.truth_retired, result.restored_ids) == (pointer.pk, True, (heavy["history"].pk,))
    history = Truth.all_objects.get(pk=heavy["history"].pk)
    assert (history.is_live, history.superseded_by_id, history.retired_reason) == (True, None, "")
    pointer.refresh_from_db()
    assert pointer.retired_reason == RetiredReason.UNDONE
    assert LineageEvent.objects.filter(action="undo", source=pointer, result=history, actor="ops").count() == 1
    with pytest.raises(UndoRefused):
        undo.undo_consolidation(truth_id=history.pk, actor="ops", reason="again")


def test_dry_run_in_apply_mode_writes_nothing(heavy, run_factory, settings):
    settings.IRIS_CONSOLIDATION_RELOCATE = "apply"
    before = truth_state(with_decay=True)
    result = stages.run_relocate(started(run_factory(dry_run=True)), heavy["user"].pk, client=None)
    assert (result.mode, result.affected, result.applied) == ("report", 2, 0)
    assert truth_state(with_decay=True) == before and Note.objects.count() == 0


def test_model_classification_acts_only_on_offered_ids(llm_server, heavy, truth_factory, run_factory, settings):
    settings.IRIS_CONSOLIDATION_RELOCATE = "apply"
    medium = truth_factory(
        "Architecture: the queue lives in PostgreSQL because one machine runs everything, "
        "and Redis only comes in when there are several workers on several machines",
        user=heavy["user"],
    )
    offered = {"id": "r3", "title": "Queue architecture", "summary": "Why the queue lives in PostgreSQL"}
    invented = {"id": "r9", "title": "Invented", "summary": "not offered", "reason": "x"}
    llm_server.script = [llm_stub.text(json.dumps({"notes": [{**offered, "reason": "rationale"}, invented]}))]
    result = stages.run_relocate(started(run_factory()), heavy["user"].pk, client=get_judge_client("llm"))
    data = llm_stub.StubLLMServer.data_of(llm_server.chat_requests()[0])
    assert [c["content"] for c in data["candidates"]] == [RUNBOOK, HISTORY, medium.content]  # short "cats" not offered
    assert llm_server.chat_requests()[0]["json"]["messages"][0]["content"] == prompts.RELOCATE_SYSTEM
    assert result.findings[0]["refused"] == [{"entry": invented, "why": "id was not offered"}]
    assert (result.affected, result.applied) == (1, 1)
    assert Truth.all_objects.get(pk=medium.pk).superseded_by.content == (
        "See [[queue-architecture]]: Why the queue lives in PostgreSQL"
    )
    assert Truth.objects.filter(pk__in=[heavy["runbook"].pk, heavy["history"].pk]).count() == 2


def test_a_malformed_classification_falls_back_to_the_rule(llm_server, heavy, run_factory, settings):
    settings.IRIS_CONSOLIDATION_LLM_ATTEMPTS = 1
    llm_server.script = [llm_stub.text('{"notes": [{"id": "r1"', finish_reason="length")]
    result = stages.run_relocate(started(run_factory()), heavy["user"].pk, client=get_judge_client("llm"))
    assert result.findings[0]["errors"][0].startswith("model call failed, the rule decided:")
    assert result.affected == 2


@pytest.mark.parametrize("in_a_pass", [False, True])
def test_a_truth_tagged_as_pointer_is_never_a_candidate(heavy, run_factory, in_a_pass):
    """Unpinned and reference-heavy, but tagged as a pointer: left alone, whether the stage
    reads its rows itself or from a user's pass (where the tag is a flag from the query)."""
    Truth.objects.filter(pk=heavy["history"].pk).update(tags=["travel", relocation.POINTER_TAG])
    run = started(run_factory())
    if in_a_pass:
        with passes.user_pass(run, heavy["user"].pk, buffered=False) as shared:
            assert [row.pointer for row in shared.rows] == [False, True, False, False]
            result = stages.run_relocate(run, heavy["user"].pk, client=None, shared=shared)
    else:
        result = stages.run_relocate(run, heavy["user"].pk, client=None)
    assert (result.examined, result.affected) == (2, 1)
    assert [f["truth_id"] for f in result.findings[1:]] == [heavy["runbook"].pk]


def test_the_models_candidates_leave_pointers_out(heavy):
    """``candidates``, what the model is offered, applies the same pointer test as the rule's rows."""
    Truth.objects.filter(pk=heavy["history"].pk).update(tags=["travel", relocation.POINTER_TAG])
    assert [t.pk for t in relocation.candidates(heavy["user"].pk)] == [heavy["runbook"].pk, heavy["short"].pk]
