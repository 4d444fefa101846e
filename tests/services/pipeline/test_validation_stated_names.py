"""Right verdicts the validator takes, each beside its twin that it still refuses: a name,
place or identifier reworded by a synonym the judge states, a list's items in another
order, a hyphenated word kept by its parts, a synonym stated without quotes, and a
supersede whose later truth reports a change of the same attribute. Pure: no database,
no model."""

from __future__ import annotations

import pytest

from iris_consolidation import text
from iris_consolidation.services.pipeline import validation as v
from tests.helpers import judge_request, merge_action, refusal_codes, supersede_action


def _invariant_codes(contents: tuple[str, ...], content: str, reason: str) -> list[str]:
    """The invariants' refusals of a model's merge of every member into ``content`` (signals go to
    the second look, so they do not refuse here)."""
    request = judge_request(*contents)
    action = merge_action([m.alias for m in request.members], content, reason)
    return refusal_codes(request, action, refuse_signals=False)


# --- names, places and identifiers with a stated synonym ---------------------------------------

RENAMED = [
    # An acronym and its expansion, either way round.
    (("Works for the NHS", "Works for the National Health Service"), "Works for the National Health Service",
     "NHS = 'National Health Service'"),
    (("Works for the NHS", "Works for the National Health Service"), "Works for the NHS",
     "'National Health Service' = NHS"),
    # A place's name in two languages.
    (("Grew up in Köln", "Grew up in Cologne"), "Grew up in Cologne", "Köln = Cologne"),
    (("Wohnt in Wien", "Lives in Vienna"), "Lives in Vienna", "Wien = Vienna; wohnt = lives"),
    # A product's short and long name.
    (("Writes the frontend in TS", "Writes the frontend in TypeScript"), "Writes the frontend in TypeScript",
     "TS = TypeScript"),
    (("Hosts the blog on AWS", "Hosts the blog on Amazon Web Services"), "Hosts the blog on Amazon Web Services",
     "AWS = Amazon Web Services"),
]  # fmt: skip


@pytest.mark.parametrize(("contents", "content", "reason"), RENAMED)
def test_a_name_reworded_by_a_stated_synonym_is_kept(contents, content, reason):
    assert _invariant_codes(contents, content, reason) == []


@pytest.mark.parametrize(("contents", "content", "reason"), RENAMED)
def test_a_name_dropped_with_no_synonym_stated_is_refused(contents, content, reason):
    assert _invariant_codes(contents, content, "They are the same fact.") == [v.Code.LOST_DETAIL]


@pytest.mark.parametrize(
    "reason",
    [
        "Köln = Bonn",  # the content side is not in the merged text
        "Koeln = Cologne",  # the source side is in no source
        "Cologne = Cologne",  # a synonym of itself covers nothing
    ],
)
def test_a_stated_name_synonym_counts_only_with_one_side_in_the_source_and_one_in_the_content(reason):
    assert _invariant_codes(("Grew up in Köln", "Grew up in Cologne"), "Grew up in Cologne", reason) == [
        v.Code.LOST_DETAIL
    ]


def test_a_merged_text_may_use_the_expansion_that_no_source_wrote_when_the_synonym_is_stated():
    contents = ("Is a nurse at the NHS", "Has worked at the NHS since 2019")
    content = "Is a nurse at the National Health Service and has worked there since 2019"
    stated = "NHS = National Health Service; worked there = worked at the NHS"
    assert _invariant_codes(contents, content, stated) == []
    assert _invariant_codes(contents, content, "same employer") in ([v.Code.LOST_DETAIL], [v.Code.INVENTED_DETAIL])


def test_a_name_synonym_is_still_a_signal_for_the_second_look():
    """Two names said to be one thing is what a second look confirms: the rule judge refuses."""
    contents, content, reason = RENAMED[0]
    request = judge_request(*contents)
    assert refusal_codes(request, merge_action(("t1", "t2"), content, reason)) == [v.Code.NAMES_DIFFER]


# --- word order --------------------------------------------------------------------------------

