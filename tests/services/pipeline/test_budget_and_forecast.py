"""The money side of judging, against the scripted stub server: the forecast
(``--estimate``, dry runs) and the per-run budget (``MAX_COST_PER_RUN``)."""

from __future__ import annotations

import os
from io import StringIO

import pytest
from django.core.management import call_command

from iris_consolidation import inventory_display, run_settings
from iris_consolidation.inventory_display import NO_PRICE
from iris_consolidation.models import ClusterReview, ConsolidationCursor, LiveSettings, Truth
from iris_consolidation.services.pipeline import forecast, judging
from tests.helpers import history_counts, parse_summary, truth_state
from tests.incremental_support import make_pairs, run_pass

pytestmark = pytest.mark.django_db

PRICED = "openai/gpt-4o-mini"  # in litellm's local price map; the stub answers for it


def _price_per_call() -> float:
    """USD of one stub reply (50 prompt + 20 completion tokens) at ``PRICED``."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import litellm

    prompt, completion = litellm.cost_per_token(model="gpt-4o-mini", prompt_tokens=50, completion_tokens=20)
    return prompt + completion


def _command(*args: str) -> str:
    out = StringIO()
    call_command("consolidate_truths", *args, stdout=out, stderr=StringIO())
    return out.getvalue()


# --- the forecast --------------------------------------------------------------------------


def test_estimate_writes_nothing_and_sends_nothing(llm_server, truth_factory, user_factory, settings):
    settings.IRIS_CONSOLIDATION_CLUSTERS_PER_CALL = 2
    user = user_factory()
    make_pairs(truth_factory, user, 3)
    truth_factory("fact 9 without an embedding", user=user)
    before, counts = truth_state(), history_counts()

    output = _command("--estimate")

    assert llm_server.requests == []
    assert truth_state() == before and history_counts() == counts
    assert "users=1 clusters=3 (verdict cache 0, pre-pass 0, to the model 3) calls=2 at 2 clusters per call" in output
    assert f"cost {NO_PRICE} (openai/stub-judge)" in output


def test_estimate_needs_no_api_key(llm_server, truth_factory, user_factory, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY")
    make_pairs(truth_factory, user_factory(), 1)

    output = _command("--estimate")

    assert "calls=1" in output and llm_server.requests == []


def test_estimate_prices_tokens_counted_on_the_messages_the_calls_would_send(
    llm_server, truth_factory, user_factory, settings
):
    settings.IRIS_CONSOLIDATION_MODEL = PRICED
    settings.IRIS_CONSOLIDATION_RISK_POLICY = "refuse"  # no second look: the judge calls alone
    user = user_factory()
    make_pairs(truth_factory, user, 3)

    estimate = forecast.forecast_user(
        user_id=user.pk, clusters=_clusters(user), model=PRICED, per_call=8
    )

    import litellm

    from iris_consolidation.llm.prompts import build_messages

    requests = []
    alias = 1
    for cluster in _clusters(user):
        request, _ = judging.build_request(list(Truth.objects.filter(pk__in=cluster.member_ids)), first_alias=alias)
        alias += len(request.members)
        requests.append(request)
    expected = litellm.token_counter(model=PRICED, messages=build_messages(requests))
    assert (estimate.calls, estimate.to_model, estimate.prompt_tokens) == (1, 3, expected)
    assert estimate.completion_tokens == 3 * forecast.COMPLETION_TOKENS_PER_CLUSTER
    prompt, completion = litellm.cost_per_token(model=PRICED, prompt_tokens=expected, completion_tokens=240)
    assert estimate.cost() == pytest.approx(prompt + completion, rel=1e-9) and estimate.cost() > 0


def test_the_forecast_adds_the_second_looks_it_expects(llm_server, truth_factory, user_factory, settings):
    settings.IRIS_CONSOLIDATION_MODEL = PRICED
    user = user_factory()
    make_pairs(truth_factory, user, 3)
    settings.IRIS_CONSOLIDATION_RISK_POLICY = "refuse"
    judge_only = forecast.forecast_user(user_id=user.pk, clusters=_clusters(user), model=PRICED, per_call=1)
    settings.IRIS_CONSOLIDATION_RISK_POLICY = "verify"

    verified = forecast.forecast_user(user_id=user.pk, clusters=_clusters(user), model=PRICED, per_call=1)

    import litellm

    from iris_consolidation.llm import second_look

    system = litellm.token_counter(model=PRICED, messages=second_look.build_messages([]))
    # 3 judge calls: ceil(3 x 0.2) = 1 second look, of ceil(1 x 1.5) = 2 checks.
    assert (verified.calls, verified.second_looks) == (3, 1)
    assert verified.prompt_tokens == judge_only.prompt_tokens + system + 2 * forecast.PROMPT_TOKENS_PER_CHECK
    assert verified.completion_tokens == judge_only.completion_tokens + 2 * forecast.COMPLETION_TOKENS_PER_CHECK


def test_the_forecast_leaves_out_clusters_the_cache_or_the_pre_pass_settles(llm_server, truth_factory, user_factory):
    from tests.conftest import vector_at

    user = user_factory()
    make_pairs(truth_factory, user, 2)
    truth_factory("Has a dog named Rex", user=user, embedding=vector_at(1.0, axis=10, towards=11))
    truth_factory("has a dog named Rex.", user=user, embedding=vector_at(0.95, axis=10, towards=11))
    run_pass()  # "keep" for both pairs goes into the verdict cache; the dog pair is merged
    make_pairs(truth_factory, user, 1, start=6)

    estimate = forecast.forecast_user(user_id=user.pk, clusters=_clusters(user), model="openai/stub-judge")

    assert (estimate.clusters, estimate.cached, estimate.to_model, estimate.calls) == (3, 2, 1, 1)


def test_a_dry_run_prints_the_same_forecast_line(llm_server, truth_factory, user_factory):
    make_pairs(truth_factory, user_factory(), 2)
    estimate_line = next(line for line in _command("--estimate").splitlines() if line.startswith("Forecast:"))

    output = _command("--dry-run")

    # The judge's part is the same; a dry run makes its stages' calls (counted), it does not forecast them.
    dry_line = next(line for line in output.splitlines() if line.startswith("Forecast:"))
    assert dry_line.split("; stages:")[0] == estimate_line.split("; stages:")[0]
    assert inventory_display.STAGES_NOT_FORECAST in dry_line
    assert "stages: mine calls=0 tokens 0+~0, check calls=0 tokens 0+~0, noise calls=0" in estimate_line
    assert len(llm_server.chat_requests()) == 1


def _clusters(user):
    from iris_consolidation.services.pipeline import clustering

    return clustering.find_clusters(user_id=user.pk, threshold=0.75)


# --- the budget ----------------------------------------------------------------------------


def test_the_budget_stops_calls_defers_the_rest_and_the_next_run_finishes_them(
    llm_server, truth_factory, user_factory, settings
):
    settings.IRIS_CONSOLIDATION_MODEL = PRICED
    settings.IRIS_CONSOLIDATION_CLUSTERS_PER_CALL = 1
    settings.IRIS_CONSOLIDATION_MAX_COST_PER_RUN = 1.5 * _price_per_call()
    user = user_factory()
    make_pairs(truth_factory, user, 4)

    capped = run_pass()

    # Call 1 starts at $0, call 2 under the cap, call 3 would start at 2 calls' worth.
    assert len(llm_server.chat_requests()) == 2
    assert (capped.status, capped.kept, capped.deferred, capped.failed) == ("done", 2, 2, 0)
    assert capped.cost == pytest.approx(2 * _price_per_call())
    deferred = capped.reviews.filter(outcome=ClusterReview.Outcome.DEFERRED)
    assert {r.skip_reason for r in deferred} == {judging.DEFERRED}
    assert capped.checkpoint is None
    cursor = ConsolidationCursor.objects.get(user=user)
    members = Truth.objects.filter(pk__in=[r["id"] for review in deferred for r in review.snapshot])
    assert (cursor.updated_at, cursor.truth_id) < min((t.updated_at, t.pk) for t in members)

    settings.IRIS_CONSOLIDATION_MAX_COST_PER_RUN = None
    rest = run_pass()

    judged = [{t["content"] for t in llm_server.truths_of(r)} for r in llm_server.chat_requests()[2:]]
    assert judged == [{"fact 2 a", "fact 2 b"}, {"fact 3 a", "fact 3 b"}]
    assert (rest.clusters_found, rest.kept, rest.deferred, rest.status) == (2, 2, 0, "done")
    assert rest.checkpoint is not None


def test_a_capped_run_makes_no_call_for_a_model_without_a_price(llm_server, truth_factory, user_factory, settings):
    settings.IRIS_CONSOLIDATION_MAX_COST_PER_RUN = 5.0
    make_pairs(truth_factory, user_factory(), 2)

    run = run_pass()

    assert llm_server.chat_requests() == []
    assert (run.deferred, run.failed, run.llm_calls) == (2, 0, 0)


def test_the_live_settings_cap_overrides_the_setting(db, settings):
    settings.IRIS_CONSOLIDATION_MAX_COST_PER_RUN = 10.0
    assert run_settings.get_effective_settings().max_cost_per_run == 10.0

    LiveSettings.objects.create(max_cost_per_run="0.25")

    effective = run_settings.get_effective_settings()
    assert effective.max_cost_per_run == 0.25 and "max_cost_per_run" in effective.overridden


def test_the_summary_shows_calls_clusters_per_call_tokens_and_cost(llm_server, truth_factory, user_factory, settings):
    settings.IRIS_CONSOLIDATION_MODEL = PRICED
    make_pairs(truth_factory, user_factory(), 3)

    summary = parse_summary(_command("--sync"))

    assert {k: summary[k] for k in ("llm_calls", "clusters_per_call", "prompt_tokens", "cached_tokens")} == {
        "llm_calls": "1",
        "clusters_per_call": "3.00",
        "prompt_tokens": "50",
        "cached_tokens": "0",
    }
    assert (summary["completion_tokens"], summary["deferred"]) == ("20", "0")
    assert summary["cost"] == f"${_price_per_call():.4f}"


def test_an_unpriced_model_shows_its_cost_as_unknown(llm_server, truth_factory, user_factory):
    make_pairs(truth_factory, user_factory(), 1)

    summary = parse_summary(_command("--sync"))

    assert summary["cost"] == "unknown" and summary["llm_calls"] == "1"
