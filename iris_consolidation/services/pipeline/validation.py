"""The validator: every verdict of every judge passes here before anything is written.

``validate(request, actions)`` splits the judge's actions into accepted ones and
rejections, each rejection with a reason from the constants below. It is pure: it
reads only the request (members as the judge saw them) and the limits passed in.

The rules (DESIGN.md "Validation", issue 3), checked in this order for each action:
- a reason is present; ids only from this cluster; no id twice in one action; a member
  takes part in one action at most (so no duplicate actions and no supersede chains);
- a member at the generation limit takes part in no action; a protected member (pinned,
  created by the user or the assistant) is never retired or reworded: it may survive a
  merge whose content is exactly its text, and at most one protected member per merge;
- merge: two or more members; content non-empty and at most ``max_length`` characters;
  members whose polarity (negations and negative verbs: "Hates jazz" agrees with "Does
  not like jazz", never with "Likes jazz"), names, numbers (by value: "3" = "three"),
  dates or span of time ("until", "used to", "quit") differ never merge, nor a member
  that reports a change ("now", "left", "moved", "no longer", in several languages:
  ``textfacts.REPORTED_CHANGE_MARKERS``) with one that does not (issue 11: it is
  superseded or kept), nor a role swap (same words, names in another order), nor a
  contrast (the same frame with one thing swapped: "Owns a red bicycle" / "Owns a red
  car"), nor one frame filled twice ("Chose a standing desk over a treadmill desk" /
  "Chose an e-reader over paper books": ``textfacts.parallel``), nor two members that
  share only a name, number or date and no word of what they say about it (issue 11:
  "Works as an accountant at Birch & Co" / "Organises the Birch & Co office softball
  team"; ``textfacts.shares_only_details``, synonyms the judge states count); in a
  merge of three or more members every two share a word or detail (no chain A~B~C, as
  in clustering); the content keeps every number, date and name of
  every source, their polarity sentence by sentence, their ended or changed state, and
  every content word of every source or a synonym the judge states in its reason
  (``textfacts.lost_words``: everyday rewordings of ``textfacts.PHRASE_EQUIVALENCES``
  count, "father of a boy" / "son"; Chinese, Japanese and Thai compared by character cover),
  reorders no source's words except as ``wordorder.moved_phrase`` allows (a fronted
  phrase, an equative turned round: "In the morning prefers tea" for "Prefers tea in the
  morning", never "Bob manages Alice" for "Alice manages Bob"), and adds no detail and no
  content word that no source stated;
- supersede: at least one old member, never the new one; each old member was stated
  before the new one (``created_at``), and the new one says the state changed
  ("moved", "now", "no longer", ... see ``textfacts.CHANGE_MARKERS``), so a still-true
  fact is never retired as "contradicted" by a mere neighbour; several old members must
  restate one statement (one holds every detail and content word of the other), so one
  change never retires two different facts.
The per-run retirement cap and freshness need the database; ``merging`` enforces them.
A rejected action is recorded and the members it named are kept as they were.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from ... import textfacts, wordorder
from ...llm.base import Action, JudgeRequest, MemberView

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
POLARITY_DIFFERS = "{a!r} and {b!r} differ in negation; a statement never merges with its opposite."
NAMES_DIFFER = "{a!r} and {b!r} name different people or things ({names}); they stay apart."
NUMBERS_DIFFER = "{a!r} and {b!r} give different numbers ({numbers}); they stay apart."
ROLE_SWAP = "{a!r} and {b!r} use the same words with names in another order (a role swap); they stay apart."
CHAINED = "{a!r} and {b!r} share no word or detail; a merge of three or more members must not chain unrelated facts."
REORDERED = "The merged content uses the words of {alias!r} in another order, which can swap who does what."
TIME_SPAN_DIFFERS = "{a!r} and {b!r} cover different spans of time (one says its state ended); they stay apart."
CONTRAST = "{a!r} and {b!r} say different things in the same frame ({words}); distinct facts stay apart."
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
SUPERSEDE_MIXED = (
    "{a!r} and {b!r} are different statements; one change supersedes one statement (and its restatements), "
    "not several facts at once."
)
MERGED_CONTENT = "merged content"


class Code(StrEnum):
    """Stable code of each kind of refusal, stored with the rejection.

    Code, not message text, is what other modules read (cursor, stops, counts by kind), so
    the wording of a message can change freely.
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
    INVENTED_DETAIL = "invented_detail"
    INVENTED_WORDS = "invented_words"
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
    # Written by ``merging`` (they need the database), listed here so that codes live in one place.
    STALE_MEMBER = "stale_member"
    CAP_REACHED = "cap_reached"


