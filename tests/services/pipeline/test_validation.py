"""The validator on its own: each rule rejects what it must, with its reason, and lets
true merges and supersedes through. Pure: no database, no model."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from iris_consolidation.llm.base import Action, JudgeRequest, MemberView
from iris_consolidation.services.pipeline import validation as v

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _request(*contents: str, **flags: dict[str, object]) -> JudgeRequest:
    """Members t1, t2, ... one day apart; ``t2={"protected": True}`` sets fields."""
    members = []
    for i, content in enumerate(contents, start=1):
        alias = f"t{i}"
        members.append(
            MemberView(alias=alias, content=content, created_at=T0 + timedelta(days=i), **flags.get(alias, {}))
        )
    return JudgeRequest(members=tuple(members))


def _merge(ids: tuple[str, ...], content: str, reason: str = "same fact") -> Action:
    return Action(action="merge", ids=ids, content=content, reason=reason)


def _supersede(old: tuple[str, ...], new: str, reason: str = "changed") -> Action:
    return Action(action="supersede", old=old, new=new, reason=reason)


def _reasons(request: JudgeRequest, *actions: Action, max_length: int = 1000) -> list[str]:
    result = v.validate(request, actions, max_length=max_length, max_generation=5)
    return [r.reason for r in result.rejections]


def test_paraphrases_merge_with_any_members_text_that_keeps_the_details():
    request = _request("Has a son named Tomas", "Is the father of a boy called Tomas", "Tomas is the user's son")
    stated = "Same son; 'father of a boy' = 'son'"
    assert _reasons(request, _merge(("t1", "t2", "t3"), "Has a son named Tomas", reason=stated)) == []
    # "father of a boy" / "son" is an everyday rewording (textfacts.PHRASE_EQUIVALENCES).
    assert _reasons(request, _merge(("t1", "t2", "t3"), "Has a son named Tomas")) == []
    twin = _request("Has a son named Tomas", "Is the father of a boy called Tomas", "Tomas is the user's father")
    assert _reasons(twin, _merge(("t1", "t2", "t3"), "Has a son named Tomas")) == [
        v.DETAILS_ONLY.format(a="t1", b="t3", details="'tomas'")
    ]


def test_state_change_supersedes_the_older_statement():
    request = _request("Lives in Lisbon", "Moved to Berlin in May")
    assert _reasons(request, _supersede(("t1",), "t2")) == []


@pytest.mark.parametrize(
    ("action", "reason"),
    [
        (_merge(("t1", "t9"), "Likes tea"), v.UNKNOWN_ID.format(alias="t9")),
        (_merge(("t1", "t1"), "Likes tea"), v.REPEATED_ID.format(alias="t1")),
        (_merge(("t1", "t2"), "Likes tea", reason="  "), v.NO_REASON),
        (_merge(("t1",), "Likes tea"), v.TOO_FEW),
        (_merge(("t1", "t2"), "   "), v.EMPTY_CONTENT),
    ],
)
def test_structural_faults_are_rejected_with_their_reason(action, reason):
    assert _reasons(_request("Likes tea", "Enjoys tea"), action) == [reason]


def test_a_member_takes_part_in_one_action_only():
    request = _request("Likes tea", "Enjoys tea", "Moved to a tea farm and now grows tea")
    first = _merge(("t1", "t2"), "Likes tea")
    duplicate = _merge(("t2", "t1"), "Likes tea")
    chain = _supersede(("t2",), "t3")

    assert _reasons(request, first, duplicate, chain) == [
        v.ALREADY_USED.format(alias="t2"),
        v.ALREADY_USED.format(alias="t2"),
    ]


def test_merged_content_is_bounded_in_length():
    request = _request("Likes tea", "Enjoys tea")
    assert _reasons(request, _merge(("t1", "t2"), "Likes tea"), max_length=5) == [v.TOO_LONG.format(length=9, limit=5)]


def test_protected_member_survives_only_with_its_own_text():
    request = _request("Prefers to be called Sasha", "Likes to be called Sasha", t1={"protected": True})

    assert _reasons(request, _merge(("t1", "t2"), "Prefers to be called Sasha")) == []
    assert _reasons(request, _merge(("t1", "t2"), "Likes to be called Sasha")) == [
        v.PROTECTED_RETIRED.format(alias="t1")
    ]
    assert _reasons(request, _supersede(("t1",), "t2")) == [v.PROTECTED_RETIRED.format(alias="t1")]


def test_two_protected_members_never_merge():
    request = _request("Likes tea", "Likes tea", t1={"protected": True}, t2={"protected": True})
    assert _reasons(request, _merge(("t1", "t2"), "Likes tea")) == [v.TWO_PROTECTED.format(aliases="t1, t2")]


def test_member_at_the_generation_limit_takes_part_in_nothing():
    request = _request("Is allergic to penicillin", "Has a penicillin allergy", t1={"generation": 5, "protected": True})
    assert _reasons(request, _merge(("t1", "t2"), "Is allergic to penicillin")) == [
        v.AT_GENERATION_LIMIT.format(alias="t1", limit=5)
    ]


@pytest.mark.parametrize(
    ("contents", "content", "reason"),
    [
        (
            ("Runs 10 km every Sunday", "Does a 10 km run each Sunday"),
            "Runs every Sunday",
            v.LOST_DETAIL.format(detail="10", alias="t1"),
        ),
        (
            ("Birthday is on 14 March", "Was born on March 14"),
            "Birthday is on 14",
            v.LOST_DETAIL.format(detail="march", alias="t1"),
        ),
        (
            ("Has a son named Tomas", "Is the father of a boy called Tomas"),
            "Has a son",
            v.LOST_DETAIL.format(detail="tomas", alias="t1"),
        ),
        (("Does not eat meat", "Never eats meat"), "Eats meat", v.POLARITY_DIFFERS.format(a="t1", b=v.MERGED_CONTENT)),
        (("Likes tea", "Enjoys tea"), "Likes tea since 2019", v.INVENTED_DETAIL.format(detail="2019")),
        (("Likes tea", "Enjoys tea"), "Likes green tea", v.INVENTED_WORDS.format(words="'green'")),
        (
            ("Nadia manages Oskar", "Nadia is the manager of Oskar"),
            "Oskar manages Nadia",
            v.ROLE_SWAP.format(a="t1", b=v.MERGED_CONTENT),
        ),
        (
            ("Works as an accountant at Birch", "Is an accountant at Birch"),
            "Birch as an accountant at Works",
            v.REORDERED.format(alias="t1"),
        ),
    ],
)
def test_merged_content_keeps_every_detail_and_adds_none(contents, content, reason):
    assert _reasons(_request(*contents), _merge(("t1", "t2"), content)) == [reason]


@pytest.mark.parametrize(
    ("contents", "reason"),
    [
        (("Likes jazz", "Does not like jazz"), v.POLARITY_DIFFERS.format(a="t1", b="t2")),
        (
            ("Sister Ines lives in Lyon", "Brother Hugo lives in Lyon"),
            v.NAMES_DIFFER.format(a="t1", b="t2", names="hugo, ines"),
        ),
        (("Has two cats", "Has three cats"), v.NUMBERS_DIFFER.format(a="t1", b="t2", numbers="2, 3")),
        (
            ("Plays tennis on Tuesdays", "Plays tennis on Thursdays"),
            v.NAMES_DIFFER.format(a="t1", b="t2", names="thursdays, tuesdays"),
        ),
        (("Nadia manages Oskar", "Oskar manages Nadia"), v.ROLE_SWAP.format(a="t1", b="t2")),
        (
            ("Is allergic to peanuts", "Is allergic to shellfish"),
            v.CONTRAST.format(a="t1", b="t2", words="peanut / shellfish"),
        ),
        (
            ("Drinks coffee with oat milk", "Drinks tea with oat milk"),
            v.CONTRAST.format(a="t1", b="t2", words="coffe / tea"),
        ),
        (
            ("Works on the payments team", "Worked on the payments team until 2023"),
            v.TIME_SPAN_DIFFERS.format(a="t1", b="t2"),
        ),
    ],
)
def test_members_that_say_different_things_never_merge_even_losslessly(contents, reason):
    assert _reasons(_request(*contents), _merge(("t1", "t2"), "; ".join(contents))) == [reason]


def test_three_members_that_only_chain_never_merge():
    request = _request(
        "Takes the 7:40 train to work", "Reads on the train during the commute", "Reads mystery novels before bed"
    )
    content = "Takes the 7:40 train to work; Reads on the train during the commute; Reads mystery novels before bed"
    assert _reasons(request, _merge(("t1", "t2", "t3"), content)) == [v.CHAINED.format(a="t1", b="t3")]


def test_newer_statement_never_retires_in_favour_of_an_older_one():
    request = _request("Lives in Lisbon", "Moved to Berlin in May")
    assert _reasons(request, _supersede(("t2",), "t1")) == [v.SUPERSEDE_BACKWARDS.format(old="t2", new="t1")]


def test_supersede_needs_the_newer_statement_to_say_the_state_changed():
    request = _request("Is allergic to peanuts", "Is allergic to shellfish")
    assert _reasons(request, _supersede(("t1",), "t2")) == [v.SUPERSEDE_NO_CHANGE.format(new="t2", old="t1")]


def test_supersede_needs_an_old_member_and_never_retires_its_new_one():
    request = _request("Lives in Lisbon", "Moved to Berlin")
    assert _reasons(request, _supersede((), "t2"), _supersede(("t2",), "t2")) == [
        v.SUPERSEDE_EMPTY,
        v.REPEATED_ID.format(alias="t2"),
    ]
