"""The validator: every verdict of every judge passes here before anything is written.

``validate(request, actions, ...)`` splits the judge's actions into accepted ones and
rejections, each rejection with a ``Code`` and a reason from the constants below. It is
pure: it reads only the request (members as the judge saw them) and the limits passed in.

Two tiers, checked in this order for each action:

**Invariants** refuse outright, whatever the judge and whatever the risk policy. They
need no trust in any model and alone keep a hostile one harmless:
- a reason is present; ids only from this cluster; no id twice in one action; a member
  takes part in one action at most (no duplicate actions, no supersede chains);
- a member at the generation limit takes part in no action; a protected member (pinned,
  created by the user or the assistant) is never retired or reworded: it may survive a
  merge whose content is exactly its text, and at most one protected member per merge;
- merge: two or more members, content non-empty and at most ``max_length`` characters,
  and **nothing lost**: every number (by value: "2" = "two"), date and name of every
  source is in the content; every content word of every source is there or covered by
  a synonym the judge states in its reason ("source word = content word"); a negation of
  a source is kept (as a word, a stated synonym, or a negative sentence); the content
  adds no number, date, name, negation or content word that no source stated, and uses
  no source's words in another order that swaps who does what (a list's items in another
  order, or a phrase moved to the front, swap nothing); a name, place or identifier may be
  reworded by a synonym the judge states whose one side stands in the source and the other
  in the content ("IBM = International Business Machines");
- supersede: at least one old member, never the new one; each old member was stated
  before the new one (``created_at``): the statement made last wins.

**Signals** are the word-level readings that a pair of truths may be two facts: negation
differs, different names, numbers or dates, one reports a change or an ended span and
the other does not, the same frame with different fillers (a contrast, or one frame
filled twice), members that share only a name, a chain (three or more members, two of
which share nothing), a supersede with no change word, a supersede whose new member shares
no word, name or number with an old one, or several old members that are different
statements. With ``refuse_signals`` (the rule judge, the pre-pass, and the ``refuse`` risk
policy) the first signal refuses the action, as the invariants do;
otherwise the action is accepted with its ``signals`` attached, for the second look
(``judging``) to confirm or withdraw. Each signal's message is in plain words, naming
the truths by alias and quoting their differing words.

The per-run retirement cap and freshness need the database; ``merging`` enforces them.
A rejected action is recorded and the members it named are kept as they were.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from enum import StrEnum

from ... import text
from ...choices import MergeProtection
from ...llm.base import Action, JudgeRequest, MemberView, Signal

NO_REASON = "The action gives no reason."
UNKNOWN_ID = "The action names {alias!r}, which is not a member of this cluster."
REPEATED_ID = "The action names {alias!r} more than once."
ALREADY_USED = "{alias!r} is already named by an earlier action; a member takes part in one action at most."
TOO_FEW = "A merge needs at least two members."
EMPTY_CONTENT = "The merged content is empty."
TOO_LONG = "The merged content has {length} characters; the limit is {limit}."
PROTECTED_RETIRED = (
    "{alias!r} is protected (pinned, created by the user or the assistant, or at the maximum generation) "
    "and cannot be retired or reworded."
)
AT_GENERATION_LIMIT = "{alias!r} is at the generation limit ({limit}) and takes part in no further consolidation."
TWO_PROTECTED = "A merge may keep at most one protected member; {aliases} are all protected."
LOST_DETAIL = "The merged content drops {detail!r}, found in {alias!r}."
INVENTED_DETAIL = "The merged content adds {detail!r}, which no member states."
INVENTED_WORDS = "The merged content says {words}, which no member states."
LOST_NEGATION = (
    "The merged content drops the negation {words} of {alias!r}; keep it, or state the synonym in the reason "
    '("word = synonym").'
)
INVENTED_NEGATION = "The merged content says {words}, a negation that no member states."
POLARITY_DIFFERS = "{a!r} and {b!r} differ in negation; a statement never merges with its opposite."
#: Appended to a signal's message: the words an operator (and the second look) should read.
DIFFERING_WORDS = " The words that differ: {words}."
NAMES_DIFFER = "{a!r} and {b!r} name different people or things ({names}); they stay apart."
NUMBERS_DIFFER = "{a!r} and {b!r} give different numbers ({numbers}); they stay apart."
ROLE_SWAP = "{a!r} and {b!r} use the same words with names in another order (a role swap); they stay apart."
CHAINED = "{a!r} and {b!r} share no word or detail; a merge of three or more members must not chain unrelated facts."
REORDERED = "The merged content uses the words of {alias!r} in another order, which can swap who does what."
TIME_SPAN_DIFFERS = "{a!r} and {b!r} cover different spans of time (one says its state ended); they stay apart."
CONTRAST = "{a!r} says {words_a} where {b!r} says {words_b} in the same frame; distinct facts stay apart."
DETAILS_ONLY = (
    "{a!r} and {b!r} share only {details} and no word of what they say about it; two facts about one name stay "
    'apart (if they restate each other, state the synonyms in the reason: "word = synonym").'
)
STATE_CHANGED = (
    "{a!r} reports a change ({marker}) and {b!r} does not; a change is superseded or kept, never merged away."
)
LOST_WORDS = (
    "The merged content drops {words}, stated by {alias!r}; keep them, or state each synonym in the reason "
    '("word = synonym").'
)
SUPERSEDE_SELF = "A supersede cannot retire its own 'new' member."
SUPERSEDE_EMPTY = "A supersede needs at least one 'old' member."
SUPERSEDE_BACKWARDS = "{old!r} was stated after {new!r}; the newer statement never retires in favour of an older one."
SUPERSEDE_NO_CHANGE = (
    "{new!r} does not say that anything changed (e.g. moved, now, no longer); {old!r} stays as a fact of its own."
)
SUPERSEDE_UNRELATED = (
    "{new!r} shares no word, name or number with {old!r}; a later truth about another attribute retires nothing."
)
SUPERSEDE_MIXED = (
    "{a!r} and {b!r} are different statements; one change supersedes one statement (and its restatements), "
    "not several facts at once."
)
MERGED_CONTENT = "merged content"

# What a signal says to the second look and the operator: the observation, in plain
# words, with no conclusion (the refusal messages above state the rule judge's).
CONCERN_POLARITY = "{a} and {b} differ in negation: {words} stands in only one of them."
CONCERN_NAMES = "{a} and {b} name different people, places or things: {names}."
CONCERN_NUMBERS = "{a} and {b} give different numbers: {numbers}."
CONCERN_DATES = "{a} and {b} give different days or months: {names}."
CONCERN_ROLE_SWAP = "{a} and {b} use the same words with the names in another order."
CONCERN_TIME_SPAN = "{a} says a state ended ({marker}) and {b} does not."
CONCERN_STATE_CHANGED = "{a} reports a change ({marker}) and {b} does not."
CONCERN_CONTRAST = "{a} says {words_a} where {b} says {words_b}; their other words are the same."
CONCERN_CHAINED = "{a} and {b} share no word, name or number."
CONCERN_DETAILS_ONLY = "{a} and {b} share only {details}."
CONCERN_NO_CHANGE = "{new} does not say that anything changed or that {old} was wrong."
CONCERN_UNRELATED = "{new} shares no word, name or number with {old}: it may be about another attribute."
CONCERN_MIXED = "{a} and {b}, both to be retired, say different things."
#: A signal as the checks find it: (code, refusal message, concern).
Finding = tuple["Code", str, str]


class Code(StrEnum):
    """Stable code of each kind of refusal or signal, stored with the rejection.

    Code, not message text, is what other modules read (cursor, stops, counts by kind), so
    the wording of a message can change freely. ``INVARIANTS`` and ``SIGNALS`` sort them.
    """

    NO_REASON = "no_reason"
    UNKNOWN_ID = "unknown_id"
    REPEATED_ID = "repeated_id"
    ALREADY_USED = "already_used"
    TOO_FEW = "too_few"
    EMPTY_CONTENT = "empty_content"
    TOO_LONG = "too_long"
    PROTECTED = "protected"
    GENERATION_LIMIT = "generation_limit"
    TWO_PROTECTED = "two_protected"
    LOST_DETAIL = "lost_detail"
    LOST_NEGATION = "lost_negation"
    INVENTED_DETAIL = "invented_detail"
    INVENTED_WORDS = "invented_words"
    INVENTED_NEGATION = "invented_negation"
    POLARITY = "polarity"
    NAMES_DIFFER = "names_differ"
    NUMBERS_DIFFER = "numbers_differ"
    DATES_DIFFER = "dates_differ"
    ROLE_SWAP = "role_swap"
    CHAINED = "chained"
    REORDERED = "reordered"
    TIME_SPAN = "time_span"
    CONTRAST = "contrast"
    DETAILS_ONLY = "details_only"
    STATE_CHANGED = "state_changed"
    LOST_WORDS = "lost_words"
    SUPERSEDE_SELF = "supersede_self"
    SUPERSEDE_EMPTY = "supersede_empty"
    SUPERSEDE_BACKWARDS = "supersede_backwards"
    SUPERSEDE_NO_CHANGE = "supersede_no_change"
    SUPERSEDE_MIXED = "supersede_mixed"
    SUPERSEDE_UNRELATED = "supersede_unrelated"
    # Written by ``judging`` after the second look (``llm/second_look.py``).
    SECOND_LOOK_WITHDRAWN = "second_look_withdrawn"
    SECOND_LOOK_MISSING = "second_look_missing"
    SECOND_LOOK_FAILED = "second_look_failed"
    # Written by ``merging`` (they need the database), listed here so that codes live in one place.
    STALE_MEMBER = "stale_member"
    CAP_REACHED = "cap_reached"


#: Codes of the signals: readings that send a model's action to the second look (and
#: refuse a rule judge's). Every other code of a validation refusal is an invariant.
SIGNALS = frozenset(
    {
        Code.POLARITY,
        Code.NAMES_DIFFER,
        Code.NUMBERS_DIFFER,
        Code.DATES_DIFFER,
        Code.ROLE_SWAP,
        Code.TIME_SPAN,
        Code.STATE_CHANGED,
        Code.CONTRAST,
        Code.CHAINED,
        Code.DETAILS_ONLY,
        Code.SUPERSEDE_NO_CHANGE,
        Code.SUPERSEDE_MIXED,
        Code.SUPERSEDE_UNRELATED,
    }
)
#: Codes a second look writes for an action it did not confirm.
SECOND_LOOK = frozenset({Code.SECOND_LOOK_WITHDRAWN, Code.SECOND_LOOK_MISSING, Code.SECOND_LOOK_FAILED})
#: Codes of the invariants: refused whatever the judge and the risk policy.
INVARIANTS = frozenset(Code) - SIGNALS - SECOND_LOOK - {Code.STALE_MEMBER, Code.CAP_REACHED}


#: A refusal or a signal as the checks return it: (code, message).
Refusal = tuple[Code, str]


@dataclass(frozen=True, kw_only=True)
class Rejection:
    """An action the validator (or the second look) refused, and why."""

    action: Action
    code: Code
    reason: str

    def as_dict(self) -> dict[str, object]:
        return {"action": self.action.as_wire(), "code": str(self.code), "reason": self.reason}


@dataclass(frozen=True, kw_only=True)
class ValidationResult:
    """``accepted`` in order, each with its ``signals`` (empty under ``refuse_signals``)."""

    accepted: tuple[Action, ...]
    rejections: tuple[Rejection, ...]

    @property
    def flagged(self) -> tuple[Action, ...]:
        """The accepted actions that carry signals (the second look's work)."""
        return tuple(a for a in self.accepted if a.signals)


def _quoted(words: Iterable[str]) -> str:
    return ", ".join(repr(w) for w in sorted(words))


def _role_swap(a: str, b: str, *, known: frozenset[str]) -> bool:
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


def _reordered(member: str, content: str) -> bool:
    """Whether ``content`` uses ``member``'s words in an order that may change who does what:
    not a phrase moved to the front, nor a list's items in another order (``text.wordorder``)."""
    return (
        text.reordered(member, content)
        and not text.moved_phrase(member, content)
        and not text.list_reordered(member, content)
    )


def _negation_words(a: str, b: str) -> str:
    """The negation words that tell ``a`` from ``b``, quoted ("'not' in only one of them")."""
    diff = text.negations(a) ^ text.negations(b)
    return _quoted(diff) if diff else "a negative word in only one of them"


def _both_own(a: set[str], b: set[str]) -> bool:
    """Whether each side has a name (number, date) the other lacks: "Sister Ines" / "Brother
    Hugo" may be two people; "John, with Anthony" / "John" only adds one."""
    return bool(a - b) and bool(b - a)


def _pair_signals(a: MemberView, b: MemberView, *, known: frozenset[str]) -> list[Finding]:
    """What a word-level reading finds risky in merging ``a`` with ``b`` (one per kind)."""
    found: list[Finding] = []
    x, y = a.alias, b.alias
    if text.polarity_key(a.content) != text.polarity_key(b.content):
        words = _negation_words(a.content, b.content)
        found.append((Code.POLARITY, POLARITY_DIFFERS.format(a=x, b=y), CONCERN_POLARITY.format(a=x, b=y, words=words)))
    names_a = text.names_not_dates(a.content, known=known)
    names_b = text.names_not_dates(b.content, known=known)
    if _both_own(names_a, names_b):
        names = ", ".join(sorted(names_a ^ names_b))
        found.append(
            (Code.NAMES_DIFFER, NAMES_DIFFER.format(a=x, b=y, names=names), CONCERN_NAMES.format(a=x, b=y, names=names))
        )
    if _role_swap(a.content, b.content, known=known):
        found.append((Code.ROLE_SWAP, ROLE_SWAP.format(a=x, b=y), CONCERN_ROLE_SWAP.format(a=x, b=y)))
    if text.time_ended(a.content) != text.time_ended(b.content):
        ended, other = (a, b) if text.time_ended(a.content) else (b, a)
        marker = repr(text.ended_marker(ended.content))
        concern = CONCERN_TIME_SPAN.format(a=ended.alias, b=other.alias, marker=marker)
        found.append((Code.TIME_SPAN, TIME_SPAN_DIFFERS.format(a=x, b=y), concern))
    if text.reports_change(a.content) != text.reports_change(b.content):
        changed, other = (a, b) if text.reports_change(a.content) else (b, a)
        marker = repr(text.change_marker(changed.content))
        message = STATE_CHANGED.format(a=changed.alias, b=other.alias, marker=marker)
        found.append(
            (Code.STATE_CHANGED, message, CONCERN_STATE_CHANGED.format(a=changed.alias, b=other.alias, marker=marker))
        )
    nums_a = text.numbers(a.content)
    nums_b = text.numbers(b.content)
    if _both_own(nums_a, nums_b):
        numbers = ", ".join(sorted(nums_a ^ nums_b))
        message = NUMBERS_DIFFER.format(a=x, b=y, numbers=numbers)
        found.append((Code.NUMBERS_DIFFER, message, CONCERN_NUMBERS.format(a=x, b=y, numbers=numbers)))
    dates_a, dates_b = text.dates(a.content), text.dates(b.content)
    if _both_own(dates_a, dates_b):
        names = ", ".join(sorted(dates_a ^ dates_b))
        message = NAMES_DIFFER.format(a=x, b=y, names=names)
        found.append((Code.DATES_DIFFER, message, CONCERN_DATES.format(a=x, b=y, names=names)))
    swapped = text.contrast(a.content, b.content, known=known) or text.parallel(
        a.content, b.content, known=known
    )
    if swapped:
        words_a = _quoted(text.words_of_stems(a.content, swapped[0]) or swapped[0])
        words_b = _quoted(text.words_of_stems(b.content, swapped[1]) or swapped[1])
        message = CONTRAST.format(a=x, b=y, words_a=words_a, words_b=words_b)
        found.append((Code.CONTRAST, message, CONCERN_CONTRAST.format(a=x, b=y, words_a=words_a, words_b=words_b)))
    return found


def _content_invariant(
    content: str, members: list[MemberView], *, reason: str, known: frozenset[str]
) -> Refusal | None:
    """Why ``content`` loses or invents something of ``members``, or None (``reason`` is
    the judge's, where it may state synonyms: ``text.equivalences``)."""
    # Phrases of the sources that a synonym the judge states carries into the content:
    # they may hold a number ("every six months" = "twice a year") or a negation.
    covered = text.stated_cover(content, reason)
    for member in members:
        # A name, place or identifier reworded by a stated synonym whose one side stands
        # in this member and the other in the content ("IBM" = "International Business Machines").
        renamed = text.stated_between(member.content, content, reason)
        for detail in sorted(text.details(member.content, known=known)):
            if text.contains_detail(content, detail):
                continue
            if text.is_number(detail) and text.covered_by(detail, covered):
                continue
            if not text.is_number(detail) and _named_in(detail, renamed):
                continue
            return Code.LOST_DETAIL, LOST_DETAIL.format(detail=detail, alias=member.alias)
        lost = text.lost_negations(member.content, content, covered=covered)
        if lost:
            return Code.LOST_NEGATION, LOST_NEGATION.format(words=_quoted(lost), alias=member.alias)
        if _role_swap(member.content, content, known=known):
            return Code.ROLE_SWAP, ROLE_SWAP.format(a=member.alias, b=MERGED_CONTENT)
        if _reordered(member.content, content):
            return Code.REORDERED, REORDERED.format(alias=member.alias)
        lost = text.lost_words(member.content, content, reason=reason, known=known)
        if lost:
            # The operator reads the member's words, not their stems ("hospice", not "hospic").
            words = [w for w in lost if text.no_space_runs(w)] + text.words_of_stems(member.content, lost)
            return Code.LOST_WORDS, LOST_WORDS.format(words=_quoted(words or lost), alias=member.alias)
    sources = [m.content for m in members]
    invented = text.invented_negations(content, sources, covered=text.vouched(reason, sources))
    if invented:
        return Code.INVENTED_NEGATION, INVENTED_NEGATION.format(words=_quoted(invented))
    said = set().union(*(text.details(m.content, known=known) for m in members))
    renamed = [p for m in members for p in text.stated_between(content, m.content, reason)]
    for detail in sorted(text.details(content, known=known) - said):
        if any(text.contains_detail(m.content, detail) for m in members):
            continue
        if not text.is_number(detail) and _named_in(detail, renamed):
            continue
        return Code.INVENTED_DETAIL, INVENTED_DETAIL.format(detail=detail)
    vouched = text.vouched(reason, sources)
    unstated = {w for w in text.unstated_stems(content, sources) if not text.covered_by(w, vouched)}
    if unstated:
        quoted = _quoted(text.words_of_stems(content, unstated) or unstated)
        return Code.INVENTED_WORDS, INVENTED_WORDS.format(words=quoted)
    return None


def _named_in(detail: str, phrases: list[str]) -> bool:
    """Whether the name ``detail`` stands in one of ``phrases`` (a side of a stated synonym)."""
    return any(text.contains_detail(phrase, detail) for phrase in phrases)


def _content_signals(content: str, members: list[MemberView]) -> list[Finding]:
    """What a word-level reading finds risky in ``content`` standing for ``members``."""
    found: list[Finding] = []
    for member in members:
        x = member.alias
        if text.time_ended(member.content) != text.time_ended(content):
            ended, other = (x, MERGED_CONTENT) if text.time_ended(member.content) else (MERGED_CONTENT, x)
            marker = repr(text.ended_marker(member.content if ended == x else content))
            subject = f"the {ended}" if ended == MERGED_CONTENT else ended
            concern = CONCERN_TIME_SPAN.format(a=subject, b=other, marker=marker)
            found.append((Code.TIME_SPAN, TIME_SPAN_DIFFERS.format(a=x, b=MERGED_CONTENT), concern))
        if text.reports_change(member.content) and not text.reports_change(content):
            marker = repr(text.change_marker(member.content))
            message = STATE_CHANGED.format(a=x, b=MERGED_CONTENT, marker=marker)
            concern = CONCERN_STATE_CHANGED.format(a=x, b=f"the {MERGED_CONTENT}", marker=marker)
            found.append((Code.STATE_CHANGED, message, concern))
    return found


def _merge_invariant(
    action: Action, request: JudgeRequest, *, max_length: int, known: frozenset[str]
) -> Refusal | None:
    members = [request.member(alias) for alias in action.ids]
    if len(members) < 2:
        return Code.TOO_FEW, TOO_FEW
    protection = MergeProtection.of_members(members)
    if not protection.allowed:
        return Code.TWO_PROTECTED, TWO_PROTECTED.format(aliases=", ".join(protection.protected))
    content = action.content.strip()
    if not content:
        return Code.EMPTY_CONTENT, EMPTY_CONTENT
    if len(content) > max_length:
        return Code.TOO_LONG, TOO_LONG.format(length=len(content), limit=max_length)
    keeper = protection.keeper
    if keeper is not None and content != request.member(keeper).content.strip():
        return Code.PROTECTED, PROTECTED_RETIRED.format(alias=keeper)
    return _content_invariant(content, members, reason=action.reason, known=known | text.known_names([content]))


def _merge_signals(action: Action, request: JudgeRequest, *, known: frozenset[str]) -> list[Finding]:
    members = [request.member(alias) for alias in action.ids]
    found: list[Finding] = []
    for i, a in enumerate(members):
        for b in members[i + 1 :]:
            x, y = a.alias, b.alias
            found.extend(_pair_signals(a, b, known=known))
            if len(members) > 2 and not _share(a.content, b.content, known=known):
                found.append((Code.CHAINED, CHAINED.format(a=x, b=y), CONCERN_CHAINED.format(a=x, b=y)))
            only = text.shares_only_details(a.content, b.content, reason=action.reason, known=known)
            if only:
                details = _quoted(only)
                message = DETAILS_ONLY.format(a=x, b=y, details=details)
                found.append((Code.DETAILS_ONLY, message, CONCERN_DETAILS_ONLY.format(a=x, b=y, details=details)))
    found.extend(_content_signals(action.content.strip(), members))
    return found


def _share(a: str, b: str, *, known: frozenset[str]) -> bool:
    """Whether ``a`` and ``b`` share a content word or a detail."""
    if text.details(a, known=known) & text.details(b, known=known):
        return True
    if text.share_script_text(a, b):
        return True
    stems_b = text.content_stems(b)
    return any(text.same_stem(x, y) for x in text.content_stems(a) for y in stems_b)


def _supersede_invariant(action: Action, request: JudgeRequest) -> Refusal | None:
    """Why the supersede cannot stand whatever the judge, or None: the newer statement
    is the one kept (by ``created_at``), and no protected member retires."""
    if not action.old:
        return Code.SUPERSEDE_EMPTY, SUPERSEDE_EMPTY
    if action.new in action.old:
        return Code.SUPERSEDE_SELF, SUPERSEDE_SELF
    new = request.member(action.new)
    for alias in action.old:
        old = request.member(alias)
        if old.protected:
            return Code.PROTECTED, PROTECTED_RETIRED.format(alias=alias)
        if old.created_at >= new.created_at:
            return Code.SUPERSEDE_BACKWARDS, SUPERSEDE_BACKWARDS.format(old=alias, new=action.new)
    return None


def _supersede_signals(action: Action, request: JudgeRequest, *, known: frozenset[str]) -> list[Finding]:
    """A supersede whose new member states no change, whose new member shares no word, name
    or number with an old one (another attribute), or whose old members are different
    statements: one of each two must hold every content word and detail of the other,
    so that a change about honey in tea does not retire "Drinks tea every afternoon"."""
    found: list[Finding] = []
    new = request.member(action.new)
    olds = ", ".join(action.old)
    if not text.states_change(new.content):
        message = SUPERSEDE_NO_CHANGE.format(new=action.new, old=olds)
        found.append((Code.SUPERSEDE_NO_CHANGE, message, CONCERN_NO_CHANGE.format(new=action.new, old=olds)))
    members = [request.member(alias) for alias in action.old]
    for i, a in enumerate(members):
        for b in members[i + 1 :]:
            if _pair_signals(a, b, known=known) or not (_covers(a, b, known=known) or _covers(b, a, known=known)):
                message = SUPERSEDE_MIXED.format(a=a.alias, b=b.alias)
                found.append((Code.SUPERSEDE_MIXED, message, CONCERN_MIXED.format(a=a.alias, b=b.alias)))
    # A change word says that something changed, not that it is the old truth's attribute:
    # "Actually, the gym closes at nine" retires nothing of "Is a junior designer".
    unrelated = [m.alias for m in members if not _related(m.content, new.content, known=known)]
    if unrelated:
        olds = ", ".join(unrelated)
        message = SUPERSEDE_UNRELATED.format(new=action.new, old=olds)
        found.append((Code.SUPERSEDE_UNRELATED, message, CONCERN_UNRELATED.format(new=action.new, old=olds)))
    return found


def _related(old: str, new: str, *, known: frozenset[str]) -> bool:
    """Whether ``new`` may be about ``old``'s attribute: they share a content word, a detail
    or a frame ("Lives in Lisbon" / "Moved to Berlin"). A text in a script without spaces
    counts as related: one character in common says too little either way ("住在上海" /
    "搬到了杭州" share none and are one attribute)."""
    if text.no_space_runs(old) or text.no_space_runs(new):
        return True
    return _share(old, new, known=known) or text.share_frame(old, new)


def _covers(a: MemberView, b: MemberView, *, known: frozenset[str]) -> bool:
    """Whether ``a``'s text keeps every detail and content word of ``b``."""
    details = text.details(b.content, known=known)
    if not all(text.contains_detail(a.content, d) for d in details):
        return False
    return not text.lost_words(b.content, a.content, known=known)


def _check_names(action: Action, named: tuple[str, ...], aliases: set[str], used: set[str]) -> Refusal | None:
    if not action.reason.strip():
        return Code.NO_REASON, NO_REASON
    for alias in named:
        if alias not in aliases:
            return Code.UNKNOWN_ID, UNKNOWN_ID.format(alias=alias)
        if named.count(alias) > 1:
            return Code.REPEATED_ID, REPEATED_ID.format(alias=alias)
        if alias in used:
            return Code.ALREADY_USED, ALREADY_USED.format(alias=alias)
    return None


def _invariant(
    action: Action,
    named: tuple[str, ...],
    request: JudgeRequest,
    used: set[str],
    *,
    max_length: int,
    max_generation: int,
    known: frozenset[str],
) -> Refusal | None:
    refusal = _check_names(action, named, request.aliases(), used)
    if refusal is not None:
        return refusal
    limit = [a for a in named if request.member(a).generation >= max_generation]
    if limit:
        return Code.GENERATION_LIMIT, AT_GENERATION_LIMIT.format(alias=limit[0], limit=max_generation)
    if action.action == "merge":
        return _merge_invariant(action, request, max_length=max_length, known=known)
    return _supersede_invariant(action, request)


def findings_of(action: Action, request: JudgeRequest) -> list[Finding]:
    """The signals of ``action`` as (code, refusal message, concern), the first of each
    code, in the order found; assumes the action passed the invariants. Pure."""
    known = text.known_names(m.content for m in request.members)
    if action.action == "merge":
        found = _merge_signals(action, request, known=known)
    else:
        found = _supersede_signals(action, request, known=known)
    first: dict[Code, Finding] = {}
    for finding in found:
        first.setdefault(finding[0], finding)
    return list(first.values())


def validate(
    request: JudgeRequest,
    actions: tuple[Action, ...],
    *,
    max_length: int,
    max_generation: int,
    refuse_signals: bool = True,
) -> ValidationResult:
    """Accept or reject each action, in order; see the module docstring.

    Every action is checked against the invariants first; one that passes and raises
    signals is rejected on the first of them when ``refuse_signals`` (the rule judge's
    conservative default), else accepted with its ``signals`` set. A member named by
    an accepted action cannot be named by a later one. Pure: no database, no model.
    """
    return _split(
        request, actions, max_length=max_length, max_generation=max_generation, refuse_signals=refuse_signals
    )


def check_invariants(
    request: JudgeRequest, actions: tuple[Action, ...], *, max_length: int, max_generation: int
) -> ValidationResult:
    """The invariants alone, in order, for actions whose signals were already read and
    answered (applying a dry run: ``services/operations/dry_runs``); see the module docstring.

    Signals are not read again: an accepted action keeps its ``signals`` and ``second_look``
    as they are. A member named by an accepted action cannot be named by a later one. Pure.
    """
    return _split(request, actions, max_length=max_length, max_generation=max_generation, refuse_signals=None)


def _split(
    request: JudgeRequest,
    actions: tuple[Action, ...],
    *,
    max_length: int,
    max_generation: int,
    refuse_signals: bool | None,
) -> ValidationResult:
    """``validate``'s loop; ``refuse_signals`` None reads no signal (``check_invariants``)."""
    known = text.known_names(m.content for m in request.members)
    used: set[str] = set()
    accepted: list[Action] = []
    rejections: list[Rejection] = []
    for action in actions:
        named = action.members()
        refusal = _invariant(
            action, named, request, used, max_length=max_length, max_generation=max_generation, known=known
        )
        if refusal is not None:
            rejections.append(Rejection(action=action, code=refusal[0], reason=refusal[1]))
            continue
        if refuse_signals is None:
            accepted.append(action)
            used.update(named)
            continue
        findings = findings_of(action, request)
        if findings and refuse_signals:
            rejections.append(Rejection(action=action, code=findings[0][0], reason=findings[0][1]))
            continue
        signals = tuple(Signal(code=str(code), concern=concern) for code, _, concern in findings)
        accepted.append(replace(action, signals=signals))
        used.update(named)
    return ValidationResult(accepted=tuple(accepted), rejections=tuple(rejections))
