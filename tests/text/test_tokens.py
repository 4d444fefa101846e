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
