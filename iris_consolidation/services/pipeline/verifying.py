"""The second look (risk policy ``verify``, the default with a model): every action of a
batch that passed the invariants but raised a signal goes back to the model in ONE call
(``llm/second_look.py``); only a confirmation with a reason applies it (or the part of it
the confirmation names, checked again against the invariants). A withdrawal, a missing or
unreadable answer, a failed or rate-limited call keep its truths as they are, recorded with
a ``SECOND_LOOK_*`` code.

``judging.judge_batch`` asks it (``ask_second_look``) once the batch's model stage is done.
The call happens outside any transaction; nothing here writes.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace

from ...exceptions import JudgeResponseInvalid, JudgeUnavailable
from ...llm import second_look
from ...llm.base import Action, JudgeClient, JudgeRequest, Spend
from . import validation
from .judgement import Judgement, failed_spend, validate_at_settings

SECOND_LOOK_WITHDRAWN = "The second look withdrew the action: {reason}"
SECOND_LOOK_MISSING = "The second look gave no confirmation for the action (concern: {concern})."
SECOND_LOOK_PART = "The second look confirmed only {part}; {rest} stay as they are: {reason}"
SECOND_LOOK_NOT_A_PART = "The second look confirmed {part}, not a part of the action; nothing applies: {reason}"
SECOND_LOOK_FAILED = "The second look could not be asked ({error}); the action is kept for a later run."

logger = logging.getLogger(__name__)


def ask_second_look(
    judgements: dict[int, Judgement],
    requests: dict[int, JudgeRequest],
    client: JudgeClient,
    before_model: Callable[[], None] | None,
) -> dict[int, Judgement]:
    """Ask the model once about every flagged action (one with signals) of the batch's
    ``judgements`` (cluster index -> judgement, ``requests`` the model's request of each);
    only a confirmation applies one (see the module docstring). Returns the judgements,
    updated: each asked cluster's share of the call's spend added, ``unsettled`` when the
    call failed. ``before_model`` is called right before the call; whatever it or the call
    raises keeps the flagged actions' truths as they are. Makes one model call; writes
    nothing."""
    checks, owners = _checks(judgements, requests)
    if not checks:
        return judgements
    answers, error, spend, raw = _ask(checks, client, before_model)
    weights = {i: owners.count(i) for i in dict.fromkeys(owners)}
    shares = dict(zip(weights, spend.share(list(weights.values())), strict=True))
    # Each check by the action it asks about (the very object in ``accepted``).
    check_of = {id(c.action): c for c in checks}
    updated = dict(judgements)
    for i in weights:
        judgement = judgements[i]
        accepted: list[Action] = []
        rejections = list(judgement.rejections)
        for action in judgement.accepted:
            check = check_of.get(id(action))
            answer = answers.get(check.alias) if check is not None else None
            if check is None:
                accepted.append(action)
                continue
            kept, refused = _answered(action, check, answer, error, requests[i])
            accepted.extend(kept)
            rejections.extend(refused)
        verdict = judgement.verdict
        if verdict is not None and raw:
            verdict = replace(verdict, raw="\n---\n".join(r for r in (verdict.raw, raw) if r))
        updated[i] = replace(
            judgement,
            accepted=tuple(accepted),
            rejections=tuple(rejections),
            verdict=verdict,
            spend=judgement.spend + shares[i],
            unsettled=bool(error),
        )
    return updated


def _checks(
    judgements: dict[int, Judgement], requests: dict[int, JudgeRequest]
) -> tuple[list[second_look.Check], list[int]]:
    """A check for each flagged action, in cluster order (aliases v1, v2, ...), and the
    cluster index each one belongs to."""
    checks: list[second_look.Check] = []
    owners: list[int] = []
    for i in sorted(judgements):
        for action in judgements[i].accepted:
            if not action.signals:
                continue
            named = set(action.members())
            truths = tuple(m for m in requests[i].members if m.alias in named)
            concern = " ".join(s.concern for s in action.signals)
            checks.append(second_look.Check(alias=f"v{len(checks) + 1}", action=action, truths=truths, concern=concern))
            owners.append(i)
    return checks, owners


def _ask(
    checks: list[second_look.Check], client: JudgeClient, before_model: Callable[[], None] | None
) -> tuple[dict[str, second_look.Answer], str, Spend, str]:
    """The model's answers to ``checks`` (by check alias) in one call, the error that kept
    it from answering ("" if none), what the call cost and its raw reply."""
    answers: dict[str, second_look.Answer] = {}
    error, spend, raw = "", Spend(), ""
    try:
        if before_model is not None:
            before_model()
        reply = client.second_look(checks)  # type: ignore[attr-defined]
        answers, spend, raw = reply.answers, reply.spend, reply.raw
    except (JudgeUnavailable, JudgeResponseInvalid) as exc:  # JudgeRateLimited included
        error, spend = str(exc), failed_spend(exc)
        logger.warning("second look failed for %d action(s): %s", len(checks), exc)
    except Exception as exc:  # the queue's throttle said no (its own exception): ask in a later run
        error = type(exc).__name__
        logger.warning("second look not asked for %d action(s): %s", len(checks), error)
    return answers, error, spend, raw


def _answered(
    action: Action, check: second_look.Check, answer: second_look.Answer | None, error: str, request: JudgeRequest
) -> tuple[list[Action], list[validation.Rejection]]:
    """What the second look's ``answer`` to ``check`` makes of its ``action``: the actions to
    apply (the action confirmed, or the part of it confirmed) and the rejections to record
    (withdrawn, failed when the call failed with ``error``, else missing)."""
    if answer is not None and answer.confirmed and answer.part:
        return _confirmed_part(action, answer, request)
    if answer is not None and answer.confirmed:
        return [replace(action, second_look=answer.reason)], []
    if answer is not None and answer.verdict == "withdraw":
        code, reason = validation.Code.SECOND_LOOK_WITHDRAWN, SECOND_LOOK_WITHDRAWN.format(
            reason=answer.reason or "no reason given"
        )
    elif error:
        code, reason = validation.Code.SECOND_LOOK_FAILED, SECOND_LOOK_FAILED.format(error=error)
    else:
        code, reason = validation.Code.SECOND_LOOK_MISSING, SECOND_LOOK_MISSING.format(concern=check.concern)
    return [], [validation.Rejection(action=action, code=code, reason=reason)]


def _confirmed_part(
    action: Action, answer: second_look.Answer, request: JudgeRequest
) -> tuple[list[Action], list[validation.Rejection]]:
    """The part of ``action`` that a second look confirmed (``answer.part``), as the
    actions to apply and the rejections to record.

    The part must be a part of the action: a subset of a supersede's old truths, or two or
    more of a merge's truths (with the answer's content, else the action's). It passes the
    validator's invariants again, so a confirmation cannot carry what the validator refuses
    (a merged text that drops or invents a detail for the part it names). The rest of the
    action is recorded as withdrawn; its truths stay as they are."""
    whole = action.old if action.action == "supersede" else action.ids
    if not set(answer.part) <= set(whole):
        reason = SECOND_LOOK_NOT_A_PART.format(part=", ".join(answer.part), reason=answer.reason)
        return [], [validation.Rejection(action=action, code=validation.Code.SECOND_LOOK_MISSING, reason=reason)]
    part = tuple(alias for alias in whole if alias in answer.part)  # in the action's order
    if action.action == "supersede":
        narrowed = replace(action, old=part, signals=(), second_look=answer.reason)
    else:
        content = answer.content or action.content
        narrowed = replace(action, ids=part, content=content, signals=(), second_look=answer.reason)
    if set(part) == set(whole) and narrowed.content == action.content:
        return [replace(action, second_look=answer.reason)], []
    result = validate_at_settings(request, (narrowed,), refuse_signals=False)
    rest = [alias for alias in whole if alias not in part]
    refused = list(result.rejections)
    if rest:
        reason = SECOND_LOOK_PART.format(part=", ".join(part), rest=", ".join(rest), reason=answer.reason)
        refused.append(validation.Rejection(action=action, code=validation.Code.SECOND_LOOK_WITHDRAWN, reason=reason))
    # The part keeps its own signals (those the second look was asked about, as they apply to it).
    return [replace(a, second_look=answer.reason) for a in result.accepted], refused
