"""Numbers in a truth's text by value, whatever their spelling and language.

``values(text)`` gives each number of ``text`` as a canonical string, so that "3",
"three" and "Tem três gatos" all give "3", "a dozen" and "twelve" both give "12", and
the validator compares quantities, not spellings (about one in five of its
"different numbers" refusals on the PersonaChat pairs were one number written two ways).

Canonical forms:
- cardinals: the decimal integer ("21" for "twenty-one", "1000" for "1,000" or "a
  thousand"); other digit groups as written ("3.5", "3:30", "1990-05-03");
- ordinals: "1st", "2nd", "21st" (for "first", "2nd", "twenty-first");
- repetitions: "2x" for "twice", "two times" and "2 times"; "1x" for "once";
- "a couple (of)" gives "2" and "a decade" "10", as people restate them ("a couple of pets"
  / "two pets"); other inexact quantities keep a word of their own, equal only to
  themselves: "couple" alone (an older couple) gives "couple", "dozens" "dozens", "half" "half".

Words read (from the language packs): the cardinal grammar of a pack that has one
(English: cardinals and ordinals up to the millions, "a"/"an" before "hundred", "thousand"
and "dozen", "half a dozen"); the cardinals a pack reads alone (``Language.cardinals``:
the unambiguous Portuguese and Spanish cardinals from two to twenty, "dois", "três",
"cuatro", ...; "um"/"uno", Spanish "dos" and "once" are left out: they are also articles,
Portuguese "of the" and English "once"); numerals of a script without spaces before a
counter ("三只猫", "两个孩子", "三つ", "第二") and full-width digits. Conservative: a word
that is not surely a number is not read as one.
"""

from __future__ import annotations

import functools
import re
import unicodedata

from .languages import LEXICON
from .normalising import fold

_UNITS, _TENS, _SCALES, _ORDINALS = LEXICON.units, LEXICON.tens, LEXICON.scales, LEXICON.ordinals
_CARDINALS, _REPEATS = LEXICON.cardinals, LEXICON.repeats

#: Every word read as (part of) a number.
NUMBER_WORDS = frozenset({*_UNITS, *_TENS, *_SCALES, *_ORDINALS, *_CARDINALS, *_REPEATS, *LEXICON.inexact, "dozen"})

_NUMERALS = "".join(LEXICON.numerals) + "".join(LEXICON.numeral_scales)
_ORDINAL_PREFIX = "|".join(LEXICON.ordinal_prefixes)
#: A numeral of a script without spaces is read only before a counter (measure word), or
#: after the ordinal prefix (第), so that 一起 ("together") is no number.
_CJK_NUMBER = re.compile(
    rf"({_ORDINAL_PREFIX})?([{_NUMERALS}]+)(?=[{LEXICON.counters}])|({_ORDINAL_PREFIX})([{_NUMERALS}]+)"
)
_DIGITS = re.compile(r"(?<!\d)(?<!\d[.,:/-])(\d+(?:[.,:/-]\d+)*)(?:(st|nd|rd|th|x)(?![^\W\d_]))?", re.IGNORECASE)
_THOUSANDS = re.compile(r"^\d{1,3}(?:,\d{3})+$")
_WORD = re.compile(r"[^\W\d_]+(?:-[^\W\d_]+)*")


def _ordinal(n: int) -> str:
    if 10 <= n % 100 <= 20:
        return f"{n}th"
    return f"{n}{ {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th') }"


def _digits(text: str) -> list[tuple[int, int, str]]:
    """(start, end, value) of each digit group; "2 times" gives "2x"."""
    found = []
    for match in _DIGITS.finditer(text):
        raw, suffix = match.group(1), (match.group(2) or "").lower()
        if _THOUSANDS.match(raw):
            raw = raw.replace(",", "")
        if suffix == "x" and raw.isdigit():
            found.append((match.start(), match.end(), f"{int(raw)}x"))
        elif suffix and raw.isdigit():
            found.append((match.start(), match.end(), _ordinal(int(raw))))
        elif raw.isdigit():
            found.append((match.start(), match.end(), str(int(raw))))
        else:
            found.append((match.start(), match.end(), raw))
    return found


def _cjk_value(numeral: str) -> int | None:
    """三 -> 3, 十二 -> 12, 二十 -> 20, 一百零五 -> 105; None when not well formed."""
    total, current = 0, None
    for char in numeral:
        if char in LEXICON.numerals:
            if current is not None and current != 0:
                return None  # two digits in a row ("三四": "three or four")
            current = LEXICON.numerals[char]
        else:
            scale = LEXICON.numeral_scales[char]
            total += (1 if current is None else current) * scale
            current = None
    return total + (current or 0)


def _cjk(text: str) -> list[str]:
    found = []
    for match in _CJK_NUMBER.finditer(text):
        prefix = match.group(1) or match.group(3)
        value = _cjk_value(match.group(2) or match.group(4))
        if value is not None:
            found.append(_ordinal(value) if prefix else str(value))
    return found


