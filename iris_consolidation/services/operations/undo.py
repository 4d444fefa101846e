"""Undo a consolidation: put the sources back, retire what was made of them.

One step at a time. The step to undo on a truth T is the latest review whose merge
or supersede events into T are still in force (``selectors.list_undo_steps``).
Undoing it, in one transaction under row locks taken in ascending id order (as
``merging.record_review`` does, so the two never deadlock):

- each source of the step is restored as live (``retired_at``, ``superseded_by``
  and ``retired_reason`` cleared);
- T is retired with reason ``undone`` if the step made it (a merge result). A truth
  that existed before the step (the ``new`` of a supersede, or the protected keeper
  of a merge) stays live;
- one ``LineageEvent`` per restored truth records the reversal (action ``undo``,
  source T, result the restored truth, review the undone review, actor, reason).

Nothing is deleted and the undone review stays as it was: history is append-only.
It refuses with ``UndoRefused`` (nothing written) when there is no reason, when T
was never made by consolidation, when the step is already undone, and with its
subclass ``ConsolidatedFurther`` when T has since been consolidated into a later
truth (that later step must be undone first).

Change events (``services/pipeline/truth_events.py``): in the same transaction, one
``TruthChange`` per restored source (``restored``) and one for T when the undo
retires it (``undone``), each with the undone review, the actor and the reason; the
``truth_changed`` signals follow after commit. A refused undo records and sends nothing.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, ClassVar

from django.db import transaction
from django.utils import timezone

from ... import selectors
from ...exceptions import ConsolidatedFurther, UndoRefused
from ...models import ClusterReview, LineageEvent, RetiredReason, Truth
from ..hygiene import relocation, retire
from ..pipeline import truth_events

logger = logging.getLogger(__name__)

REASON_REQUIRED = UndoRefused.REASON_REQUIRED
UNKNOWN_TRUTH = "Truth #{truth} does not exist."
NOTHING_TO_UNDO = "Truth #{truth} was not made or changed by consolidation; there is nothing to undo."
ALREADY_UNDONE = "The consolidation that made truth #{truth} has already been undone."
CONSOLIDATED_FURTHER = (
    "Truth #{truth} has since been consolidated further into truth #{later}; undo that later step first."
)
LATER_STEP = "Truth #{truth} took part in a later consolidation (review #{review}); undo that later step first."
NOT_APPLIED = "Review #{review} changed no truth; there is nothing to undo."
CHANGED_MEANWHILE = "Truth #{truth} changed while the undo was prepared; nothing was changed. Try again."


@dataclass(frozen=True, kw_only=True)
class UndoResult:
    """What one undone step changed: ``truth_id`` retired (``truth_retired``) or kept,
    ``restored_ids`` live again, ``review_id`` the review undone (None if unknown)."""

    truth_id: int
    truth_retired: bool
    restored_ids: tuple[int, ...]
    review_id: int | None
    action: str
    #: For a restoration (``action`` "restore"): the stage that had retired the truth.
    stage: str = ""


def _refuse_retired(truth: Truth) -> None:
    """Raise the right refusal for a retired ``truth``."""
    if truth.retired_reason == RetiredReason.UNDONE:
        raise UndoRefused(ALREADY_UNDONE.format(truth=truth.pk))
    if truth.superseded_by_id is not None:
        raise ConsolidatedFurther(
            CONSOLIDATED_FURTHER.format(truth=truth.pk, later=truth.superseded_by_id),
            later_truth_id=truth.superseded_by_id,
        )
    raise UndoRefused(ALREADY_UNDONE.format(truth=truth.pk))


def _latest_step(truth: Truth, *, review_id: int | None = None) -> selectors.UndoStep:
    """The step to undo on ``truth`` (of ``review_id`` if given), or raise ``UndoRefused``."""
    if truth.retired_at is not None:
        _refuse_retired(truth)
    steps = selectors.list_undo_steps(truth=truth)
    if not steps:
        if selectors.has_consolidation_history(truth=truth):
            raise UndoRefused(ALREADY_UNDONE.format(truth=truth.pk))
        raise UndoRefused(NOTHING_TO_UNDO.format(truth=truth.pk))
    step = steps[0]
    if review_id is not None and step.review is not None and step.review.pk != review_id:
        if any(s.review is not None and s.review.pk == review_id for s in steps):
            raise ConsolidatedFurther(LATER_STEP.format(truth=truth.pk, review=step.review.pk), later_truth_id=truth.pk)
        raise UndoRefused(ALREADY_UNDONE.format(truth=truth.pk))
    return step


def _fingerprint(step: selectors.UndoStep) -> tuple[Any, ...]:
    return (step.truth.pk, step.review.pk if step.review else None, step.source_ids, step.creates_truth)


def _reverse_step(
    step: selectors.UndoStep, locked: dict[int, Truth], *, events: list[LineageEvent], actor: str, reason: str,
    now: Any,
) -> list[truth_events.Change]:
    """Reverse ``step`` on the ``locked`` truths: its sources live again (an ``undo`` lineage
    event each, appended to ``events``), its truth retired as undone if the step made it.
    Returns the changes for the audit."""
    truth = locked[step.truth.pk]
    changes: list[truth_events.Change] = []
    for source_id in step.source_ids:
        source = locked[source_id]
        source.retired_at = None
        source.superseded_by = None
        source.retired_reason = ""
        source.save(update_fields=["retired_at", "superseded_by", "retired_reason", "updated_at"])
        events.append(LineageEvent(action=LineageEvent.Action.UNDO, source=truth, result=source, review=step.review,
                                   reason=reason, actor=actor))
        changes.append(truth_events.Change(truth=source, action=truth_events.RESTORED, reason=reason))
    if step.creates_truth:
        truth.retired_at = now
        truth.superseded_by = None
        truth.retired_reason = RetiredReason.UNDONE
        truth.save(update_fields=["retired_at", "superseded_by", "retired_reason", "updated_at"])
        changes.append(truth_events.Change(truth=truth, action=truth_events.UNDONE, reason=reason))
    return changes


def _undo(*, truth_ids: list[int], review_id: int | None, actor: str, reason: str) -> list[UndoResult]:
    reason = reason.strip()
    if not reason:
        raise UndoRefused(REASON_REQUIRED)
    results: list[UndoResult] = []
    changed: list[tuple[ClusterReview | None, list[truth_events.Change]]] = []
    with transaction.atomic():
        truths = {t.pk: t for t in Truth.all_objects.filter(pk__in=truth_ids)}
        for pk in truth_ids:
            if pk not in truths:
                raise UndoRefused(UNKNOWN_TRUTH.format(truth=pk))
        planned = [_latest_step(truths[pk], review_id=review_id) for pk in truth_ids]
        ids = set(truth_ids).union(*(step.source_ids for step in planned))
        locked = {t.pk: t for t in Truth.all_objects.select_for_update().filter(pk__in=sorted(ids)).order_by("pk")}
        # Plan again under the locks: what is written is exactly what was checked.
        steps = [_latest_step(locked[pk], review_id=review_id) for pk in truth_ids]
        if [_fingerprint(s) for s in steps] != [_fingerprint(s) for s in planned]:
            raise UndoRefused(CHANGED_MEANWHILE.format(truth=truth_ids[0]))
        now = timezone.now()
        events: list[LineageEvent] = []
        for step in steps:
            step_changes = _reverse_step(step, locked, events=events, actor=actor, reason=reason, now=now)
            changed.append((step.review, step_changes))
            results.append(
                UndoResult(
                    truth_id=step.truth.pk,
                    truth_retired=step.creates_truth,
                    restored_ids=step.source_ids,
                    review_id=step.review.pk if step.review else None,
                    action=step.action,
                )
            )
        LineageEvent.objects.bulk_create(events)
        # Audit rows in this transaction; truth_changed signals after it commits.
        for review, step_changes in changed:
            truth_events.record_changes(step_changes, review=review, actor=actor)
    logger.info("undo by %s: %s", actor, [(r.truth_id, r.restored_ids) for r in results])
    return results


@dataclass(frozen=True, kw_only=True)
class Reversal:
    """The undo of one truth, its kind chosen once (``reversal_of``) and used by the
    confirmation page (``step``, ``title``), by the undo itself (``perform``) and by the
    message after it (``UndoResult.action``).

    ``kind``: ``RESTORE`` (a truth the noise or prune ``stage`` retired: live again, no
    lineage step), ``RELOCATION`` (a relocated truth and its pointer, named by either: the
    truth live again, the pointer retired) or ``CONSOLIDATION`` (the latest merge or
    supersede into the truth: its sources live again; ``_undo``).
    """

    RESTORE: ClassVar[str] = "restore"
    RELOCATION: ClassVar[str] = "relocate"
    CONSOLIDATION: ClassVar[str] = "consolidation"
    TITLES: ClassVar[dict[str, str]] = {
        "restore": "Restore truth #{pk}, retired by the {stage} stage",
        "relocate": "Undo the consolidation that made truth #{pk}",
        "consolidation": "Undo the consolidation that made truth #{pk}",
    }

    kind: str
    truth: Truth
    step: selectors.UndoStep
    #: ``RESTORE`` only: the stage that retired the truth (noise or prune).
    stage: str = ""

    @property
    def title(self) -> str:
        """The confirmation page's title, e.g. "Undo the consolidation that made truth #12"."""
        return self.TITLES[self.kind].format(pk=self.truth.pk, stage=self.stage)

    def perform(self, *, actor: str, reason: str) -> UndoResult:
        """Undo it (one transaction, row locks); raises ``UndoRefused`` /
        ``ConsolidatedFurther`` as ``undo_consolidation`` says."""
        pk = self.truth.pk
        if self.kind == self.RESTORE:
            retire.restore(truth_id=pk, actor=actor, reason=reason)
            return UndoResult(truth_id=pk, truth_retired=False, restored_ids=(pk,), review_id=None,
                              action=self.RESTORE, stage=self.stage)
        if self.kind == self.RELOCATION:
            original, pointer = relocation.undo_relocation(truth_id=pk, actor=actor, reason=reason)
            return UndoResult(truth_id=pointer.pk, truth_retired=True, restored_ids=(original.pk,), review_id=None,
                              action=self.RELOCATION)
        return _undo(truth_ids=[pk], review_id=None, actor=actor, reason=reason)[0]


