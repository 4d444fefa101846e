"""One budget for every call: MAX_COST_PER_RUN holds mining, noise, relocation and promotion
too, each below its ceiling in the order of priority; what they could not afford is deferred
and reported, and the run keeps its checkpoint."""

from __future__ import annotations

import json
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.utils import timezone

from iris_consolidation import inventory_display
from iris_consolidation.models import ConsolidationRun
from iris_consolidation.services.hygiene import budget
from tests import llm_stub
from tests.services.hygiene.test_mining import make_session
from tests.services.pipeline.test_budget_and_forecast import PRICED, _price_per_call
from tests.services.pipeline.test_stage_forecast import HISTORY, stage_of

pytestmark = pytest.mark.django_db


def mined(payload):
    """Mining states the session's first message of the person; everything else changes nothing."""
    stage = stage_of(payload)
    if stage == "mine":
        data = llm_stub.StubLLMServer.data_of({"json": payload})
        first = next(m for m in data["session"]["messages"] if m["role"] == "user")
        return llm_stub.text(json.dumps({"truths": [{"content": first["content"], "kind": "fact", "confidence": "high",
                                                     "evidence": [first["id"]], "reason": "said"}]}))
    if stage == "judge":
        return llm_stub.verdict()
    if stage == "noise":
        return llm_stub.noise_results([{"id": c["id"], "verdict": "keep", "reason": "x"}
                                       for c in llm_stub.candidates_of(payload)])
    return llm_stub.text(json.dumps({"notes": []} if stage == "relocate" else {"rules": []}))


@pytest.fixture
def ana(user_factory, truth_factory, settings):
    settings.IRIS_CONSOLIDATION_MODEL = PRICED
    user = user_factory("ana")
    for day in range(6, 0, -1):
        make_session(user, f"s{day}", at=timezone.now() - timedelta(days=day), messages=[
            ("user", f"I moved house for the {day}th time this decade."), ("other", "Wow."),
        ])
    truth_factory(HISTORY, user=user)
    truth_factory("Wants answers in British English", user=user, corroborations=4)
    truth_factory("Upgraded numpy to 2.1.3", user=user)
    return user


def _run(*args):
    out = StringIO()
    call_command("consolidate_truths", "--sync", "--full", *args, stdout=out, stderr=StringIO())
    return ConsolidationRun.objects.order_by("-created_at").first(), out.getvalue()


def test_a_cap_smaller_than_the_mining_keeps_the_run_under_it_and_says_what_it_deferred(
    llm_server, ana, settings
):
    price = _price_per_call()
    cap = 2.5 * price
    settings.IRIS_CONSOLIDATION_MAX_COST_PER_RUN = cap
    llm_server.handler = mined

    run, output = _run()

    # Mining stops below half the cap (two calls), the other stages below three quarters (none left).
    calls = [stage_of(r["json"]) for r in llm_server.chat_requests()]
    assert calls.count("mine") == 2 and {"noise", "relocate", "promote"}.isdisjoint(calls)
    assert run.cost <= cap + price
    assert run.stage_calls == 2
    report = run.inventory["stages"]
    assert report["mine"]["deferred"] == 4 and report["mine"]["applied"] == 2
    assert report["relocate"]["deferred"] == 1 and report["promote"]["deferred"] == 1
    assert report["noise"]["deferred"] == 1
    assert "deferred 4 sessions (budget)" in output
    lines = inventory_display.stage_lines(report)
    assert any(line.strip().startswith("deferred: 4 sessions left for a later pass") for line in lines)
    assert run.checkpoint is None  # the next --since last reaches the deferred sessions again


def test_without_a_cap_every_stage_asks(llm_server, ana):
    llm_server.handler = mined

    run, _ = _run()

    calls = [stage_of(r["json"]) for r in llm_server.chat_requests()]
    assert calls.count("mine") == 6 and {"noise", "relocate", "promote"} <= set(calls)
    report = run.inventory["stages"]
    assert [report[s].get("deferred", 0) for s in ("mine", "noise", "relocate", "promote")] == [0, 0, 0, 0]
    assert run.checkpoint is not None


def test_a_model_without_a_price_makes_no_stage_call_under_a_cap(llm_server, ana, settings):
    settings.IRIS_CONSOLIDATION_MODEL = "openai/stub-judge"  # not in litellm's price map
    settings.IRIS_CONSOLIDATION_MAX_COST_PER_RUN = 5.0
    llm_server.handler = mined

    run, _ = _run()

    assert llm_server.chat_requests() == [] and run.llm_calls == 0
    assert run.inventory["stages"]["mine"]["deferred"] == 6


def test_the_ceilings_put_the_judge_first_and_mining_last():
    assert budget.CEILINGS["mine"] < budget.CEILINGS["noise"] == budget.CEILINGS["relocate"] \
        == budget.CEILINGS["promote"] < 1.0
