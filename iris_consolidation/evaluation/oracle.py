"""The oracle judge: answers from human labels, so an evaluation measures the ceiling
of clustering and validation rather than a model.

Given a user's labelled pairs (``same`` / ``different``), ``OracleJudge`` merges the
members of a cluster that the labels say are one statement, the way a perfect model
would: members are taken in the request's order (oldest first), each joins the first
group whose every member is labelled ``same`` with it (no chaining A~B~C through a
``different`` pair), and each group of two or more becomes one merge whose content is
the members' texts joined, so every detail of every source is kept. A pair the labels
do not cover counts as ``different``. It makes no model call, but reports one call per
request (``llm_calls=1``) so that runs count judge calls as they would with a model.

Used by ``eval_judge --pairs FILE --oracle`` and ``calibrate_threshold``; it declares
no ``prompt_version``, so the verdict cache never stores its answers.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from ..llm.base import Action, BatchReply, JudgeRequest, MemberView, Spend, Verdict

NAME = "oracle"
REASON = "Labelled the same statement by the human labels of the pairs file."
NOTHING = "No two members are labelled the same statement; all kept."
_END = (".", "!", "?")


def joined_content(texts: Iterable[str]) -> str:
    """The texts as one, each ending in a full stop if it had no end mark, in order,
    one space apart: ``["i like dogs", "dogs are great."]`` -> ``"i like dogs. dogs are great."``."""
    parts = []
    for text in texts:
        text = text.strip()
        parts.append(text if text.endswith(_END) else f"{text}.")
    return " ".join(parts)


class OracleJudge:
    """``JudgeClient`` answering from labels: ``same`` is a set of text pairs (either
    order) labelled "same" for one user. Never fails, never writes."""

    name = NAME
    #: Goes through the orchestrator's model path (pre-pass first, then this judge),
    #: as a model judge would; no model is called.
    calls_model = True

    def __init__(self, same: Iterable[tuple[str, str]]) -> None:
        self._same = {frozenset((a, b)) for a, b in same}

    def is_same(self, a: str, b: str) -> bool:
        """Whether the labels say texts ``a`` and ``b`` state the same thing (equal texts do)."""
        return a == b or frozenset((a, b)) in self._same

    def groups(self, members: tuple[MemberView, ...]) -> list[list[MemberView]]:
        """Groups of two or more members, every two of one group labelled "same"."""
        groups: list[list[MemberView]] = []
        for member in members:
            for group in groups:
                if all(self.is_same(m.content, member.content) for m in group):
                    group.append(member)
                    break
            else:
                groups.append([member])
        return [g for g in groups if len(g) >= 2]

    def judge(self, request: JudgeRequest) -> Verdict:
        actions = tuple(
            Action(
                action="merge",
                ids=tuple(m.alias for m in group),
                content=joined_content(m.content for m in group),
                reason=REASON,
            )
            for group in self.groups(request.members)
        )
        reasoning = "; ".join(f"{'+'.join(a.ids)}: {a.reason}" for a in actions) or NOTHING
        return Verdict(actions=actions, reasoning=reasoning, model=NAME, llm_calls=1, spend=Spend(calls=1))

    def judge_batch(self, requests: Sequence[JudgeRequest]) -> BatchReply:
        """Each request answered from the labels, counted as ONE call for the batch (as a
        model judging them in one call would be)."""
        call = Spend(calls=1)
        return BatchReply(
            verdicts=tuple(self.judge(r) for r in requests),
            errors=("",) * len(requests),
            spend=call,
            shares=tuple(call.share([len(r.members) for r in requests])),
        )


def oracles_by_user(pairs: Iterable[Mapping[str, str]]) -> dict[str, OracleJudge]:
    """One ``OracleJudge`` per ``user`` of ``pairs`` (dicts with user, a, b, label)."""
    same: dict[str, list[tuple[str, str]]] = {}
    for pair in pairs:
        rows = same.setdefault(pair["user"], [])
        if pair["label"] == "same":
            rows.append((pair["a"], pair["b"]))
    return {user: OracleJudge(rows) for user, rows in same.items()}
