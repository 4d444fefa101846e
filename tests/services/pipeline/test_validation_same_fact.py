"""The validator's second pass: a merge states one fact, and true rewordings merge.

Three kinds, each against the careless models of ``test_validation_kinds`` (every member
merged into the shortest text, into the oldest text, or all texts joined), in English,
Portuguese or Spanish, and Chinese or Japanese where the kind applies:

- two facts about one name (``Code.DETAILS_ONLY``): the members share a name, number or
  date and no word of what they say about it ("Works as an accountant at Birch & Co" /
  "Organises the Birch & Co office softball team"); a joined text keeps every word, yet
  merges two facts;
- one frame filled twice (``Code.CONTRAST`` by ``text.parallel``): "Chose a standing
  desk over a treadmill desk ..." / "Chose an e-reader over paper books ...";
- everyday rewordings (``Language.phrase_equivalences``): "Is the father of a boy called
  Tomas" is kept by "Has a son named Tomas" with no synonym stated, while its
  opposite-meaning twins ("the user's father", "a girl", "after noon") are still refused.

Pure: no database, no model.
"""

from __future__ import annotations

import pytest

from iris_consolidation import text
from iris_consolidation.services.pipeline import validation as v
from iris_consolidation.services.pipeline import validation_messages as say
from tests.helpers import (
    CARELESS,
    joined_codes,
    judge_request,
    merge_action,
    merge_all_codes,
    oldest_codes,
    shortest_codes,
)

CARELESS_MODELS = [shortest_codes, oldest_codes, joined_codes]


# --- two facts about one name --------------------------------------------------------------------

ONE_NAME_TWO_FACTS = [
    ("Works as an accountant at Birch & Co", "Organises the Birch & Co office softball team"),
    ("Is a nurse at Lakeside Hospital", "Sings in the Lakeside Hospital staff choir"),
    ("Has a dog named Biscuit", "Takes Biscuit to agility classes"),
    ("Plays tennis every Saturday", "Visits grandmother on Saturdays"),
    ("Trabalha como contabilista na Birch & Co", "Organiza a equipa de softball do escritório da Birch & Co"),
    ("Trabaja como contable en Birch & Co", "Organiza el equipo de sóftbol de la oficina de Birch & Co"),
    ("在Birch & Co当会计", "组织Birch & Co办公室的垒球队"),
    ("Birch & Coで会計士として働いている", "Birch & Coの社内ソフトボールチームをまとめている"),
]


@pytest.mark.parametrize("contents", ONE_NAME_TWO_FACTS)
def test_two_facts_about_one_name_never_merge_even_joined(contents):
    """The joined text keeps every word, yet joins two facts (public case B07's kind): an
    invariant, whatever the second look."""
    assert joined_codes(contents) == [v.Code.SIDE_BY_SIDE]


@pytest.mark.parametrize("contents", ONE_NAME_TWO_FACTS)
@pytest.mark.parametrize("careless", [shortest_codes, oldest_codes])
def test_two_facts_about_one_name_never_merge_into_one_text(contents, careless):
    """A careless text keeps one fact and loses the other's words: an invariant refuses it,
    whatever the second look would say."""
    assert careless(contents) == [v.Code.LOST_WORDS]


@pytest.mark.parametrize("contents", ONE_NAME_TWO_FACTS)
def test_two_facts_about_one_name_raise_a_signal(contents):
    request = judge_request(*contents)
    action = merge_action(("t1", "t2"), "; ".join(contents), CARELESS)
    assert v.findings_of(action, request)[0][0] == v.Code.DETAILS_ONLY


def test_the_refusal_names_the_shared_name():
    request = judge_request(*ONE_NAME_TWO_FACTS[0])
    action = merge_action(("t1", "t2"), "; ".join(ONE_NAME_TWO_FACTS[0]), CARELESS)
    assert v.findings_of(action, request)[0][1] == say.DETAILS_ONLY.format(a="t1", b="t2", details="'birch', 'co'")


ONE_NAME_ONE_FACT = [
    ("Works as an accountant at Birch & Co", "Is an accountant at Birch & Co"),
    ("Has a dog named Biscuit", "Owns a dog called Biscuit"),
    ("Trabalha como contabilista na Birch & Co", "É contabilista na Birch & Co"),
    ("在Birch & Co当会计", "是Birch & Co的会计"),
]


@pytest.mark.parametrize("contents", ONE_NAME_ONE_FACT)
@pytest.mark.parametrize("careless", CARELESS_MODELS)
def test_restatements_that_share_a_name_and_a_word_still_merge(contents, careless):
    assert careless(contents) == []


@pytest.mark.parametrize(
    ("contents", "reason"),
    [
        (("Has a son named Tomas", "Tomas is the user's little boy"), "'little boy' = son"),
        (("Volunteers with the HVRA", "Helps out at the HVRA"), "'helps out' = volunteers"),
        (("Tem um filho chamado Tomas", "Tomas é o menino do utilizador"), "menino = filho"),
    ],
)
def test_a_judge_that_states_the_synonyms_may_merge_two_texts_about_one_name(contents, reason):
    assert joined_codes(contents) == [v.Code.SIDE_BY_SIDE]  # no synonym stated: two facts joined
    assert merge_all_codes(contents, "; ".join(contents), reason=reason) == []