#: A refusal as the checks return it: (code, message).
Refusal = tuple[Code, str]


@dataclass(frozen=True, kw_only=True)
class Rejection:
    """An action the validator refused, and why."""

    action: Action
    code: Code
    reason: str

    def as_dict(self) -> dict[str, object]:
        return {"action": self.action.as_wire(), "code": str(self.code), "reason": self.reason}


@dataclass(frozen=True, kw_only=True)
class ValidationResult:
    accepted: tuple[Action, ...]
    rejections: tuple[Rejection, ...]


def _role_swap(a: str, b: str, *, known: frozenset[str]) -> bool:
    names_a = textfacts.proper_names(a, known=known)
    names_b = textfacts.proper_names(b, known=known)
    return (
        len(names_a) > 1
        and sorted(names_a) == sorted(names_b)
        and names_a != names_b
        and set(textfacts.tokens(a)) == set(textfacts.tokens(b))
        and not wordorder.moved_phrase(a, b)  # "Met Alice in Paris" / "In Paris met Alice"
    )


def _change_marker(text: str) -> str:
    haystack = f" {textfacts.normalise(text)} "
    markers = (*textfacts.TIME_ENDED, *textfacts.REPORTED_CHANGE_MARKERS)
    runs = "\n".join(textfacts.no_space_runs(text))
    found = next((m for m in markers if f" {m} " in haystack), "")
    return found or next((m for m in textfacts.NO_SPACE_CHANGE_MARKERS if m in runs), "")


def _pair_conflict(a: MemberView, b: MemberView, *, known: frozenset[str]) -> Refusal | None:
    """Why ``a`` and ``b`` may never merge, or None."""
    if textfacts.polarity_key(a.content) != textfacts.polarity_key(b.content):
        return Code.POLARITY, POLARITY_DIFFERS.format(a=a.alias, b=b.alias)
    names_a = {n for n in textfacts.proper_names(a.content, known=known) if n not in textfacts.MONTHS}
    names_b = {n for n in textfacts.proper_names(b.content, known=known) if n not in textfacts.MONTHS}
    if names_a and names_b and names_a != names_b:
        names = ", ".join(sorted(names_a ^ names_b))
        return Code.NAMES_DIFFER, NAMES_DIFFER.format(a=a.alias, b=b.alias, names=names)
    if _role_swap(a.content, b.content, known=known):
        return Code.ROLE_SWAP, ROLE_SWAP.format(a=a.alias, b=b.alias)
    if textfacts.time_ended(a.content) != textfacts.time_ended(b.content):
        return Code.TIME_SPAN, TIME_SPAN_DIFFERS.format(a=a.alias, b=b.alias)
    if textfacts.reports_change(a.content) != textfacts.reports_change(b.content):
        changed, other = (a, b) if textfacts.reports_change(a.content) else (b, a)
        marker = repr(_change_marker(changed.content))
        return Code.STATE_CHANGED, STATE_CHANGED.format(a=changed.alias, b=other.alias, marker=marker)
    nums_a = textfacts.numbers(a.content)
    nums_b = textfacts.numbers(b.content)
    if nums_a and nums_b and nums_a != nums_b:
        numbers = ", ".join(sorted(nums_a ^ nums_b))
        return Code.NUMBERS_DIFFER, NUMBERS_DIFFER.format(a=a.alias, b=b.alias, numbers=numbers)
    dates_a, dates_b = textfacts.dates(a.content), textfacts.dates(b.content)
    if dates_a and dates_b and dates_a != dates_b:
        names = ", ".join(sorted(dates_a ^ dates_b))
        return Code.DATES_DIFFER, NAMES_DIFFER.format(a=a.alias, b=b.alias, names=names)
    swapped = textfacts.contrast(a.content, b.content, known=known) or textfacts.parallel(
        a.content, b.content, known=known
    )
    if swapped:
        words = " / ".join(", ".join(sorted(side)) for side in swapped)
        return Code.CONTRAST, CONTRAST.format(a=a.alias, b=b.alias, words=words)
    return None


