"""The forecast of every call: ``--estimate`` counts the requests mining, noise, relocation
and promotion would send, built as the pass builds them, and sends none."""

from __future__ import annotations

import json
import re
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.utils import timezone

from iris_consolidation.llm import hygiene as prompts
from iris_consolidation.services.pipeline import forecast
from tests import llm_stub
from tests.services.hygiene.test_mining import make_session

pytestmark = pytest.mark.django_db

PRICED = "openai/gpt-4o-mini"  # in litellm's local price map; the stub answers for it
HISTORY = ("Moved from Lisbon to Porto in 2019 for a job at the port authority, then to Berlin in 2021 when "
           "the company opened an office there, and finally to Munich in 2023 after a promotion to lead the "
           "logistics team; kept the flat in Porto, which is rented out to students, and visits twice a year.")


def stage_of(payload):
    system = payload["messages"][0]["content"]
    if llm_stub.is_noise_call(payload):
        return "noise"
    if not isinstance(system, str):  # a cacheable prompt: content blocks (the judge's)
        return "second look" if llm_stub.is_second_look_call(payload) else "judge"
    return {prompts.MINING_SYSTEM: "mine", prompts.RELOCATE_SYSTEM: "relocate",
            prompts.PROMOTE_SYSTEM: "promote"}.get(system, "judge")


def answer(payload):
    """Plausible answers that change nothing: no truth mined, no noise, no note, no rule."""
    stage = stage_of(payload)
    if stage == "noise":
        return llm_stub.noise_results([{"id": c["id"], "verdict": "keep", "reason": "matters"}
                                       for c in llm_stub.candidates_of(payload)])
    if stage == "judge":
        return llm_stub.verdict()
    key = {"mine": "truths", "relocate": "notes", "promote": "rules"}[stage]
    return llm_stub.text(json.dumps({key: []}))


@pytest.fixture
def ana(user_factory, truth_factory, settings):
    settings.IRIS_CONSOLIDATION_MODEL = PRICED
    user = user_factory("ana")
    for day in (3, 2):
        make_session(user, f"s{day}", at=timezone.now() - timedelta(days=day), messages=[
            ("other", "How was the move?"), ("user", "I live in Porto now."), ("user", "I'm vegetarian, by the way."),
        ])
    truth_factory(HISTORY, user=user)
    truth_factory("Wants answers in British English", user=user, corroborations=4)
    truth_factory("Upgraded numpy to 2.1.3", user=user)
    truth_factory("The CI build is currently failing", user=user)
    return user


def _command(*args):
    out = StringIO()
    call_command("consolidate_truths", *args, stdout=out, stderr=StringIO())
    return out.getvalue()


def test_the_estimate_counts_each_stages_requests_and_sends_none(llm_server, ana, caplog):
    llm_server.handler = answer
    line = _command("--estimate", "--full")
    assert llm_server.requests == []
    # The noise call it counted in place of making it is no failure to report.
    assert "noise classification failed" not in caplog.text

    _command("--sync", "--full")

    import litellm

    sent: dict[str, list[int]] = {}
    for request in llm_server.chat_requests():
        sent.setdefault(stage_of(request["json"]), []).append(
            litellm.token_counter(model=PRICED, messages=request["json"]["messages"]))
    assert {stage: len(tokens) for stage, tokens in sent.items()} == {"mine": 2, "noise": 1, "relocate": 1,
                                                                     "promote": 1}
    for stage in set(forecast.STAGES) - {"check"}:
        completion = (forecast.NOISE_COMPLETION_TOKENS_PER_CANDIDATE * 2 if stage == "noise"
                      else forecast.STAGE_COMPLETION_TOKENS[stage] * len(sent[stage]))
        assert f"{stage} calls={len(sent[stage])} tokens {sum(sent[stage])}+~{completion}" in line
    # What the two mining replies would add, unknown to an estimate: one novelty check (its
    # system prompt and PROPOSALS_PER_CHECK proposals' worth), and ceil(2 x 0.1) = 1 change pair
    # for the judge (this pass's replies mined nothing, so neither was sent).
    system = litellm.token_counter(model=PRICED, messages=[{"role": "system", "content": prompts.CHECK_SYSTEM}])
    proposals = forecast.PROPOSALS_PER_CHECK
    assert (f"check calls=1 tokens {system + proposals * forecast.PROMPT_TOKENS_PER_CHECKED_PROPOSAL}"
            f"+~{proposals * forecast.CHECK_COMPLETION_TOKENS_PER_PROPOSAL}") in line
    assert "to the model 1, ~1 of them mined change pairs) calls=1 " in line
    # 6 stage calls, the pair's judge call and the second look expected after it.
    assert re.search(r"model_calls=8 ", line)
    assert "cost $" in line


def test_an_estimate_with_the_rule_judge_forecasts_no_stage_call(ana, settings):
    settings.IRIS_CONSOLIDATION_JUDGE = "rules"
    line = _command("--estimate", "--full")
    assert "stages: mine calls=0 tokens 0+~0, check calls=0 tokens 0+~0, noise calls=0 tokens 0+~0" in line
    assert "model_calls=0 " in line and "cost $0 (rule judge: no model call)" in line
