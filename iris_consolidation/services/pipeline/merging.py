"""Apply a validated verdict atomically and record the cluster's review.

``record_review`` is the only write path of phase 2. In one transaction it locks the
run row and the member rows (``select_for_update``, ids in ascending order so two
workers never deadlock), drops any action whose members changed since the judge
saw them (freshness), enforces the per-run retirement cap, applies the rest, writes
the ``ClusterReview`` (the decision kept whole: ``Decision.to_json``) and one
``LineageEvent`` per retired truth, and updates the run's counters. Rows are never
deleted: sources are retired with ``superseded_by``. It is idempotent: a review already
recorded for the same run and cluster key is returned unchanged, so a task delivered twice
applies its verdict once.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from ... import run_settings
from ...choices import MergeProtection
from ...conf import app_settings
from ...exceptions import JudgeResponseInvalid, StoredDecisionInvalid
from ...llm.base import Action, Signal, Spend, Verdict, with_truth_numbers
from ...llm.parsing import parse_action
from ...models import ClusterReview, ConsolidationRun, LineageEvent, Origin, RetiredReason, RunId, Truth
from ...querysets import spend_counters
from . import bookkeeping, truth_events
from .validation import Code, Rejection

logger = logging.getLogger(__name__)

STALE_MEMBER = "{alias!r} changed or was retired after the judge saw it; the action was dropped."
UNMERGED = (
    "{alias!r} stands for the result of a pre-pass merge that was not applied (see its refusal); "
    "the action, judged on that result, was dropped."
)
CAP_REACHED = (
    "The run reached its cap of {cap} retirements (IRIS_CONSOLIDATION_MAX_RETIREMENTS_PER_RUN); "
    "this action waits for the next run."
)
#: The shape of ``Decision.to_json``, stored with it: raise it when that shape changes, so that
#: ``Decision.from_json`` tells a decision stored in another shape apart (and refuses it).
DECISION_FORMAT = 1
BAD_DECISION = "The review's stored decision cannot be read: {detail}."


@dataclass(frozen=True, kw_only=True)
class Decision:
    """What phase 2 decided for one cluster: the one record between the judge and the
    review row, frozen. ``run/decide`` makes one per cluster; ``record_review`` writes it and
    stores it whole on the review (``to_json``); ``dry_runs.apply_review`` reads a dry run's
    back (``from_json``) and writes it again, re-checked.

    ``snapshot`` holds the members as judged (alias, id, content, updated_at, ...);
    ``embeddings`` maps each merged content to its fresh vector. ``accepted``: the actions
    to apply, in order, each with the ``signals`` the validator raised and the
    ``second_look`` answer that confirmed it; the first ``prepass`` of them come from the
    deterministic pre-pass (a later action naming a member of a pre-pass merge acts on that
    merge's result). ``rejections``: the refused actions, by code. ``failed`` lists the
    aliases whose judgement failed. ``stale_reason`` says why the cluster was not judged at
    all because its members changed before judging (outcome ``STALE``: no error, not a
    failure of the run). ``deferred_reason`` says why the cluster was left for the next run
    unjudged (the run's budget was spent; outcome ``DEFERRED``: nothing applied, not a
    failure). ``spend`` is the cluster's part of the model calls it took part in, its one
    account of money and calls; ``asked_model``: it went to the model.
    """

    run_id: RunId
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
    spend: Spend = field(default_factory=Spend)
    asked_model: bool = False

    def member_id(self, alias: str) -> int:
        for row in self.snapshot:
            if row["alias"] == alias:
                return int(row["id"])
        raise KeyError(alias)

    def to_json(self) -> dict[str, Any]:
        """This decision as its review stores it (``ClusterReview.decision``): a JSON object
        of every field but ``embeddings`` (vectors of the merged contents, made again by
        whoever writes the decision again), with ``format`` (``DECISION_FORMAT``). Actions
        are spelled as the wire contract spells them, with their signals and second look."""
        data = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "embeddings"}
        return {
            **data,
            "format": DECISION_FORMAT,
            "run_id": str(self.run_id),
            "snapshot": list(self.snapshot),
            "verdict": _verdict_json(self.verdict) if self.verdict is not None else None,
            "accepted": [a.as_wire() for a in self.accepted],
            "rejections": [r.as_dict() for r in self.rejections],
            "failed": list(self.failed),
            "spend": asdict(self.spend),
        }

    @classmethod
    def from_json(cls, data: Any) -> Decision:
        """The ``Decision`` that ``to_json`` gave ``data`` (``embeddings`` empty). Raises
        ``StoredDecisionInvalid`` for another ``format`` or a field that is not one."""
        if not isinstance(data, dict) or data.get("format") != DECISION_FORMAT:
            found = data.get("format") if isinstance(data, dict) else type(data).__name__
            raise StoredDecisionInvalid(BAD_DECISION.format(detail=f"format {found!r}, not {DECISION_FORMAT}"))
        try:
            verdict = data["verdict"]
            return cls(
                **{k: data[k] for k in _PLAIN_FIELDS},
                run_id=uuid.UUID(str(data["run_id"])),
                snapshot=tuple(data["snapshot"]),
                verdict=None if verdict is None else _verdict_of(verdict),
                accepted=tuple(action_of(a) for a in data["accepted"]),
                rejections=tuple(_rejection_of(r) for r in data["rejections"]),
                failed=tuple(data["failed"]),
                spend=Spend(**data["spend"]),
            )
        except (KeyError, TypeError, ValueError, JudgeResponseInvalid) as error:
            raise StoredDecisionInvalid(BAD_DECISION.format(detail=f"{type(error).__name__}: {error}")) from error


#: The fields of ``Decision.to_json`` stored as they are.
_PLAIN_FIELDS = (
    "user_id", "key", "similarities", "judge", "prepass", "error", "failure", "stale_reason",
    "deferred_reason", "asked_model",
)


def action_of(entry: Any) -> Action:
    """A stored action (``Action.as_wire``, or a review's ``applied_actions`` entry) as an
    ``Action``, with its signals and second look. Raises ``JudgeResponseInvalid``."""
    action = parse_action(entry, "")
    signals = tuple(
        Signal(code=str(s.get("code", "")), concern=str(s.get("concern", "")))
        for s in entry.get("signals") or ()
        if isinstance(s, dict)
    )
    return Action(
        action=action.action, reason=action.reason, ids=action.ids, content=action.content, old=action.old,
        new=action.new, signals=signals, second_look=str(entry.get("second_look") or ""),
    )


def _verdict_json(verdict: Verdict) -> dict[str, Any]:
    return {**asdict(verdict), "actions": [a.as_wire() for a in verdict.actions], "spend": asdict(verdict.spend)}


def _verdict_of(data: dict[str, Any]) -> Verdict:
    return Verdict(
        **{k: v for k, v in data.items() if k not in ("actions", "spend")},
        actions=tuple(action_of(a) for a in data["actions"]),
        spend=Spend(**data["spend"]),
    )


def _rejection_of(data: dict[str, Any]) -> Rejection:
    return Rejection(action=action_of(data["action"]), code=Code(data["code"]), reason=str(data["reason"]))


def is_fresh(truth: Truth | None, row: dict[str, Any], *, retiring: bool, max_generation: int) -> bool:
    """Whether ``truth`` is still the member ``row`` of a review's snapshot: live, same
    content and ``updated_at``, and, if the action would retire it, not protected now.

    The one freshness rule: ``record_review`` applies it under row locks; a dry run's
    page reads it to tell which previews have gone stale (``operations.dry_runs``)."""
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
    truth = Truth(
        user_id=sources[0].user_id,
        content=action.content.strip(),
        origin=Origin.CONSOLIDATED,
        kind=bookkeeping.merged_kind(sources),
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


@dataclass(kw_only=True)
class _Application:
    """One decision's actions being applied under the row locks of its members.

    ``current`` maps an alias to the truth it stands for now: a merge moves its members'
    aliases onto its result (``moved``), so that a later action acts on the merged truth.
    """

    decision: Decision
    dry_run: bool
    embedding_model: str
    actor: str
    cap: int
    already_retired: int
    rows: dict[str, dict[str, Any]]
    current: dict[str, Truth | None]
    moved: set[str] = field(default_factory=set)
    #: Members of a pre-pass merge that was refused: a later action naming one acted on
    #: the merge's result, which does not exist, so it is refused too (as stale).
    unmerged: set[str] = field(default_factory=set)
    rejections: list[Rejection] = field(default_factory=list)
    applied: list[dict[str, Any]] = field(default_factory=list)
    retired_count: int = 0
    events: list[LineageEvent] = field(default_factory=list)
    changed: list[tuple[Truth, str, str]] = field(default_factory=list)
    now: Any = None

    def truth(self, alias: str) -> Truth:
        """The truth ``alias`` stands for now. Raises ``LookupError`` for a member deleted
        since judging, which ``_refusal`` has refused (as stale) before any use."""
        found = self.current[alias]
        if found is None:
            raise LookupError(f"no truth stands for {alias} (deleted since judging)")
        return found


def record_review(*, decision: Decision, dry_run: bool, embedding_model: str = "", actor: str = "") -> ClusterReview:
    """Apply ``decision.accepted`` (unless ``dry_run``) and record the review; see module doc.

    Steps, in one transaction: lock the run and the members (``_lock``), check and apply
    each action (``_apply``), choose the outcome (``review_outcome``), write the review
    and its lineage (``_write_review``), count it on the run (``_count_on_run``). Side
    effects: one ``TruthChange`` row per changed truth, and ``truth_changed`` signals
    after commit. The retirement cap is the run's (``run_settings.retirement_cap``).
    Returns the new (or already existing) ``ClusterReview``.
    """
    with transaction.atomic():
        run = ConsolidationRun.objects.select_for_update().get(pk=decision.run_id)
        existing = ClusterReview.objects.filter(run=run, key=decision.key).first()
        if existing is not None:
            return existing
        work = _lock(run, decision, dry_run=dry_run, embedding_model=embedding_model, actor=actor)
        for index, action in enumerate(() if decision.deferred_reason else decision.accepted):
            _apply(work, index, action)
        outcome = review_outcome(decision, applied=bool(work.applied), rejections=work.rejections, dry_run=dry_run)
        review = _write_review(run, work, outcome)
        _count_on_run(run, work, outcome, calls=review.llm_calls)
        # Audit rows now, signals after commit (services/pipeline/truth_events.py).
        truth_events.record_change_tuples(work.changed, review=review, run=run, actor=actor or decision.judge)
    logger.info("run %s review %s: %s", decision.run_id, review.pk, outcome)
    return review


def _lock(
    run: ConsolidationRun, decision: Decision, *, dry_run: bool, embedding_model: str, actor: str
) -> _Application:
    """Lock the decision's members (ascending ids, the lock order) and start its application."""
    ids = sorted(int(row["id"]) for row in decision.snapshot)
    locked = {t.pk: t for t in Truth.all_objects.select_for_update().filter(pk__in=ids).order_by("pk")}
    rows = {row["alias"]: row for row in decision.snapshot}
    return _Application(
        decision=decision, dry_run=dry_run, embedding_model=embedding_model, actor=actor or decision.judge,
        cap=run_settings.retirement_cap(run), already_retired=run.retired, rows=rows,
        current={alias: locked.get(int(row["id"])) for alias, row in rows.items()},
        rejections=list(decision.rejections), now=timezone.now(),
    )


def _refusal(work: _Application, action: Action, retiring: list[str]) -> Rejection | None:
    """Why ``action`` cannot be applied now (a member changed or became protected since
    the judge saw it, or the run's retirement cap), or None."""
    max_generation = app_settings.MAX_GENERATION
    unmerged = [a for a in action.members() if a in work.unmerged]
    if unmerged:
        return Rejection(action=action, code=Code.STALE_MEMBER, reason=UNMERGED.format(alias=unmerged[0]))
    stale = [
        a
        for a in action.members()
        if a not in work.moved
        and not is_fresh(work.current[a], work.rows[a], retiring=a in retiring, max_generation=max_generation)
    ]
    if stale:
        return Rejection(action=action, code=Code.STALE_MEMBER, reason=STALE_MEMBER.format(alias=stale[0]))
    if work.already_retired + work.retired_count + len(retiring) > work.cap:
        return Rejection(action=action, code=Code.CAP_REACHED, reason=CAP_REACHED.format(cap=work.cap))
    return None


def _protection(work: _Application, action: Action) -> MergeProtection:
    """The protection of a merge: its members as the judge saw them, or, for an alias a
    merge of this review moved onto its result, that result now."""
    max_generation = app_settings.MAX_GENERATION

    def protected(alias: str) -> bool:
        if alias in work.moved:
            return work.truth(alias).is_protected(max_generation=max_generation)
        return bool(work.rows[alias]["protected"])

    return MergeProtection.of(action.ids, protected)


def _apply(work: _Application, index: int, action: Action) -> None:
    """Check ``action`` (``_refusal``) and apply it: record it as applied (previewed in a
    dry run) or as a rejection."""
    keeper, retiring = None, list(action.old)
    if action.action == "merge":
        protection = _protection(work, action)
        keeper, retiring = protection.keeper, list(protection.retiring)
    refusal = _refusal(work, action, retiring)
    if refusal is not None:
        work.rejections.append(refusal)
        if index < work.decision.prepass and action.action == "merge":
            work.unmerged.update(action.ids)
        return
    entry: dict[str, Any] = {
        **action.as_wire(),
        "stage": "prepass" if index < work.decision.prepass else "judge",
        "truth_ids": {a: work.truth(a).pk for a in action.members()},
    }
    work.retired_count += len(retiring)
    if not work.dry_run:
        entry["result_id"] = _write_action(work, action, keeper=keeper, retiring=retiring).pk
    work.applied.append(entry)


def _write_action(work: _Application, action: Action, *, keeper: str | None, retiring: list[str]) -> Truth:
    """Write an accepted, fresh ``action``: the merged truth (or the protected keeper,
    never reworded), the retired sources pointing at it, their lineage events. Returns
    the truth that stands for the action's members now."""
    sources = [work.truth(a) for a in action.members()]
    # The records keep truth numbers, never the call's aliases (valid for one call only).
    why = with_truth_numbers(action.reason, {alias: f"#{row['id']}" for alias, row in work.rows.items()})
    if action.action == "merge":
        if keeper is not None:
            result = work.truth(keeper)
            # The protected keeper is never reworded, but it takes the merge's
            # bookkeeping (tags, uses, validation, relevance) of what it absorbs.
            bookkeeping.absorb(result, sources=sources, retired=len(retiring))
        else:
            embedding = work.decision.embeddings.get(action.content.strip())
            result = _merged_truth(action, sources, embedding, work.embedding_model)
            work.changed.append((result, "created", why))
        reason, kind = RetiredReason.MERGED, LineageEvent.Action.MERGE
    else:
        result = work.truth(action.new)
        reason, kind = RetiredReason.SUPERSEDED, LineageEvent.Action.SUPERSEDE
    for alias in retiring:
        source = work.truth(alias)
        _retire(source, into=result, reason=reason, now=work.now)
        work.changed.append((source, "retired", why))
        work.events.append(LineageEvent(action=kind, source=source, result=result, reason=why, actor=work.actor))
    if action.action == "merge":
        for alias in action.ids:
            work.current[alias] = result
            work.moved.add(alias)
    return result


def review_outcome(decision: Decision, *, applied: bool, rejections: Sequence[Rejection], dry_run: bool) -> str:
    """The ``ClusterReview.Outcome`` of a decision once its actions were applied (``applied``:
    at least one) or refused (``rejections``)."""
    Outcome = ClusterReview.Outcome
    if decision.deferred_reason:
        return Outcome.DEFERRED
    if applied:
        return Outcome.PREVIEW if dry_run else Outcome.APPLIED
    if decision.error:
        return Outcome.FAILED
    if decision.stale_reason:
        return Outcome.STALE
    if rejections:
        return Outcome.STALE if all(r.code == Code.STALE_MEMBER for r in rejections) else Outcome.REJECTED
    return Outcome.KEPT


def _write_review(run: ConsolidationRun, work: _Application, outcome: str) -> ClusterReview:
    """Create the review of ``work`` (members, verdict, what was applied or refused, the
    spend) and link its lineage events to it."""
    decision, verdict, spend = work.decision, work.decision.verdict, work.decision.spend
    applied, rejections = work.applied, work.rejections
    review = ClusterReview.objects.create(
        run=run,
        user_id=decision.user_id,
        key=decision.key,
        snapshot=list(decision.snapshot),
        similarities=decision.similarities,
        actions=[a.as_wire() for a in verdict.actions] if verdict else [],
        applied_actions=applied,
        rejections=[r.as_dict() for r in rejections],
        reasoning=verdict.reasoning if verdict else "",
        proposed_content="\n".join(a.content for a in verdict.actions if a.action == "merge") if verdict else "",
        outcome=outcome,
        applied=bool(applied) and not work.dry_run,
        skip_reason=decision.stale_reason
        or decision.deferred_reason
        or ("; ".join(r.reason for r in rejections) if not applied else ""),
        judge=decision.judge,
        model=verdict.model if verdict else "",
        prompt_version=verdict.prompt_version if verdict else "",
        tokens=spend.tokens,
        prompt_tokens=spend.prompt_tokens,
        cached_tokens=spend.cached_tokens,
        completion_tokens=spend.completion_tokens,
        cost=spend.cost,
        cost_known=not spend.unpriced,
        llm_calls=spend.calls or (verdict.llm_calls if verdict else 0),
        latency_ms=verdict.latency_ms if verdict else 0,
        attempts=verdict.attempts if verdict else 0,
        error=decision.error,
        failure=decision.failure if decision.error else "",
        failed_members=list(decision.failed),
        raw_response=verdict.raw if verdict else "",
        decision=decision.to_json(),
    )
    review.members.set(sorted(int(row["id"]) for row in decision.snapshot))
    for event in work.events:
        event.review = review
    LineageEvent.objects.bulk_create(work.events)
    return review


def _count_on_run(run: ConsolidationRun, work: _Application, outcome: str, *, calls: int) -> None:
    """Add the review to the run's counters in one UPDATE: a cluster done, its merges,
    supersedes and retirements, its outcome's counter (``outcome_counter``), its spend."""
    merges = sum(1 for a in work.applied if a["action"] == "merge")
    counted = outcome_counter(outcome, work.rejections)
    ConsolidationRun.objects.filter(pk=run.pk).update(
        clusters_done=F("clusters_done") + 1,
        merged=F("merged") + merges,
        superseded=F("superseded") + (len(work.applied) - merges),
        retired=F("retired") + work.retired_count,
        kept=F("kept") + int(counted == "kept"),
        rejected=F("rejected") + int(counted == "rejected"),
        stale=F("stale") + int(counted == "stale"),
        deferred=F("deferred") + int(counted == "deferred"),
        failed=F("failed") + (1 if work.decision.error else 0),
        model_clusters=F("model_clusters") + (1 if work.decision.asked_model else 0),
        **spend_counters(work.decision.spend, calls=calls),
    )
