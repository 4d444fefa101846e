"""Japanese."""

from __future__ import annotations

import pytest

from .cases import case, check, uncovered

CASES = [
    case("values", "猫を三匹飼っている", expect={"3"}),
    case("values", "猫を２匹飼っている", expect={"2"}),
    case(uncovered, "週末に川沿いの公園で犬を散歩させる", "週末に犬を散歩させる", expect=["川沿いの公園で"]),
    # Particles and endings are grammar.
    case(uncovered, "週末に犬を散歩させる", "週末は犬を散歩させます", expect=[]),
    case("polarity_key", "コーヒーが嫌いだ", expect=(True, False)),
    case("states_change", "大阪に引っ越した", expect=True),
]


@pytest.mark.parametrize(("function", "args", "kwargs", "expect"), CASES)
def test_japanese(function, args, kwargs, expect):
    check(function, args, kwargs, expect)
