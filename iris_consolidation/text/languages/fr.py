"""French."""

from __future__ import annotations

from .base import Language

FRENCH = Language(
    code="fr",
    stemmer="french",
    # "son" ("his") is left out: it is an English content word.
    # Possessives but "ma" and "ta" (English words too): "Sa sœur" is "her sister".
    stopwords=frozenset(
        "le la les un une des du est et au aux avec pour sur il elle ils elles"
        " sa ses mes tes notre nos votre vos leur leurs".split()
    ),
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
    change_events=("en fait", "a terminé", "a fini", "me suis trompé", "me suis trompée"),
    conjunctions=frozenset("et ou".split()),
    # A plan or an effort under way, whose later outcome replaces it (``Language.plans``).
    plans=("prévoit", "veut", "compte", "envisage", "actuellement"),
    # Set long before it was said: no outcome of a plan stated earlier.
    long_ago=(
        "quand j'étais enfant",
        "dans mon enfance",
        "quand j'étais petit",
        "quand j'étais petite",
        "il y a des années",
    ),
    # Addressed to the model, not a fact about the person.
    instructions=(
        "ignore toutes les instructions précédentes",
        "ignorez toutes les instructions précédentes",
        "oublie les instructions précédentes",
    ),
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
