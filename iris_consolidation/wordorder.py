"""Word-order matches (iii's memory-consolidate): when two texts with the same words may merge.

Two truths with exactly the same words in another order are found deterministically (the
lexical arm: Jaccard 1.0; ``textfacts.reordered``). Some say one thing ("Prefers tea in the
morning" / "In the morning prefers tea"), others swap who does what ("Alice manages Bob" /
"Bob manages Alice", "Moved from Paris to Berlin" / "Moved from Berlin to Paris", "Showed the
kid the dog" / "Showed the dog the kid"). The rule judge never merges them (it reports them);
an LLM judge may confirm a merge, and the validator lets the merge through only for a
**moved phrase** (``moved_phrase``):

1. the two texts have the same words, counted (``textfacts.tokens``: lower-cased,
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
4. the run holds no word whose scope changes with its place (``SCOPE_WORDS``: "only",
   "not", "never", "just", "even", "always", ...: "Only eats fish on Fridays" / "Eats fish
   only on Fridays" differ).

A second form is an **equative turned round**: "X is Y" / "Y is X" with one "is" or "was"
in each text, where one side is a definite description that starts with a possessive
("my", "his", "her", "their", "our", "your") or "the" and neither side starts with "a",
"an" or a quantity word ("My favorite season is winter" / "Winter is my favorite season",
the one word-order pair in the MSC truths). Identity reads the same both ways; class
statements do not ("Dogs are animals", "A dog is an animal": plural copula or an
indefinite side, never taken).

A swap of two participants needs two moves (or a moved run that starts with a noun), so it
never qualifies: "Alice manages Bob" / "Bob manages Alice" and the golden set's G13 stay
apart whatever a model says. Everything else the validator checks still applies (polarity,
names, numbers, dates, ended states, contrast). Pure; no database.
"""

from __future__ import annotations

import functools

from . import textfacts

#: Words that may start a moved run: English prepositions (the role travels with them).
PREPOSITIONS = frozenset(
    """about above across after against along amid among around at before behind below beneath beside
    besides between beyond by despite during for from in inside into near of off on onto out outside over
    past per since through throughout till to toward towards under until unto up upon via with within""".split()
)
#: Words of time or frequency that may start a moved run ("every Sunday", "twice a week").
TIME_WORDS = frozenset(
    """every each daily weekly monthly yearly annually nightly hourly often usually sometimes occasionally
    regularly frequently rarely seldom once twice today tomorrow yesterday tonight recently lately nowadays
    mornings evenings afternoons nights weekends weekdays""".split()
)
#: Words whose meaning depends on where they stand (focus, negation, quantity): a run that
#: holds one is never a harmless move.
SCOPE_WORDS = frozenset(
    """only just even not no never always almost nearly hardly barely scarcely also too either neither nor
    all both mostly mainly merely solely especially""".split()
)
#: Copulas of an equative ("X is Y"): singular only, plural ones state classes.
COPULAS = frozenset({"is", "was"})
#: Words that start a definite description (the side that makes "X is Y" an identity).
DEFINITE = frozenset({"the", "my", "his", "her", "their", "our", "your"})
#: Words that start an indefinite or quantified side (a class statement, not an identity).
INDEFINITE = frozenset({"a", "an", "some", "any", "many", "most", "few", "several", "all", "every", "each", "no"})
#: Longest text (in words) compared; longer ones are never a moved phrase (cost is cubic).
MAX_WORDS = 60


def moved_phrase(a: str, b: str) -> bool:
    """Whether ``b`` is ``a`` with one phrase moved (see the module docstring); False for
    equal word orders, different words, or texts over ``MAX_WORDS`` words."""
    words_a, words_b = tuple(textfacts.tokens(a)), tuple(textfacts.tokens(b))
    return _moved(words_a, words_b) or _equative(words_a, words_b)


def _equative(a: tuple[str, ...], b: tuple[str, ...]) -> bool:
    """Whether ``b`` is ``a``'s "X is Y" turned round into "Y is X" (module docstring)."""
    if a == b or sorted(a) != sorted(b) or SCOPE_WORDS.intersection(a):
        return False
    copulas = [i for i, w in enumerate(a) if w in COPULAS]
    if len(copulas) != 1:
        return False
    i = copulas[0]
    x, y = a[:i], a[i + 1 :]
    if not x or not y or b != y + (a[i],) + x:
        return False
    if x[0] in INDEFINITE or y[0] in INDEFINITE:
        return False
    return x[0] in DEFINITE or y[0] in DEFINITE


@functools.lru_cache(maxsize=4096)
def _moved(a: tuple[str, ...], b: tuple[str, ...]) -> bool:
    if a == b or sorted(a) != sorted(b) or len(a) > MAX_WORDS:
        return False
    n = len(a)
    for i in range(n):
        if a[i] not in PREPOSITIONS and a[i] not in TIME_WORDS:
            continue
        for j in range(i + 1, n + 1):
            run = a[i:j]
            if SCOPE_WORDS.intersection(run):
                break  # a longer run from i holds the same word
            rest = a[:i] + a[j:]
            # Fronting only: the run leaves the front (i == 0) or goes to it (k == 0).
            for k in ((0,) if i else range(1, len(rest) + 1)):
                if rest[:k] + run + rest[k:] == b:
                    return True
    return False
