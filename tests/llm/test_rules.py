"""The offline rule judge proposes only merges its validator accepts."""

from __future__ import annotations

import pytest

from iris_consolidation.llm.base import JudgeRequest
from iris_consolidation.llm.rules import RuleJudge
from iris_consolidation.services.pipeline import validation
from tests.helpers import judge_request


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("I'm a nurse.", "i am a nurse"),
        ("Works as a nurse at Lakeside", "works as a nurse at Lakeside."),
    ],
)
def test_same_statement_is_merged_and_the_validator_accepts_it(a, b):
    request = judge_request(a, b)

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
    verdict = RuleJudge().judge(judge_request(a, b))

    assert verdict.actions == ()


def _scored(*members: tuple[str, float]) -> JudgeRequest:
    """Members with their distillation scores."""
    return judge_request(*(c for c, _ in members), **{f"t{i}": {"score": s} for i, (_, s) in enumerate(members, 1)})


def test_merge_keeps_the_member_with_its_proper_names_capitalised():
    verdict = RuleJudge().judge(judge_request("I met taylor swift.", "I met Taylor Swift"))

    assert [a.content for a in verdict.actions] == ["I met Taylor Swift"]


def test_merge_prefers_a_capital_first_letter_over_a_higher_score():
    verdict = RuleJudge().judge(
        _scored(("Drinks green tea every morning", 0.4), ("drinks green tea every morning.", 0.9))
    )

    assert [a.content for a in verdict.actions] == ["Drinks green tea every morning"]


def test_merge_keeps_the_higher_score_when_both_are_written_alike():
    verdict = RuleJudge().judge(
        _scored(("Drinks green tea every morning", 0.4), ("Drinks green tea every morning.", 0.9))
    )

    assert [a.content for a in verdict.actions] == ["Drinks green tea every morning."]


def test_merge_keeps_the_oldest_when_names_and_scores_tie():
    verdict = RuleJudge().judge(_scored(("Lives in Lisbon", 0.5), ("lives in Lisbon.", 0.5)))

    assert [a.content for a in verdict.actions] == ["Lives in Lisbon"]


def test_the_kept_text_passes_the_validator():
    request = judge_request("I met taylor swift.", "I met Taylor Swift")

    verdict = RuleJudge().judge(request)
    result = validation.validate(request, verdict.actions, max_length=1000, max_generation=5)

    assert result.accepted == verdict.actions
