"""Spanish."""

from __future__ import annotations

from types import MappingProxyType

from .base import Language

SPANISH = Language(
    code="es",
    stemmer="spanish",
    stopwords=frozenset(
        """de el la los las un una es está están del al en y con por para lo se su sus que
        tiene tienen tenía llamado llamada llamados llamadas""".split()
    ),
    articles=frozenset("el la los las un una unos unas".split()),
    # "nada" is left out: it is also Portuguese "swims".
    negations=frozenset({"no", "nunca", "tampoco", "ningún", "ninguna"}),
    negative_verbs=frozenset("odia odio detesta detesto evita".split()),
    ended_negations=("ya no",),
    preference_words=frozenset("gusta gustan encanta encantan prefiere prefiero".split()),
    reported_changes=(
        "ahora",
        "ya no",
        "se mudó",
        "dejó",
        "reparado",
        "reparada",
        "reparó",
        "ascendido",
        "ascendida",
    ),  # fmt: skip
    # "changed", "actually", "I was wrong".
    change_events=("cambió", "terminó", "completó", "en realidad", "me equivoqué", "me equivocaba"),
    time_ended=("ya no", "dejó de", "solía"),
    job_frames=("trabaja como",),
    phrase_equivalences=(
        ("padre de un niño", "hijo"),
        ("madre de un niño", "hijo"),
        ("padre de una niña", "hija"),
        ("madre de una niña", "hija"),
        ("antes del mediodía", "mañana"),
    ),
    # "uno" and "dos" are left out ("dos" is Portuguese "of the"), and "once" (English "once").
    cardinals=MappingProxyType(
        {
            "tres": 3,
            "cuatro": 4,
            "cinco": 5,
            "seis": 6,
            "siete": 7,
            "ocho": 8,
            "nueve": 9,
            "diez": 10,
            "quince": 15,
            "veinte": 20,
        }
    ),  # fmt: skip
    conjunctions=frozenset("y e o u".split()),
    # A plan or an effort under way, whose later outcome replaces it (``Language.plans``).
    plans=("planea", "quiere", "piensa", "va a", "pretende", "está considerando", "actualmente"),
    # Set long before it was said: no outcome of a plan stated earlier.
    long_ago=("de niño", "de niña", "cuando era niño", "cuando era niña", "de pequeño", "de pequeña", "hace años"),
    # Addressed to the model, not a fact about the person.
    instructions=(
        "ignora todas las instrucciones anteriores",
        "ignora las instrucciones anteriores",
        "olvida las instrucciones anteriores",
    ),
    # Single-valued attributes of a person and their cues (``Language.attributes``).
    attributes={
        "home": ("vive en", "vive cerca", "se mudó", "mudó a", "reside en", "se trasladó"),
        "work": ("trabaja", "empleo", "empleado", "empleada", "contratad*", "despedid*", "jubilad*", "profesión"),
        "relationship": ("casad*", "se casó", "prometid*", "divorciad*", "novio", "novia", "esposo", "esposa"),
        "name": ("se llama", "nombre es"),
        "age": ("años de edad", "cumpleaños", "nació"),
        "diet": ("vegetarian*", "vegan*", "come carne", "dieta"),
        "children": ("hijos", "embarazada"),
        "pets": ("perro", "perra", "gato", "gata", "gatos", "gatas", "perros", "mascota", "mascotas"),
        "phone": ("móvil", "celular", "teléfono"),
        "allergies": ("alérgic*", "alergia"),
        "appointment": ("cita con",),
    },
)
