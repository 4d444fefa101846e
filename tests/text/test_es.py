"""Spanish."""

from __future__ import annotations

import pytest

from .cases import case, check

CASES = [
    case("values", "Tiene tres gatos", expect={"3"}),
    case("polarity", "No bebe café", expect=True),
    case("polarity", "Ya no fuma", expect=False),  # a state that ended
    case("time_ended", "Ya no fuma", expect=True),
    case("states_change", "Ahora vive en Madrid", expect=True),
    case("lost_words", "Es padre de un niño llamado Tomás", "Tiene un hijo llamado Tomás", expect=[]),
]


@pytest.mark.parametrize(("function", "args", "kwargs", "expect"), CASES)
def test_spanish(function, args, kwargs, expect):
    check(function, args, kwargs, expect)
