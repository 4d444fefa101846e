"""The LLM judge through litellm against the scripted stub server."""

from __future__ import annotations

import pytest

from iris_consolidation.exceptions import JudgeMisconfigured, JudgeRateLimited, JudgeResponseInvalid
from iris_consolidation.llm import get_judge_client
from tests import llm_stub
from tests.helpers import judge_request

#: Two wordings of one job (the request is frozen, so tests share it).
NURSES = judge_request("Works as a nurse", "Is a nurse")


def test_verdict_travels_through_litellm(llm_server):
    merge = {"action": "merge", "ids": ["t1", "t2"], "content": "Works as a nurse", "reason": "same"}
    llm_server.script = [llm_stub.verdict([merge])]

    verdict = get_judge_client().judge(NURSES)

    assert [a.ids for a in verdict.actions] == [("t1", "t2")]
    assert verdict.tokens == 70 and verdict.llm_calls == 1
    sent = llm_server.chat_requests()[0]
    assert sent["json"]["model"] == "stub-judge"
    assert [t["id"] for t in llm_server.truths_of(sent)] == ["t1", "t2"]


def test_rate_limit_reports_the_providers_wait(llm_server):
    llm_server.script = [llm_stub.error(429, headers={"retry-after": "17"})]

    with pytest.raises(JudgeRateLimited) as info:
        get_judge_client().judge(NURSES)

    assert info.value.retry_after == 17.0
    assert len(llm_server.chat_requests()) == 1  # litellm's own retries are off


def test_truncated_reply_is_retried_then_invalid(llm_server):
    llm_server.script = [llm_stub.text('{"actions": [{"action": "mer', finish_reason="length")]

    with pytest.raises(JudgeResponseInvalid):
        get_judge_client().judge(NURSES)

    assert len(llm_server.chat_requests()) == 2


def test_missing_api_key_is_a_configuration_error(settings, monkeypatch):
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    settings.IRIS_CONSOLIDATION_JUDGE = "llm"
    settings.IRIS_CONSOLIDATION_MODEL = "anthropic/claude-sonnet-4-5"

    with pytest.raises(JudgeMisconfigured, match="ANTHROPIC_API_KEY"):
        get_judge_client()


def test_ask_json_keeps_the_spend_of_earlier_attempts_when_a_later_one_fails(llm_server, settings):
    """A malformed reply is asked again; when the second call fails in transport, the
    error carries the first call's spend (it was made and billed). ``ask_json``'s own
    copy of the retry loop used to drop it."""
    from iris_consolidation.exceptions import JudgeUnavailable

    settings.IRIS_CONSOLIDATION_JUDGE = "llm"
    settings.IRIS_CONSOLIDATION_LLM_ATTEMPTS = 2
    llm_server.script = [llm_stub.text("Sure! Ana lives in Porto."), llm_stub.error(500)]

    def parse(raw: str) -> dict:
        if not raw.startswith("{"):
            raise JudgeResponseInvalid("not a JSON object", raw=raw)
        return {}

    with pytest.raises(JudgeUnavailable) as info:
        get_judge_client("llm").ask_json([{"role": "user", "content": "{}"}], parse)

    assert len(llm_server.chat_requests()) == 2
    assert info.value.spend is not None
    assert (info.value.spend.calls, info.value.spend.tokens) == (1, 70)