def _check_content(content: str, members: list[MemberView], *, reason: str, known: frozenset[str]) -> Refusal | None:
    """Why ``content`` cannot stand for ``members``, or None. ``reason`` is the judge's,
    where it may state synonyms (``textfacts.equivalences``)."""
    content_keys = textfacts.sentence_polarity_keys(content)
    member_keys = set().union(*(textfacts.sentence_polarity_keys(m.content) for m in members))
    for member in members:
        for detail in sorted(textfacts.details(member.content, known=known)):
            if not textfacts.contains_detail(content, detail):
                return Code.LOST_DETAIL, LOST_DETAIL.format(detail=detail, alias=member.alias)
        # Sentence by sentence: two joined negative statements stay negative.
        if not textfacts.sentence_polarity_keys(member.content) <= content_keys <= member_keys:
            return Code.POLARITY, POLARITY_DIFFERS.format(a=member.alias, b=MERGED_CONTENT)
        if textfacts.time_ended(member.content) != textfacts.time_ended(content):
            return Code.TIME_SPAN, TIME_SPAN_DIFFERS.format(a=member.alias, b=MERGED_CONTENT)
        if textfacts.reports_change(member.content) and not textfacts.reports_change(content):
            marker = repr(_change_marker(member.content))
            return Code.STATE_CHANGED, STATE_CHANGED.format(a=member.alias, b=MERGED_CONTENT, marker=marker)
        if _role_swap(member.content, content, known=known):
            return Code.ROLE_SWAP, ROLE_SWAP.format(a=member.alias, b=MERGED_CONTENT)
        if textfacts.reordered(member.content, content) and not wordorder.moved_phrase(member.content, content):
            return Code.REORDERED, REORDERED.format(alias=member.alias)
        lost = textfacts.lost_words(member.content, content, reason=reason, known=known)
        if lost:
            words = ", ".join(repr(w) for w in lost)
            return Code.LOST_WORDS, LOST_WORDS.format(words=words, alias=member.alias)
    stated = set().union(*(textfacts.details(m.content, known=known) for m in members))
    for detail in sorted(textfacts.details(content, known=known) - stated):
        if not any(textfacts.contains_detail(m.content, detail) for m in members):
            return Code.INVENTED_DETAIL, INVENTED_DETAIL.format(detail=detail)
    unstated = textfacts.unstated_stems(content, [m.content for m in members])
    if unstated:
        return Code.INVENTED_WORDS, INVENTED_WORDS.format(words=", ".join(repr(w) for w in sorted(unstated)))
    return None


