"""German."""

from __future__ import annotations

from .base import Language

GERMAN = Language(
    code="de",
    stemmer="german",
    stopwords=frozenset("der das ein eine ist sind und im mit zu von dem den des".split()),
    negations=frozenset({"nicht", "kein", "keine", "keinen", "keiner", "nie", "niemals"}),
    conjunctions=frozenset("und oder".split()),
)
