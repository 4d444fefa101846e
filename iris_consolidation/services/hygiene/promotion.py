"""The promote stage (iii's rule promotion): standing instructions become learned rules.

Truths of a user that are live, not pointers, backed by at least
``IRIS_CONSOLIDATION_PROMOTE_THRESHOLD`` (3) corroborations and not yet the source of a
learned rule are offered to the model in one call (``{"candidates": [{"id", "content"}]}``
-> ``{"rules": [{"id", "rule", "reason"}]}``, docs/llm.md). The entries it names are
appended to the user's auto-managed ``LearnedRule`` list as one line each:

- only ids it was offered count (any other is refused and recorded);
- a rule whose fingerprint (sha256 of its normalised text) the user already has, auto or
  hand-authored, is not added again; nothing is ever edited or deleted (append-only), and a
  hand-authored rule is never touched;
- the truth stays live (it is still a truth about the person) and is linked to its rule.

A candidate the model does not name is "not a rule": that answer is remembered per truth
text, model and prompt version (``answers``), so a later pass asks only about what changed.

Offline (no model) the stage does nothing and reports "skipped: no LLM".
"""

from __future__ import annotations

import hashlib
import logging
import re
from dataclasses import dataclass, field
from typing import Any

from django.db import IntegrityError, transaction

from ...conf import app_settings
from ...exceptions import JudgeRateLimited, JudgeResponseInvalid, JudgeUnavailable
from ...llm import hygiene as prompts
from ...models import ConsolidationRun, LearnedRule, Truth
from . import answers, budget
from .relocation import is_pointer

logger = logging.getLogger(__name__)

NO_LLM = "skipped: no LLM"
DUPLICATE = "already a learned rule (#{rule}{hand})"


def fingerprint(text: str) -> str:
    """sha256 of ``text`` lower-cased, punctuation removed, spaces collapsed."""
    normal = " ".join(re.sub(r"[^\w\s]", " ", text.lower()).split())
    return hashlib.sha256(normal.encode()).hexdigest()


def candidates(user_id: int) -> list[Truth]:
    """Live truths at or above the threshold that no learned rule came from and that are not
    note pointers (``relocation.is_pointer``), oldest first."""
    threshold = int(app_settings.PROMOTE_THRESHOLD)
    rows = (
        Truth.objects.for_user(user_id).filter(corroborations__gte=threshold, learned_rules__isnull=True)
        .alias(pointer=is_pointer()).filter(pointer=False).order_by("created_at", "id")
    )
    return list(rows)


@dataclass(kw_only=True)
class PromotionResult:
    """Per user: candidates offered, rules proposed (with what became of each), refusals."""

    offered: int = 0
    proposals: list[dict[str, Any]] = field(default_factory=list)
    refused: list[dict[str, Any]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    skipped: str = ""
    #: Candidates sent to the model in ``calls`` calls, and those not sent again because
    #: their "not a rule" is remembered (``answers``).
    asked: int = 0
    calls: int = 0
    remembered: int = 0
    #: Candidates not asked about: the run's budget reached the stage's ceiling (``budget``).
    deferred: int = 0

    def asked_head(self) -> dict[str, int]:
        """What the model was asked, for the stage's findings."""
        return {"asked": self.asked, "calls": self.calls, "remembered": self.remembered, "deferred": self.deferred}


#: Why a candidate the model did not name is not a rule (its remembered answer).
NOT_A_RULE = "not a standing instruction, by the model"


def propose_rules(
    *, run: ConsolidationRun, user_id: int, client: Any | None
) -> tuple[PromotionResult, list[tuple[Truth, str, str]]]:
    """Ask the model about the user's candidates; returns the result and the rules to add
    as ``(truth, rule, reason)``. Writes nothing but the run's model-spend counters and the
    remembered answers (``answers``): a candidate the model did not name is not asked about
    again until its text, the prompt or the model changes."""
    result = PromotionResult()
    if client is None:
        result.skipped = NO_LLM
        return result, []
    truths = candidates(user_id)
    result.offered = len(truths)
    identity: dict[str, Any] = {"stage": answers.PROMOTE, "user_id": user_id,
                                "model": str(getattr(client, "model", "") or ""),
                                "prompt_version": prompts.PROMOTE_PROMPT_VERSION}
    known = answers.remembered(**identity, contents=[t.content for t in truths])
    asking = [t for t in truths if t.content not in known]
    result.remembered = len(truths) - len(asking)
    if not asking:
        return result, []
    if not budget.may_call(run, "promote", client):
        result.deferred = len(asking)
        return result, []
    result.asked, result.calls = len(asking), 1
    aliases = {f"r{i}": t for i, t in enumerate(asking, start=1)}
    data = {"candidates": [{"id": a, "content": t.content} for a, t in aliases.items()]}
    try:
        (items, refused), spend = client.ask_json(
            prompts.messages_for(prompts.PROMOTE_SYSTEM, data),
            lambda raw: prompts.parse_promotion(raw, offered=set(aliases)),
        )
    except (JudgeResponseInvalid, JudgeUnavailable, JudgeRateLimited) as exc:
        ConsolidationRun.objects.filter(pk=run.pk).add_spend(exc.spend)
        result.errors.append(f"model call failed: {exc}")
        return result, []
    ConsolidationRun.objects.filter(pk=run.pk).add_spend(spend)
    result.refused = [{"entry": r.entry, "why": r.why} for r in refused]
    # A candidate the model left out is "not a rule", remembered; one in a refused entry is asked again.
    named = {i.id for i in items} | {str(r.entry.get("id")) for r in refused}
    answers.remember(**identity, answers={t.content: NOT_A_RULE for a, t in aliases.items() if a not in named})
    return result, [(aliases[i.id], i.rule, i.reason) for i in items]


def append(
    *, run: ConsolidationRun, user_id: int, rules: list[tuple[Truth, str, str]], result: PromotionResult,
    write: bool, model: str,
) -> int:
    """Append the new rules (``write``) or list them; returns how many were (or would be)
    added. Existing rules are read, never changed. One transaction."""
    added = 0
    if not rules:  # nothing proposed (the rule judge's pass): no rule to read
        return added
    with transaction.atomic():
        known = {r.fingerprint: r for r in LearnedRule.objects.filter(user_id=user_id)}
        for truth, text, reason in rules:
            mark = fingerprint(text)
            entry = {"truth_id": truth.pk, "content": truth.content, "rule": text, "reason": reason}
            if mark in known:
                rule = known[mark]
                entry["outcome"] = "skipped"
                entry["why"] = DUPLICATE.format(rule=rule.pk, hand=", hand-authored" if rule.hand_authored else "")
                if write and not rule.hand_authored:
                    rule.source_truths.add(truth)  # a new source of the same rule; the rule stays as it is
                result.proposals.append(entry)
                continue
            if write:
                try:
                    with transaction.atomic():
                        rule = LearnedRule.objects.create(user_id=user_id, text=text, fingerprint=mark, reason=reason,
                                                          model=model, run=run)
                except IntegrityError:  # a concurrent pass added it first
                    entry["outcome"], entry["why"] = "skipped", DUPLICATE.format(rule="?", hand="")
                    result.proposals.append(entry)
                    continue
                rule.source_truths.add(truth)
                known[mark] = rule
                entry["rule_id"] = rule.pk
            else:
                known[mark] = LearnedRule(text=text, fingerprint=mark)
            entry["outcome"] = "added" if write else "would add"
            added += 1
            result.proposals.append(entry)
    return added
