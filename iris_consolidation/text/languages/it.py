"""Italian."""

from __future__ import annotations

from .base import Language

ITALIAN = Language(
    code="it",
    stemmer="italian",
    stopwords=frozenset("il lo gli le è sono di del della nel nella con per e".split()),
    negations=frozenset({"non"}),
    # "now", "moved", "changed", "repaired", "promoted".
    reported_changes=(
        "adesso",
        "trasferito",
        "trasferita",
        "cambiato",
        "riparato",
        "riparata",
        "promosso",
        "promossa",
    ),  # fmt: skip
    # "actually", "I was wrong".
    change_events=("in realtà", "ha finito", "ha completato", "mi sbagliavo", "mi ero sbagliato", "mi ero sbagliata"),
    conjunctions=frozenset("e ed o".split()),
    # A plan or an effort under way, whose later outcome replaces it (``Language.plans``).
    plans=("vuole", "intende", "pianifica", "sta pensando", "attualmente"),
    # Set long before it was said: no outcome of a plan stated earlier.
    long_ago=("da bambino", "da bambina", "da piccolo", "da piccola", "anni fa"),
    # Addressed to the model, not a fact about the person.
    instructions=("ignora tutte le istruzioni precedenti", "ignora le istruzioni precedenti"),
    # Single-valued attributes of a person and their cues (``Language.attributes``).
    attributes={
        "home": ("vive a", "vive in", "abita", "si è trasferit*", "trasferit*"),
        "work": ("lavora", "impiego", "impiegat*", "assunt*", "licenziat*", "in pensione", "professione"),
        "relationship": ("sposat*", "fidanzat*", "divorziat*", "marito", "moglie"),
        "name": ("si chiama", "nome è"),
        "age": ("anni", "compleanno", "è nat*"),
        "diet": ("vegetarian*", "vegan*", "mangia carne", "dieta"),
        "children": ("figli", "incinta"),
        "pets": ("cane", "cani", "gatto", "gatta", "gatti", "animale domestico"),
        "phone": ("cellulare", "telefono"),
        "allergies": ("allergic*", "allergia"),
        "appointment": ("appuntamento",),
    },
)
