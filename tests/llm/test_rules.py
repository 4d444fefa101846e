"""The offline rule judge proposes only merges its validator accepts."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from iris_consolidation.llm.base import JudgeRequest, MemberView
from iris_consolidation.llm.rules import RuleJudge
from iris_consolidation.services.pipeline import validation


def _request(*contents: str) -> JudgeRequest:
    t = datetime(2026, 1, 1, tzinfo=UTC)
    return JudgeRequest(
        members=tuple(
            MemberView(alias=f"t{i}", content=c, created_at=t.replace(day=i)) for i, c in enumerate(contents, start=1)
        )
    )


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("I'm a nurse.", "i am a nurse"),
        ("Works as a nurse at Lakeside", "works as a nurse at Lakeside."),
    ],
)
def test_same_statement_is_merged_and_the_validator_accepts_it(a, b):
    request = _request(a, b)

    verdict = RuleJudge().judge(request)
    result = validation.validate(request, verdict.actions, max_length=1000, max_generation=5)

    assert [act.ids for act in verdict.actions] == [("t1", "t2")]
    assert result.accepted == verdict.actions and result.rejections == ()


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("Likes jazz and old soul records", "Likes old soul records and jazz"),
        ("The dog chased the cat", "The cat chased the dog"),
        ("Alice manages Bob", "Bob manages Alice"),
    ],
)
def test_same_words_in_another_order_are_left_to_the_judge(a, b):
    verdict = RuleJudge().judge(_request(a, b))

    assert verdict.actions == ()
