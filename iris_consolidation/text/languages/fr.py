"""French."""

from __future__ import annotations

from .base import Language

FRENCH = Language(
    code="fr",
    stemmer="french",
    # "son" ("his") is left out: it is an English content word.
    stopwords=frozenset("le la les un une des du est et au aux avec pour sur il elle ils elles".split()),
    articles=frozenset("le la les un une des".split()),
    negations=frozenset({"pas", "jamais", "non"}),
    # "now", "moved", "settled", "changed", "repaired", "promoted".
    reported_changes=(
        "maintenant",
        "déménagé",
        "déménagée",
        "installé",
        "installée",
        "changé",
        "réparé",
        "réparée",
        "promu",
        "promue",
    ),  # fmt: skip
    # "actually", "I was wrong".
    change_events=("en fait", "me suis trompé", "me suis trompée"),
    conjunctions=frozenset("et ou".split()),
)
