"""Italian."""

from __future__ import annotations

import pytest

from .cases import case, check

CASES = [
    case("polarity", "Non beve caffè", expect=True),
    case("polarity", "Beve caffè", expect=False),
]


@pytest.mark.parametrize(("function", "args", "kwargs", "expect"), CASES)
def test_italian(function, args, kwargs, expect):
    check(function, args, kwargs, expect)
