"""``text.attributes_of``: the single-valued attributes a truth speaks of, in every pack."""

from __future__ import annotations

import pytest

from iris_consolidation.text.attributes import attributes_of
from iris_consolidation.text.languages import PACKS

CASES = [
    ("Lives in Lisbon", {"home"}),
    ("Moved to Berlin in September 2025", {"home"}),
    ("Works at Northwind as an analyst", {"work"}),
    ("Switched jobs and now works at Contoso as a data engineer", {"work"}),
    ("Is engaged to Sam", {"relationship"}),
    ("Married Sam in September", {"relationship"}),
    ("Is allergic to cats", {"allergies", "pets"}),
    ("Es alérgica a los gatos", {"allergies", "pets"}),
    ("Vive no Porto", {"home"}),
    ("Wohnt in Hamburg", {"home"}),
    ("Habite à Lyon", {"home"}),
    ("Lavora come infermiera", {"work"}),
    ("住在北京", {"home"}),
    ("東京に住んでいる", {"home"}),
    ("อาศัยอยู่ที่เชียงใหม่", {"home"}),
    ("Uses a Pixel phone", {"phone"}),
    ("Is vegetarian", {"diet"}),
    ("Likes jazz", set()),
    # A cue matches whole words unless it ends in "*": "Maria" is no "mari" (husband).
    ("Maria likes marinas", set()),
]


@pytest.mark.parametrize("content,expected", CASES, ids=[c for c, _ in CASES])
def test_attributes_of(content, expected):
    assert attributes_of(content) == frozenset(expected)


@pytest.mark.parametrize("pack", PACKS, ids=lambda p: p.code)
def test_every_pack_has_cues_for_home_and_work(pack):
    assert {"home", "work", "relationship"} <= set(pack.attributes)
    for cues in pack.attributes.values():
        assert all(c == c.lower().strip() and c for c in cues)
