"""Chinese."""

from __future__ import annotations

import pytest

from iris_consolidation.text import quantities

from .cases import case, check, uncovered

CASES = [
    case("values", "有三只猫", expect={"3"}),
    case("values", "Has 3 cats", expect={"3"}),
    case("values", "有两个孩子", expect={"2"}),
    case("values", "第二个孩子", expect={"2nd"}),
    case("values", "Walks together: 一起散步", expect=set()),
    case(uncovered, "周末在河边的公园遛狗", "周末遛狗", expect=["在河边的公园"]),
    case(uncovered, "周末遛狗", "周末在河边的公园遛狗", expect=[]),
    case("lost_words", "周末在河边的公园遛狗", "周末遛狗", expect=["在河边的公园"]),
    case(
        "lost_words",
        "周末在河边的公园遛狗",
        "Walks the dog by the river in the park at the weekend",
        reason="'周末在河边的公园遛狗' = 'walks the dog by the river in the park at the weekend'",
        expect=[],
    ),
    case("polarity_key", "不喜欢咖啡", expect=(True, False)),
    case("polarity_key", "讨厌咖啡", expect=(True, False)),
    case("time_ended", "不再抽烟", expect=True),
    case("reports_change", "不再抽烟", expect=True),
    case("time_ended", "现在住在杭州", expect=False),
    case("reports_change", "现在住在杭州", expect=True),
    case("time_ended", "抽烟", expect=False),
    case("reports_change", "抽烟", expect=False),
    case("ended_marker", "不再抽烟", expect="不再"),
]


@pytest.mark.parametrize(("function", "args", "kwargs", "expect"), CASES)
def test_chinese(function, args, kwargs, expect):
    check(function, args, kwargs, expect)


def test_strip_cjk_blanks_the_numbers_only():
    assert quantities.strip_cjk("有两只猫") == "有 只猫"
    assert quantities.strip_cjk("第二个") == "  个"
    assert quantities.strip_cjk("一起散步") == "一起散步"