LISTS = [
    ("Plays chess and go", "Plays go and chess"),
    ("Keeps bees, hens and goats", "Keeps goats, bees and hens"),
    ("Was born in Accra and raised in Leeds", "Was raised in Leeds and born in Accra"),
    ("Spricht Polnisch und Englisch", "Spricht Englisch und Polnisch"),
    # An apposition turned round: the description says who the name is, wherever it stands.
    ("Ines, her cousin, teaches in Porto", "Her cousin Ines teaches in Porto"),
    ("The owner, Marco, sells bread", "Marco the owner sells bread"),
]
ROLES = [
    ("Priya mentors Tom", "Tom mentors Priya", v.Code.ROLE_SWAP),
    ("The landlord sued the tenant", "The tenant sued the landlord", v.Code.REORDERED),
    ("Ines, her cousin, visits the baker", "Her cousin the baker visits Ines", v.Code.REORDERED),
    ("Priya and Ana mentor Tom", "Tom and Ana mentor Priya", v.Code.ROLE_SWAP),
]


@pytest.mark.parametrize(("member", "content"), LISTS)
def test_a_list_or_an_apposition_in_another_order_is_no_reordering(member, content):
    assert _invariant_codes((member, member), content, "the same list in another order") == []


@pytest.mark.parametrize(("member", "content", "code"), ROLES)
def test_roles_swapped_are_still_refused(member, content, code):
    assert _invariant_codes((member, member), content, "the same people") == [code]


# --- hyphens and apostrophes -------------------------------------------------------------------


def test_a_hyphenated_word_keeps_its_parts_and_its_parts_keep_it():
    contents = ("Is a part-time tutor", "Tutors maths part time")
    assert _invariant_codes(contents, "Is a part-time maths tutor", "tutors = tutor") == []
    assert _invariant_codes(("Tutors maths part time",) * 2, "Tutors maths part-time", "same") == []
    assert _invariant_codes(("Is a part-time tutor",) * 2, "Is a part time tutor", "same") == []
    # An apostrophe joins parts too; a part of one letter ("l'") says nothing of its own.
    assert _invariant_codes(("Travaille à l'hôpital",) * 2, "Travaille à hôpital", "same") == []
    assert _invariant_codes(("Loves rock'n'roll",) * 2, "Loves rock", "same") == [v.Code.LOST_WORDS]


def test_a_hyphenated_word_dropped_is_still_lost():
    assert _invariant_codes(("Is a part-time tutor", "Tutors part time"), "Is a tutor", "same") == [v.Code.LOST_WORDS]
    # One part kept is not the word kept.
    contents = ("Follows a low-sodium diet", "Eats a low-sodium diet")
    assert _invariant_codes(contents, "Follows a low diet", "eats = follows") == [v.Code.LOST_WORDS]


# --- a synonym stated without quotes -----------------------------------------------------------


def test_a_synonym_without_quotes_is_read_whole():
    contents = ("Drinks green tea after lunch", "午饭后喝绿茶")
    stated = "Both say it: green tea = 绿茶, after lunch = 午饭后, drinks = 喝"
    assert ("green tea", "绿茶") in text.equivalences(stated)
    assert _invariant_codes(contents, "午饭后喝绿茶", stated) == []
    # Its twin states only "tea": "green" is dropped.
    assert _invariant_codes(contents, "午饭后喝绿茶", "tea = 绿茶, after lunch = 午饭后, drinks = 喝") == [
        v.Code.LOST_WORDS
    ]


# --- supersede: the same attribute, stated later, a change or a correction ---------------------

SAME_ATTRIBUTE = [
    ("Is a junior designer", "Was promoted to lead designer"),
    ("The dishwasher leaks", "The dishwasher was repaired"),
    ("Thinks the gym closes at ten", "Actually, the gym closes at nine"),
    ("Lives in Lisbon", "Moved to Berlin in May"),
]
OTHER_ATTRIBUTE = [
    ("Is a junior designer", "Actually, the gym closes at nine"),
    ("The dishwasher leaks", "Was promoted to lead designer"),
]


@pytest.mark.parametrize(("old", "new"), SAME_ATTRIBUTE)
def test_a_later_change_of_the_same_attribute_supersedes_with_no_signal(old, new):
    assert refusal_codes(judge_request(old, new), supersede_action(("t1",), "t2")) == []


@pytest.mark.parametrize(("old", "new"), OTHER_ATTRIBUTE)
def test_a_later_truth_about_another_attribute_is_a_signal(old, new):
    assert refusal_codes(judge_request(old, new), supersede_action(("t1",), "t2")) == [v.Code.SUPERSEDE_UNRELATED]
