"""German."""

from __future__ import annotations

from .base import Language

GERMAN = Language(
    code="de",
    stemmer="german",
    stopwords=frozenset("der das ein eine ist sind und im mit zu von dem den des".split()),
    negations=frozenset({"nicht", "kein", "keine", "keinen", "keiner", "nie", "niemals"}),
    # "now", "moved", "changed", "repaired", "promoted", "quit".
    reported_changes=("jetzt", "umgezogen", "zog um", "gewechselt", "repariert", "befördert", "gekündigt"),
    # "actually", "was wrong".
    change_events=("eigentlich", "geirrt"),
    conjunctions=frozenset("und oder".split()),
)
