"""Word-order matches (iii's memory-consolidate): when two texts with the same words may merge.

Two truths with exactly the same words in another order are found deterministically (the
lexical arm: Jaccard 1.0; ``reordered``). Some say one thing ("Prefers tea in the
morning" / "In the morning prefers tea"), others swap who does what ("Alice manages Bob" /
"Bob manages Alice", "Moved from Paris to Berlin" / "Moved from Berlin to Paris", "Showed the
kid the dog" / "Showed the dog the kid"). The rule judge never merges them (it reports them);
an LLM judge may confirm a merge, and the validator lets the merge through only for a
**moved phrase** (``moved_phrase``):

1. the two texts have the same words, counted (``tokens``: lower-cased,
   contractions expanded, punctuation dropped), in another order; and
2. one text is the other with ONE contiguous run of words moved as a whole to or from the
   front of the sentence (fronting), every other word keeping its order; a run moved
   inside the sentence is not taken, because there a phrase can change what it belongs
   to ("Alice from Paris married Bob" / "Alice married Bob from Paris"), so "Moved to
   Berlin from Paris" / "Moved from Paris to Berlin" stays apart too (conservative); and
3. that run starts with a preposition ("in the morning", "from Paris", "with Bob") or a
   word of time or frequency ("every Sunday", "twice a week", "often"), the kinds of phrase
   that say the same thing wherever they stand, because the preposition, not the position,
   carries the role; and
4. the run holds no word whose scope changes with its place (``LEXICON.scope_words``: "only",
   "not", "never", "just", "even", "always", ...: "Only eats fish on Fridays" / "Eats fish
   only on Fridays" differ).

A second form is an **equative turned round**: "X is Y" / "Y is X" with one "is" or "was"
in each text, where one side is a definite description that starts with a possessive
("my", "his", "her", "their", "our", "your") or "the" and neither side starts with "a",
"an" or a quantity word ("My favorite season is winter" / "Winter is my favorite season",
the one word-order pair in the MSC truths). Identity reads the same both ways; class
statements do not ("Dogs are animals", "A dog is an animal": plural copula or an
indefinite side, never taken).

A third form is a **list in another order**: the two texts are the same but for one
stretch (``list_reordered``), and that stretch is a list of items joined by a conjunction
(``LEXICON.conjunctions``: "and", "or", "e", "und", ...) and commas, the same items in
another order ("Likes hiking and swimming" / "Likes swimming and hiking"; "Runs on Mondays
and swims on Fridays" / "Swims on Fridays and runs on Mondays"). An item is kept whole,
so "Alice manages Bob and Carol" / "Bob manages Alice and Carol" is no list reordered (its
items differ), and "Alice manages Bob" has no list at all.

A fourth form is an **apposition turned round**: one text is "X, Y, ..." with a name or
description X and, between commas, its apposition Y, the other "Y X ..." with the commas
dropped and every other word in its order ("Camille, her sister, lives in Montreal" / "Her
sister Camille lives in Montreal"), where X or Y is a definite description (starts with
``LEXICON.definite``: "her sister", "the owner"), each at most ``MAX_APPOSITION_WORDS`` words,
neither holding a conjunction or a scope word, and what follows the second comma not
starting with a conjunction (so "Alice, Bob, and Carol came" is a list, never taken). Y
describes X, so the two say the same whichever stands first.

A swap of two participants needs two moves (or a moved run that starts with a noun), so it
never qualifies: "Alice manages Bob" / "Bob manages Alice" and the golden set's G13 stay
apart whatever a model says. Everything else the validator checks still applies (polarity,
names, numbers, dates, ended states, contrast). Pure; no database.
"""

from __future__ import annotations

import functools

from .languages import LEXICON
from .normalising import fold, tokens

#: Longest text (in words) compared; longer ones are never a moved phrase (cost is cubic).
MAX_WORDS = 60
#: Longest name or apposition (in words) an apposition turned round may move ("her older
#: sister", "the owner of the bakery" is over it and stays a refusal: conservative).
MAX_APPOSITION_WORDS = 4


def moved_phrase(a: str, b: str) -> bool:
    """Whether ``b`` is ``a`` with one phrase moved (see the module docstring); False for
    equal word orders, different words, or texts over ``MAX_WORDS`` words."""
    words_a, words_b = tuple(tokens(a)), tuple(tokens(b))
    return _moved(words_a, words_b) or _equative(words_a, words_b) or _apposition(a, b) or _apposition(b, a)


def _apposition(a: str, b: str) -> bool:
    """Whether ``b`` is ``a``'s "X, Y, rest" said "Y X rest" (the module docstring's fourth form)."""
    parts = fold(a).split(_COMMA, 2)
    if len(parts) != 3:
        return False
    x, y, rest = (tokens(part) for part in parts)
    if not x or not y or not rest or max(len(x), len(y)) > MAX_APPOSITION_WORDS:
        return False
    if rest[0] in LEXICON.conjunctions or (LEXICON.conjunctions | LEXICON.scope_words).intersection(x + y):
        return False
    if x[0] not in LEXICON.definite and y[0] not in LEXICON.definite:
        return False
    return tokens(b) == y + x + rest


