"""A second look that confirms part of an action (through litellm, to the scripted server on
127.0.0.1): only the confirmed part applies, the rest stays as it is, and a confirmation,
hostile or careless, still cannot carry what the validator's invariants refuse."""

from __future__ import annotations

from typing import Any

import pytest

from iris_consolidation.embeddings import LocalEmbedder
from iris_consolidation.llm import get_judge_client, second_look
from iris_consolidation.models import ClusterReview, Truth
from iris_consolidation.services.pipeline.validation import Code
from tests import llm_stub
from tests.helpers import consolidate, merge_dict, supersede_dict, truth_state

pytestmark = pytest.mark.django_db

EMBEDDER = LocalEmbedder()
#: Two wordings of one habit and a third fact: fused without loss, the negation is a signal (set
#: side by side, t2 and t3 would be refused outright: ``validation_messages.SIDE_BY_SIDE``; "Does not drink
#: dairy milk" beside "oat milk" would keep both values of one slot: ``validation_messages.BOTH_VALUES``).
LATTES = ("Drinks oat milk lattes", "Drinks lattes with oat milk", "Does not drink dairy")
JOINED = merge_dict(["t1", "t2", "t3"], "Drinks lattes with oat milk, not dairy milk", "all about milk")
#: A chain of states of one thing; the latest supersedes both (two different statements: a signal).
BOILER = ("The boiler stopped heating", "The boiler was repaired", "The boiler broke down again")
CHAIN = supersede_dict(["t1", "t2"], "t3", "the latest state of the boiler")


def _truths(truth_factory: Any, contents: tuple[str, ...]) -> list[Truth]:
    first = truth_factory(contents[0])
    return [first, *(truth_factory(c, user=first.user) for c in contents[1:])]


def _run(llm_server: Any, truths: list[Truth], action: dict[str, Any], answer: tuple[Any, ...]) -> ClusterReview:
    """One cluster judged with ``action``; every second look answered ``answer`` (verdict, reason, fields)."""
    llm_server.script = [llm_stub.verdict([action])]
    llm_server.second_looks = lambda checks: {c["id"]: answer for c in checks}
    return consolidate(*truths, client=get_judge_client(), embedder=EMBEDDER)


def _live(truths: list[Truth]) -> list[str]:
    return [t.content for t in Truth.objects.filter(pk__in=[t.pk for t in truths]).order_by("pk")]


def test_a_supersede_confirmed_for_some_old_truths_retires_only_those(llm_server, truth_factory):
    truths = _truths(truth_factory, BOILER)

    review = _run(llm_server, truths, CHAIN, ("confirm", "the repair is what broke down again", {"old": ["t2"]}))

    (check,) = llm_stub.checks_of(llm_server.chat_requests()[-1]["json"])
    assert check["old"] == ["t1", "t2"] and check["new"] == "t3"
    (applied,) = review.applied_actions
    assert applied["old"] == ["t2"] and applied["new"] == "t3"
    assert applied["second_look"] == "the repair is what broke down again"
    assert Truth.all_objects.get(pk=truths[1].pk).superseded_by_id == truths[2].pk
    assert _live(truths) == [BOILER[0], BOILER[2]]  # t1 stays as it was
    assert [r["code"] for r in review.rejections] == [Code.SECOND_LOOK_WITHDRAWN]
    assert "confirmed only t2" in review.rejections[0]["reason"]


def test_a_merge_confirmed_for_some_members_joins_only_those(llm_server, truth_factory):
    truths = _truths(truth_factory, LATTES)
    answer = ("confirm", "t1 and t2 are one habit; t3 is another fact", {"ids": ["t1", "t2"], "content": LATTES[0]})

    review = _run(llm_server, truths, JOINED, answer)

    assert review.outcome == ClusterReview.Outcome.APPLIED
    live = list(Truth.objects.filter(user=truths[0].user).order_by("pk").values_list("content", flat=True))
    assert live == [LATTES[2], LATTES[0]]  # t3 untouched, t1 + t2 merged into one new truth
    assert not Truth.objects.filter(pk__in=[truths[0].pk, truths[1].pk]).exists()
    assert [r["code"] for r in review.rejections] == [Code.SECOND_LOOK_WITHDRAWN]


