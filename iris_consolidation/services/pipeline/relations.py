"""What two truths have to do with each other, by their words (``text``): one thing, related,
one covering the other, names in another order; pure functions over strings and
``MemberView``s, used by ``validation``."""

from __future__ import annotations

from collections.abc import Iterable

from ... import text
from ...llm.base import MemberView
from ...text.attributes import attributes_of


def quoted(words: Iterable[str]) -> str:
    return ", ".join(repr(w) for w in sorted(words))


def role_swap(a: str, b: str, *, known: frozenset[str]) -> bool:
    names_a = text.proper_names(a, known=known)
    names_b = text.proper_names(b, known=known)
    return (
        len(names_a) > 1
        and sorted(names_a) == sorted(names_b)
        and names_a != names_b
        and set(text.tokens(a)) == set(text.tokens(b))
        and not text.moved_phrase(a, b)  # "Met Alice in Paris" / "In Paris met Alice"
        and not text.list_reordered(a, b)  # "Visited Alice and Bob" / "Visited Bob and Alice"
    )


def reordered(member: str, content: str) -> bool:
    """Whether ``content`` uses ``member``'s words in an order that may change who does what:
    not a phrase moved to the front, nor a list's items in another order (``text.wordorder``)."""
    return (
        text.reordered(member, content)
        and not text.moved_phrase(member, content)
        and not text.list_reordered(member, content)
    )


def negation_words(a: str, b: str) -> str:
    """The negation words that tell ``a`` from ``b``, quoted ("'not' in only one of them")."""
    diff = text.negations(a) ^ text.negations(b)
    return quoted(diff) if diff else "a negative word in only one of them"


def both_own(a: set[str], b: set[str]) -> bool:
    """Whether each side has a name (number, date) the other lacks: "Sister Ines" / "Brother
    Hugo" may be two people; "John, with Anthony" / "John" only adds one."""
    return bool(a - b) and bool(b - a)


def share(a: str, b: str, *, known: frozenset[str]) -> bool:
    """Whether ``a`` and ``b`` share a content word or a detail."""
    if text.details(a, known=known) & text.details(b, known=known):
        return True
    if text.share_script_text(a, b):
        return True
    stems_b = text.content_stems(b)
    return any(text.same_stem(x, y) for x in text.content_stems(a) for y in stems_b)


def one_thing(a: str, b: str, *, known: frozenset[str]) -> bool:
    """Whether ``a`` and ``b`` speak of one thing: a content word, a detail, a frame ("Lives in
    Lisbon" / "Moved to Berlin") or an attribute of the person in common (``attributes_of``:
    "Is single" / "Got engaged to Ana" are both the relationship)."""
    if share(a, b, known=known) or text.share_frame(a, b):
        return True
    return bool(attributes_of(a) & attributes_of(b))


def related(old: str, new: str, *, known: frozenset[str]) -> bool:
    """Whether ``new`` may be about ``old``'s attribute (``one_thing``). A text in a script without spaces
    counts as related: one character in common says too little either way ("住在上海" /
    "搬到了杭州" share none and are one attribute)."""
    if text.no_space_runs(old) or text.no_space_runs(new):
        return True
    return one_thing(old, new, known=known)


def covers(a: MemberView, b: MemberView, *, known: frozenset[str]) -> bool:
    """Whether ``a``'s text keeps every detail and content word of ``b``."""
    details = text.details(b.content, known=known)
    if not all(text.contains_detail(a.content, d) for d in details):
        return False
    return not text.lost_words(b.content, a.content, known=known)


def defines(a: str, b: str) -> bool:
    """Whether one of ``a`` and ``b`` may define the other in other words, though they share no
    word: both speak of one attribute of the person (``attributes_of``: "Is vegetarian" / "Does
    not eat meat" are both the diet) and exactly one of them is negative (``text.polarity_key``).
    A negative statement names no value of the attribute, it rules some out, so beside a
    positive one it is a definition or a contradiction; a contradiction mostly negates the
    other's own word, which the caller refuses first, and the rest is what the second look
    is asked (the pair's signals stay). Two positive statements of one
    attribute may be two of its values ("Is vegetarian" / "Follows a keto diet", "Has a dog" /
    "Feeds the cat"), and a negative one of another attribute is another fact ("Is vegetarian"
    / "Does not own a car"). Measured on the labelled PersonaChat pairs that share no word
    (docs/benchmarks.md, "Measured constants"): the negation shape alone holds far more
    different pairs than same ones, the attribute in common few of either."""
    if text.polarity_key(a) == text.polarity_key(b):
        return False
    return bool(attributes_of(a) & attributes_of(b))
