"""Apply a validated verdict atomically and record the cluster's review.

``record_review`` is the only write path of phase 2. In one transaction it locks the
run row and the member rows (``select_for_update``, ids in ascending order so two
workers never deadlock), drops any action whose members changed since the judge
saw them (freshness), enforces the per-run retirement cap, applies the rest, writes
the ``ClusterReview`` and one ``LineageEvent`` per retired truth, and updates the
run's counters. Rows are never deleted: sources are retired with ``superseded_by``.
It is idempotent: a review already recorded for the same run and cluster key is
returned unchanged, so a task delivered twice applies its verdict once.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from ...conf import app_settings
from ...llm.base import Action, Spend, Verdict
from ...models import ClusterReview, ConsolidationRun, LineageEvent, Origin, RetiredReason, Truth
from ..hygiene import bookkeeping
from ..operations import live_settings
from . import truth_events
from .validation import Code, Rejection

logger = logging.getLogger(__name__)

STALE_MEMBER = "{alias!r} changed or was retired after the judge saw it; the action was dropped."
CAP_REACHED = (
    "The run reached its cap of {cap} retirements (IRIS_CONSOLIDATION_MAX_RETIREMENTS_PER_RUN); "
    "this action waits for the next run."
)


@dataclass(frozen=True, kw_only=True)
class ReviewDraft:
    """Everything phase 2 learnt about one cluster before writing.

    ``snapshot`` holds the members as judged (alias, id, content, updated_at, ...);
    ``embeddings`` maps each merged content to its fresh vector. The first ``prepass``
    accepted actions come from the deterministic pre-pass; a later action naming a
    member of a pre-pass merge acts on that merge's result. ``failed`` lists the
    aliases whose judgement failed; ``llm_calls`` counts every model call made.
    ``stale_reason`` says why the cluster was not judged at all because its members
    changed before judging (outcome ``STALE``: no error, not a failure of the run).
    ``deferred_reason`` says why the cluster was left for the next run unjudged (the
    run's budget was spent; outcome ``DEFERRED``: nothing applied, not a failure).
    ``spend`` is the cluster's part of the model calls it took part in (``llm_calls``
    adds calls known without a usage block); ``asked_model``: it went to the model.
    """

    run_id: Any
    user_id: int
    key: str
    snapshot: tuple[dict[str, Any], ...]
    similarities: dict[str, float]
    judge: str
    verdict: Verdict | None = None
    accepted: tuple[Action, ...] = ()
    rejections: tuple[Rejection, ...] = ()
    prepass: int = 0
    failed: tuple[str, ...] = ()
    error: str = ""
    failure: str = ""
    stale_reason: str = ""
    deferred_reason: str = ""
    embeddings: dict[str, Any] = field(default_factory=dict)
    llm_calls: int = 0
    spend: Spend = field(default_factory=Spend)
    asked_model: bool = False

    def member_id(self, alias: str) -> int:
        for row in self.snapshot:
            if row["alias"] == alias:
                return int(row["id"])
        raise KeyError(alias)


def _is_fresh(truth: Truth | None, row: dict[str, Any], *, retiring: bool, max_generation: int) -> bool:
    if truth is None or truth.retired_at is not None:
        return False
    if truth.content != row["content"] or truth.updated_at.isoformat() != row["updated_at"]:
        return False
    if retiring and truth.is_protected(max_generation=max_generation):
        return False
    return True


def _retire(truth: Truth, *, into: Truth, reason: str, now: Any) -> None:
    truth.retired_at = now
    truth.superseded_by = into
    truth.retired_reason = reason
    truth.save(update_fields=["retired_at", "superseded_by", "retired_reason", "updated_at"])


def _merged_truth(action: Action, sources: Sequence[Truth], embedding: Any, embedding_model: str) -> Truth:
    """The new consolidated truth of a merge (docs/pipeline.md, phase 2, "Apply")."""
    provenance: list[str] = []
    for s in sorted(sources, key=lambda t: (t.created_at, t.pk)):
        for line in s.source.splitlines():
            if line and line not in provenance:
                provenance.append(line)
    kinds = [s.kind for s in sources]
    truth = Truth(
        user_id=sources[0].user_id,
        content=action.content.strip(),
        origin=Origin.CONSOLIDATED,
        kind=max(set(kinds), key=kinds.count),
        generation=max(s.generation for s in sources) + 1,
        score=max(s.score for s in sources),
        corroborations=sum(s.corroborations for s in sources),
        source="\n".join(provenance),
        created_at=max(s.created_at for s in sources),
        embedding=embedding,
        embedding_model=embedding_model if embedding is not None else "",
        **bookkeeping.merged_fields(sources, retired=len(sources) - 1),
    )
    truth.full_clean(exclude=["embedding", "user", "superseded_by"])
    truth.save()
    return truth


def outcome_counter(outcome: str, rejections: Sequence[Rejection]) -> str | None:
    """The run counter a review of ``outcome`` adds one to: ``kept``, ``rejected``,
    ``stale`` or ``deferred`` (left unjudged because the run's budget was spent, or refused
    only because the run reached its retirement cap),
    or None (applied or previewed clusters count their actions; failed ones ``failed``).

    Each cluster counts once: "kept" used to include rejected and stale ones.
    """
    if outcome == ClusterReview.Outcome.KEPT:
        return "kept"
    if outcome == ClusterReview.Outcome.STALE:
        return "stale"
    if outcome == ClusterReview.Outcome.DEFERRED:
        return "deferred"
    if outcome == ClusterReview.Outcome.REJECTED:
        if rejections and all(r.code == Code.CAP_REACHED for r in rejections):
            return "deferred"
        return "rejected"
    return None


def record_review(*, draft: ReviewDraft, dry_run: bool, embedding_model: str = "", actor: str = "") -> ClusterReview:
    """Apply ``draft.accepted`` (unless ``dry_run``) and record the review; see module doc.

    Transaction: one, around everything. Side effects: one ``TruthChange`` row per
    changed truth, and ``truth_changed`` signals after commit. The retirement cap is
    the run's (``live_settings.retirement_cap``). Returns the new (or already
    existing) ``ClusterReview``.
    """
    max_generation = app_settings.MAX_GENERATION
    changed: list[tuple[Truth, str, str]] = []
    with transaction.atomic():
        run = ConsolidationRun.objects.select_for_update().get(pk=draft.run_id)
        cap = live_settings.retirement_cap(run)
        existing = ClusterReview.objects.filter(run=run, key=draft.key).first()
        if existing is not None:
            return existing
        ids = sorted(int(row["id"]) for row in draft.snapshot)
        locked = {t.pk: t for t in Truth.all_objects.select_for_update().filter(pk__in=ids).order_by("pk")}
        rows = {row["alias"]: row for row in draft.snapshot}

        rejections = list(draft.rejections)
        applied: list[dict[str, Any]] = []
        retired_count = 0
        events: list[LineageEvent] = []
        now = timezone.now()
        # alias -> the truth it stands for now; a pre-pass merge moves its members'
        # aliases onto its result, so that a later action acts on the merged truth.
        current = {alias: locked.get(int(row["id"])) for alias, row in rows.items()}
        moved: set[str] = set()
        accepted = () if draft.deferred_reason else draft.accepted
        for index, action in enumerate(accepted):
            if action.action == "merge":
                protected = [
                    a for a in action.ids
                    if (current[a].is_protected(max_generation=max_generation) if a in moved else rows[a]["protected"])
                ]
                retiring = [a for a in action.ids if a not in protected]
            else:
                protected = []
                retiring = list(action.old)
            stale = [
                a
                for a in action.members()
                if a not in moved
                and not _is_fresh(current[a], rows[a], retiring=a in retiring, max_generation=max_generation)
            ]
            if stale:
                reason = STALE_MEMBER.format(alias=stale[0])
                rejections.append(Rejection(action=action, code=Code.STALE_MEMBER, reason=reason))
                continue
            if run.retired + retired_count + len(retiring) > cap:
                rejections.append(Rejection(action=action, code=Code.CAP_REACHED, reason=CAP_REACHED.format(cap=cap)))
                continue
            entry: dict[str, Any] = {
                **action.as_wire(),
                "stage": "prepass" if index < draft.prepass else "judge",
                "truth_ids": {a: current[a].pk for a in action.members()},  # type: ignore[union-attr]
            }
            retired_count += len(retiring)
            if dry_run:
                applied.append(entry)
                continue
            sources = [current[a] for a in action.members()]
            if action.action == "merge":
                if protected:
                    result = current[protected[0]]
                    # The protected keeper is never reworded, but it takes the merge's
                    # bookkeeping (tags, uses, validation, relevance) of what it absorbs.
                    bookkeeping.absorb(result, sources=sources, retired=len(retiring))
                else:
                    embedding = draft.embeddings.get(action.content.strip())
                    result = _merged_truth(action, sources, embedding, embedding_model)
                    changed.append((result, "created", action.reason))
                reason = RetiredReason.MERGED
                kind = LineageEvent.Action.MERGE
            else:
                result = current[action.new]
                reason = RetiredReason.SUPERSEDED
                kind = LineageEvent.Action.SUPERSEDE
            for alias in retiring:
                source = current[alias]
                _retire(source, into=result, reason=reason, now=now)
                changed.append((source, "retired", action.reason))
                events.append(
                    LineageEvent(
                        action=kind, source=source, result=result, reason=action.reason, actor=actor or draft.judge
                    )
                )
            if action.action == "merge":
                for alias in action.ids:
                    current[alias] = result
                    moved.add(alias)
            entry["result_id"] = result.pk
            applied.append(entry)

        if draft.deferred_reason:
            outcome = ClusterReview.Outcome.DEFERRED
        elif applied:
            outcome = ClusterReview.Outcome.PREVIEW if dry_run else ClusterReview.Outcome.APPLIED
        elif draft.error:
            outcome = ClusterReview.Outcome.FAILED
        elif draft.stale_reason:
            outcome = ClusterReview.Outcome.STALE
        elif rejections:
            stale_only = all(r.code == Code.STALE_MEMBER for r in rejections)
            outcome = ClusterReview.Outcome.STALE if stale_only else ClusterReview.Outcome.REJECTED
        else:
            outcome = ClusterReview.Outcome.KEPT
        verdict = draft.verdict
        spend = draft.spend
        calls = spend.calls or draft.llm_calls or (verdict.llm_calls if verdict else 0)
        review = ClusterReview.objects.create(
            run=run,
            user_id=draft.user_id,
            key=draft.key,
            snapshot=list(draft.snapshot),
            similarities=draft.similarities,
            actions=[a.as_wire() for a in verdict.actions] if verdict else [],
            applied_actions=applied,
            rejections=[r.as_dict() for r in rejections],
            reasoning=verdict.reasoning if verdict else "",
            proposed_content="\n".join(a.content for a in verdict.actions if a.action == "merge") if verdict else "",
            outcome=outcome,
            applied=bool(applied) and not dry_run,
            skip_reason=draft.stale_reason
            or draft.deferred_reason
            or ("; ".join(r.reason for r in rejections) if not applied else ""),
            judge=draft.judge,
            model=verdict.model if verdict else "",
            prompt_version=verdict.prompt_version if verdict else "",
            tokens=spend.tokens,
            prompt_tokens=spend.prompt_tokens,
            cached_tokens=spend.cached_tokens,
            completion_tokens=spend.completion_tokens,
            cost=spend.cost,
            cost_known=not spend.unpriced,
            llm_calls=calls,
            latency_ms=verdict.latency_ms if verdict else 0,
            attempts=verdict.attempts if verdict else 0,
            error=draft.error,
            failure=draft.failure if draft.error else "",
            failed_members=list(draft.failed),
            raw_response=verdict.raw if verdict else "",
        )
        review.members.set(ids)
        for event in events:
            event.review = review
        LineageEvent.objects.bulk_create(events)
        merges = sum(1 for a in applied if a["action"] == "merge")
        counted = outcome_counter(outcome, rejections)
        ConsolidationRun.objects.filter(pk=run.pk).update(
            clusters_done=F("clusters_done") + 1,
            merged=F("merged") + merges,
            superseded=F("superseded") + (len(applied) - merges),
            retired=F("retired") + retired_count,
            kept=F("kept") + int(counted == "kept"),
            rejected=F("rejected") + int(counted == "rejected"),
            stale=F("stale") + int(counted == "stale"),
            deferred=F("deferred") + int(counted == "deferred"),
            failed=F("failed") + (1 if draft.error else 0),
            llm_calls=F("llm_calls") + calls,
            model_clusters=F("model_clusters") + (1 if draft.asked_model else 0),
            tokens=F("tokens") + spend.tokens,
            prompt_tokens=F("prompt_tokens") + spend.prompt_tokens,
            cached_tokens=F("cached_tokens") + spend.cached_tokens,
            completion_tokens=F("completion_tokens") + spend.completion_tokens,
            cost=F("cost") + spend.cost,
            unpriced=F("unpriced") + (1 if spend.unpriced else 0),
        )
        # Audit rows now, signals after commit (services/pipeline/truth_events.py).
        truth_events.record_change_tuples(changed, review=review, run=run, actor=actor or draft.judge)
    logger.info("run %s review %s: %s", draft.run_id, review.pk, outcome)
    return review
