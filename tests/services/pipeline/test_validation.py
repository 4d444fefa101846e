"""The validator on its own: each invariant rejects what it must, with its code; each
signal refuses under ``refuse_signals`` (the rule judge's default) and is attached to the
action otherwise; true merges and supersedes go through. Pure: no database, no model."""

from __future__ import annotations

import pytest

from iris_consolidation.llm.base import Action, JudgeRequest
from iris_consolidation.services.pipeline import validation as v
from tests.helpers import judge_request, merge_action, refusal_codes, supersede_action


def _signals(request: JudgeRequest, action: Action) -> list[str]:
    """The codes of the signals of ``action`` when signals do not refuse (a model's action)."""
    result = v.validate(request, (action,), max_length=1000, max_generation=5, refuse_signals=False)
    assert not result.rejections, result.rejections
    return [s.code for s in result.accepted[0].signals]


def test_paraphrases_merge_with_any_members_text_that_keeps_the_details():
    request = judge_request("Has a son named Tomas", "Is the father of a boy called Tomas", "Tomas is the user's son")
    stated = "Same son; 'father of a boy' = 'son'"
    assert refusal_codes(request, merge_action(("t1", "t2", "t3"), "Has a son named Tomas", reason=stated)) == []
    # "father of a boy" / "son" is an everyday rewording (Language.phrase_equivalences).
    assert refusal_codes(request, merge_action(("t1", "t2", "t3"), "Has a son named Tomas")) == []
    twin = judge_request("Has a son named Tomas", "Is the father of a boy called Tomas", "Tomas is the user's father")
    # The text drops t3's "father": nothing lost is an invariant, checked before any signal.
    assert refusal_codes(twin, merge_action(("t1", "t2", "t3"), "Has a son named Tomas")) == [v.Code.LOST_WORDS]


def test_state_change_supersedes_the_older_statement():
    request = judge_request("Lives in Lisbon", "Moved to Berlin in May")
    assert refusal_codes(request, supersede_action(("t1",), "t2")) == []


@pytest.mark.parametrize(
    ("action", "reason"),
    [
        (merge_action(("t1", "t9"), "Likes tea"), v.Code.UNKNOWN_ID),
        (merge_action(("t1", "t1"), "Likes tea"), v.Code.REPEATED_ID),
        (merge_action(("t1", "t2"), "Likes tea", reason="  "), v.Code.NO_REASON),
        (merge_action(("t1",), "Likes tea"), v.Code.TOO_FEW),
        (merge_action(("t1", "t2"), "   "), v.Code.EMPTY_CONTENT),
    ],
)
def test_structural_faults_are_rejected_with_their_reason(action, reason):
    assert refusal_codes(judge_request("Likes tea", "Enjoys tea"), action) == [reason]


def test_a_member_takes_part_in_one_action_only():
    request = judge_request("Likes tea", "Enjoys tea", "Moved to a tea farm and now grows tea")
    first = merge_action(("t1", "t2"), "Likes tea")
    duplicate = merge_action(("t2", "t1"), "Likes tea")
    chain = supersede_action(("t2",), "t3")

    assert refusal_codes(request, first, duplicate, chain) == [
        v.Code.ALREADY_USED,
        v.Code.ALREADY_USED,
    ]


def test_merged_content_is_bounded_in_length():
    request = judge_request("Likes tea", "Enjoys tea")
    assert refusal_codes(request, merge_action(("t1", "t2"), "Likes tea"), max_length=5) == [v.Code.TOO_LONG]


def test_protected_member_survives_only_with_its_own_text():
    request = judge_request("Prefers to be called Sasha", "Likes to be called Sasha", t1={"protected": True})

    assert refusal_codes(request, merge_action(("t1", "t2"), "Prefers to be called Sasha")) == []
    assert refusal_codes(request, merge_action(("t1", "t2"), "Likes to be called Sasha")) == [
        v.Code.PROTECTED
    ]
    assert refusal_codes(request, supersede_action(("t1",), "t2")) == [v.Code.PROTECTED]


def test_two_protected_members_never_merge():
    request = judge_request("Likes tea", "Likes tea", t1={"protected": True}, t2={"protected": True})
    assert refusal_codes(request, merge_action(("t1", "t2"), "Likes tea")) == [v.Code.TWO_PROTECTED]


def test_member_at_the_generation_limit_takes_part_in_nothing():
    request = judge_request(
        "Is allergic to penicillin", "Has a penicillin allergy", t1={"generation": 5, "protected": True}
    )
    assert refusal_codes(request, merge_action(("t1", "t2"), "Is allergic to penicillin")) == [
        v.Code.GENERATION_LIMIT
    ]


