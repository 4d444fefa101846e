"""French."""

from __future__ import annotations

import pytest

from .cases import case, check

CASES = [
    case("polarity", "Ne boit pas de café", expect=True),
    case("polarity", "Boit du café", expect=False),
    case("content_stems", "Boit du café avec les amis", expect={"boit", "café", "ami"}),
]


@pytest.mark.parametrize(("function", "args", "kwargs", "expect"), CASES)
def test_french(function, args, kwargs, expect):
    check(function, args, kwargs, expect)
