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
    # Single-valued attributes of a person and their cues (``Language.attributes``).
    attributes={
        "home": ("habite", "vit à", "vit en", "a déménagé", "déménag*", "s'est installé"),
        "work": ("travaille", "emploi", "employé", "embauché", "licencié", "retraite", "métier"),
        "relationship": ("marié", "fiancé", "divorcé", "petit ami", "petite amie", "mari", "épouse"),
        "name": ("s'appelle", "prénom est", "nom est"),
        "age": ("ans", "anniversaire", "est né", "est née"),
        "diet": ("végétarien", "végan", "mange de la viande", "régime"),
        "children": ("enfants", "enceinte"),
        "pets": ("chien", "chiens", "chat", "chats", "chatte", "animal de compagnie"),
        "phone": ("téléphone", "portable"),
        "allergies": ("allergi*",),
        "appointment": ("rendez-vous",),
    },
)