# --- one frame filled twice ----------------------------------------------------------------------

ONE_FRAME_TWO_FACTS = [
    (
        "Chose a standing desk over a treadmill desk for the home office",
        "Chose an e-reader over paper books for travelling",
    ),
    ("Picked a window seat over an aisle seat for the flight", "Picked a hotel room over a hostel bed for the stay"),
    (
        "Escolheu uma secretária alta em vez de uma passadeira para o escritório",
        "Escolheu um e-reader em vez de livros de papel para viajar",
    ),
    (
        "Eligió un escritorio de pie en lugar de una cinta para la oficina",
        "Eligió un lector electrónico en lugar de libros de papel para viajar",
    ),
]


@pytest.mark.parametrize("contents", ONE_FRAME_TWO_FACTS)
@pytest.mark.parametrize("careless", CARELESS_MODELS)
def test_one_frame_filled_twice_never_merges(contents, careless):
    """Shared syntax, different choices (public case B15's kind): a careless text loses
    the other choice (an invariant); joined without loss, it joins two facts (an invariant too)."""
    expected = [v.Code.SIDE_BY_SIDE] if careless is joined_codes else [v.Code.LOST_WORDS]
    assert careless(contents) == expected


@pytest.mark.parametrize(
    "contents",
    [
        ("Prefers tea over coffee in the morning", "In the morning the user prefers tea to coffee"),
        ("Chose a standing desk over a treadmill desk", "Over a treadmill desk, chose a standing desk"),
        (
            "Likes hiking in the Alps and skiing in the Dolomites",
            "Enjoys hiking in the Alps and skiing in the Dolomites",
        ),
        (
            "Escolheu uma secretária alta em vez de uma passadeira para o escritório",
            "Para o escritório, escolheu uma secretária alta em vez de uma passadeira",
        ),
    ],
)
def test_a_rewording_of_one_choice_is_no_parallel_frame(contents):
    assert text.parallel(*contents) is None
    assert joined_codes(contents) == []


# --- everyday rewordings: kept without a stated synonym --------------------------------------------

REWORDINGS = [
    ("Has a son named Tomas", "Is the father of a boy called Tomas"),
    ("Has a son named Tomas", "Is the mother of a boy called Tomas"),
    ("Has a daughter named Mia", "Is the father of a girl called Mia"),
    ("Runs every Saturday morning", "Jogs each Saturday before noon"),
    ("Goes running on Sunday mornings", "Goes jogging on Sundays before noon"),
    ("Is fluent in Japanese", "Speaks fluent Japanese"),
    ("Is fluent in Portuguese", "Speaks fluent Portuguese"),
    ("Tem um filho chamado Tomas", "É pai de um menino chamado Tomas"),
    ("Tiene una hija llamada Mia", "Es madre de una niña llamada Mia"),
    ("Corre aos sábados de manhã", "Corre aos sábados antes do meio-dia"),
    ("周六上午跑步", "周六中午前慢跑"),
    ("有一个叫Tomas的儿子", "是一个叫Tomas的男孩的父亲"),
    ("土曜日の午前にランニングする", "土曜日の昼前にジョギングする"),
]


@pytest.mark.parametrize("contents", REWORDINGS)
@pytest.mark.parametrize("careless", CARELESS_MODELS)
def test_everyday_rewordings_merge_without_a_stated_synonym(contents, careless):
    """Golden cases G01, G07 and G10's kind: a careless model's merge into either text is kept."""
    assert careless(contents) == []
    assert merge_all_codes(contents, contents[1]) == []


REWORDING_TWINS = [
    # (a text, its opposite-meaning twin); a merge into the first must be refused.
    ("Has a son named Tomas", "Tomas is the user's father"),
    ("Has a son named Tomas", "Is the father of a girl called Tomas"),
    ("Has a daughter named Mia", "Is the father of a boy called Mia"),
    ("Runs every Saturday morning", "Jogs each Saturday after noon"),
    ("Runs every Saturday morning", "Walks each Saturday before noon"),
    ("Is fluent in Japanese", "Speaks basic Japanese"),
    ("Tem um filho chamado Tomas", "É pai de uma menina chamada Tomas"),
    ("Corre aos sábados de manhã", "Corre aos sábados depois do meio-dia"),
    ("周六上午跑步", "周六下午慢跑"),
    ("土曜日の午前にランニングする", "土曜日の夕方にジョギングする"),
]


@pytest.mark.parametrize("contents", REWORDING_TWINS)
def test_opposite_meaning_twins_of_the_rewordings_are_still_refused(contents):
    assert merge_all_codes(contents, contents[0]) != []
    assert merge_all_codes(contents, contents[0], reason="The same fact, reworded.") != []


@pytest.mark.parametrize(
    ("sample", "phrase", "found"),
    [
        ("Is the father of a boy called Tomas", "father of a boy", True),
        ("Tomas is the user's father", "father of a boy", False),
        ("Jogged each Saturday", "jog", True),
        ("Jogs each Saturday after noon", "before noon", False),
        ("周六中午前慢跑", "中午前", True),
        ("周六下午慢跑", "中午前", False),
    ],
)
def test_a_rewording_stands_as_a_whole_phrase(sample, phrase, found):
    assert text.has_phrase(sample, phrase) is found
