"""Change cues of every pack that has the language: informal corrections, verbs of change
("umgezogen", "déménagé", "consertado", "修好"), "swapped", "repaired"; each wording beside
a twin that states no change. Wordings written for these tests (none from the issue)."""

from __future__ import annotations

import pytest

from iris_consolidation import text

#: (a later truth that states a change or a correction, its twin that states none).
CHANGES = [
    ("Actually, the meeting is on Friday", "The meeting is on Friday"),
    ("I was wrong about the cat: she is four", "The cat is four"),
    ("Turns out the flight leaves at noon", "The flight leaves at noon"),
    ("Swapped to a mechanical keyboard", "Types on a mechanical keyboard"),
    ("Had the boiler repaired in March", "Has a boiler"),
    ("The washing machine broke down again", "Owns a washing machine"),
    ("Got promoted to senior nurse", "Is a senior nurse"),
    ("Correction: the sister lives in Oslo", "The sister lives in Oslo"),
    ("The final plan is to fly on Sunday", "Plans to fly on Sunday"),
    ("Ist letztes Jahr nach Leipzig umgezogen", "Wohnt in Leipzig"),
    ("Hat den Job gewechselt", "Hat einen Job"),
    ("Das Fahrrad wurde repariert", "Hat ein Fahrrad"),
    ("A déménagé à Lille", "Habite à Lille"),
    ("En fait, préfère le thé", "Préfère le thé"),
    ("Si è trasferita a Bari", "Vive a Bari"),
    ("In realtà preferisce il caffè", "Preferisce il caffè"),
    ("La lavadora fue reparada", "Tiene una lavadora"),
    ("En realidad tiene dos perros", "Tiene dos perros"),
    ("Trocou o carro por uma mota", "Tem uma mota"),
    ("Na verdade mora em Faro", "Mora em Faro"),
    ("手机修好了", "有一部手机"),
    ("其实有两只猫", "有两只猫"),
    ("パソコンを修理した", "パソコンを持っている"),
    ("実は猫が二匹いる", "猫が二匹いる"),
    ("ที่จริงมีแมวสองตัว", "มีแมวสองตัว"),
]


@pytest.mark.parametrize(("changed", "plain"), CHANGES)
def test_a_change_or_correction_is_a_change_cue_and_its_twin_is_not(changed, plain):
    assert text.states_change(changed)
    assert not text.states_change(plain)


@pytest.mark.parametrize(
    "changed",
    ["Swapped to a mechanical keyboard", "The washing machine broke down again", "Ist nach Leipzig umgezogen"],
)
def test_a_reported_change_is_never_merged_away(changed):
    """A thing swapped, broken or moved reports a change against the earlier state: a merge
    with a truth that does not is a signal (``reports_change``), not a rewording."""
    assert text.reports_change(changed)