def _words(words: list[str]) -> list[str]:
    """Values of the number-word phrases in ``words`` (lower-case words in order)."""
    found: list[str] = []
    i = 0
    while i < len(words):
        word = words[i]
        article = word in ("a", "an") and i + 1 < len(words) and words[i + 1] in ("hundred", "thousand", "dozen")
        if word == "half" and words[i + 1 : i + 3] == ["a", "dozen"]:
            found.append("6")
            i += 3
            continue
        if word in _UNITS or word in _TENS or article or _compound(word) is not None:
            value, i = _cardinal(words, i + 1 if article else i, start=1 if article else None)
            if i < len(words) and words[i] == "dozen":
                value, i = value * 12, i + 1
            if i < len(words) and words[i] == "times":
                found.append(f"{value}x")
                i += 1
            else:
                found.append(str(value))
            continue
        if word in _ORDINALS or _compound_ordinal(word) is not None:
            found.append(_ordinal(_ORDINALS.get(word) or _compound_ordinal(word) or 0))
        elif word in _REPEATS:
            found.append(f"{_REPEATS[word]}x")
        elif word in _CARDINALS:
            found.append(str(_CARDINALS[word]))
        elif word == "dozen":
            found.append("12")
        elif word == "couple" and i and words[i - 1] == "a":
            found.append("2")  # "a couple (of)": two, as a merge restates it ("a couple" / "two")
        elif word == "decade" and i and words[i - 1] in ("a", "one"):
            found.append("10")  # "a decade" / "ten years"
        elif word in LEXICON.inexact:
            found.append(word)
        i += 1
    return found


def _compound(word: str) -> int | None:
    """ "twenty-one" -> 21."""
    parts = word.split("-")
    if len(parts) == 2 and parts[0] in _TENS and parts[1] in _UNITS and 0 < _UNITS[parts[1]] < 10:
        return _TENS[parts[0]] + _UNITS[parts[1]]
    return None


def _compound_ordinal(word: str) -> int | None:
    """ "twenty-first" -> 21."""
    parts = word.split("-")
    if len(parts) == 2 and parts[0] in _TENS and parts[1] in _ORDINALS and _ORDINALS[parts[1]] < 10:
        return _TENS[parts[0]] + _ORDINALS[parts[1]]
    return None


def _cardinal(words: list[str], i: int, *, start: int | None) -> tuple[int, int]:
    """Read an English cardinal from ``words[i]``; returns (value, index after it).

    ``start`` is the value already read (1 for "a" in "a hundred")."""
    total, current = 0, start or 0
    while i < len(words):
        word = words[i]
        if word in _UNITS:
            current += _UNITS[word]
        elif word in _TENS:
            current += _TENS[word]
        elif _compound(word) is not None:
            current += _compound(word) or 0
        elif word in _SCALES:
            scale = _SCALES[word]
            if scale == 100:
                current = (current or 1) * 100
            else:
                total += (current or 1) * scale
                current = 0
        elif word == "and" and i + 1 < len(words) and (words[i + 1] in _UNITS or words[i + 1] in _TENS):
            pass  # "one hundred and five"
        else:
            break
        i += 1
    return total + current, i


def values(text: str) -> set[str]:
    """Every number of ``text`` as a canonical string (see the module docstring).

    "Has three cats and 4 dogs" -> {"3", "4"}; "Reads a dozen books" -> {"12"};
    "Runs twice a week" -> {"2x"}; "Has a couple of pets" -> {"2"}.
    """
    text = unicodedata.normalize("NFKC", text)
    spans = _digits(text)
    found = {value for _, _, value in spans}
    # "2 times" -> "2x": the digit group followed by the word.
    for _start, end, value in spans:
        if value.isdigit() and re.match(r"\s+times\b", text[end:], re.IGNORECASE):
            found.discard(value)
            found.add(f"{value}x")
    found.update(_cjk(text))
    found.update(_words([w.lower() for w in _WORD.findall(text)]))
    return found


def strip_cjk(text: str) -> str:
    """``text`` with its Chinese and Japanese numbers ("两只", "第二") blanked out, for
    comparisons of the other characters (the numbers compare by value)."""
    return _CJK_NUMBER.sub(lambda m: " " * len(m.group(0)), unicodedata.normalize("NFKC", text))


def numbers(text: str) -> set[str]:
    """Every number in ``text`` by value, as ``values`` gives it: "3" for
    "3", "three" or "três", "12" for "a dozen", "2nd" for "second", "2x" for "twice"."""
    return values(fold(text))


@functools.lru_cache(maxsize=8192)
def number_word(word: str) -> bool:
    """Whether ``word`` is a number word ("three", "dozen", "dois") or an ordinal suffix
    after digits ("nd" of "2nd"): numbers compare by value, not as content words."""
    return word in ("st", "nd", "rd", "th", "times") or word in NUMBER_WORDS or bool(values(word))


def is_number(detail: str) -> bool:
    """Whether a detail (from ``details``) is a number: digits, "2x", or an inexact
    quantity word ("couple", "dozens")."""
    return detail[:1].isdigit() or detail in LEXICON.inexact