def reversal_of(truth: Truth) -> Reversal:
    """The ``Reversal`` of ``truth``: the one place that chooses what undoing it means.
    Reads only. Raises what the undo would refuse with (``UndoRefused``,
    ``ConsolidatedFurther``) for a consolidation with nothing to undo."""
    if retire.is_hygiene_retirement(truth):
        stage = "prune" if truth.retired_reason == RetiredReason.PRUNED else "noise"
        step = selectors.UndoStep(truth=truth, review=None, events=(), creates_truth=False)
        return Reversal(kind=Reversal.RESTORE, truth=truth, step=step, stage=stage)
    pair = relocation.relocated_pair(truth)
    if pair is not None:
        # A relocation: the pointer "made" from the truth; undoing restores one, retires the other.
        original, pointer = pair
        events = tuple(LineageEvent.objects.filter(
            source=original, result=pointer, action=LineageEvent.Action.RELOCATE
        ))
        step = selectors.UndoStep(truth=pointer, review=None, events=events, creates_truth=True)
        return Reversal(kind=Reversal.RELOCATION, truth=truth, step=step)
    return Reversal(kind=Reversal.CONSOLIDATION, truth=truth, step=_latest_step(truth))


def plan_review_undo(*, review: ClusterReview) -> list[selectors.UndoStep]:
    """The steps ``undo_review`` would reverse, for a confirmation page. Reads only;
    raises what ``undo_review`` would refuse with (except a missing reason)."""
    truth_ids = _review_truth_ids(review)
    truths = {t.pk: t for t in Truth.all_objects.filter(pk__in=truth_ids)}
    return [_latest_step(truths[pk], review_id=review.pk) for pk in truth_ids if pk in truths]


