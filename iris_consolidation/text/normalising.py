"""Words of a truth's text: normalising, tokens, and the runs of scripts without spaces.

``normalise`` lower-cases, expands contractions (``Language.contractions``) and drops
punctuation, so that two spellings of one statement compare equal. A run of characters
of a script written without spaces (Chinese, Japanese, Thai: ``Language.spaces``) is one
token; its content is compared by character cover (``uncovered``): a run is kept by a
text when it can be cut into pieces that each stand in that text (one character at
least, three for Thai: ``Language.min_piece``), so inserted words never count as a loss
and a dropped word always does. Grammar characters (hiragana, a few Chinese function
characters: ``Language.grammar_chars``) are not required.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence

from .languages import LEXICON
from .patterns import required_literals


# Combining marks (Unicode categories Mn, Mc, Me) of the Basic Multilingual Plane: Thai
# vowels and tone marks, Devanagari vowel signs... belong to their word; without them
# "ไม่" (not) and "ไม้" (wood) would normalise to one word.
def _mark_ranges() -> str:
    """The combining marks as a regex class body of ranges ("\\u0300-\\u036f...")."""
    marks = [c for c in range(0x300, 0xFFFF) if unicodedata.category(chr(c)) in ("Mn", "Mc", "Me")]
    ranges: list[tuple[int, int]] = []
    for c in marks:
        if ranges and c == ranges[-1][1] + 1:
            ranges[-1] = (ranges[-1][0], c)
        else:
            ranges.append((c, c))
    return "".join(f"\\u{a:04x}-\\u{b:04x}" for a, b in ranges)


_MARKS = _mark_ranges()


_LETTER = rf"(?:[^\W\d_]|[{_MARKS}])"


# Possessive repeats (``++``, ``*+``): a word's pattern never needs to give back what it
# took (each part ends where its characters do), so they match the same words as greedy
# ones without keeping backtracking points, which is faster (docs/benchmarks.md, "Measured constants").
_WORD = re.compile(rf"[0-9]++(?:[.,:/-][0-9]++)*+|{_LETTER}++(?:['’-]{_LETTER}++)*+", re.UNICODE)
#: ``_WORD`` on ASCII text, where a letter is [a-zA-Z] (no ASCII character is a combining
#: mark or "’"): the same words in less time (docs/benchmarks.md, "Measured constants").
_ASCII_WORD = re.compile(r"[0-9]++(?:[.,:/-][0-9]++)*+|[a-zA-Z]++(?:['-][a-zA-Z]++)*+")


def _words(text: str) -> list[str]:
    """The words of ``text`` (already folded and lower-cased), in order: runs of digits
    with their separators, runs of letters and combining marks with inner apostrophes
    and hyphens."""
    return (_ASCII_WORD if text.isascii() else _WORD).findall(text)


RAW_WORD = re.compile(rf"{_LETTER}+(?:['-]{_LETTER}+)*|[.!?;:]", re.UNICODE)


#: Scripts written without spaces between words (every pack with ``spaces=False``).
_NO_SPACE = LEXICON.no_space_script
NO_SPACE_RUN = re.compile(f"[{_NO_SPACE}]+")
_GRAMMAR = re.compile(f"[{LEXICON.no_space_grammar}]")
#: (a character of the script, the fewest characters of a kept piece) for scripts whose letters alone mean nothing.
_MIN_PIECES = tuple((re.compile(f"[{script}]"), size) for script, size in LEXICON.min_pieces)


#: A letter of a script with spaces beside one without ("在Birch", "Co当会计"): mixed-language
#: truths keep their names as words of their own.
_SCRIPT_EDGE = re.compile(rf"(?<=[{_NO_SPACE}])(?=[^\W\d_{_NO_SPACE}])|(?<=[^\W\d_{_NO_SPACE}])(?=[{_NO_SPACE}])")


def fold(text: str) -> str:
    """NFKC, typographic apostrophes made plain, and a space where a script with spaces
    meets one without (a name written into Chinese or Japanese text stays a word)."""
    text = unicodedata.normalize("NFKC", text).replace("’", "'").replace("‘", "'")
    # An edge needs a character of a script without spaces: most texts have none (a search
    # for one is a sixth of the substitution's scan).
    return _SCRIPT_EDGE.sub(" ", text) if NO_SPACE_RUN.search(text) else text


def normalise(text: str) -> str:
    """Lower-case, contractions expanded, punctuation dropped, spaces collapsed.

    "I'm a nurse." and "i am a nurse" both give "i am a nurse".
    """
    text = fold(text).lower()
    for pattern, repl in LEXICON.contractions:
        text = re.sub(pattern, repl, text)
    return " ".join(_words(text))


def tokens(text: str) -> list[str]:
    """Words of the normalised text, in order."""
    return normalise(text).split()


_CONTRACTIONS = tuple(
    (re.compile(pattern), repl, required_literals(pattern)) for pattern, repl in LEXICON.contractions
)


def tokens_of_each(texts: Sequence[str]) -> list[list[str]]:
    """``tokens`` of each of ``texts``, in order: every step but the last runs once over
    the texts joined by NUL, which no stored text holds (PostgreSQL refuses it in text)
    and which every step treats as the end of a text (not a letter, digit or space; a
    starter for NFKC, uncased for ``lower``)."""
    if any("\x00" in text for text in texts):
        return [tokens(text) for text in texts]
    joined = fold("\x00".join(texts)).lower()
    for pattern, repl, needs in _CONTRACTIONS:
        # Skipped where no string its every match holds occurs (most texts have no apostrophe).
        if not needs or any(literal in joined for literal in needs):
            joined = pattern.sub(repl, joined)
    return [_words(text) for text in joined.split("\x00")] if texts else []


def no_space_runs(text: str) -> list[str]:
    """Runs of Han, kana and Thai characters in the normalised ``text``, in order."""
    return NO_SPACE_RUN.findall(normalise(text))


def significant(piece: str) -> bool:
    """Whether ``piece`` carries content: a character other than a grammar one
    (``Language.grammar_chars``: hiragana, Chinese function characters)."""
    return any(not _GRAMMAR.match(c) for c in piece)


def _min_piece(char: str) -> int:
    return next((size for script, size in _MIN_PIECES if script.match(char)), 1)


def uncovered(run: str, haystack: str) -> list[str]:
    """Pieces of ``run`` (from ``no_space_runs``) that stand nowhere in ``haystack``.

    Greedy longest match from the left: each step takes the longest piece of ``run``
    that ``haystack`` contains (one character at least, more where a pack's
    ``min_piece`` says so: three for Thai, whose letters alone mean nothing); characters no such piece covers make the
    result, grouped, without pieces of grammar only (``significant``).
    """
    pieces: list[str] = []
    lost = ""
    i = 0
    while i < len(run):
        need = _min_piece(run[i])
        length = 0
        for size in range(len(run) - i, need - 1, -1):
            if run[i : i + size] in haystack:
                length = size
                break
        if length:
            if lost:
                pieces.append(lost)
                lost = ""
            i += length
        else:
            lost += run[i]
            i += 1
    if lost:
        pieces.append(lost)
    return [p for p in pieces if significant(p)]


def share_script_text(a: str, b: str) -> bool:
    """Whether ``a`` and ``b`` share a content character of a script without spaces."""
    chars_a = {c for run in no_space_runs(a) for c in run if significant(c)}
    return any(c in chars_a for run in no_space_runs(b) for c in run)