@pytest.mark.parametrize(
    ("contents", "content", "reason"),
    [
        (
            ("Runs 10 km every Sunday", "Does a 10 km run each Sunday"),
            "Runs every Sunday",
            v.Code.LOST_DETAIL,
        ),
        (
            ("Birthday is on 14 March", "Was born on March 14"),
            "Birthday is on 14",
            v.Code.LOST_DETAIL,
        ),
        (
            ("Has a son named Tomas", "Is the father of a boy called Tomas"),
            "Has a son",
            v.Code.LOST_DETAIL,
        ),
        (("Does not eat meat", "Never eats meat"), "Eats meat", v.Code.LOST_NEGATION),
        (("Likes tea", "Enjoys tea"), "Does not like tea", v.Code.INVENTED_NEGATION),
        (("Likes tea", "Enjoys tea"), "Likes tea since 2019", v.Code.INVENTED_DETAIL),
        (("Likes tea", "Enjoys tea"), "Likes green tea", v.Code.INVENTED_WORDS),
        (
            ("Nadia manages Oskar", "Nadia is the manager of Oskar"),
            "Oskar manages Nadia",
            v.Code.ROLE_SWAP,
        ),
        (
            ("Works as an accountant at Birch", "Is an accountant at Birch"),
            "Birch as an accountant at Works",
            v.Code.REORDERED,
        ),
    ],
)
def test_merged_content_keeps_every_detail_and_adds_none(contents, content, reason):
    assert refusal_codes(judge_request(*contents), merge_action(("t1", "t2"), content)) == [reason]


@pytest.mark.parametrize(
    ("contents", "reason"),
    [
        (("Likes jazz", "Does not like jazz"), v.Code.POLARITY),
        (
            ("Sister Ines lives in Lyon", "Brother Hugo lives in Lyon"),
            v.Code.NAMES_DIFFER,
        ),
        (("Has two cats", "Has three cats"), v.Code.NUMBERS_DIFFER),
        (
            ("Plays tennis on Tuesdays", "Plays tennis on Thursdays"),
            v.Code.NAMES_DIFFER,
        ),
        (("Nadia manages Oskar", "Oskar manages Nadia"), v.Code.ROLE_SWAP),
        (
            ("Is allergic to peanuts", "Is allergic to shellfish"),
            v.Code.CONTRAST,
        ),
        (
            ("Drinks coffee with oat milk", "Drinks tea with oat milk"),
            v.Code.CONTRAST,
        ),
        (
            ("Works on the payments team", "Worked on the payments team until 2023"),
            v.Code.TIME_SPAN,
        ),
    ],
)
def test_members_that_say_different_things_raise_a_signal_even_when_nothing_is_lost(contents, reason):
    """Their signal is the members' reading; set side by side in one text they are refused
    outright (joined, not fused), whatever a second look would say."""
    action = merge_action(("t1", "t2"), "; ".join(contents))
    assert v.findings_of(action, judge_request(*contents))[0][0] == reason
    assert refusal_codes(judge_request(*contents), action, refuse_signals=False) == [v.Code.SIDE_BY_SIDE]


def test_three_members_that_only_chain_never_merge():
    request = judge_request(
        "Takes the 7:40 train to work", "Reads on the train during the commute", "Reads mystery novels before bed"
    )
    content = "Takes the 7:40 train to work; Reads on the train during the commute; Reads mystery novels before bed"
    action = merge_action(("t1", "t2", "t3"), content)
    assert v.Code.CHAINED in [code for code, _, _ in v.findings_of(action, request)]
    assert refusal_codes(request, action, refuse_signals=False) == [v.Code.SIDE_BY_SIDE]


def test_newer_statement_never_retires_in_favour_of_an_older_one():
    request = judge_request("Lives in Lisbon", "Moved to Berlin in May")
    assert refusal_codes(request, supersede_action(("t2",), "t1")) == [v.Code.SUPERSEDE_BACKWARDS]


def test_supersede_needs_the_newer_statement_to_say_the_state_changed():
    request = judge_request("Is allergic to peanuts", "Is allergic to shellfish")
    assert refusal_codes(request, supersede_action(("t1",), "t2")) == [v.Code.SUPERSEDE_NO_CHANGE]


def test_supersede_needs_an_old_member_and_never_retires_its_new_one():
    request = judge_request("Lives in Lisbon", "Moved to Berlin")
    assert refusal_codes(request, supersede_action((), "t2"), supersede_action(("t2",), "t2")) == [
        v.Code.SUPERSEDE_EMPTY,
        v.Code.REPEATED_ID,
    ]
