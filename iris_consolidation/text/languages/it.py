"""Italian."""

from __future__ import annotations

from .base import Language

ITALIAN = Language(
    code="it",
    stemmer="italian",
    stopwords=frozenset("il lo gli le è sono di del della nel nella con per e".split()),
    negations=frozenset({"non"}),
    conjunctions=frozenset("e ed o".split()),
)
