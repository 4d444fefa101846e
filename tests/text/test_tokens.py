"""``tokens_of_each``, the lexical arm's one pass over a user's texts, is ``tokens`` of each."""

from __future__ import annotations

from iris_consolidation import text


def test_tokens_of_each_is_tokens_of_every_text():
    texts = ["I can't go", "won't", "Σίσυφος ΟΔΟΣ", "在Birch工作", "Co当会计", "e\u0301", "\u0301start", "ไม่ ไม้",
             "I'm a nurse.", "x'd", "’ll be", "", " ", "1.2.3-4", "ﬁne ①", "ΟΔΟΣ\n- two", "isn't", "a\x00b"]
    for order in (texts, texts[::-1], texts[:-1]):
        assert text.tokens_of_each(order) == [text.tokens(t) for t in order]
    assert text.tokens_of_each([]) == []


def test_ascii_words_are_the_general_words():
    """On ASCII text the shorter pattern finds what the general one finds: every pair
    of ASCII characters around a letter and a digit, and texts with every separator."""
    from iris_consolidation.text.normalising import _ASCII_WORD, _WORD

    chars = [chr(c) for c in range(128)]
    texts = [f"{a}x{b}9{a}" for a in chars for b in chars]
    texts += ["don't-stop 1,200.5/3:4-5 x-'y a--b 'quoted' _under_score_ 12ab34 tab\there", "".join(chars)]
    for t in texts:
        assert _ASCII_WORD.findall(t) == _WORD.findall(t), t
    assert _ASCII_WORD.findall("i can't go 1.2.3-4") == ["i", "can't", "go", "1.2.3-4"]


def test_possessive_word_patterns_find_what_greedy_ones_find():
    """The word patterns use possessive repeats (no backtracking points); their greedy
    forms, the patterns as written before, find the same words on texts of every kind of
    separator, digit run and mark."""
    import random
    import re

    from iris_consolidation.text.normalising import _ASCII_WORD, _WORD

    rng = random.Random(7)
    alphabet = list("abXY09.,:/-'’ _\t\u0301é日ไม่😀")
    texts = ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 24))) for _ in range(5000)]
    texts += ["1.2.", "a-'b", "x--y", "12,3,,4", "don't-", "-'a", "9:", "e\u0301\u0301-"]
    for possessive in (_WORD, _ASCII_WORD):
        greedy = re.compile(possessive.pattern.replace("++", "+").replace("*+", "*"), possessive.flags)
        assert greedy.pattern != possessive.pattern
        for t in texts:
            assert possessive.findall(t) == greedy.findall(t), t
