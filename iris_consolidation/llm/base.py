"""The judge protocol and its value types.

A judge takes a ``JudgeRequest`` (the cluster's members under short aliases) and
returns a ``Verdict`` in the shape of the wire contract (docs/llm.md): merge and supersede
actions over aliases; members named in no action are kept.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, Protocol

#: A judge's alias (``t1``, ``'t4'``, ``"t12"``) as a word of a reason or reasoning.
ALIAS = re.compile(r"""(['"]?)\b(t\d+)\b\1""")


def truth_names(snapshot: Sequence[Mapping[str, Any]] | None) -> dict[str, str]:
    """``{"t1": "#12", ...}`` from a review's member snapshot (the aliases of its call)."""
    return {str(row["alias"]): f"#{row['id']}" for row in snapshot or () if "alias" in row and "id" in row}


def with_truth_numbers(text: str, names: Mapping[str, str]) -> str:
    """``text`` with each alias of ``names`` (quoted or not) replaced by its truth number
    (``#12``): an alias is valid for one call, so nothing an operator reads keeps one.
    Words that are not the call's aliases are left alone."""
    if not text or not names:
        return text
    return ALIAS.sub(lambda m: names.get(m.group(2), m.group(0)), text)


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
    #: The truth's composite quality in 0..1 (``quality.py``); not sent to
    #: a model. The rule judge keeps the best one's text where it has no other preference.
    quality: float = 0.0
    #: Distillation score; the rule judge's tie-break between equal texts (never sent to a model).
    score: float = 0.0
    #: The alias of the member this one was mined as a change of (mining's ``changes``), or None.
    changes: str | None = None

    def as_wire(self) -> dict[str, object]:
        """The member as the wire contract (docs/llm.md) puts it in the request; ``changes``
        only when set."""
        wire: dict[str, object] = {
            "id": self.alias,
            "content": self.content,
            "created_at": self.created_at.isoformat().replace("+00:00", "Z"),
            "generation": self.generation,
            "protected": self.protected,
        }
        if self.changes:
            wire["changes"] = self.changes
        return wire


@dataclass(frozen=True, kw_only=True)
class JudgeRequest:
    """A cluster to judge: members in a stable order (oldest first).

    In a call carrying several clusters (``JudgeClient.judge_batch``) the aliases are
    unique across the call, so an alias of a sibling cluster is a foreign id here.
    """

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
class Signal:
    """Something about an action that a word-level reading finds risky (the validator's
    ``Code`` of a signal, and the concern in plain words, truths named by alias).

    A signal is never a refusal of a model's action on its own: it sends the action to
    the second look (``llm/second_look.py``); the rule judge refuses on it instead.
    """

    code: str
    concern: str

    def as_dict(self) -> dict[str, str]:
        return {"code": self.code, "concern": self.concern}


@dataclass(frozen=True, kw_only=True)
class Action:
    """``merge``: ``ids`` become one truth with ``content``.
    ``supersede``: ``old`` retire in favour of ``new`` (a state change, or a later
    statement that contradicts an earlier one).

    ``signals`` and ``second_look`` are the validator's and the second look's notes on
    the action (empty as the judge proposes it); ``as_wire`` carries them when set, so a
    review's applied and rejected actions keep them.
    """

    action: Literal["merge", "supersede"]
    reason: str = ""
    ids: tuple[str, ...] = ()
    content: str = ""
    old: tuple[str, ...] = ()
    new: str = ""
    signals: tuple[Signal, ...] = ()
    #: The model's reason for confirming the action at the second look ("" if none was asked).
    second_look: str = ""

    def members(self) -> tuple[str, ...]:
        """Every alias this action names."""
        return self.ids if self.action == "merge" else (*self.old, self.new)

    def as_wire(self) -> dict[str, object]:
        if self.action == "merge":
            data: dict[str, object] = {
                "action": "merge", "ids": list(self.ids), "content": self.content, "reason": self.reason
            }
        else:
            data = {"action": "supersede", "old": list(self.old), "new": self.new, "reason": self.reason}
        if self.signals:
            data["signals"] = [s.as_dict() for s in self.signals]
        if self.second_look:
            data["second_look"] = self.second_look
        return data


@dataclass(frozen=True, kw_only=True)
class Spend:
    """What model calls cost: tokens as the provider's usage block reports them.

    ``prompt_tokens`` counts every prompt token, ``cached_tokens`` the part of them read
    from the provider's prompt cache (billed at its cache price). ``cost`` is in USD
    from litellm's price map; ``unpriced`` is non-zero when a call in it had no price
    there (the cost is then unknown, never taken as 0).
    """

    calls: int = 0
    prompt_tokens: int = 0
    cached_tokens: int = 0
    completion_tokens: int = 0
    cost: float = 0.0
    unpriced: int = 0

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def __add__(self, other: Spend) -> Spend:
        return Spend(
            calls=self.calls + other.calls,
            prompt_tokens=self.prompt_tokens + other.prompt_tokens,
            cached_tokens=self.cached_tokens + other.cached_tokens,
            completion_tokens=self.completion_tokens + other.completion_tokens,
            cost=self.cost + other.cost,
            unpriced=self.unpriced + other.unpriced,
        )

    def share(self, weights: Sequence[float]) -> list[Spend]:
        """This spend split over several clusters in proportion to ``weights`` (their
        share of the request): integer token counts by largest remainder, so the parts
        add up to the whole exactly; every call goes to the first part, and every part
        keeps ``unpriced`` (its cost is as unknown as the whole's)."""
        total = float(sum(weights)) or 1.0
        fractions = [w / total for w in weights] if sum(weights) else [1.0 / len(weights)] * len(weights)

        def split(value: int) -> list[int]:
            raw = [value * f for f in fractions]
            parts = [int(r) for r in raw]
            order = sorted(range(len(raw)), key=lambda i: raw[i] - parts[i], reverse=True)
            for i in order[: value - sum(parts)]:
                parts[i] += 1
            return parts

        prompt, cached, completion = split(self.prompt_tokens), split(self.cached_tokens), split(self.completion_tokens)
        return [
            Spend(
                calls=self.calls if i == 0 else 0,
                prompt_tokens=prompt[i],
                cached_tokens=cached[i],
                completion_tokens=completion[i],
                cost=self.cost * fractions[i],
                unpriced=self.unpriced,
            )
            for i in range(len(fractions))
        ]


@dataclass(frozen=True, kw_only=True)
class Verdict:
    """What a judge decided, with the figures of the call(s) that produced it.

    ``tokens``/``cost`` are the totals of ``spend`` (kept for the review rows);
    ``llm_calls`` counts the calls this verdict is charged with.
    """

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
    spend: Spend = field(default_factory=Spend)


@dataclass(frozen=True, kw_only=True)
class BatchReply:
    """One call's answer for several clusters (``JudgeClient.judge_batch``).

    ``verdicts[i]`` is the verdict on ``requests[i]``, or None when the reply left that
    cluster out or its entry was not a verdict (``errors[i]`` says why): never a
    decision; the caller retries it. ``spend`` covers the whole call (every attempt).
    """

    verdicts: tuple[Verdict | None, ...]
    errors: tuple[str, ...]
    raw: str = ""
    spend: Spend = field(default_factory=Spend)
    #: ``spend`` split over the clusters (``Spend.share``), one per request.
    shares: tuple[Spend, ...] = ()


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

    def judge_batch(self, requests: Sequence[JudgeRequest]) -> BatchReply:
        """Judge several clusters of ONE user in one call (aliases unique across them).

        Raises like ``judge``; a reply that is not a verdict as a whole raises
        ``JudgeResponseInvalid`` (with ``spend`` set on it), one that misses or garbles
        some clusters returns them as None in ``verdicts``.
        """
        ...


# --- noise classification (the "30-day test" for the detector's candidates) ---


@dataclass(frozen=True, kw_only=True)
class NoiseCandidate:
    """A truth the deterministic noise detector flagged, as the model sees it.

    ``alias`` (n1, n2, ...) is valid for one call only; ``category`` and ``tier``
    ("sure" or "suspect") are the detector's (``services/hygiene/noise_rules``), sent as
    hints, never as a decision.
    """

    alias: str
    content: str
    kind: str = "fact"
    category: str = ""
    tier: str = "sure"

    def as_wire(self) -> dict[str, object]:
        return {"id": self.alias, "content": self.content, "kind": self.kind, "flagged_as": self.category,
                "tier": self.tier}


@dataclass(frozen=True, kw_only=True)
class NoiseReply:
    """One classification call's answer: ``noise`` maps the aliases the model confirmed
    as noise to its reason; every other candidate is kept. ``spend`` covers every attempt."""

    noise: dict[str, str]
    reasons: dict[str, str] = field(default_factory=dict)
    raw: str = ""
    model: str = ""
    prompt_version: str = ""
    attempts: int = 1
    spend: Spend = field(default_factory=Spend)