@pytest.mark.parametrize(
    ("fields", "code"),
    [
        # The part drops t3's negation and its words: an invariant refuses it.
        ({"ids": ["t1", "t3"], "content": LATTES[0]}, Code.LOST_NEGATION),
        # The part keeps the whole action's content, which says what t1 and t2 never did.
        ({"ids": ["t1", "t2"]}, Code.INVENTED_NEGATION),
        # A part that is no part of the action.
        ({"ids": ["t1", "t9"], "content": LATTES[0]}, Code.SECOND_LOOK_MISSING),
        ({"ids": ["t1"], "content": LATTES[0]}, Code.TOO_FEW),
    ],
)
def test_a_hostile_partial_confirmation_cannot_pass_an_invariant(llm_server, truth_factory, fields, code):
    truths = _truths(truth_factory, LATTES)
    before = truth_state()

    review = _run(llm_server, truths, JOINED, ("confirm", "trust me", fields))

    assert truth_state() == before
    assert review.applied_actions == []
    assert code in [r["code"] for r in review.rejections]


@pytest.mark.parametrize("old", [["t3"], ["t1", "t4"]])
def test_a_supersede_part_must_be_among_its_old_truths(llm_server, truth_factory, old):
    truths = _truths(truth_factory, BOILER)
    before = truth_state()

    review = _run(llm_server, truths, CHAIN, ("confirm", "retire these", {"old": old}))

    assert truth_state() == before
    assert [r["code"] for r in review.rejections] == [Code.SECOND_LOOK_MISSING]


def test_a_withdrawal_naming_a_part_applies_nothing(llm_server, truth_factory):
    truths = _truths(truth_factory, BOILER)
    before = truth_state()

    review = _run(llm_server, truths, CHAIN, ("withdraw", "unsure", {"old": ["t2"]}))

    assert truth_state() == before
    assert [r["code"] for r in review.rejections] == [Code.SECOND_LOOK_WITHDRAWN]


def test_the_prompt_asks_a_supersede_whether_the_later_truth_replaces_the_earlier_one():
    prompt = second_look.SYSTEM_PROMPT
    assert second_look.PROMPT_VERSION == "second-look-2026-12-01.2"
    assert "does the new truth replace it?" in prompt and "need not repeat" in prompt
    assert "same attribute" in prompt and '"old"' in prompt and '"ids"' in prompt


@pytest.mark.parametrize(
    ("entry", "expected"),
    [
        ({"verdict": "confirm", "reason": "r", "old": ["t2", "t2"]}, ("t2",)),
        ({"verdict": "confirm", "reason": "r", "ids": ["t1", "t2"], "content": " x "}, ("t1", "t2")),
        ({"verdict": "confirm", "reason": "r"}, ()),
        ({"verdict": "confirm", "reason": "r", "old": "t2"}, None),  # not a list: left out
        ({"verdict": "confirm", "reason": "r", "old": [2]}, None),
        ({"verdict": "confirm", "reason": "r", "old": ["t1"], "ids": ["t1", "t2"]}, None),
        ({"verdict": "confirm", "reason": "r", "ids": ["t1", "t2"], "content": 5}, None),
    ],
)
def test_the_parser_reads_the_confirmed_part_strictly(entry, expected):
    import json

    answers = second_look.parse(json.dumps({"checks": [{"id": "v1", **entry}]}), ["v1"])
    if expected is None:
        assert answers == {}
    else:
        assert answers["v1"].part == expected
        assert answers["v1"].content == ("x" if "content" in entry else "")


def test_a_name_reworded_by_a_stated_synonym_merges_on_confirmation_and_a_dropped_name_never(llm_server, truth_factory):
    """ "NHS" = "National Health Service" stated: the names signal goes to the second look,
    whose confirmation applies the merge. Its twin states no synonym: the invariant refuses
    it before any second look, whatever the model would answer."""
    contents = ("Works for the NHS", "Works for the National Health Service")
    stated = merge_dict(["t1", "t2"], contents[1], "NHS = 'National Health Service'")
    truths = _truths(truth_factory, contents)

    review = _run(llm_server, truths, stated, ("confirm", "one employer, its acronym and its name"))

    assert review.outcome == ClusterReview.Outcome.APPLIED
    assert [s["code"] for s in review.applied_actions[0]["signals"]] == [Code.NAMES_DIFFER]
    assert list(Truth.objects.filter(user=truths[0].user).values_list("content", flat=True)) == [contents[1]]

    twin = _truths(truth_factory, contents)
    before = truth_state()
    careless = merge_dict(["t1", "t2"], contents[1], "They are the same fact.")
    review = _run(llm_server, twin, careless, ("confirm", "trust me"))

    assert truth_state() == before
    assert [r["code"] for r in review.rejections] == [Code.LOST_DETAIL]
