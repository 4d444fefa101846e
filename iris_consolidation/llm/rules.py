"""The offline rule judge: deterministic, conservative, no model.

It merges only what it can prove is one statement:
1. normalised text equal (case, punctuation, contractions), or
2. the same set of words with every proper name in the same order (so
   "Alice manages Bob" never merges with "Bob manages Alice").
Everything else is kept. It is the default judge where no LLM is configured, and
the deterministic pre-pass that runs before an LLM judge.
"""

from __future__ import annotations

from collections.abc import Sequence

from .. import text
from ..choices import MergeProtection
from .base import Action, BatchReply, JudgeRequest, MemberView, Spend, Verdict

RULES_VERSION = "rules-1"
REASON_SAME_TEXT = "Same statement: the texts are equal once case, punctuation and contractions are ignored."
REASON_SAME_WORDS = "Same statement: the same words, with names in the same order."
REPORT_REORDERED = "{pair}: the same words in another order; reported only, an LLM judge must confirm a merge"


def _signature(member: MemberView, known: frozenset[str]) -> tuple[frozenset[str], tuple[str, ...], bool]:
    return (
        frozenset(text.tokens(member.content)),
        tuple(text.proper_names(member.content, known=known)),
        text.polarity(member.content),
    )


def equivalent_groups(members: tuple[MemberView, ...]) -> list[tuple[list[MemberView], str]]:
    """Groups of two or more members that state the same thing, with the reason.

    Members are compared in the given order; each joins the first group it matches.
    """
    known = text.known_names(m.content for m in members)
    groups: list[tuple[list[MemberView], str]] = []
    for member in members:
        norm = text.normalise(member.content)
        sig = _signature(member, known)
        for group, _ in groups:
            head = group[0]
            # Same words in another content-word order go to the judge, not here: the
            # validator refuses reordered text ("the dog chased the cat" / "the cat
            # chased the dog" swap roles without any name to show it).
            same_words = _signature(head, known) == sig and not text.reordered(head.content, member.content)
            if text.normalise(head.content) == norm or same_words:
                group.append(member)
                break
        else:
            groups.append(([member], ""))
    result = []
    for group, _ in groups:
        if len(group) < 2:
            continue
        norms = {text.normalise(m.content) for m in group}
        result.append((group, REASON_SAME_TEXT if len(norms) == 1 else REASON_SAME_WORDS))
    return result


def best_written(group: list[MemberView]) -> MemberView:
    """The member whose text a merge keeps, the best written: the most proper
    names capitalised (so "I met Taylor Swift" wins over "I met taylor swift."), then a
    capital first letter, then the higher quality (``MemberView.quality``), then
    the higher distillation score, then the oldest (members come oldest first).
    """
    known = text.known_names(m.content for m in group)
    ranked = [
        (
            len(text.proper_names(m.content, known=known)),
            m.content.lstrip()[:1].isupper(),
            # Quality to two decimals, so that minutes of recency do not decide.
            round(m.quality, 2),
            m.score,
            -index,
            m,
        )
        for index, m in enumerate(group)
    ]
    return max(ranked, key=lambda r: r[:5])[5]


def merge_actions(request: JudgeRequest) -> tuple[Action, ...]:
    """The provable merges of ``request``: one action per group of equal statements.

    The merged content is a protected member's text when the group has one (it must
    survive unchanged), else the best-written member's (``best_written``).
    """
    actions = []
    for group, reason in equivalent_groups(request.members):
        by_alias = {m.alias: m for m in group}
        protection = MergeProtection.of_members(group)
        if not protection.allowed:
            # Two protected truths can never both survive one merge: merge the others
            # into the first protected one only.
            group = [by_alias[a] for a in protection.retiring] + [by_alias[protection.protected[0]]]
            if len(group) < 2:
                continue
        keeper = by_alias[protection.keeper] if protection.keeper is not None else best_written(group)
        actions.append(
            Action(action="merge", ids=tuple(m.alias for m in group), content=keeper.content, reason=reason)
        )
    return tuple(actions)


def reordered_pairs(members: tuple[MemberView, ...]) -> list[tuple[str, str]]:
    """Pairs of aliases whose texts use the same words in another order (iii's word-order
    matches): the rule judge reports them and never merges them, because the order can
    swap who does what; an LLM judge may confirm them (then the validator decides)."""
    pairs = []
    for i, a in enumerate(members):
        for b in members[i + 1 :]:
            if text.reordered(a.content, b.content):
                pairs.append((a.alias, b.alias))
    return pairs


class RuleJudge:
    """``JudgeClient`` that applies ``merge_actions``; never fails, never calls a model."""

    name = "rules"
    #: The orchestrator runs no deterministic pre-pass before this judge: it is one.
    calls_model = False
    prompt_version = RULES_VERSION

    @classmethod
    def from_settings(cls) -> RuleJudge:
        return cls()

    def judge(self, request: JudgeRequest) -> Verdict:
        actions = merge_actions(request)
        reasoning = (
            "; ".join(f"{'+'.join(a.ids)}: {a.reason}" for a in actions)
            if actions
            else "No two members are provably the same statement; all kept."
        )
        reported = [REPORT_REORDERED.format(pair="+".join(p)) for p in reordered_pairs(request.members)]
        if reported:
            reasoning = "; ".join([reasoning, *reported])
        return Verdict(actions=actions, reasoning=reasoning, model="rules", prompt_version=RULES_VERSION, llm_calls=0)

    def judge_batch(self, requests: Sequence[JudgeRequest]) -> BatchReply:
        """Each request judged on its own (no model, nothing spent)."""
        return BatchReply(
            verdicts=tuple(self.judge(r) for r in requests),
            errors=("",) * len(requests),
            shares=tuple(Spend() for _ in requests),
        )
