"""Ask the judge about a cluster: build the request, run the deterministic pre-pass,
call the injected client with failure isolation, validate every verdict.

The client comes from the caller (``llm.get_judge_client()``); calls happen outside
any transaction. Nothing here writes: ``merging.record_review`` applies the result.

For a judge that calls a model (``client.calls_model``), ``decide_cluster`` works in
two stages:
1. **Pre-pass** (no model call): the rule judge's provable merges (normalised text
   equal, or the same words with names in the same order), validated like any verdict.
2. **Model**: the members left, each merged group standing as one member (its keeper:
   the protected member, else the oldest, with the merged truth's generation and
   newest ``created_at``). A malformed or truncated reply has already been retried by
   the client; here the cluster is then split in halves, down to single truths, and a
   member that fails even so is listed in ``failed``. Transport, auth and quota
   errors end the model stage (``unavailable``); the pre-pass stands. An unparseable
   reply is never a decision.
A rate limit (``JudgeRateLimited``) propagates so that the caller waits and retries.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, replace

from ...conf import app_settings
from ...exceptions import JudgeRateLimited, JudgeResponseInvalid, JudgeUnavailable
from ...llm import rules
from ...llm.base import Action, JudgeClient, JudgeRequest, MemberView, Verdict
from ...models import Truth
from . import validation

JUDGE_UNAVAILABLE = "LLM judge unavailable: {error}"
JUDGE_INVALID = "The judge's reply was not a verdict for {aliases} even after bisection: {error}"
PREPASS_REASONING = "Pre-pass (no model call): {reasoning}"


def build_request(
    truths: Sequence[Truth], *, max_generation: int | None = None
) -> tuple[JudgeRequest, dict[str, Truth]]:
    """A ``JudgeRequest`` over ``truths`` (sorted oldest first, aliased t1, t2, ...),
    and the alias -> truth map. Aliases are valid for this call only."""
    max_generation = max_generation or app_settings.MAX_GENERATION
    ordered = sorted(truths, key=lambda t: (t.created_at, t.pk))
    by_alias = {f"t{i}": t for i, t in enumerate(ordered, start=1)}
    members = tuple(
        MemberView(
            alias=alias,
            content=t.content,
            created_at=t.created_at,
            generation=t.generation,
            protected=t.is_protected(max_generation=max_generation),
            origin=t.origin,
            pinned=t.pinned,
        )
        for alias, t in by_alias.items()
    )
    return JudgeRequest(members=members), by_alias


def cluster_key(truths: Sequence[Truth]) -> str:
    """sha256 over the members' ids and contents: the same cluster in the same state
    gives the same key, so a task delivered twice finds its own review."""
    digest = hashlib.sha256()
    for t in sorted(truths, key=lambda t: t.pk):
        digest.update(f"{t.pk}\x1f{t.content}\x1e".encode())
    return digest.hexdigest()


@dataclass(frozen=True, kw_only=True)
class Judgement:
    """What the judge tier decided about one cluster, validated, ready to apply.

    ``accepted`` is in apply order: the first ``prepass`` actions come from the
    pre-pass; a later action may name a pre-pass keeper, which then stands for the
    pre-pass result. ``verdict`` combines every proposal and the figures of every
    model call (None if no judge answered). ``failed`` lists the aliases whose
    judgement failed; ``error`` says why; ``unavailable`` is True when the model could
    not be reached (the caller stops the model tier for this user).
    """

    accepted: tuple[Action, ...] = ()
    rejections: tuple[validation.Rejection, ...] = ()
    prepass: int = 0
    verdict: Verdict | None = None
    failed: tuple[str, ...] = ()
    error: str = ""
    unavailable: bool = False
    llm_calls: int = 0


def _validate(request: JudgeRequest, actions: tuple[Action, ...]) -> validation.ValidationResult:
    return validation.validate(
        request, actions, max_length=app_settings.MAX_CONTENT_LENGTH, max_generation=app_settings.MAX_GENERATION
    )


def after_prepass(request: JudgeRequest, merges: Sequence[Action], *, max_generation: int) -> JudgeRequest:
    """``request`` with each merged group replaced by its keeper (see module docstring)."""
    members = {m.alias: m for m in request.members}
    for action in merges:
        group = [members.pop(alias) for alias in action.ids]
        protected = [m for m in group if m.protected]
        keeper = protected[0] if protected else group[0]
        generation = keeper.generation if protected else max(m.generation for m in group) + 1
        members[keeper.alias] = replace(
            keeper,
            content=action.content.strip(),
            created_at=max(m.created_at for m in group),
            generation=generation,
            protected=bool(protected) or generation >= max_generation,
            origin=keeper.origin if protected else "consolidated",
        )
    return JudgeRequest(members=tuple(members[m.alias] for m in request.members if m.alias in members))


@dataclass
class _Bisection:
    parts: list[tuple[JudgeRequest, Verdict]]
    failed: list[str]
    errors: list[str]
    raws: list[str]
    calls: int = 0


def _judge_bisecting(request: JudgeRequest, client: JudgeClient, state: _Bisection) -> None:
    """Judge ``request``; on an invalid reply judge each half. Raises ``JudgeUnavailable``."""
    if len(request.members) < 2:
        state.failed.extend(m.alias for m in request.members)
        return
    try:
        verdict = judge_cluster(request=request, client=client)
    except JudgeResponseInvalid as exc:
        state.calls += int(getattr(exc, "llm_calls", 1))
        state.errors.append(str(exc))
        state.raws.append(exc.raw)
        aliases = tuple(m.alias for m in request.members)
        half = len(aliases) // 2
        if len(aliases) == 2:
            state.failed.extend(aliases)
            return
        _judge_bisecting(request.subset(aliases[:half]), client, state)
        _judge_bisecting(request.subset(aliases[half:]), client, state)
        return
    state.calls += verdict.llm_calls
    state.parts.append((request, verdict))


def _combine(parts: list[tuple[JudgeRequest, Verdict]], raws: list[str], calls: int) -> Verdict | None:
    if not parts:
        return None
    verdicts = [v for _, v in parts]
    return Verdict(
        actions=tuple(a for v in verdicts for a in v.actions),
        reasoning="\n".join(v.reasoning for v in verdicts if v.reasoning),
        raw="\n---\n".join([*(v.raw for v in verdicts), *(r for r in raws if r)]),
        model=verdicts[0].model,
        prompt_version=verdicts[0].prompt_version,
        tokens=sum(v.tokens for v in verdicts),
        cost=sum(v.cost for v in verdicts),
        latency_ms=sum(v.latency_ms for v in verdicts),
        llm_calls=calls,
        attempts=sum(v.attempts for v in verdicts),
    )


def judge_cluster(*, request: JudgeRequest, client: JudgeClient) -> Verdict:
    """The client's verdict on ``request``, unvalidated (one call; see ``decide_cluster``).

    Raises what the client raises: ``JudgeUnavailable`` (``JudgeRateLimited``) or
    ``JudgeResponseInvalid``. Makes the client's model calls; writes nothing.
    """
    return client.judge(request)


def decide_cluster(*, request: JudgeRequest, client: JudgeClient, model_allowed: bool = True) -> Judgement:
    """Judge and validate one cluster (see the module docstring); never writes.

    ``model_allowed=False`` runs the pre-pass only (the model tier was stopped for this
    user). Raises ``JudgeRateLimited`` only; every other failure is in the result.
    """
    if not getattr(client, "calls_model", True):
        verdict = client.judge(request)
        result = _validate(request, verdict.actions)
        return Judgement(accepted=result.accepted, rejections=result.rejections, verdict=verdict)

    max_generation = app_settings.MAX_GENERATION
    pre_verdict = rules.RuleJudge().judge(request)
    pre = _validate(request, pre_verdict.actions)
    merges = [a for a in pre.accepted if a.action == "merge"]
    base = Judgement(accepted=pre.accepted, rejections=pre.rejections, prepass=len(pre.accepted))
    model_request = after_prepass(request, merges, max_generation=max_generation)
    prepass_only = replace(
        base, verdict=replace(pre_verdict, reasoning=PREPASS_REASONING.format(reasoning=pre_verdict.reasoning))
    )
    if len(model_request.members) < 2:
        return prepass_only
    if not model_allowed:
        return replace(prepass_only, failed=tuple(m.alias for m in model_request.members))

    state = _Bisection(parts=[], failed=[], errors=[], raws=[])
    try:
        _judge_bisecting(model_request, client, state)
    except JudgeRateLimited:
        raise
    except JudgeUnavailable as exc:
        return replace(
            prepass_only,
            failed=tuple(m.alias for m in model_request.members),
            error=JUDGE_UNAVAILABLE.format(error=exc),
            unavailable=True,
            llm_calls=state.calls + int(getattr(exc, "llm_calls", 1)),
        )
    accepted = list(pre.accepted)
    rejections = list(pre.rejections)
    for sub_request, verdict in state.parts:
        result = _validate(sub_request, verdict.actions)
        accepted.extend(result.accepted)
        rejections.extend(result.rejections)
    combined = _combine(state.parts, state.raws, state.calls)
    if combined is not None:
        notes = [PREPASS_REASONING.format(reasoning=pre_verdict.reasoning)] if pre.accepted else []
        combined = replace(
            combined,
            actions=(*pre_verdict.actions, *combined.actions),
            reasoning="\n".join([*notes, combined.reasoning]),
        )
    error = ""
    if state.failed:
        error = JUDGE_INVALID.format(aliases=", ".join(state.failed), error=state.errors[-1])
    return Judgement(
        accepted=tuple(accepted),
        rejections=tuple(rejections),
        prepass=len(pre.accepted),
        verdict=combined if combined is not None else replace(prepass_only.verdict, raw="\n---\n".join(state.raws)),
        failed=tuple(state.failed),
        error=error,
        llm_calls=state.calls,
    )
