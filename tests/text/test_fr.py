"""French."""

from __future__ import annotations

import pytest

from .cases import case, check

CASES = [
    case("polarity", "Ne boit pas de café", expect=True),
    case("polarity", "Boit du café", expect=False),
    case("content_stems", "Boit du café avec les amis", expect={"boit", "café", "ami"}),
    # A possessive is no content word: "Sa sœur" is "her sister", whose "her" is none either.
    case("content_stems", "Sa sœur Camille habite à Montréal", expect={"sœur", "camill", "habit", "montréal"}),
    case("content_stems", "Leurs enfants habitent à Lyon", expect={"enfant", "habit", "lyon"}),
]


@pytest.mark.parametrize(("function", "args", "kwargs", "expect"), CASES)
def test_french(function, args, kwargs, expect):
    check(function, args, kwargs, expect)
