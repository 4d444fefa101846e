"""Ask the judge about a cluster: build the request, run the deterministic pre-pass,
call the injected client with failure isolation, validate every verdict.

The client comes from the caller (``llm.get_judge_client()``); calls happen outside
any transaction. Nothing here writes: ``merging.record_review`` applies the result.

For a judge that calls a model (``client.calls_model``), ``judge_batch`` works on
several clusters of ONE user in two stages:
1. **Pre-pass** (no model call): the rule judge's provable merges (normalised text
   equal, or the same words with names in the same order), validated like any verdict.
2. **Model**: the members left of every cluster, each merged group standing as one
   member (its keeper: the protected member, else the oldest, with the merged truth's
   generation and newest ``created_at``), in ONE call (wire contract v2). A cluster
   the reply leaves out or garbles is asked again without the others; a reply that is
   malformed or truncated as a whole (already retried by the client) splits the batch
   in halves, down to one cluster, which is then split in halves down to single
   truths; a member that fails even so is listed in ``failed``. So one bad cluster
   never sinks its neighbours. Transport, auth and quota errors end the model stage
   (``unavailable``); the pre-pass stands. An unparseable reply is never a decision.
A rate limit (``JudgeRateLimited``) propagates so that the caller waits and retries.

3. **Second look** (risk policy ``verify``, the default with a model; ``verifying``):
   every action of the batch that passed the invariants but raised a signal goes back to
   the model in ONE call; only a confirmation with a reason applies it. Policy ``refuse``
   refuses on signals (as the rule judge and the pre-pass always do); ``accept`` applies
   them with the signals recorded.

The value type ``Judgement`` and the validation at the settings are in ``judgement``.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from ...choices import MergeProtection, RiskPolicy, judge_identity
from ...conf import app_settings
from ...exceptions import JudgeRateLimited, JudgeResponseInvalid, JudgeUnavailable
from ...llm import rules
from ...llm.base import Action, JudgeClient, JudgeRequest, MemberView, Spend, Verdict
from ...models import Truth
from ...quality import quality_of
from . import validation, verifying
from .judgement import Judgement, failed_spend, validate_at_settings

JUDGE_UNAVAILABLE = "LLM judge unavailable: {error}"
JUDGE_INVALID = "The judge's reply was not a verdict for {aliases} even after bisection: {error}"
PREPASS_REASONING = "Pre-pass (no model call): {reasoning}"
DEFERRED = "Deferred: the run's budget (IRIS_CONSOLIDATION_MAX_COST_PER_RUN) was spent before this cluster was judged."

logger = logging.getLogger(__name__)


def build_request(
    truths: Sequence[Truth], *, max_generation: int | None = None, first_alias: int = 1,
    changes: Mapping[int, int] | None = None,
) -> tuple[JudgeRequest, dict[str, Truth]]:
    """A ``JudgeRequest`` over ``truths`` (sorted oldest first, aliased t1, t2, ...; from
    ``t<first_alias>`` when the cluster follows others in one call, so aliases stay
    unique across the call), and the alias -> truth map. Aliases are valid for one call.
    ``changes`` maps a mined truth's id to the id of the truth mining read it as changing
    (``hygiene.novelty.mined_changes``); a member whose changed truth is in the request
    carries that truth's alias (``MemberView.changes``)."""
    max_generation = max_generation or app_settings.MAX_GENERATION
    ordered = sorted(truths, key=lambda t: (t.created_at, t.pk))
    by_alias = {f"t{i}": t for i, t in enumerate(ordered, start=first_alias)}
    alias_of = {t.pk: alias for alias, t in by_alias.items()}
    changes = changes or {}
    members = tuple(
        MemberView(
            alias=alias,
            content=t.content,
            created_at=t.created_at,
            generation=t.generation,
            protected=t.is_protected(max_generation=max_generation),
            origin=t.origin,
            pinned=t.pinned,
            quality=quality_of(t),
            score=t.score,
            changes=alias_of.get(changes.get(t.pk, 0)),
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


def after_prepass(request: JudgeRequest, merges: Sequence[Action], *, max_generation: int) -> JudgeRequest:
    """``request`` with each merged group replaced by its keeper (see module docstring)."""
    members = {m.alias: m for m in request.members}
    for action in merges:
        group = {alias: members.pop(alias) for alias in action.ids}
        protection = MergeProtection.of_members(group.values())
        kept = protection.keeper is not None
        keeper = group[protection.keeper or action.ids[0]]
        generation = keeper.generation if kept else max(m.generation for m in group.values()) + 1
        members[keeper.alias] = replace(
            keeper,
            content=action.content.strip(),
            created_at=max(m.created_at for m in group.values()),
            generation=generation,
            protected=kept or generation >= max_generation,
            origin=keeper.origin if kept else "consolidated",
        )
    return JudgeRequest(members=tuple(members[m.alias] for m in request.members if m.alias in members))


class _OverBudget(Exception):
    """The run's budget is spent: no further model call (internal to this module)."""


@dataclass
class _Bisection:
    """One cluster's model stage: verdicts of its parts, failures, spend so far."""

    parts: list[tuple[JudgeRequest, Verdict]] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    raws: list[str] = field(default_factory=list)
    spend: Spend = field(default_factory=Spend)


def _check_budget(may_call: Callable[[], bool] | None) -> None:
    if may_call is not None and not may_call():
        raise _OverBudget


def _judge_bisecting(
    request: JudgeRequest, client: JudgeClient, state: _Bisection, may_call: Callable[[], bool] | None = None
) -> None:
    """Judge one cluster's ``request``; on an invalid reply judge each half, down to
    single truths. Raises ``JudgeUnavailable`` and ``_OverBudget``."""
    if len(request.members) < 2:
        state.failed.extend(m.alias for m in request.members)
        return
    _check_budget(may_call)
    try:
        verdict = judge_cluster(request=request, client=client)
    except JudgeResponseInvalid as exc:
        state.spend = state.spend + failed_spend(exc)
        state.errors.append(str(exc))
        state.raws.append(exc.raw)
        aliases = tuple(m.alias for m in request.members)
        half = len(aliases) // 2
        if len(aliases) == 2:
            state.failed.extend(aliases)
            return
        _judge_bisecting(request.subset(aliases[:half]), client, state, may_call)
        _judge_bisecting(request.subset(aliases[half:]), client, state, may_call)
        return
    state.spend = state.spend + verdict.spend
    state.parts.append((request, verdict))


def _judge_group(
    indices: list[int],
    requests: dict[int, JudgeRequest],
    client: JudgeClient,
    states: dict[int, _Bisection],
    done: set[int],
    may_call: Callable[[], bool] | None,
) -> None:
    """Judge the clusters ``indices`` in one call; a cluster left out of the reply, or
    whose entry is not a verdict, is judged again without the others; a reply that is
    not a verdict as a whole splits the group in halves. One cluster alone goes down
    to the member bisection (``_judge_bisecting``). Marks finished clusters in ``done``."""
    if len(indices) == 1:
        (index,) = indices
        _judge_bisecting(requests[index], client, states[index], may_call)
        done.add(index)
        return
    _check_budget(may_call)
    try:
        reply = client.judge_batch([requests[i] for i in indices])
    except JudgeResponseInvalid as exc:
        weights = [len(requests[i].members) for i in indices]
        for i, share in zip(indices, failed_spend(exc).share(weights), strict=True):
            states[i].spend = states[i].spend + share
            states[i].errors.append(str(exc))
        states[indices[0]].raws.append(exc.raw)
        half = len(indices) // 2
        _judge_group(indices[:half], requests, client, states, done, may_call)
        _judge_group(indices[half:], requests, client, states, done, may_call)
        return
    missing: list[int] = []
    for i, verdict, error, share in zip(indices, reply.verdicts, reply.errors, reply.shares, strict=True):
        states[i].spend = states[i].spend + share
        if verdict is None:
            states[i].errors.append(error)
            missing.append(i)
            continue
        states[i].parts.append((requests[i], replace(verdict, spend=share, tokens=share.tokens, cost=share.cost)))
        done.add(i)
    if missing:
        logger.warning("judge reply left out or garbled %d of %d clusters; asking again", len(missing), len(indices))
        if len(missing) == len(indices):
            states[missing[0]].raws.append(reply.raw)
            half = len(missing) // 2
            _judge_group(missing[:half], requests, client, states, done, may_call)
            _judge_group(missing[half:], requests, client, states, done, may_call)
        else:
            _judge_group(missing, requests, client, states, done, may_call)


def _combine(parts: list[tuple[JudgeRequest, Verdict]], raws: list[str], spend: Spend) -> Verdict | None:
    if not parts:
        return None
    verdicts = [v for _, v in parts]
    return Verdict(
        actions=tuple(a for v in verdicts for a in v.actions),
        reasoning="\n".join(v.reasoning for v in verdicts if v.reasoning),
        raw="\n---\n".join([*dict.fromkeys(v.raw for v in verdicts), *(r for r in raws if r)]),
        model=verdicts[0].model,
        prompt_version=verdicts[0].prompt_version,
        tokens=spend.tokens,
        cost=spend.cost,
        latency_ms=sum(v.latency_ms for v in verdicts),
        llm_calls=spend.calls,
        attempts=sum(v.attempts for v in verdicts),
        spend=spend,
    )


def judge_cluster(*, request: JudgeRequest, client: JudgeClient) -> Verdict:
    """The client's verdict on ``request``, unvalidated (one call; see ``judge_one``).

    Raises what the client raises: ``JudgeUnavailable`` (``JudgeRateLimited``) or
    ``JudgeResponseInvalid``. Makes the client's model calls; writes nothing.
    """
    return client.judge(request)


def judge_one(*, request: JudgeRequest, client: JudgeClient, model_allowed: bool = True) -> Judgement:
    """Judge and validate one cluster (``judge_batch`` of one); never writes."""
    return judge_batch(requests=[request], client=client, model_allowed=model_allowed)[0]


def judge_batch(
    *,
    requests: Sequence[JudgeRequest],
    client: JudgeClient,
    model_allowed: bool = True,
    may_call: Callable[[Spend], bool] | None = None,
    before_model: Callable[[], None] | None = None,
    risk_policy: str | None = None,
) -> list[Judgement]:
    """Judge and validate several clusters of ONE user (aliases unique across them),
    one ``Judgement`` each, in order; never writes (see the module docstring).

    The clusters left for the model after the pre-pass go in one call; the reply is
    validated per cluster, so an action naming a sibling cluster's truth is a foreign
    id. A cluster missing from the reply is asked again (``_judge_group``).
    ``model_allowed=False`` runs the pre-pass only (the model tier was stopped for this
    user). ``may_call(spent)`` is asked before every model call with what this batch
    has spent so far; once it says no, the clusters without an answer are ``deferred``.
    ``before_model`` is called once right before the first model call, never when none
    is made (rule judge, pre-pass settled every cluster): the queue's rate limit waits
    there, and whatever it raises propagates. Raises ``JudgeRateLimited`` only; every
    other failure is in the results.

    ``risk_policy`` (default ``IRIS_CONSOLIDATION_RISK_POLICY``) decides what a model's
    action with signals gets (module docstring, step 3); the second look is one more
    call, made after ``before_model`` is asked again (a refusal there, or any failure of
    the call, keeps the flagged actions' truths as they are). Raises ``ValueError`` for
    an unknown policy.
    """
    policy = _policy(risk_policy, client)
    if not getattr(client, "calls_model", True):
        return _without_model(requests, client)
    judgements, prepasses, model_requests = _prepasses(requests, client, model_allowed=model_allowed)
    judgements.update(
        _model_stage(
            requests,
            model_requests,
            prepasses,
            client,
            may_call=may_call,
            before_model=before_model,
            refuse_signals=policy == "refuse",
        )
    )
    if policy == "verify":
        judgements = verifying.ask_second_look(judgements, model_requests, client, before_model)
    return [judgements[i] for i in range(len(requests))]


def _without_model(requests: Sequence[JudgeRequest], client: JudgeClient) -> list[Judgement]:
    """Each request judged by a judge that calls no model (the rule judge), validated."""
    results = []
    for request in requests:
        verdict = client.judge(request)
        result = validate_at_settings(request, verdict.actions)
        results.append(Judgement(accepted=result.accepted, rejections=result.rejections, verdict=verdict))
    return results


#: A cluster's pre-pass: the rule judge's verdict, its validation, the judgement it alone makes.
_Prepass = tuple[Verdict, validation.ValidationResult, Judgement]


def _prepasses(
    requests: Sequence[JudgeRequest], client: JudgeClient, *, model_allowed: bool
) -> tuple[dict[int, Judgement], dict[int, _Prepass], dict[int, JudgeRequest]]:
    """The pre-pass of every request (``_prepass``), by index: the judgements it settles (no
    two members left for the model, or the model not allowed), every pre-pass, and the
    requests left for the model."""
    judgements: dict[int, Judgement] = {}
    prepasses: dict[int, _Prepass] = {}
    model_requests: dict[int, JudgeRequest] = {}
    for index, request in enumerate(requests):
        prepasses[index], model_request = _prepass(request)
        prepass_only = prepasses[index][2]
        if len(model_request.members) < 2:
            judgements[index] = prepass_only
        elif not model_allowed:
            judgements[index] = _named_model(
                replace(prepass_only, failed=tuple(m.alias for m in model_request.members)), client
            )
        else:
            model_requests[index] = model_request
    return judgements, prepasses, model_requests


def _model_stage(
    requests: Sequence[JudgeRequest],
    model_requests: dict[int, JudgeRequest],
    prepasses: dict[int, _Prepass],
    client: JudgeClient,
    *,
    may_call: Callable[[Spend], bool] | None,
    before_model: Callable[[], None] | None,
    refuse_signals: bool,
) -> dict[int, Judgement]:
    """The judgements of the clusters left for the model (``model_requests``), by index:
    judged in one call (``_judge_group``), deferred once ``may_call`` says no, failed with
    the pre-pass standing when the model is unavailable. Raises ``JudgeRateLimited``."""
    judgements: dict[int, Judgement] = {}
    states = {i: _Bisection() for i in model_requests}
    done: set[int] = set()
    pending = sorted(model_requests)

    def check() -> bool:
        return may_call is None or may_call(sum((st.spend for st in states.values()), Spend()))

    if pending and before_model is not None:
        before_model()
    try:
        if pending:
            _judge_group(pending, model_requests, client, states, done, check)
    except JudgeRateLimited:
        raise
    except _OverBudget:
        judgements.update(_deferred([i for i in pending if i not in done], states))
    except JudgeUnavailable as exc:
        left = [i for i in pending if i not in done]
        failed = _unavailable(left, exc, states, model_requests, {i: prepasses[i][2] for i in left})
        judgements.update({i: _named_model(j, client) for i, j in failed.items()})
    for i in done:
        judgements[i] = _judged(requests[i], prepasses[i][0], prepasses[i][1], states[i], refuse_signals=refuse_signals)
    return judgements


def _policy(risk_policy: str | None, client: JudgeClient) -> str:
    """The risk policy in force (default: the setting); ``refuse`` for a judge that cannot
    be asked a second look. Raises ``ValueError`` for an unknown policy."""
    policy = risk_policy or app_settings.RISK_POLICY
    if policy not in RiskPolicy.values:
        raise ValueError(f"unknown risk policy {policy!r}; choose one of {', '.join(RiskPolicy.values)}")
    if policy == RiskPolicy.VERIFY and not hasattr(client, "second_look"):
        return RiskPolicy.REFUSE  # a judge that cannot be asked again stays conservative
    return policy


def _prepass(request: JudgeRequest) -> tuple[tuple[Verdict, validation.ValidationResult, Judgement], JudgeRequest]:
    """The deterministic pre-pass of one cluster: the rule judge's verdict, its
    validation and the judgement it alone makes; and the request left for the model
    (each pre-pass merge replaced by its keeper, ``after_prepass``)."""
    pre_verdict = rules.RuleJudge().judge(request)
    pre = validate_at_settings(request, pre_verdict.actions)
    merges = [a for a in pre.accepted if a.action == "merge"]
    model_request = after_prepass(request, merges, max_generation=app_settings.MAX_GENERATION)
    prepass_only = Judgement(
        accepted=pre.accepted,
        rejections=pre.rejections,
        prepass=len(pre.accepted),
        verdict=replace(pre_verdict, reasoning=PREPASS_REASONING.format(reasoning=pre_verdict.reasoning)),
    )
    return (pre_verdict, pre, prepass_only), model_request


def _deferred(left: list[int], states: dict[int, _Bisection]) -> dict[int, Judgement]:
    """The clusters without an answer when the run's budget was spent: deferred, each
    with what it spent (``asked_model`` if the model saw it)."""
    return {
        i: Judgement(
            deferred=True,
            spend=states[i].spend,
            error=DEFERRED,
            asked_model=bool(states[i].spend.calls or states[i].spend.tokens or states[i].errors),
        )
        for i in left
    }


def _named_model(judgement: Judgement, client: JudgeClient) -> Judgement:
    """A judgement the model failed (or was not asked) for, naming the judge's model: its
    only verdict is the pre-pass's ("rules"), which would name the rule judge instead."""
    model = judge_identity(getattr(client, "name", ""))[1]
    if judgement.verdict is None or not model:
        return judgement
    return replace(judgement, verdict=replace(judgement.verdict, model=model))


def _unavailable(
    left: list[int], exc: JudgeUnavailable, states: dict[int, _Bisection], model_requests: dict[int, JudgeRequest],
    prepass_only: dict[int, Judgement],
) -> dict[int, Judgement]:
    """The clusters without an answer when the model was found unreachable: the pre-pass
    applies, the rest failed; the failed call's spend goes to the first of them."""
    judgements = {}
    for n, i in enumerate(left):
        judgements[i] = replace(
            prepass_only[i],
            failed=tuple(m.alias for m in model_requests[i].members),
            error=JUDGE_UNAVAILABLE.format(error=exc),
            unavailable=True,
            spend=states[i].spend + (failed_spend(exc) if n == 0 else Spend()),
            asked_model=True,
        )
    return judgements


def _judged(
    request: JudgeRequest,
    pre_verdict: Verdict,
    pre: validation.ValidationResult,
    state: _Bisection,
    *,
    refuse_signals: bool,
) -> Judgement:
    """The judgement of a cluster whose model stage finished (every part answered or failed)."""
    accepted = list(pre.accepted)
    rejections = list(pre.rejections)
    for sub_request, verdict in state.parts:
        result = validate_at_settings(sub_request, verdict.actions, refuse_signals=refuse_signals)
        accepted.extend(result.accepted)
        rejections.extend(result.rejections)
    combined = _combine(state.parts, state.raws, state.spend)
    if combined is not None:
        notes = [PREPASS_REASONING.format(reasoning=pre_verdict.reasoning)] if pre.accepted else []
        combined = replace(
            combined,
            actions=(*pre_verdict.actions, *combined.actions),
            reasoning="\n".join([*notes, combined.reasoning]),
        )
    else:
        combined = replace(
            pre_verdict,
            reasoning=PREPASS_REASONING.format(reasoning=pre_verdict.reasoning),
            raw="\n---\n".join(state.raws),
            spend=state.spend,
            tokens=state.spend.tokens,
            cost=state.spend.cost,
            llm_calls=state.spend.calls,
        )
    error = ""
    if state.failed:
        error = JUDGE_INVALID.format(aliases=", ".join(state.failed), error=state.errors[-1])
    return Judgement(
        accepted=tuple(accepted),
        rejections=tuple(rejections),
        prepass=len(pre.accepted),
        verdict=combined,
        failed=tuple(state.failed),
        error=error,
        spend=state.spend,
        asked_model=True,
    )
