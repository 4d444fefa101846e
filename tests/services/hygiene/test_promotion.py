"""The promote stage: offline skip, only offered ids, hand-authored rules
never touched, fingerprint dedupe, append-only, dry runs; against the scripted stub."""

from __future__ import annotations

import json

import pytest
from django.utils import timezone

from iris_consolidation.llm import get_judge_client
from iris_consolidation.llm import hygiene as prompts
from iris_consolidation.models import LearnedRule, StageResult, Truth
from iris_consolidation.services.hygiene import promotion, stages
from tests import llm_stub
from tests.helpers import truth_state

pytestmark = pytest.mark.django_db


def started(run):
    run.started_at = timezone.now()
    run.save(update_fields=["started_at"])
    return run


def rules(*entries):
    return llm_stub.text(json.dumps({"rules": list(entries)}))


@pytest.fixture
def often(truth_factory):
    british = truth_factory("Wants answers in British English", corroborations=4)
    terse = truth_factory("Prefers short answers without preamble", user=british.user, corroborations=3)
    cats = truth_factory("Has two cats", user=british.user, corroborations=5)
    rare = truth_factory("Wants code in Rust", user=british.user, corroborations=2)
    return {"british": british, "terse": terse, "cats": cats, "rare": rare, "user": british.user}


def test_offline_the_stage_reports_skipped_no_llm(often, run_factory):
    result = stages.run_promote(started(run_factory()), often["user"].pk, client=None)
    assert (result.examined, result.affected, result.findings[0]["skipped"]) == (0, 0, "skipped: no LLM")
    assert LearnedRule.objects.count() == 0


def test_only_offered_candidates_become_rules_and_hand_authored_ones_are_untouched(
    llm_server, often, run_factory, settings
):
    settings.IRIS_CONSOLIDATION_PROMOTE = "apply"
    hand = LearnedRule.objects.create(user=often["user"], text="Prefers short answers without preamble!",
                                      fingerprint=promotion.fingerprint("Prefers short answers without preamble"),
                                      hand_authored=True)
    llm_server.script = [rules(
        {"id": "r1", "rule": "Answer in British English.", "reason": "a standing instruction"},
        {"id": "r2", "rule": "Prefers short answers without preamble", "reason": "same as the hand-written one"},
        {"id": "r4", "rule": "Write code in Rust.", "reason": "not offered"},
        {"id": "r3", "rule": "Line one\nline two", "reason": "two lines"},
    )]
    run = started(run_factory())
    result = stages.run_promote(run, often["user"].pk, client=get_judge_client("llm"))
    call = llm_server.chat_requests()[0]
    assert call["json"]["messages"][0]["content"] == prompts.PROMOTE_SYSTEM
    offered = llm_stub.StubLLMServer.data_of(call)["candidates"]
    assert offered == [
        {"id": "r1", "content": "Wants answers in British English"},
        {"id": "r2", "content": "Prefers short answers without preamble"},
        {"id": "r3", "content": "Has two cats"},
    ]  # "Wants code in Rust" has 2 corroborations, below the threshold of 3
    auto = LearnedRule.objects.get(hand_authored=False)
    assert (auto.text, auto.run_id, auto.model) == ("Answer in British English.", run.pk, "openai/stub-judge")
    assert list(auto.source_truths.values_list("pk", flat=True)) == [often["british"].pk]
    hand.refresh_from_db()
    assert (hand.text, hand.source_truths.count()) == ("Prefers short answers without preamble!", 0)
    head = result.findings[0]
    assert [r["why"] for r in head["refused"]] == [
        "id was not offered", "rule empty, longer than 200 characters or not one line"
    ]
    assert [(p["truth_id"], p["outcome"]) for p in result.findings[1:]] == [
        (often["british"].pk, "added"), (often["terse"].pk, "skipped")
    ]
    assert result.findings[2]["why"] == f"already a learned rule (#{hand.pk}, hand-authored)"
    assert (result.examined, result.affected, result.applied) == (3, 1, 1)
    assert Truth.objects.filter(user=often["user"]).count() == 4  # truths stay live


def test_a_second_pass_appends_nothing_and_edits_nothing(llm_server, often, run_factory, settings):
    settings.IRIS_CONSOLIDATION_PROMOTE = "apply"
    llm_server.script = [rules({"id": "r1", "rule": "Answer in British English.", "reason": "instruction"})]
    stages.run_promote(started(run_factory()), often["user"].pk, client=get_judge_client("llm"))
    first = LearnedRule.objects.get()
    created = (first.pk, first.text, first.created_at)
    llm_server.script = [rules({"id": "r1", "rule": "answer in british english", "reason": "same again"})]
    # A truth the model left out is asked about again once its text changed (its "not a rule" is remembered).
    Truth.objects.filter(pk=often["terse"].pk).update(content="Prefers short answers, no preamble")
    again = stages.run_promote(started(run_factory()), often["user"].pk, client=get_judge_client("llm"))
    # The promoted truth is no longer a candidate; the changed one, offered again, maps to the same fingerprint.
    assert [c["content"] for c in llm_stub.StubLLMServer.data_of(llm_server.chat_requests()[1])["candidates"]] == [
        "Prefers short answers, no preamble"
    ]
    assert again.applied == 0 and LearnedRule.objects.count() == 1
    first.refresh_from_db()
    assert (first.pk, first.text, first.created_at) == created


def test_report_mode_and_dry_runs_write_no_rule(llm_server, often, run_factory, settings):
    llm_server.script = [rules({"id": "r1", "rule": "Answer in British English.", "reason": "instruction"})]
    before = truth_state(with_decay=True)
    report = stages.run_promote(started(run_factory()), often["user"].pk, client=get_judge_client("llm"))
    settings.IRIS_CONSOLIDATION_PROMOTE = "apply"
    dry = stages.run_promote(started(run_factory(dry_run=True)), often["user"].pk, client=get_judge_client("llm"))
    assert [(r.mode, r.affected, r.applied) for r in (report, dry)] == [("report", 1, 0), ("report", 1, 0)]
    assert dry.findings[1]["outcome"] == "would add"
    assert LearnedRule.objects.count() == 0 and truth_state(with_decay=True) == before


def test_malformed_reply_is_an_error_and_adds_nothing(llm_server, often, run_factory, settings):
    settings.IRIS_CONSOLIDATION_PROMOTE = "apply"
    settings.IRIS_CONSOLIDATION_LLM_ATTEMPTS = 2
    llm_server.script = [llm_stub.text("These look like rules to me."), llm_stub.text('{"rules": [{"id": "r1",',
                                                                                     finish_reason="length")]
    result = stages.run_promote(started(run_factory()), often["user"].pk, client=get_judge_client("llm"))
    assert result.findings[0]["errors"] == [
        "model call failed: The judge's reply was cut off (finish_reason=length)."
    ]
    assert LearnedRule.objects.count() == 0 and StageResult.objects.get(stage="promote").applied == 0


def test_a_note_pointer_is_never_a_candidate(often):
    from iris_consolidation.services.hygiene.relocation import POINTER_TAG

    Truth.objects.filter(pk=often["cats"].pk).update(tags=["pets", POINTER_TAG])
    assert [t.pk for t in promotion.candidates(often["user"].pk)] == [often["british"].pk, often["terse"].pk]
