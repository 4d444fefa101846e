"""What the judge tier decides about one cluster (``Judgement``), and the two rules both of
its stages share: the model stage (``judging``) and the second look (``verifying``).

A verdict's actions are validated at the settings (``validate_at_settings``), and a model
call that failed still costs what it spent (``failed_spend``). Nothing here calls a model
or writes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ...conf import app_settings
from ...exceptions import ModelCallError
from ...llm.base import Action, JudgeRequest, Spend, Verdict
from . import validation


@dataclass(frozen=True, kw_only=True)
class Judgement:
    """What the judge tier decided about one cluster, validated, ready to apply.

    ``accepted`` is in apply order: the first ``prepass`` actions come from the
    pre-pass; a later action may name a pre-pass keeper, which then stands for the
    pre-pass result. ``verdict`` combines every proposal and the figures of every
    model call (None if no judge answered). ``failed`` lists the aliases whose
    judgement failed; ``error`` says why; ``unavailable`` is True when the model could
    not be reached (the caller stops the model tier for this user). ``deferred`` is
    True when the run's budget ran out before the model answered for this cluster:
    nothing of it is applied, not even the pre-pass; the next run judges it.
    ``spend`` is this cluster's part of every model call it took part in.
    """

    accepted: tuple[Action, ...] = ()
    rejections: tuple[validation.Rejection, ...] = ()
    prepass: int = 0
    verdict: Verdict | None = None
    failed: tuple[str, ...] = ()
    error: str = ""
    unavailable: bool = False
    deferred: bool = False
    spend: Spend = field(default_factory=Spend)
    #: Whether the cluster's members went to the model in at least one call.
    asked_model: bool = False
    #: True when a second look for this cluster could not be asked (failed, rate-limited):
    #: its flagged actions were kept, so the verdict must not be cached as a "keep".
    unsettled: bool = False

    @property
    def llm_calls(self) -> int:
        return self.spend.calls


def validate_at_settings(
    request: JudgeRequest, actions: tuple[Action, ...], *, refuse_signals: bool = True
) -> validation.ValidationResult:
    """``validation.validate`` of ``actions`` on ``request`` at the settings' content length
    and generation limit (``refuse_signals``: refuse an action with signals). Pure."""
    return validation.validate(
        request,
        actions,
        max_length=app_settings.MAX_CONTENT_LENGTH,
        max_generation=app_settings.MAX_GENERATION,
        refuse_signals=refuse_signals,
    )


def failed_spend(exc: ModelCallError) -> Spend:
    """What a failed call cost (``ModelCallError.spend``; one call if it says nothing)."""
    if exc.spend is not None and exc.spend.calls:
        return exc.spend
    return Spend(calls=exc.llm_calls)
