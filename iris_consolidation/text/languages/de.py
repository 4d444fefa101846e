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
    # Single-valued attributes of a person and their cues (``Language.attributes``).
    attributes={
        "home": ("wohnt", "lebt in", "umgezogen", "zieht nach", "zog nach"),
        "work": ("arbeitet", "beruf", "angestellt", "eingestellt", "gekündigt", "rente", "stelle als"),
        "relationship": ("verheiratet", "heiratete", "verlobt", "geschieden", "freundin", "freund", "ehemann",
                         "ehefrau"),
        "name": ("heißt", "name ist"),
        "age": ("jahre alt", "geburtstag", "geboren"),
        "diet": ("vegetarier", "veganer", "vegan", "isst fleisch", "diät"),
        "children": ("kinder", "schwanger"),
        "pets": ("hund", "hunde", "katze", "katzen", "haustier"),
        "phone": ("handy", "telefon", "smartphone"),
        "allergies": ("allergi*",),
        "appointment": ("termin",),
    },
)
