"""Undo a whole run: every truth it retired or merged comes back, newest step first.

A run's steps are read from its audit rows (``TruthChange`` with the run and action
``retired``): each review that merged or superseded truths is one step, undone by the
one-step undo of a review (``undo.undo_review``); each truth the noise, prune or relocate
stage retired is one step, undone by the one-step undo of a truth
(``undo.undo_consolidation``: a restoration, or the relocation undone). Nothing here
writes a truth itself.

Steps go newest first, so that what a later step of the run did to a truth (a merge
result pruned at the end of the pass) is undone before the step that made it. Each step
is its own transaction, in the one-step undo, with one audit row per truth it brings
back (``restored``) or retires (``undone``, a merge result), the run's actor and reason.

A step a later change made unsafe is refused, listed with why, and nothing of it is
written: the one-step undo's own refusals (a merge result consolidated further by a
later run, a step already undone), and, for a stage's retirement, any audit row on the
truth after the run's (restored by an operator, retired again by a later run): the
run's retirement is then no longer the one in force. Undoing a run twice refuses every
step the second time.

Truths the run mined, and the relevance its decay wrote, are left as they are: neither
retired a truth.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime

from ...exceptions import UndoRefused
from ...models import ClusterReview, ConsolidationRun, TruthChange
from . import undo

logger = logging.getLogger(__name__)

DRY_RUN = "Run {run} is a dry run: it changed no truth, so there is nothing to undo."
IN_PROGRESS = "Run {run} is still in progress; undo it once it has finished."
NOTHING = "Run {run} retired and merged no truth; there is nothing to undo."
CHANGED_SINCE = (
    "Truth #{truth} changed after this run ({action} by {actor} on {when}); the run's retirement is no "
    "longer the one in force."
)
AFTER_NEWER = "Undone after the newer steps above, which bring back the truths it needs."

#: Audit reason prefixes of the stages' retirements (``retire.retire``, ``relocation``), by step kind.
STAGE_PREFIXES = {"noise": "noise", "pruned": "prune", "relocated": "relocate"}


@dataclass(frozen=True, kw_only=True)
class RunStep:
    """One step of a run: ``kind`` ``review`` (its merges and supersedes, ``review_id``)
    or ``noise`` / ``prune`` / ``relocate`` (one truth); ``truth_ids`` the truths it
    retired; ``last_change`` the id of its latest audit row (the order of steps)."""

    kind: str
    truth_ids: tuple[int, ...]
    at: datetime
    last_change: int
    review_id: int | None = None

    def label(self) -> str:
        """``"review #12 (retired #3, #4)"`` or ``"prune of truth #7"``."""
        ids = ", ".join(f"#{pk}" for pk in self.truth_ids)
        if self.kind == "review":
            return f"review #{self.review_id} (retired {ids})"
        return f"{self.kind} of truth {ids}"


@dataclass(frozen=True, kw_only=True)
class StepOutcome:
    """A step and what became of it: ``done`` (``restored_ids`` live again) or refused
    (``reason`` says why; nothing of the step was written). In a plan, ``done`` says
    what the undo is expected to do."""

    step: RunStep
    done: bool
    reason: str = ""
    restored_ids: tuple[int, ...] = ()


@dataclass(frozen=True, kw_only=True)
class RunUndoResult:
    """The outcome of each step of the run, newest first."""

    run_id: object
    outcomes: list[StepOutcome] = field(default_factory=list)

    @property
    def undone(self) -> list[StepOutcome]:
        return [o for o in self.outcomes if o.done]

    @property
    def refused(self) -> list[StepOutcome]:
        return [o for o in self.outcomes if not o.done]

    @property
    def restored_ids(self) -> tuple[int, ...]:
        return tuple(sorted({pk for o in self.undone for pk in o.restored_ids}))


def _check_run(run: ConsolidationRun) -> None:
    """Raise ``UndoRefused`` for a run that cannot be undone at all."""
    short = str(run.pk)[:8]
    if run.dry_run:
        raise UndoRefused(DRY_RUN.format(run=short))
    if run.status in (ConsolidationRun.Status.PENDING, ConsolidationRun.Status.RUNNING):
        raise UndoRefused(IN_PROGRESS.format(run=short))


def list_steps(*, run: ConsolidationRun) -> list[RunStep]:
    """The run's steps, newest first (one query over its audit rows). A retirement by a
    stage the run's audit rows do not name (none today) is left out."""
    by_review: dict[int, list[tuple[int, int, datetime]]] = {}
    steps: list[RunStep] = []
    rows = TruthChange.objects.filter(run=run, action=TruthChange.Action.RETIRED).order_by("created_at", "id")
    for change_id, truth_id, review_id, reason, at in rows.values_list(
        "id", "truth_id", "review_id", "reason", "created_at"
    ):
        if review_id is not None:
            by_review.setdefault(review_id, []).append((change_id, truth_id, at))
            continue
        kind = STAGE_PREFIXES.get(reason.split(":", 1)[0].strip())
        if kind is not None:
            steps.append(RunStep(kind=kind, truth_ids=(truth_id,), at=at, last_change=change_id))
    for review_id, changes in by_review.items():
        steps.append(
            RunStep(
                kind="review",
                review_id=review_id,
                truth_ids=tuple(sorted({t for _, t, _ in changes})),
                at=max(at for _, _, at in changes),
                last_change=max(c for c, _, _ in changes),
            )
        )
    return sorted(steps, key=lambda s: (s.at, s.last_change), reverse=True)


