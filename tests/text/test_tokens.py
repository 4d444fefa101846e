"""``tokens_of_each``, the lexical arm's one pass over a user's texts, is ``tokens`` of each."""

from __future__ import annotations

from iris_consolidation import text


def test_tokens_of_each_is_tokens_of_every_text():
    texts = ["I can't go", "won't", "Σίσυφος ΟΔΟΣ", "在Birch工作", "Co当会计", "e\u0301", "\u0301start", "ไม่ ไม้",
             "I'm a nurse.", "x'd", "’ll be", "", " ", "1.2.3-4", "ﬁne ①", "ΟΔΟΣ\n- two", "isn't", "a\x00b"]
    for order in (texts, texts[::-1], texts[:-1]):
        assert text.tokens_of_each(order) == [text.tokens(t) for t in order]
    assert text.tokens_of_each([]) == []