def _equative(a: tuple[str, ...], b: tuple[str, ...]) -> bool:
    """Whether ``b`` is ``a``'s "X is Y" turned round into "Y is X" (module docstring)."""
    if a == b or sorted(a) != sorted(b) or LEXICON.scope_words.intersection(a):
        return False
    copulas = [i for i, w in enumerate(a) if w in LEXICON.copulas]
    if len(copulas) != 1:
        return False
    i = copulas[0]
    x, y = a[:i], a[i + 1 :]
    if not x or not y or b != y + (a[i],) + x:
        return False
    if x[0] in LEXICON.indefinite or y[0] in LEXICON.indefinite:
        return False
    return x[0] in LEXICON.definite or y[0] in LEXICON.definite


@functools.lru_cache(maxsize=4096)
def _moved(a: tuple[str, ...], b: tuple[str, ...]) -> bool:
    if a == b or sorted(a) != sorted(b) or len(a) > MAX_WORDS:
        return False
    n = len(a)
    for i in range(n):
        if a[i] not in LEXICON.prepositions and a[i] not in LEXICON.time_words:
            continue
        for j in range(i + 1, n + 1):
            run = a[i:j]
            if LEXICON.scope_words.intersection(run):
                break  # a longer run from i holds the same word
            rest = a[:i] + a[j:]
            # Fronting only: the run leaves the front (i == 0) or goes to it (k == 0).
            for k in (0,) if i else range(1, len(rest) + 1):
                if rest[:k] + run + rest[k:] == b:
                    return True
    return False


def list_reordered(a: str, b: str) -> bool:
    """Whether ``b`` is ``a`` with the items of one list in another order (module
    docstring): the words before and after the list are equal, and the list's items,
    split at conjunctions and commas, are the same items counted. False for equal word
    orders, different words, or no conjunction in the stretch that differs."""
    words_a, words_b = _list_words(a), _list_words(b)
    if words_a == words_b or sorted(words_a) != sorted(words_b):
        return False
    prefix = 0
    while words_a[prefix] == words_b[prefix]:
        prefix += 1
    suffix = 0
    while words_a[-1 - suffix] == words_b[-1 - suffix]:
        suffix += 1
    # The stretch that differs may start or end inside an item ("Likes green tea and green
    # apples" / "Likes green apples and green tea" differ from "tea"): try it widened.
    for start in range(prefix, -1, -1):
        for end in range(suffix, -1, -1):
            middle_a, middle_b = words_a[start : len(words_a) - end], words_b[start : len(words_b) - end]
            if any(w in LEXICON.conjunctions for w in middle_a) and sorted(_items(middle_a)) == sorted(
                _items(middle_b)
            ):
                return True
    return False


#: The comma, kept as a word by ``_list_words``: it parts the items of a list.
_COMMA = ","
_SEPARATORS = LEXICON.conjunctions | {_COMMA}


def _list_words(text: str) -> list[str]:
    """The tokens of ``text`` with each comma kept as a word of its own."""
    return [w for part in fold(text).split(_COMMA) for w in (*tokens(part), _COMMA)][:-1]


def _items(words: list[str]) -> list[tuple[str, ...]]:
    """The items of a list: the runs of ``words`` between separators (empty runs dropped)."""
    items: list[tuple[str, ...]] = []
    current: list[str] = []
    for word in words:
        if word in _SEPARATORS:
            if current:
                items.append(tuple(current))
            current = []
        else:
            current.append(word)
    if current:
        items.append(tuple(current))
    return items


def side_by_side(content: str, a: str, b: str) -> bool:
    """Whether ``content`` holds the whole of ``a`` and the whole of ``b``, each as a run of
    its words (``tokens``) in its own order, the two runs apart ("Is vegetarian and does not
    eat meat" holds "Is vegetarian" and "Does not eat meat"): a merged text that restates
    two members side by side joins them, it does not fuse one statement out of them. Two
    texts with the same words count once (the runs must not overlap)."""
    words, run_a, run_b = tokens(content), tokens(a), tokens(b)
    if not run_a or not run_b:
        return False
    starts_a, starts_b = _runs_at(words, run_a), _runs_at(words, run_b)
    return any(i + len(run_a) <= j or j + len(run_b) <= i for i in starts_a for j in starts_b)


def _runs_at(words: list[str], run: list[str]) -> list[int]:
    """Where ``run`` starts in ``words`` (indices, in order)."""
    return [i for i in range(len(words) - len(run) + 1) if words[i : i + len(run)] == run]