def _review_truth_ids(review: ClusterReview) -> list[int]:
    if not review.applied:
        raise UndoRefused(NOT_APPLIED.format(review=review.pk))
    truth_ids = sorted({int(entry["result_id"]) for entry in review.applied_actions if "result_id" in entry})
    if not truth_ids:
        raise UndoRefused(NOT_APPLIED.format(review=review.pk))
    return truth_ids


def undo_consolidation(*, truth_id: int, actor: str, reason: str) -> UndoResult:
    """Undo the latest consolidation step into truth ``truth_id``; see the module doc.

    Transaction: one, with row locks. Idempotent in effect: a second call refuses
    with ``ALREADY_UNDONE``. Raises ``UndoRefused`` / ``ConsolidatedFurther``. What
    undoing means is the truth's ``Reversal`` (``reversal_of``): a truth retired by the
    noise or prune stage is restored (``hygiene.retire.restore``); a relocation (named by
    the relocated truth or its pointer) is undone by ``hygiene.relocation.undo_relocation``:
    the truth live again, the pointer retired.
    """
    truth = Truth.all_objects.filter(pk=truth_id).first()
    if truth is None:
        raise UndoRefused(UNKNOWN_TRUTH.format(truth=truth_id))
    if not reason.strip():
        raise UndoRefused(REASON_REQUIRED)
    return reversal_of(truth).perform(actor=actor, reason=reason)


def undo_review(*, review_id: int, actor: str, reason: str) -> list[UndoResult]:
    """Undo every step review ``review_id`` applied (all or nothing); see the module doc.

    Each truth the review wrote must still have this review as its latest step in
    force. Raises ``UndoRefused`` (``NOT_APPLIED`` for a review that changed nothing,
    e.g. a dry run's) or ``ConsolidatedFurther``.
    """
    review = ClusterReview.objects.filter(pk=review_id).first()
    if review is None:
        raise UndoRefused(NOT_APPLIED.format(review=review_id))
    truth_ids = _review_truth_ids(review)
    return _undo(truth_ids=truth_ids, review_id=review.pk, actor=actor, reason=reason)
