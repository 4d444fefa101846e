"""Portuguese."""

from __future__ import annotations

import pytest

from .cases import case, check

CASES = [
    case("values", "Tem três gatos", expect={"3"}),
    case("values", "Tem dois filhos", expect={"2"}),
    case("values", "Vive no Porto", expect=set()),
    case("lost_words", "Tem três gatos", "Tem 3 gatos", expect=[]),
    case("polarity_key", "Não gosta de café", expect=(True, False)),
    case("polarity_key", "Vive na cidade do Porto", expect=(False, False)),
    # "no" is "in the" in a text marked as Portuguese ("com", "ã"), a negation elsewhere:
    # "Vive no Porto" alone has no marker and reads as negated (conservative).
    case("polarity", "Vive no Porto com a família", expect=False),
    case("polarity", "Vive no Porto", expect=True),
    case("polarity", "Says no to sugar", expect=True),
    case("time_ended", "Já não fuma", expect=True),
    case("reports_change", "Já não fuma", expect=True),
    case("time_ended", "Agora trabalha num lar", expect=False),
    case("reports_change", "Agora trabalha num lar", expect=True),
    case("states_change", "Agora trabalha num lar", expect=True),
]


@pytest.mark.parametrize(("function", "args", "kwargs", "expect"), CASES)
def test_portuguese(function, args, kwargs, expect):
    check(function, args, kwargs, expect)