def _check_merge(action: Action, request: JudgeRequest, *, max_length: int, known: frozenset[str]) -> Refusal | None:
    members = [request.member(alias) for alias in action.ids]
    if len(members) < 2:
        return Code.TOO_FEW, TOO_FEW
    protected = [m for m in members if m.protected]
    if len(protected) > 1:
        return Code.TWO_PROTECTED, TWO_PROTECTED.format(aliases=", ".join(m.alias for m in protected))
    content = action.content.strip()
    if not content:
        return Code.EMPTY_CONTENT, EMPTY_CONTENT
    if len(content) > max_length:
        return Code.TOO_LONG, TOO_LONG.format(length=len(content), limit=max_length)
    if protected and content != protected[0].content.strip():
        return Code.PROTECTED, PROTECTED_RETIRED.format(alias=protected[0].alias)
    for i, a in enumerate(members):
        for b in members[i + 1 :]:
            conflict = _pair_conflict(a, b, known=known)
            if conflict:
                return conflict
            if len(members) > 2 and not _share(a.content, b.content, known=known):
                return Code.CHAINED, CHAINED.format(a=a.alias, b=b.alias)
            only = textfacts.shares_only_details(a.content, b.content, reason=action.reason, known=known)
            if only:
                details = ", ".join(repr(d) for d in sorted(only))
                return Code.DETAILS_ONLY, DETAILS_ONLY.format(a=a.alias, b=b.alias, details=details)
    return _check_content(content, members, reason=action.reason, known=known | textfacts.known_names([content]))


def _share(a: str, b: str, *, known: frozenset[str]) -> bool:
    """Whether ``a`` and ``b`` share a content word or a detail."""
    if textfacts.details(a, known=known) & textfacts.details(b, known=known):
        return True
    if textfacts.share_script_text(a, b):
        return True
    stems_b = textfacts.content_stems(b)
    return any(textfacts.same_stem(x, y) for x in textfacts.content_stems(a) for y in stems_b)


def _check_supersede(action: Action, request: JudgeRequest, *, known: frozenset[str]) -> Refusal | None:
    """Why the supersede cannot stand, or None. Several old members must restate one
    statement: one of each two holds every content word and detail of the other, and
    they may merge (``_pair_conflict``), so that a change about honey in tea never
    retires "Drinks tea every afternoon" with "Takes honey in tea"."""
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
    if not textfacts.states_change(new.content):
        return Code.SUPERSEDE_NO_CHANGE, SUPERSEDE_NO_CHANGE.format(new=action.new, old=", ".join(action.old))
    olds = [request.member(alias) for alias in action.old]
    for i, a in enumerate(olds):
        for b in olds[i + 1 :]:
            if _pair_conflict(a, b, known=known) or not (_covers(a, b, known=known) or _covers(b, a, known=known)):
                return Code.SUPERSEDE_MIXED, SUPERSEDE_MIXED.format(a=a.alias, b=b.alias)
    return None


def _covers(a: MemberView, b: MemberView, *, known: frozenset[str]) -> bool:
    """Whether ``a``'s text keeps every detail and content word of ``b``."""
    details = textfacts.details(b.content, known=known)
    if not all(textfacts.contains_detail(a.content, d) for d in details):
        return False
    return not textfacts.lost_words(b.content, a.content, known=known)


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


def validate(
    request: JudgeRequest, actions: tuple[Action, ...], *, max_length: int, max_generation: int
) -> ValidationResult:
    """Accept or reject each action, in order; see the module docstring.

    A member named by an accepted action cannot be named by a later one. Pure: no
    database, no model.
    """
    aliases = request.aliases()
    known = textfacts.known_names(m.content for m in request.members)
    used: set[str] = set()
    accepted: list[Action] = []
    rejections: list[Rejection] = []
    for action in actions:
        named = action.members()
        refusal = _check_names(action, named, aliases, used)
        if refusal is None:
            limit = [a for a in named if request.member(a).generation >= max_generation]
            if limit:
                refusal = Code.GENERATION_LIMIT, AT_GENERATION_LIMIT.format(alias=limit[0], limit=max_generation)
        if refusal is None:
            if action.action == "merge":
                refusal = _check_merge(action, request, max_length=max_length, known=known)
            else:
                refusal = _check_supersede(action, request, known=known)
        if refusal is None:
            accepted.append(action)
            used.update(named)
        else:
            rejections.append(Rejection(action=action, code=refusal[0], reason=refusal[1]))
    return ValidationResult(accepted=tuple(accepted), rejections=tuple(rejections))
