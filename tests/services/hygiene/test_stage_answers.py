"""Answers remembered: relocation's "keep" and promotion's "not a rule" are not asked again
until the truth, the prompt or the model changes (counted at the scripted server)."""

from __future__ import annotations

import json

import pytest

from iris_consolidation.llm import hygiene as prompts
from iris_consolidation.models import LearnedRule, Note, Truth, VerdictCacheEntry
from iris_consolidation.services.hygiene import answers
from tests import llm_stub
from tests.incremental_support import run_pass

pytestmark = pytest.mark.django_db

HISTORY = ("Moved from Lisbon to Porto in 2019 for a job at the port authority, then to Berlin in 2021 when "
           "the company opened an office there, and finally to Munich in 2023 after a promotion to lead the "
           "logistics team; kept the flat in Porto, which is rented out to students, and visits twice a year.")


class Counting:
    """The scripted model: relocation and promotion calls counted and answered "nothing to
    do" (or promote ``rules``), judge calls kept."""

    def __init__(self, *, rules=()):
        self.calls = {"relocate": [], "promote": []}
        self.rules = list(rules)

    def __call__(self, payload):
        system = payload["messages"][0]["content"]
        if "<data>" not in payload["messages"][-1]["content"]:
            return llm_stub.verdict()
        data = llm_stub.StubLLMServer.data_of({"json": payload})
        if "standing instructions" in system:
            self.calls["promote"].append([c["content"] for c in data["candidates"]])
            named = [r for r in self.rules if r["content"] in {c["content"] for c in data["candidates"]}]
            alias = {c["content"]: c["id"] for c in data["candidates"]}
            entries = [{"id": alias[r["content"]], "rule": r["rule"], "reason": "instruction"} for r in named]
            return llm_stub.text(json.dumps({"rules": entries}))
        self.calls["relocate"].append([c["content"] for c in data["candidates"]])
        return llm_stub.text(json.dumps({"notes": []}))


@pytest.fixture
def person(truth_factory):
    history = truth_factory(HISTORY, corroborations=1)
    british = truth_factory("Wants answers in British English", user=history.user, corroborations=4)
    cats = truth_factory("Has two cats and a dog named Rex who all live in Porto with the family", user=history.user,
                         corroborations=5)
    return {"user": history.user, "history": history, "british": british, "cats": cats}


def test_a_second_pass_over_unchanged_truths_sends_no_relocation_or_promotion_call(llm_server, person, settings):
    settings.IRIS_CONSOLIDATION_RELOCATE_MIN_CHARS = 120  # cats (70 characters) is offered too: half of 120
    model = Counting()
    llm_server.handler = model

    first = run_pass()
    assert [len(c) for c in model.calls["relocate"]] == [2] and [len(c) for c in model.calls["promote"]] == [2]
    assert VerdictCacheEntry.objects.filter(stage="relocate").count() == 2
    assert VerdictCacheEntry.objects.filter(stage="promote").count() == 2

    second = run_pass()

    assert (len(model.calls["relocate"]), len(model.calls["promote"])) == (1, 1)
    assert second.stage_calls == 0 and first.stage_calls == 2
    head = second.stage_results.get(stage="promote").findings[0]
    assert (head["asked"], head["calls"], head["remembered"]) == (0, 0, 2)
    assert not Note.objects.exists() and not LearnedRule.objects.exists()


def test_a_changed_truth_prompt_or_model_is_asked_again(llm_server, person, settings, monkeypatch):
    settings.IRIS_CONSOLIDATION_RELOCATE_MIN_CHARS = 120
    model = Counting()
    llm_server.handler = model
    run_pass()

    # The truth changed: only it is asked about again, by both stages.
    Truth.objects.filter(pk=person["british"].pk).update(content="Wants every answer in British English")
    run_pass()
    assert model.calls["promote"][-1] == ["Wants every answer in British English"]
    assert len(model.calls["relocate"]) == 1  # too short to be offered for a note either way

    # The prompt changed: everything is asked again, by that stage only.
    monkeypatch.setattr(prompts, "PROMOTE_PROMPT_VERSION", "promote-test.2")
    run_pass()
    assert len(model.calls["promote"]) == 3 and len(model.calls["promote"][-1]) == 2
    assert len(model.calls["relocate"]) == 1

    # The model changed: both stages ask again.
    settings.IRIS_CONSOLIDATION_MODEL = "openai/another-stub"
    run_pass()
    assert (len(model.calls["relocate"]), len(model.calls["promote"])) == (2, 4)


def test_a_rule_or_a_refused_entry_is_not_remembered_as_not_a_rule(llm_server, person, settings):
    settings.IRIS_CONSOLIDATION_PROMOTE = "report"  # the rule is not written: the truth stays a candidate
    model = Counting(rules=[{"content": "Wants answers in British English", "rule": "Answer in British English."}])
    llm_server.handler = model
    run_pass()
    run_pass()
    # The named one is asked about again (a rule is not an answer to forget); the other is not.
    assert model.calls["promote"] == [
        ["Wants answers in British English", "Has two cats and a dog named Rex who all live in Porto with the family"],
        ["Wants answers in British English"],
    ]
    key = answers.answer_key(stage="promote", user_id=person["user"].pk, model="openai/stub-judge",
                             prompt_version=prompts.PROMOTE_PROMPT_VERSION, content=person["cats"].content)
    assert VerdictCacheEntry.objects.get(key=key).reasoning == "not a standing instruction, by the model"


def test_without_a_model_nothing_is_remembered(person, settings):
    settings.IRIS_CONSOLIDATION_JUDGE = "rules"
    run_pass()
    # The judge may cache its own "keep" on a cluster (the attribute arm groups the move and the
    # pets in Porto); relocation and promotion remember nothing without a model.
    assert not VerdictCacheEntry.objects.exclude(stage="").exists()
