"""The validator: every verdict of every judge passes here before anything is written.

``validate(request, actions, ...)`` splits the judge's actions into accepted ones and
rejections, each rejection with a ``Code`` and a reason from the constants below. It is
pure: it reads only the request (members as the judge saw them) and the limits passed in.

Two tiers, checked in this order for each action:

**Invariants** refuse outright, whatever the judge and whatever the risk policy. They
need no trust in any model and alone keep a hostile one harmless, one that confirms its
own second looks included (``benchmarks/judge_hostile.py``):
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
  in the content ("IBM = International Business Machines"); and a content that sets two
  members side by side whole ("A; B", "A and B": nothing fused) joins them only if they are
  restatements: not when they hold different values (a name, number, date, role or slot of
  one frame), not when one negates what the other says of a word they share, or ends or
  changes what the other says of one thing, and not two of three or more that share
  nothing unless one may define the other ("Is vegetarian" / "Does not eat meat": a second
  look, ``relations.defines``) (``SIDE_BY_SIDE``); nor does a fused content keep the values of both members
  that differ in one slot of one frame or in their numbers ("Is allergic to peanuts and
  shellfish", ``BOTH_VALUES``);
- supersede: at least one old member, never the new one; each old member was stated
  before the new one (``created_at``): the statement made last wins; each old member is
  about what the new one says (a word, a detail, a frame or an attribute of the person in
  common, ``SUPERSEDE_UNRELATED``); the new one states a change, or may state the outcome
  of a plan or effort every old member states, or was mined as a change of the old member
  (``MemberView.changes``) (else ``SUPERSEDE_NO_CHANGE``); old members
  that are no step of a change (a change, an event, a plan) restate one statement
  (``SUPERSEDE_SEVERAL``);
- a member that addresses the model ("Ignore all previous instructions ...") takes part
  in no action (``INSTRUCTION``).

**Signals** are the word-level readings that a pair of truths may be two facts: negation
differs, different names, numbers or dates, one reports a change or an ended span and
the other does not, the same frame with different fillers (a contrast, or one frame
filled twice), members that share only a name, a chain (three or more members, two of
which share nothing), a supersede whose new member states no change word but may be the
outcome of the old members' plan (``SUPERSEDE_OUTCOME``), or several old members that are
different statements, steps of a change among them. With ``refuse_signals`` (the rule judge,
the pre-pass, and the ``refuse`` risk policy) the first signal refuses the action, as the
invariants do; otherwise the action is accepted with its ``signals`` attached, for the second look
(``judging``) to confirm or withdraw. Each signal's message is in plain words, naming
the truths by alias and quoting their differing words.

The per-run retirement cap and freshness need the database; ``merging`` enforces them.
A rejected action is recorded and the members it named are kept as they were.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import StrEnum

from ... import text
from ...choices import MergeProtection
from ...llm.base import Action, JudgeRequest, MemberView, Signal
from . import relations
from . import validation_messages as say
from .relations import both_own, covers, negation_words, one_thing, quoted, related, reordered, role_swap, share

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
    SIDE_BY_SIDE = "side_by_side"
    BOTH_VALUES = "both_values"
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
    SUPERSEDE_OUTCOME = "supersede_outcome"
    SUPERSEDE_SEVERAL = "supersede_several"
    INSTRUCTION = "instruction"
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
        Code.SUPERSEDE_OUTCOME,
        Code.SUPERSEDE_MIXED,
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


def _pair_signals(a: MemberView, b: MemberView, *, known: frozenset[str]) -> list[Finding]:
    """What a word-level reading finds risky in merging ``a`` with ``b`` (one per kind)."""
    found: list[Finding] = []
    x, y = a.alias, b.alias
    if text.polarity_key(a.content) != text.polarity_key(b.content):
        words = negation_words(a.content, b.content)
        concern = say.CONCERN_POLARITY.format(a=x, b=y, words=words)
        found.append((Code.POLARITY, say.POLARITY_DIFFERS.format(a=x, b=y), concern))
    names_a = text.names_not_dates(a.content, known=known)
    names_b = text.names_not_dates(b.content, known=known)
    if both_own(names_a, names_b):
        names = ", ".join(sorted(names_a ^ names_b))
        found.append(
            (Code.NAMES_DIFFER, say.NAMES_DIFFER.format(a=x, b=y, names=names),
             say.CONCERN_NAMES.format(a=x, b=y, names=names))
        )
    if role_swap(a.content, b.content, known=known):
        found.append((Code.ROLE_SWAP, say.ROLE_SWAP.format(a=x, b=y), say.CONCERN_ROLE_SWAP.format(a=x, b=y)))
    if text.time_ended(a.content) != text.time_ended(b.content):
        ended, other = (a, b) if text.time_ended(a.content) else (b, a)
        marker = repr(text.ended_marker(ended.content))
        concern = say.CONCERN_TIME_SPAN.format(a=ended.alias, b=other.alias, marker=marker)
        found.append((Code.TIME_SPAN, say.TIME_SPAN_DIFFERS.format(a=x, b=y), concern))
    if text.reports_change(a.content) != text.reports_change(b.content):
        changed, other = (a, b) if text.reports_change(a.content) else (b, a)
        marker = repr(text.change_marker(changed.content))
        message = say.STATE_CHANGED.format(a=changed.alias, b=other.alias, marker=marker)
        found.append(
            (Code.STATE_CHANGED, message,
             say.CONCERN_STATE_CHANGED.format(a=changed.alias, b=other.alias, marker=marker))
        )
    nums_a = text.numbers(a.content)
    nums_b = text.numbers(b.content)
    if both_own(nums_a, nums_b):
        numbers = ", ".join(sorted(nums_a ^ nums_b))
        message = say.NUMBERS_DIFFER.format(a=x, b=y, numbers=numbers)
        found.append((Code.NUMBERS_DIFFER, message, say.CONCERN_NUMBERS.format(a=x, b=y, numbers=numbers)))
    dates_a, dates_b = text.dates(a.content), text.dates(b.content)
    if both_own(dates_a, dates_b):
        names = ", ".join(sorted(dates_a ^ dates_b))
        message = say.NAMES_DIFFER.format(a=x, b=y, names=names)
        found.append((Code.DATES_DIFFER, message, say.CONCERN_DATES.format(a=x, b=y, names=names)))
    swapped = text.contrast(a.content, b.content, known=known) or text.parallel(
        a.content, b.content, known=known
    )
    if swapped:
        words_a = quoted(text.words_of_stems(a.content, swapped[0]) or swapped[0])
        words_b = quoted(text.words_of_stems(b.content, swapped[1]) or swapped[1])
        message = say.CONTRAST.format(a=x, b=y, words_a=words_a, words_b=words_b)
        found.append((Code.CONTRAST, message, say.CONCERN_CONTRAST.format(a=x, b=y, words_a=words_a, words_b=words_b)))
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
            return Code.LOST_DETAIL, say.LOST_DETAIL.format(detail=detail, alias=member.alias)
        lost = text.lost_negations(member.content, content, covered=covered)
        if lost:
            return Code.LOST_NEGATION, say.LOST_NEGATION.format(words=quoted(lost), alias=member.alias)
        if role_swap(member.content, content, known=known):
            return Code.ROLE_SWAP, say.ROLE_SWAP.format(a=member.alias, b=say.MERGED_CONTENT)
        if reordered(member.content, content):
            return Code.REORDERED, say.REORDERED.format(alias=member.alias)
        lost = text.lost_words(member.content, content, reason=reason, known=known)
        if lost:
            # The operator reads the member's words, not their stems ("hospice", not "hospic").
            words = [w for w in lost if text.no_space_runs(w)] + text.words_of_stems(member.content, lost)
            return Code.LOST_WORDS, say.LOST_WORDS.format(words=quoted(words or lost), alias=member.alias)
    sources = [m.content for m in members]
    invented = text.invented_negations(content, sources, covered=text.vouched(reason, sources))
    if invented:
        return Code.INVENTED_NEGATION, say.INVENTED_NEGATION.format(words=quoted(invented))
    said = set().union(*(text.details(m.content, known=known) for m in members))
    renamed = [p for m in members for p in text.stated_between(content, m.content, reason)]
    for detail in sorted(text.details(content, known=known) - said):
        if any(text.contains_detail(m.content, detail) for m in members):
            continue
        if not text.is_number(detail) and _named_in(detail, renamed):
            continue
        return Code.INVENTED_DETAIL, say.INVENTED_DETAIL.format(detail=detail)
    vouched = text.vouched(reason, sources)
    unstated = {w for w in text.unstated_stems(content, sources) if not text.covered_by(w, vouched)}
    if unstated:
        return Code.INVENTED_WORDS, say.INVENTED_WORDS.format(
            words=quoted(text.words_of_stems(content, unstated) or unstated)
        )
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
            ended, other = (x, say.MERGED_CONTENT) if text.time_ended(member.content) else (say.MERGED_CONTENT, x)
            marker = repr(text.ended_marker(member.content if ended == x else content))
            subject = f"the {ended}" if ended == say.MERGED_CONTENT else ended
            concern = say.CONCERN_TIME_SPAN.format(a=subject, b=other, marker=marker)
            found.append((Code.TIME_SPAN, say.TIME_SPAN_DIFFERS.format(a=x, b=say.MERGED_CONTENT), concern))
        if text.reports_change(member.content) and not text.reports_change(content):
            marker = repr(text.change_marker(member.content))
            message = say.STATE_CHANGED.format(a=x, b=say.MERGED_CONTENT, marker=marker)
            concern = say.CONCERN_STATE_CHANGED.format(a=x, b=f"the {say.MERGED_CONTENT}", marker=marker)
            found.append((Code.STATE_CHANGED, message, concern))
    return found


def _merge_invariant(
    action: Action, request: JudgeRequest, *, max_length: int, known: frozenset[str]
) -> Refusal | None:
    members = [request.member(alias) for alias in action.ids]
    if len(members) < 2:
        return Code.TOO_FEW, say.TOO_FEW
    protection = MergeProtection.of_members(members)
    if not protection.allowed:
        return Code.TWO_PROTECTED, say.TWO_PROTECTED.format(aliases=", ".join(protection.protected))
    content = action.content.strip()
    if not content:
        return Code.EMPTY_CONTENT, say.EMPTY_CONTENT
    if len(content) > max_length:
        return Code.TOO_LONG, say.TOO_LONG.format(length=len(content), limit=max_length)
    keeper = protection.keeper
    if keeper is not None and content != request.member(keeper).content.strip():
        return Code.PROTECTED, say.PROTECTED_RETIRED.format(alias=keeper)
    refusal = _content_invariant(content, members, reason=action.reason, known=known | text.known_names([content]))
    # The members' signals read the members alone: a word capitalised mid-way in a joined text
    # ("... and Learned the cello") is no name of theirs.
    refusal = refusal or _side_by_side(content, members, reason=action.reason, known=known)
    return refusal or _both_values(content, members, known=known)


#: Pair signals that say two members hold different values of one thing: set side by side in
#: one merged text they are two facts joined ("Runs 10 km every Sunday; Runs 5 km every Sunday").
_DISTINCT = frozenset({Code.NAMES_DIFFER, Code.NUMBERS_DIFFER, Code.DATES_DIFFER, Code.ROLE_SWAP, Code.CONTRAST})
#: Pair signals that say one member ends or changes the other: side by side they are a change
#: when the two are about one thing ("Lives in Shanghai; Moved to Hangzhou"), and one state told
#: twice when they are not ("Is a recovering alcoholic; Used to drink a lot").
_CHANGED = frozenset({Code.TIME_SPAN, Code.STATE_CHANGED})


def _side_by_side(content: str, members: list[MemberView], *, reason: str, known: frozenset[str]) -> Refusal | None:
    """Why ``content`` joins different facts, or None: for each two members that it restates
    whole side by side (``text.side_by_side``), nothing was fused, so the merge stands only if
    they are restatements of one fact. Refused when they hold different values (``_DISTINCT``,
    or they share only a name, number or date), when one negates, ends or changes what the
    other says about a word they share, or ends or changes what the other says about one thing
    (``_CHANGED``, ``_one_thing``), or when, among three or more members,
    the two share nothing (a chain) and neither may define the other (``relations.defines``;
    their signals ask the second look). An invariant: what a second look may confirm about a
    fused text, a juxtaposition shows in its own words (a hostile model's "every text joined")."""
    for i, a in enumerate(members):
        for b in members[i + 1 :]:
            if not text.side_by_side(content, a.content, b.content):
                continue
            codes = {finding[0] for finding in _pair_signals(a, b, known=known)}
            shared = share(a.content, b.content, known=known)
            if codes & _DISTINCT or text.shares_only_details(a.content, b.content, reason=reason, known=known):
                why = say.SIDE_DISTINCT
            elif (
                Code.POLARITY in codes and shared or codes & _CHANGED and one_thing(a.content, b.content, known=known)
            ):
                # A negation of what the other says is a contradiction; of nothing it says, a
                # definition ("Is vegetarian and does not eat meat").
                why = say.SIDE_OPPOSED
            elif len(members) > 2 and not shared and not relations.defines(a.content, b.content):
                why = say.SIDE_CHAINED
            else:
                continue
            return Code.SIDE_BY_SIDE, say.SIDE_BY_SIDE.format(a=a.alias, b=b.alias, why=why)
    return None


def _merge_signals(action: Action, request: JudgeRequest, *, known: frozenset[str]) -> list[Finding]:
    members = [request.member(alias) for alias in action.ids]
    found: list[Finding] = []
    for i, a in enumerate(members):
        for b in members[i + 1 :]:
            x, y = a.alias, b.alias
            found.extend(_pair_signals(a, b, known=known))
            if len(members) > 2 and not share(a.content, b.content, known=known):
                found.append((Code.CHAINED, say.CHAINED.format(a=x, b=y), say.CONCERN_CHAINED.format(a=x, b=y)))
            only = text.shares_only_details(a.content, b.content, reason=action.reason, known=known)
            if only:
                details = quoted(only)
                message = say.DETAILS_ONLY.format(a=x, b=y, details=details)
                found.append((Code.DETAILS_ONLY, message, say.CONCERN_DETAILS_ONLY.format(a=x, b=y, details=details)))
    found.extend(_content_signals(action.content.strip(), members))
    return found


def _supersede_invariant(action: Action, request: JudgeRequest, *, known: frozenset[str]) -> Refusal | None:
    """Why the supersede cannot stand whatever the judge, or None: the newer statement
    is the one kept (by ``created_at``), no protected member retires, each old member is
    about what the new one says (``_related``: a word, a detail or a frame in common), and
    the new one states a change (``text.states_change``) or the outcome of a plan or effort
    an old one states (``text.fulfils``: then a signal, ``say.SUPERSEDE_OUTCOME``). A later
    truth that shares nothing with an earlier one, or that says no more than another value
    ("Has two cats" then "Has three cats", "Plays tennis on Tuesdays" then "... Thursdays"),
    may be a second fact: it retires nothing."""
    if not action.old:
        return Code.SUPERSEDE_EMPTY, say.SUPERSEDE_EMPTY
    if action.new in action.old:
        return Code.SUPERSEDE_SELF, say.SUPERSEDE_SELF
    new = request.member(action.new)
    for alias in action.old:
        old = request.member(alias)
        if old.protected:
            return Code.PROTECTED, say.PROTECTED_RETIRED.format(alias=alias)
        if old.created_at >= new.created_at:
            return Code.SUPERSEDE_BACKWARDS, say.SUPERSEDE_BACKWARDS.format(old=alias, new=action.new)
    olds = [request.member(alias) for alias in action.old]
    # A change word says that something changed, not that it is the old truth's attribute:
    # "Actually, the gym closes at nine" retires nothing of "Is a junior designer".
    unrelated = [m.alias for m in olds if not related(m.content, new.content, known=known)]
    if unrelated:
        return Code.SUPERSEDE_UNRELATED, say.SUPERSEDE_UNRELATED.format(new=action.new, old=", ".join(unrelated))
    # Mining's mark stands for a change word; the second look (SUPERSEDE_OUTCOME) still asks.
    if not text.states_change(new.content) and not all(text.fulfils(m.content, new.content) or new.changes == m.alias
                                                       for m in olds):
        return Code.SUPERSEDE_NO_CHANGE, say.SUPERSEDE_NO_CHANGE.format(new=action.new, old=", ".join(action.old))
    # Old members that are no step of a change (a change or event, or a plan under way) must
    # restate one statement: "Takes honey in tea" and "Drinks tea every afternoon" are two
    # facts, and "Now drinks tea without honey" changes one of them; a chain of states ("was
    # repaired", "broke down again", then "repaired again") retires its earlier steps.
    plain = [m for m in olds if not (text.reports_change(m.content) or text.states_change(m.content))]
    plain = [m for m in plain if not text.states_plan(m.content)]
    for i, a in enumerate(plain):
        for b in plain[i + 1 :]:
            if _pair_signals(a, b, known=known) or not (covers(a, b, known=known) or covers(b, a, known=known)):
                return Code.SUPERSEDE_SEVERAL, say.SUPERSEDE_SEVERAL.format(a=a.alias, b=b.alias)
    return None


def _supersede_signals(action: Action, request: JudgeRequest, *, known: frozenset[str]) -> list[Finding]:
    """A supersede whose new member states no change, whose new member shares no word, name
    or number with an old one (another attribute), or whose old members are different
    statements: one of each two must hold every content word and detail of the other,
    so that a change about honey in tea does not retire "Drinks tea every afternoon"."""
    found: list[Finding] = []
    new = request.member(action.new)
    olds = ", ".join(action.old)
    if not text.states_change(new.content):  # each old member states a plan (the invariant)
        message = say.SUPERSEDE_OUTCOME.format(new=action.new, old=olds)
        found.append((Code.SUPERSEDE_OUTCOME, message, say.CONCERN_OUTCOME.format(new=action.new, old=olds)))
    members = [request.member(alias) for alias in action.old]
    for i, a in enumerate(members):
        for b in members[i + 1 :]:
            if _pair_signals(a, b, known=known) or not (covers(a, b, known=known) or covers(b, a, known=known)):
                message = say.SUPERSEDE_MIXED.format(a=a.alias, b=b.alias)
                found.append((Code.SUPERSEDE_MIXED, message, say.CONCERN_MIXED.format(a=a.alias, b=b.alias)))
    return found


def _both_values(content: str, members: list[MemberView], *, known: frozenset[str]) -> Refusal | None:
    """Why ``content`` fuses two values of one thing, or None: two members differ in one slot
    of one frame (``text.contrast``: "Is allergic to peanuts" / "... to shellfish") or in their
    numbers ("Runs 10 km" / "Runs 5 km"), and the content keeps the values of both ("Is
    allergic to peanuts and shellfish", "Runs 10 km and 5 km"). A restatement keeps one value
    (the other reworded into it, with its synonym stated); keeping both joins two facts."""
    have = text.content_stems(content)
    numbers = text.numbers(content)
    for i, a in enumerate(members):
        for b in members[i + 1 :]:
            swapped = text.contrast(a.content, b.content, known=known)
            if swapped and all(any(text.same_stem(w, h) for w in side for h in have) for side in swapped):
                pairs = zip((a, b), swapped, strict=True)
                words = [quoted(text.words_of_stems(m.content, side) or side) for m, side in pairs]
            else:
                own_a = text.numbers(a.content) - text.numbers(b.content)
                own_b = text.numbers(b.content) - text.numbers(a.content)
                if not (own_a and own_b and own_a <= numbers and own_b <= numbers):
                    continue
                words = [quoted(own_a), quoted(own_b)]
            return Code.BOTH_VALUES, say.BOTH_VALUES.format(a=a.alias, b=b.alias, words_a=words[0], words_b=words[1])
    return None


def _check_names(action: Action, named: tuple[str, ...], aliases: set[str], used: set[str]) -> Refusal | None:
    if not action.reason.strip():
        return Code.NO_REASON, say.NO_REASON
    for alias in named:
        if alias not in aliases:
            return Code.UNKNOWN_ID, say.UNKNOWN_ID.format(alias=alias)
        if named.count(alias) > 1:
            return Code.REPEATED_ID, say.REPEATED_ID.format(alias=alias)
        if alias in used:
            return Code.ALREADY_USED, say.ALREADY_USED.format(alias=alias)
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
        return Code.GENERATION_LIMIT, say.AT_GENERATION_LIMIT.format(alias=limit[0], limit=max_generation)
    instruction = [a for a in named if text.addresses_model(request.member(a).content)]
    if instruction:
        return Code.INSTRUCTION, say.INSTRUCTION.format(alias=instruction[0])
    if action.action == "merge":
        return _merge_invariant(action, request, max_length=max_length, known=known)
    return _supersede_invariant(action, request, known=known)


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
