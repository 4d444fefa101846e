"""The validator: every verdict of every judge passes here before anything is written.

``validate(request, actions)`` splits the judge's actions into accepted ones and
rejections, each rejection with a reason from the constants below. It is pure: it
reads only the request (members as the judge saw them) and the settings passed in.
The rules are DESIGN.md's "Validation" list; a rejected action is recorded and the
members it named are kept as they were.
"""

from __future__ import annotations

from dataclasses import dataclass

from .. import textfacts
from ..llm.base import Action, JudgeRequest, MemberView

NO_REASON = "The action gives no reason."
UNKNOWN_ID = "The action names {alias!r}, which is not a member of this cluster."
REPEATED_ID = "The action names {alias!r} more than once."
ALREADY_USED = "{alias!r} is already named by an earlier action; a member takes part in one action at most."
TOO_FEW = "A merge needs at least two members."
EMPTY_CONTENT = "The merged content is empty."
TOO_LONG = "The merged content has {length} characters; the limit is {limit}."
PROTECTED_RETIRED = "{alias!r} is protected (pinned, created by the user or the assistant, or at the maximum generation) and cannot be retired or reworded."
TWO_PROTECTED = "A merge may keep at most one protected member; {aliases} are all protected."
LOST_DETAIL = "The merged content drops {detail!r}, found in {alias!r}."
INVENTED_DETAIL = "The merged content adds {detail!r}, which no member states."
POLARITY_DIFFERS = "{a!r} and {b!r} differ in negation; a statement never merges with its opposite."
NAMES_DIFFER = "{a!r} and {b!r} name different people or things ({names}); they stay apart."
NUMBERS_DIFFER = "{a!r} and {b!r} give different numbers ({numbers}); they stay apart."
ROLE_SWAP = "{a!r} and {b!r} use the same words with names in another order (a role swap); they stay apart."
SUPERSEDE_SELF = "A supersede cannot retire its own 'new' member."
SUPERSEDE_EMPTY = "A supersede needs at least one 'old' member."
SUPERSEDE_BACKWARDS = "{old!r} was stated after {new!r}; the newer statement never retires in favour of an older one."
GENERATION_LIMIT = "The merge would make generation {generation}; the limit is {limit}."


@dataclass(frozen=True, kw_only=True)
class Rejection:
    """An action the validator refused, and why."""

    action: Action
    reason: str

    def as_dict(self) -> dict[str, object]:
        return {"action": self.action.as_wire(), "reason": self.reason}


@dataclass(frozen=True, kw_only=True)
class ValidationResult:
    accepted: tuple[Action, ...]
    rejections: tuple[Rejection, ...]


def _pair_conflict(a: MemberView, b: MemberView) -> str | None:
    """Why ``a`` and ``b`` may never merge, or None."""
    if textfacts.polarity(a.content) != textfacts.polarity(b.content):
        return POLARITY_DIFFERS.format(a=a.alias, b=b.alias)
    names_a = [n for n in textfacts.proper_names(a.content) if n not in textfacts.MONTHS]
    names_b = [n for n in textfacts.proper_names(b.content) if n not in textfacts.MONTHS]
    if names_a and names_b and set(names_a) != set(names_b):
        return NAMES_DIFFER.format(a=a.alias, b=b.alias, names=", ".join(sorted(set(names_a) ^ set(names_b))))
    if set(names_a) == set(names_b) and len(names_a) > 1 and names_a != names_b:
        if set(textfacts.tokens(a.content)) == set(textfacts.tokens(b.content)):
            return ROLE_SWAP.format(a=a.alias, b=b.alias)
    nums_a = {n.lower() for n in textfacts.numbers(a.content)}
    nums_b = {n.lower() for n in textfacts.numbers(b.content)}
    if nums_a and nums_b and nums_a != nums_b:
        return NUMBERS_DIFFER.format(a=a.alias, b=b.alias, numbers=", ".join(sorted(nums_a ^ nums_b)))
    return None


def _check_merge(action: Action, request: JudgeRequest, *, max_length: int, max_generation: int) -> str | None:
    members = [request.member(alias) for alias in action.ids]
    if len(members) < 2:
        return TOO_FEW
    protected = [m for m in members if m.protected]
    if len(protected) > 1:
        return TWO_PROTECTED.format(aliases=", ".join(m.alias for m in protected))
    content = action.content.strip()
    if not content:
        return EMPTY_CONTENT
    if len(content) > max_length:
        return TOO_LONG.format(length=len(content), limit=max_length)
    if protected and content != protected[0].content.strip():
        return PROTECTED_RETIRED.format(alias=protected[0].alias)
    if not protected:
        generation = max(m.generation for m in members) + 1
        if generation > max_generation:
            return GENERATION_LIMIT.format(generation=generation, limit=max_generation)
    for i, a in enumerate(members):
        for b in members[i + 1 :]:
            conflict = _pair_conflict(a, b)
            if conflict:
                return conflict
    for member in members:
        for detail in sorted(textfacts.details(member.content)):
            if not textfacts.contains_detail(content, detail):
                return LOST_DETAIL.format(detail=detail, alias=member.alias)
        if textfacts.polarity(member.content) != textfacts.polarity(content):
            return POLARITY_DIFFERS.format(a=member.alias, b="merged content")
    stated = set().union(*(textfacts.details(m.content) for m in members))
    for detail in sorted(textfacts.details(content) - stated):
        if not any(textfacts.contains_detail(m.content, detail) for m in members):
            return INVENTED_DETAIL.format(detail=detail)
    return None


def _check_supersede(action: Action, request: JudgeRequest) -> str | None:
    if not action.old:
        return SUPERSEDE_EMPTY
    if action.new in action.old:
        return SUPERSEDE_SELF
    new = request.member(action.new)
    for alias in action.old:
        old = request.member(alias)
        if old.protected:
            return PROTECTED_RETIRED.format(alias=alias)
        if old.created_at >= new.created_at:
            return SUPERSEDE_BACKWARDS.format(old=alias, new=action.new)
    return None


def validate(
    request: JudgeRequest, actions: tuple[Action, ...], *, max_length: int, max_generation: int
) -> ValidationResult:
    """Accept or reject each action, in order; see the module docstring.

    A member named by an accepted action cannot be named by a later one.
    """
    aliases = request.aliases()
    used: set[str] = set()
    accepted: list[Action] = []
    rejections: list[Rejection] = []
    for action in actions:
        reason: str | None = None
        named = action.members()
        if not action.reason.strip():
            reason = NO_REASON
        for alias in named:
            if reason:
                break
            if alias not in aliases:
                reason = UNKNOWN_ID.format(alias=alias)
            elif named.count(alias) > 1:
                reason = REPEATED_ID.format(alias=alias)
            elif alias in used:
                reason = ALREADY_USED.format(alias=alias)
        if reason is None:
            if action.action == "merge":
                reason = _check_merge(action, request, max_length=max_length, max_generation=max_generation)
            else:
                reason = _check_supersede(action, request)
        if reason is None:
            accepted.append(action)
            used.update(named)
        else:
            rejections.append(Rejection(action=action, reason=reason))
    return ValidationResult(accepted=tuple(accepted), rejections=tuple(rejections))
