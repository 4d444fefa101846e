"""A ``merging.Decision`` is stored whole on its review (``Decision.to_json``) and read back
(``Decision.from_json``) as the same decision, its vectors aside; a stored decision of another
format is refused with a clear error."""

from __future__ import annotations

import json
import uuid

import pytest

from iris_consolidation.exceptions import StoredDecisionInvalid
from iris_consolidation.llm.base import Action, Signal, Spend, Verdict
from iris_consolidation.services.pipeline import merging
from iris_consolidation.services.pipeline.validation import Code, Rejection

SNAPSHOT = (
    {"alias": "t1", "id": 11, "content": "Has two cats", "created_at": "2026-01-01T00:00:00+00:00",
     "updated_at": "2026-01-01T00:00:00+00:00", "generation": 0, "origin": "promoted", "pinned": False,
     "score": 0.5, "protected": False},
    {"alias": "t2", "id": 12, "content": "Has three cats now", "created_at": "2026-02-01T00:00:00+00:00",
     "updated_at": "2026-02-01T00:00:00+00:00", "generation": 1, "origin": "consolidated", "pinned": False,
     "score": 0.7, "protected": False},
)
SUPERSEDE = Action(
    action="supersede", old=("t1",), new="t2", reason="the count changed",
    signals=(Signal(code="supersede_outcome", concern="t2 states no change"),), second_look="a third cat came",
)
MERGE = Action(action="merge", ids=("t1", "t2"), content="Has cats", reason="the same pets")


def _decision() -> merging.Decision:
    spend = Spend(calls=2, prompt_tokens=900, cached_tokens=100, completion_tokens=80, cost=0.0031, unpriced=0)
    return merging.Decision(
        run_id=uuid.uuid4(), user_id=7, key="k" * 64, snapshot=SNAPSHOT, similarities={"t1": 1.0, "t2": 0.87},
        judge="llm", verdict=Verdict(actions=(SUPERSEDE, MERGE), reasoning="scripted", raw='{"clusters": []}',
                                     model="openai/test", prompt_version="judge-x", tokens=980, cost=0.0031,
                                     latency_ms=412, llm_calls=2, attempts=1, spend=spend),
        accepted=(SUPERSEDE,), prepass=0,
        rejections=(Rejection(action=MERGE, code=Code.LOST_DETAIL, reason="'three' is lost"),),
        failed=("t3",), error="one failed", failure="invalid_reply", spend=spend, asked_model=True,
        embeddings={"Has cats": [0.1] * 3},
    )


def test_a_decision_round_trips_through_its_stored_json_but_its_vectors():
    decision = _decision()

    stored = json.loads(json.dumps(decision.to_json()))  # as the JSON column keeps it
    back = merging.Decision.from_json(stored)

    assert back == merging.Decision(**{**decision.__dict__, "embeddings": {}})
    assert back.accepted[0].second_look == "a third cat came"
    assert back.accepted[0].signals[0].code == "supersede_outcome"
    assert back.spend.cost == 0.0031 and back.verdict is not None and back.verdict.spend.calls == 2
    assert back.rejections[0].code is Code.LOST_DETAIL
    assert stored["format"] == merging.DECISION_FORMAT == 1 and "embeddings" not in stored


def test_a_decision_without_a_verdict_round_trips():
    decision = merging.Decision(
        run_id=uuid.uuid4(), user_id=1, key="s", snapshot=SNAPSHOT, similarities={}, judge="rules",
        stale_reason="Fewer than two members of this cluster are still live; nothing to judge.",
    )

    assert merging.Decision.from_json(json.loads(json.dumps(decision.to_json()))) == decision


@pytest.mark.parametrize(
    ("change", "detail"),
    [
        ({"format": 2}, "format 2, not 1"),
        ({"format": None}, "format None, not 1"),
        ({"accepted": [{"action": "split"}]}, "JudgeResponseInvalid"),
        ({"rejections": [{"action": MERGE.as_wire(), "code": "no_such_code", "reason": ""}]}, "ValueError"),
        ({"spend": {"calls": 1, "dollars": 3}}, "TypeError"),
    ],
)
def test_a_stored_decision_of_another_shape_is_refused_with_a_clear_error(change, detail):
    stored = {**_decision().to_json(), **change}

    with pytest.raises(StoredDecisionInvalid, match="The review's stored decision cannot be read") as refused:
        merging.Decision.from_json(stored)

    assert detail in str(refused.value)
