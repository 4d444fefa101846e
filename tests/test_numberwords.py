"""``numberwords``: numbers by value, whatever their spelling."""

from __future__ import annotations

import pytest

from iris_consolidation import numberwords


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Has 3 cats", {"3"}),
        ("Has three cats", {"3"}),
        ("Has a dozen eggs", {"12"}),
        ("Has twelve eggs", {"12"}),
        ("Bakes half a dozen loaves", {"6"}),
        ("Bought two dozen roses", {"24"}),
        ("Is twenty-one", {"21"}),
        ("Owns one hundred and five records", {"105"}),
        ("Owns a thousand books", {"1000"}),
        ("Owns 1,000 books", {"1000"}),
        ("Runs 3.5 km at 7:40", {"3.5", "7:40"}),
        ("Swims twice a week", {"2x"}),
        ("Swims two times a week", {"2x"}),
        ("Swims 2 times a week", {"2x"}),
        ("Lives on the second floor", {"2nd"}),
        ("Lives on the 2nd floor", {"2nd"}),
        ("Finished twenty-first", {"21st"}),
        ("Tem três gatos", {"3"}),
        ("Tiene tres gatos", {"3"}),
        ("Tem dois filhos", {"2"}),
        ("有三只猫", {"3"}),
        ("有两个孩子", {"2"}),
        ("第二个孩子", {"2nd"}),
        ("猫を三匹飼っている", {"3"}),
        ("猫を２匹飼っている", {"2"}),
        ("Has a couple of cats", {"2"}),
        ("Lives with an older couple", {"couple"}),
        ("Worked there for a decade", {"10"}),
        ("Reads dozens of books", {"dozens"}),
        ("Born 1990-05-03", {"1990-05-03"}),
        ("Vive no Porto", set()),
        ("Walks together: 一起散步", set()),
        ("Likes tea", set()),
    ],
)
def test_values(text, expected):
    assert numberwords.values(text) == expected


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("Has three cats", "Has 3 cats"),
        ("Reads a dozen books", "Reads 12 books"),
        ("Swims twice a week", "Swims 2 times a week"),
        ("Tem três gatos", "Has three cats"),
        ("有三只猫", "Has 3 cats"),
        ("Has a couple of cats", "Has 2 cats"),
    ],
)
def test_one_value_in_two_spellings_is_equal(a, b):
    assert numberwords.values(a) == numberwords.values(b)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("An older couple adopted her", "Two people adopted her"),
        ("Has three cats", "Has 13 cats"),
        ("Swims twice a week", "Swims 2 km a week"),
        ("Lives on the second floor", "Has 2 floors"),
        ("Reads dozens of books", "Reads 12 books"),
    ],
)
def test_different_or_inexact_values_differ(a, b):
    assert numberwords.values(a) != numberwords.values(b)


def test_strip_cjk_blanks_the_numbers_only():
    assert numberwords.strip_cjk("有两只猫") == "有 只猫"
    assert numberwords.strip_cjk("第二个") == "  个"
    assert numberwords.strip_cjk("一起散步") == "一起散步"