def _changed_since(step: RunStep) -> str:
    """Why a stage step is unsafe (a later audit row on its truth), or ""."""
    later = (
        TruthChange.objects.filter(truth_id__in=step.truth_ids, pk__gt=step.last_change)
        .order_by("-created_at", "-id")
        .first()
    )
    if later is None:
        return ""
    return CHANGED_SINCE.format(
        truth=later.truth_id,
        action=later.get_action_display().lower(),
        actor=later.actor or "someone",
        when=f"{later.created_at:%Y-%m-%d %H:%M}",
    )


def plan_run_undo(*, run: ConsolidationRun) -> list[StepOutcome]:
    """What ``undo_run`` is expected to do with each step, newest first, for a
    confirmation page. Reads only. A review step the one-step undo refuses now because a
    newer step of this run retired one of its truths is expected to go through (those
    truths come back first: ``AFTER_NEWER``). Raises ``UndoRefused`` for a dry run, a run
    in progress, or one with nothing to undo."""
    _check_run(run)
    steps = list_steps(run=run)
    if not steps:
        raise UndoRefused(NOTHING.format(run=str(run.pk)[:8]))
    reviews = {r.pk: r for r in ClusterReview.objects.filter(pk__in=[s.review_id for s in steps if s.review_id])}
    planned: list[StepOutcome] = []
    newer: set[int] = set()
    for step in steps:
        if step.kind != "review":
            reason = _changed_since(step)
            planned.append(StepOutcome(step=step, done=not reason, reason=reason, restored_ids=step.truth_ids))
        else:
            try:
                undo.plan_review_undo(review=reviews[step.review_id])
            except UndoRefused as exc:
                results = {int(a["result_id"]) for a in reviews[step.review_id].applied_actions if "result_id" in a}
                if results & newer:
                    planned.append(StepOutcome(step=step, done=True, reason=AFTER_NEWER, restored_ids=step.truth_ids))
                else:
                    planned.append(StepOutcome(step=step, done=False, reason=str(exc)))
            else:
                planned.append(StepOutcome(step=step, done=True, restored_ids=step.truth_ids))
        newer.update(step.truth_ids)
    return planned


def _undo_step(step: RunStep, *, actor: str, reason: str) -> StepOutcome:
    """Undo one step through the one-step undo; a refusal becomes a refused outcome."""
    if step.kind != "review":
        why = _changed_since(step)
        if why:
            return StepOutcome(step=step, done=False, reason=why)
    try:
        if step.kind == "review":
            results = undo.undo_review(review_id=step.review_id, actor=actor, reason=reason)
        else:
            results = [undo.undo_consolidation(truth_id=step.truth_ids[0], actor=actor, reason=reason)]
    except UndoRefused as exc:
        return StepOutcome(step=step, done=False, reason=str(exc))
    return StepOutcome(step=step, done=True, restored_ids=tuple(sorted({pk for r in results for pk in r.restored_ids})))


def undo_run(*, run_id: object, actor: str, reason: str) -> RunUndoResult:
    """Undo every step of run ``run_id``, newest first (see the module docstring).

    Transactions: one per step (the one-step undo's, with its row locks), so a refused
    step leaves the others undone. Raises ``UndoRefused`` (nothing written) for an
    unknown run, a dry run, a run in progress, a run with nothing to undo, or no reason.
    """
    reason = reason.strip()
    if not reason:
        raise UndoRefused(UndoRefused.REASON_REQUIRED)
    run = ConsolidationRun.objects.filter(pk=run_id).first()
    if run is None:
        raise UndoRefused(f"No consolidation run has the id {run_id}.")
    _check_run(run)
    steps = list_steps(run=run)
    if not steps:
        raise UndoRefused(NOTHING.format(run=str(run.pk)[:8]))
    result = RunUndoResult(run_id=run.pk)
    for step in steps:
        result.outcomes.append(_undo_step(step, actor=actor, reason=reason))
    logger.info(
        "run %s undone by %s: %d steps undone, %d refused", run.pk, actor, len(result.undone), len(result.refused)
    )
    return result
