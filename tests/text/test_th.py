"""Thai (and the combining marks of every script)."""

from __future__ import annotations

import pytest

from .cases import case, check, uncovered

CASES = [
    # Without its tone mark, "ไม่" (not) would be "ไม้" (wood).
    case("normalise", "ไม่ชอบกาแฟ", expect="ไม่ชอบกาแฟ"),
    case("normalise", "ไม้ชอบกาแฟ", expect="ไม้ชอบกาแฟ"),
    case("tokens", "हिन्दी बोलता है", expect=["हिन्दी", "बोलता", "है"]),
    case(uncovered, "พาสุนัขไปเดินเล่นที่สวนริมแม่น้ำ", "พาสุนัขไปเดินเล่น", expect=["ที่สวนริมแม่น้ํา"]),
    case(uncovered, "", "anything", expect=[]),
    case("polarity_key", "ไม่ชอบกาแฟ", expect=(True, False)),
]


@pytest.mark.parametrize(("function", "args", "kwargs", "expect"), CASES)
def test_thai(function, args, kwargs, expect):
    check(function, args, kwargs, expect)
