"""Noise: truths that should never have been stored (rho's auto-remove categories).

Two nets, one deterministic detector (``noise_rules``: the patterns, guards and
categories of rho's memory-consolidate SOP, in English):

- the **sure** tier, high precision: patterns that need the vocabulary of software
  work (a version string, "the nightly job failed", "no bugs found" about a module,
  "px"). Under the rule judge only this tier retires, offline.
- the **suspect** tier, wide: every category again in looser words. The rules never
  retire a suspect; they list it in the report.

A guard (a preference, a lesson or root cause, a standing instruction, a fact about
the person: age, family, studies, races, sport) keeps a text out of both tiers.
Never a preference (``kind`` preference) and never a protected truth: the stage
selects consolidatable truths of other kinds only.

**With an LLM judge** (``confirm``), both tiers go to the model, and only those, in
batches of ``PER_CALL`` (one call each, ``LiteLLMJudge.classify_noise``; the truths
travel as quoted JSON data, never as instructions, each with its category and tier as
hints) for rho's "30-day test": would this still matter in 30 days? The model decides
what the rules only suspect. A candidate is noise only when the model says "noise"
with a reason; a "keep", a candidate left out or garbled, a malformed or cut-off
reply, or a call that fails keeps it (keep on doubt), whatever its tier. The call is
made in ``report`` mode too, so that the report lists what ``apply`` would retire.

Writes nothing: ``stages.run_noise`` retires (apply mode) through ``retire.retire``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ...exceptions import JudgeResponseInvalid, JudgeUnavailable
from ...llm.base import NoiseCandidate, NoiseReply, Spend
from ...models import Truth
from ..pipeline.forecast import FORECAST_ONLY
from .noise_rules import SURE, SUSPECT, TIER_SURE, TIER_SUSPECT, NoiseMatch, detect

__all__ = [
    "CATEGORIES", "SUSPECT", "TIER_SURE", "TIER_SUSPECT", "NoiseMatch", "confirm", "detect", "find_noise", "sure_only",
]

logger = logging.getLogger(__name__)

#: Candidates per classification call: a few hundred tokens each way per call, and a
#: failed call keeps only its own batch.
PER_CALL = 20

#: The categories and the sure tier's patterns (``noise_rules``), re-exported.
CATEGORIES = SURE


def find_noise(truths: list[Truth]) -> list[tuple[Truth, NoiseMatch]]:
    """The noise among ``truths`` (callers pass consolidatable truths); preferences are
    never noise."""
    found = []
    for truth in truths:
        if truth.kind == "preference":
            continue
        match = detect(truth.content)
        if match is not None:
            found.append((truth, match))
    return found


def sure_only(found: Sequence[tuple[Truth, NoiseMatch]]) -> list[tuple[Truth, NoiseMatch]]:
    """What the rule judge retires among ``found``: the sure tier's matches, in order."""
    return [(t, m) for t, m in found if m.tier == TIER_SURE]


#: What the model said about a candidate (``Confirmation.decisions``).
MODEL_NOISE = "noise"
MODEL_KEEP = "keep"
MODEL_ERROR = "error"
#: The reason of a candidate left undecided because the run's budget was spent.
MODEL_DEFERRED = "deferred: the run's budget reached the noise stage's ceiling"


@dataclass(kw_only=True)
class Confirmation:
    """The model's classification of the detector's candidates.

    ``decisions`` maps a truth id to ``(MODEL_NOISE | MODEL_KEEP | MODEL_ERROR, reason)``
    (the reason is the model's, or the error of the call that left it undecided);
    ``spend`` sums every call; ``model`` and ``prompt_version`` name what was asked."""

    decisions: dict[int, tuple[str, str]] = field(default_factory=dict)
    spend: Spend = field(default_factory=Spend)
    model: str = ""
    prompt_version: str = ""
    errors: int = 0
    #: Candidates not asked about: ``may_call`` said no (the run's budget), kept.
    deferred: int = 0

    def confirmed(self, found: Sequence[tuple[Truth, NoiseMatch]]) -> list[tuple[Truth, NoiseMatch]]:
        """The members of ``found`` the model confirmed as noise, in order."""
        return [(t, m) for t, m in found if self.decisions.get(t.pk, (MODEL_ERROR, ""))[0] == MODEL_NOISE]


def confirm(
    found: Sequence[tuple[Truth, NoiseMatch]],
    classify: Callable[[Sequence[NoiseCandidate]], NoiseReply],
    *,
    per_call: int = PER_CALL,
    may_call: Callable[[], bool] | None = None,
) -> Confirmation:
    """Ask ``classify`` (``LiteLLMJudge.classify_noise``) about the detector's candidates,
    ``per_call`` at a time (aliases n1, n2, ... per call). Never raises for a model's
    failure: a call that fails (``JudgeUnavailable``, ``JudgeResponseInvalid``) keeps its
    candidates, recorded as ``MODEL_ERROR`` with the error. ``may_call`` (the run's budget,
    ``budget.may_call``) is asked before each call: once it says no, the rest are kept,
    undecided (``MODEL_DEFERRED``), and counted in ``deferred``."""
    result = Confirmation()
    for start in range(0, len(found), per_call):
        batch = list(found[start : start + per_call])
        by_alias = {f"n{i + 1}": truth for i, (truth, _) in enumerate(batch)}
        if may_call is not None and (result.deferred or not may_call()):
            # The run's budget: this batch and the rest are kept, undecided, for a later pass.
            result.deferred += len(batch)
            for truth in by_alias.values():
                result.decisions[truth.pk] = (MODEL_ERROR, MODEL_DEFERRED)
            continue
        candidates = [
            NoiseCandidate(alias=alias, content=truth.content, kind=truth.kind, category=match.category,
                           tier=match.tier)
            for alias, (truth, match) in zip(by_alias, batch, strict=True)
        ]
        try:
            reply = classify(candidates)
        except (JudgeUnavailable, JudgeResponseInvalid) as exc:
            if str(exc) != FORECAST_ONLY:  # an estimate counts the call and makes none: no failure
                logger.warning("noise classification failed; %d candidate(s) kept: %s", len(batch), exc)
            if exc.spend is not None:
                result.spend = result.spend + exc.spend
            result.errors += 1
            for truth in by_alias.values():
                result.decisions[truth.pk] = (MODEL_ERROR, f"{type(exc).__name__}: {exc}"[:300])
            continue
        result.spend = result.spend + reply.spend
        result.model, result.prompt_version = reply.model, reply.prompt_version
        for alias, truth in by_alias.items():
            if alias in reply.noise:
                result.decisions[truth.pk] = (MODEL_NOISE, reply.noise[alias])
            else:
                result.decisions[truth.pk] = (MODEL_KEEP, reply.reasons.get(alias, "not confirmed: kept on doubt"))
    return result
