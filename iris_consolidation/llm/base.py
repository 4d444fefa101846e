"""The judge protocol and its value types.

A judge takes a ``JudgeRequest`` (the cluster's members under short aliases) and
returns a ``Verdict`` in the shape of DESIGN.md's wire contract: merge and supersede
actions over aliases; members named in no action are kept.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Literal, Protocol


@dataclass(frozen=True, kw_only=True)
class MemberView:
    """One cluster member as the judge sees it; ``alias`` is valid for one call only."""

    alias: str
    content: str
    created_at: datetime
    generation: int = 0
    protected: bool = False
    origin: str = "promoted"
    pinned: bool = False
    #: Distillation score; the rule judge's tie-break between equal texts (never sent to a model).
    score: float = 0.0

    def as_wire(self) -> dict[str, object]:
        """The member as DESIGN.md's wire contract puts it in the request."""
        return {
            "id": self.alias,
            "content": self.content,
            "created_at": self.created_at.isoformat().replace("+00:00", "Z"),
            "generation": self.generation,
            "protected": self.protected,
        }


@dataclass(frozen=True, kw_only=True)
class JudgeRequest:
    """A cluster to judge: members in a stable order (oldest first)."""

    members: tuple[MemberView, ...]

    def aliases(self) -> set[str]:
        return {m.alias for m in self.members}

    def subset(self, aliases: tuple[str, ...]) -> JudgeRequest:
        """The request over ``aliases`` only (same aliases, same order)."""
        return JudgeRequest(members=tuple(m for m in self.members if m.alias in aliases))

    def member(self, alias: str) -> MemberView:
        for m in self.members:
            if m.alias == alias:
                return m
        raise KeyError(alias)


@dataclass(frozen=True, kw_only=True)
class Action:
    """``merge``: ``ids`` become one truth with ``content``.
    ``supersede``: ``old`` retire in favour of ``new`` (a state change)."""

    action: Literal["merge", "supersede"]
    reason: str = ""
    ids: tuple[str, ...] = ()
    content: str = ""
    old: tuple[str, ...] = ()
    new: str = ""

    def members(self) -> tuple[str, ...]:
        """Every alias this action names."""
        return self.ids if self.action == "merge" else (*self.old, self.new)

    def as_wire(self) -> dict[str, object]:
        if self.action == "merge":
            return {"action": "merge", "ids": list(self.ids), "content": self.content, "reason": self.reason}
        return {"action": "supersede", "old": list(self.old), "new": self.new, "reason": self.reason}


@dataclass(frozen=True, kw_only=True)
class Verdict:
    """What a judge decided, with the figures of the call that produced it."""

    actions: tuple[Action, ...]
    reasoning: str = ""
    raw: str = ""
    model: str = ""
    prompt_version: str = ""
    tokens: int = 0
    cost: float = 0.0
    latency_ms: int = 0
    llm_calls: int = 0
    attempts: int = 1


class JudgeClient(Protocol):
    """Anything that judges a cluster.

    ``judge`` raises ``JudgeUnavailable`` (transport, auth, quota, timeout; its
    subclass ``JudgeRateLimited`` for a 429) or ``JudgeResponseInvalid`` (a reply
    that is not a verdict). It never writes to the database.
    """

    #: Short description stored on runs and reviews, e.g. "rules" or "llm:openai/gpt".
    name: str
    #: True for a judge that asks a model: the orchestrator then runs the deterministic
    #: pre-pass first and isolates the model's failures (retry, bisection).
    calls_model: bool

    def judge(self, request: JudgeRequest) -> Verdict: ...
