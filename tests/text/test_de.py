"""German."""

from __future__ import annotations

import pytest

from .cases import case, check

CASES = [
    case("polarity", "Trinkt keinen Kaffee", expect=True),
    case("polarity", "Trinkt nie Kaffee", expect=True),
    case("polarity", "Trinkt Kaffee", expect=False),
    case("negations", "Trinkt keinen Kaffee", expect={"keinen"}),
]


@pytest.mark.parametrize(("function", "args", "kwargs", "expect"), CASES)
def test_german(function, args, kwargs, expect):
    check(function, args, kwargs, expect)
