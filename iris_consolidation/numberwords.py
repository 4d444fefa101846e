"""Numbers in a truth's text by value, whatever their spelling.

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

Words read: English cardinals and ordinals up to the millions, "a"/"an" before
"hundred", "thousand" and "dozen", "half a dozen"; the unambiguous Portuguese and
Spanish cardinals from two to twenty ("dois", "três", "cuatro", ...; "um"/"uno", Spanish
"dos" and "once" are left out: they are also articles, Portuguese "of the" and English
"once"); Chinese and
Japanese numerals before a counter ("三只猫", "两个孩子", "三つ", "第二") and full-width
digits. Conservative: a word that is not surely a number is not read as one.
"""

from __future__ import annotations

import re
import unicodedata

_UNITS = {
    "zero": 0, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8,
    "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "thirteen": 13, "fourteen": 14, "fifteen": 15,
    "sixteen": 16, "seventeen": 17, "eighteen": 18, "nineteen": 19,
}  # fmt: skip
_TENS = {
    "twenty": 20, "thirty": 30, "forty": 40, "fifty": 50, "sixty": 60, "seventy": 70, "eighty": 80,
    "ninety": 90,
}  # fmt: skip
_SCALES = {"hundred": 100, "thousand": 1000, "million": 1_000_000, "billion": 1_000_000_000}
_ORDINALS = {
    "first": 1, "second": 2, "third": 3, "fourth": 4, "fifth": 5, "sixth": 6, "seventh": 7, "eighth": 8,
    "ninth": 9, "tenth": 10, "eleventh": 11, "twelfth": 12, "thirteenth": 13, "fourteenth": 14,
    "fifteenth": 15, "sixteenth": 16, "seventeenth": 17, "eighteenth": 18, "nineteenth": 19,
    "twentieth": 20, "thirtieth": 30, "fortieth": 40, "fiftieth": 50, "sixtieth": 60, "seventieth": 70,
    "eightieth": 80, "ninetieth": 90, "hundredth": 100, "thousandth": 1000,
}  # fmt: skip
#: Portuguese and Spanish cardinals that are no other common word in either language.
_ROMANCE = {
    "dois": 2, "duas": 2, "três": 3, "tres": 3, "quatro": 4, "cuatro": 4, "cinco": 5, "seis": 6,
    "sete": 7, "siete": 7, "oito": 8, "ocho": 8, "nove": 9, "nueve": 9, "dez": 10, "diez": 10,
    "onze": 11, "quinze": 15, "quince": 15, "vinte": 20, "veinte": 20,
}  # fmt: skip
_REPEATS = {"once": 1, "twice": 2, "thrice": 3}
#: Inexact quantities: each equal only to itself.
INEXACT = frozenset({"couple", "dozens", "half", "hundreds", "thousands"})

#: Every word this module reads as (part of) a number.
NUMBER_WORDS = frozenset({*_UNITS, *_TENS, *_SCALES, *_ORDINALS, *_ROMANCE, *_REPEATS, *INEXACT, "dozen"})

_CJK_DIGITS = {"〇": 0, "零": 0, "一": 1, "二": 2, "两": 2, "兩": 2, "三": 3, "四": 4, "五": 5, "六": 6, "七": 7,
               "八": 8, "九": 9}  # fmt: skip
_CJK_SCALES = {"十": 10, "百": 100, "千": 1000, "万": 10_000, "萬": 10_000}
#: Counters (measure words) that follow a Chinese or Japanese numeral: a numeral is read
#: only before one of these, or after 第 (ordinal), so that 一起 ("together") is no number.
_CJK_COUNTERS = (
    "只个個岁歳次年天本位条條公里点點月号號日分小时時周週回匹人枚台杯頭羽件张張口家部辆輛双雙瓶碗份所座种種間间歩步つ"
)
_CJK_NUMBER = re.compile(
    rf"(第)?([〇零一二两兩三四五六七八九十百千万萬]+)(?=[{_CJK_COUNTERS}])|(第)([〇零一二两兩三四五六七八九十百千万萬]+)"
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
        if char in _CJK_DIGITS:
            if current is not None and current != 0:
                return None  # two digits in a row ("三四": "three or four")
            current = _CJK_DIGITS[char]
        else:
            scale = _CJK_SCALES[char]
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
        elif word in _ROMANCE:
            found.append(str(_ROMANCE[word]))
        elif word == "dozen":
            found.append("12")
        elif word == "couple" and i and words[i - 1] == "a":
            found.append("2")  # "a couple (of)": two, as a merge restates it ("a couple" / "two")
        elif word == "decade" and i and words[i - 1] in ("a", "one"):
            found.append("10")  # "a decade" / "ten years"
        elif word in INEXACT:
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
