"""Apply a dry run as it was previewed: its accepted actions, not a second judgement.

``apply_refusal`` says whether a dry run can be applied; ``start_application`` then
creates the applying run (``source_run`` points at the
dry run) and starts one apply job per chosen preview, each running ``apply_review``.

What a dry run decided for a cluster is stored on its preview review: ``applied_actions``
holds the actions it accepted, in apply order (the pre-pass's first), each as the wire
contract spells it with ``stage`` ("prepass" or "judge"), the ``signals`` the validator
raised and the ``second_look`` answer that confirmed it, and ``truth_ids`` (alias -> truth
id); ``snapshot`` holds the members as judged. ``previewed_decision`` reads that back as a
``PreviewedDecision``. ``apply_review`` applies exactly those actions: signals are not read
again and no second look is asked, so an action the dry run's second look confirmed, or a
model's action naming a pre-pass keeper, applies as previewed. What is checked again:
the invariants (``validation.check_invariants``: ids, protection, generation limit,
direction, nothing lost; a model's action against the members as the pre-pass left them,
as the dry run checked it) and, in ``merging.record_review`` under row locks, freshness
(members unchanged since the preview, still consolidatable) and the retirement cap. Each
refusal is recorded on the application's review and listed on the dry run's page
(``application_refusals``). No model is called; merged contents are embedded afresh.

``stale_previews`` says which previews no longer apply at all (every action names a
member changed since), so that the admin offers only what can still be applied.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import transaction

from ...choices import MergeProtection
from ...conf import app_settings
from ...embeddings import Embedder
from ...exceptions import ApplyRefused
from ...llm.base import Action, JudgeRequest, MemberView, Signal, Verdict
from ...llm.parsing import parse_action
from ...models import ClusterReview, ConsolidationJob, ConsolidationRun, RunId, Truth
from ..pipeline import judging, merging, validation
from ..run import lifecycle

logger = logging.getLogger(__name__)

NOT_A_DRY_RUN = "Run {run} is not a dry run; only a dry run's verdicts can be applied."
NOT_FINISHED = "Dry run {run} is still in progress; apply it once it has finished."
NOTHING_TO_APPLY = "Dry run {run} proposed no change; there is nothing to apply."
ALREADY_APPLIED = "Dry run {run} has already been applied as run {application}."
ALL_STALE = (
    "Every one of the {previews} previewed cluster(s) of dry run {run} has changed since it was judged "
    "(a later run may already have made these merges); there is nothing left to apply."
)
NOTHING_CHOSEN = "No cluster of dry run {run} was chosen; tick at least one to apply."
NOT_A_PREVIEW = "Review(s) {ids} are not previewed clusters of dry run {run}."
#: The ``stage`` of a previewed action (``merging``): the deterministic pre-pass, or the judge.
PREPASS = "prepass"


def _short(run_id: RunId) -> str:
    return str(run_id)[:8]


def apply_refusal(
    *, run: ConsolidationRun, application: ConsolidationRun | None, previews: int, stale: int = 0
) -> str | None:
    """Why ``run``'s verdicts cannot be applied now (a message below), or None if they can.

    ``application``: the run that already applied it, if any; ``previews``: how many
    of its reviews have the outcome preview; ``stale``: how many of those no longer apply
    at all (``stale_previews``). Pure.
    """
    if not run.dry_run:
        return NOT_A_DRY_RUN.format(run=_short(run.pk))
    if run.finished_at is None:
        return NOT_FINISHED.format(run=_short(run.pk))
    if application is not None:
        return ALREADY_APPLIED.format(run=_short(run.pk), application=_short(application.pk))
    if not previews:
        return NOTHING_TO_APPLY.format(run=_short(run.pk))
    if stale >= previews:
        return ALL_STALE.format(run=_short(run.pk), previews=previews)
    return None


def choose_previews(
    *, run: ConsolidationRun, previews: Sequence[ClusterReview], review_ids: Iterable[int] | None
) -> list[ClusterReview]:
    """The previews of ``run`` an operator chose (``review_ids``; None: every one), in order.

    Raises ``ApplyRefused`` (``NOTHING_CHOSEN``, ``NOT_A_PREVIEW``) for an empty choice or
    an id that is not one of ``previews``. Pure.
    """
    if review_ids is None:
        return list(previews)
    chosen = {int(i) for i in review_ids}
    if not chosen:
        raise ApplyRefused(NOTHING_CHOSEN.format(run=_short(run.pk)))
    unknown = chosen - {p.pk for p in previews}
    if unknown:
        raise ApplyRefused(NOT_A_PREVIEW.format(ids=", ".join(f"#{i}" for i in sorted(unknown)), run=_short(run.pk)))
    return [p for p in previews if p.pk in chosen]


def _request_from_snapshot(snapshot: list[dict[str, Any]]) -> JudgeRequest:
    """The request the judge answered, rebuilt from a review's snapshot."""
    return JudgeRequest(
        members=tuple(
            MemberView(
                alias=row["alias"],
                content=row["content"],
                created_at=datetime.fromisoformat(row["created_at"]),
                generation=int(row.get("generation", 0)),
                protected=bool(row.get("protected", False)),
                origin=row.get("origin", "promoted"),
                pinned=bool(row.get("pinned", False)),
            )
            for row in snapshot
        )
    )


@dataclass(frozen=True, kw_only=True)
class PreviewedDecision:
    """What a dry run decided for one cluster, read back from its preview review.

    ``prepass`` and ``judged`` are the accepted actions in apply order (the pre-pass's,
    then the judge's), each with the ``signals`` it raised and the ``second_look``
    reason that confirmed it; ``request`` holds the members as judged (the snapshot).
    """

    request: JudgeRequest
    prepass: tuple[Action, ...]
    judged: tuple[Action, ...]


def _stored_action(entry: dict[str, Any], raw: str) -> Action:
    """One stored previewed action (``applied_actions`` entry) as an ``Action``, with its
    signals and second look. Raises ``JudgeResponseInvalid`` for an entry that is not one."""
    action = parse_action(entry, raw)
    signals = tuple(
        Signal(code=str(s.get("code", "")), concern=str(s.get("concern", "")))
        for s in entry.get("signals") or ()
        if isinstance(s, dict)
    )
    return Action(
        action=action.action, reason=action.reason, ids=action.ids, content=action.content, old=action.old,
        new=action.new, signals=signals, second_look=str(entry.get("second_look") or ""),
    )


def previewed_decision(preview: ClusterReview) -> PreviewedDecision:
    """The ``PreviewedDecision`` stored on ``preview`` (see the module docstring). Raises
    ``JudgeResponseInvalid`` if a stored action is not one."""
    actions = [(entry.get("stage"), _stored_action(entry, preview.raw_response)) for entry in preview.applied_actions]
    return PreviewedDecision(
        request=_request_from_snapshot(preview.snapshot),
        prepass=tuple(a for stage, a in actions if stage == PREPASS),
        judged=tuple(a for stage, a in actions if stage != PREPASS),
    )


@dataclass(frozen=True, kw_only=True)
class Rechecked:
    """A previewed decision after the invariants were checked again: the actions still
    standing, in apply order (``prepass`` of them first), the refusals, and for each
    standing merge whether it makes a new truth (which needs an embedding)."""

    accepted: tuple[Action, ...]
    rejections: tuple[validation.Rejection, ...]
    prepass: int
    new_contents: tuple[str, ...]


def recheck(decision: PreviewedDecision) -> Rechecked:
    """Check ``decision``'s actions against the invariants again, as the dry run checked
    them: the pre-pass's against the members as judged, the judge's against the members as
    the standing pre-pass merges leave them (``judging.after_prepass``: a keeper stands for
    its merge). No signal is read again. Pure."""
    limits = {"max_length": app_settings.MAX_CONTENT_LENGTH, "max_generation": app_settings.MAX_GENERATION}
    pre = validation.check_invariants(decision.request, decision.prepass, **limits)
    merges = [a for a in pre.accepted if a.action == "merge"]
    model_request = judging.after_prepass(decision.request, merges, max_generation=limits["max_generation"])
    judged = validation.check_invariants(model_request, decision.judged, **limits)
    new_contents = [
        a.content.strip()
        for request, result in ((decision.request, pre), (model_request, judged))
        for a in result.accepted
        if a.action == "merge" and MergeProtection.of_members(request.member(i) for i in a.ids).needs_embedding
    ]
    return Rechecked(
        accepted=(*pre.accepted, *judged.accepted),
        rejections=(*pre.rejections, *judged.rejections),
        prepass=len(pre.accepted),
        new_contents=tuple(dict.fromkeys(new_contents)),
    )


def apply_review(*, run_id: RunId, review_id: int, embedder: Embedder) -> ClusterReview:
    """Apply preview review ``review_id`` of ``run_id``'s dry run within run ``run_id``:
    exactly its previewed actions (``previewed_decision``), re-checked (``recheck``).

    Embeds new merged contents (outside any transaction), then records through
    ``merging.record_review`` (one transaction, freshness and the run's cap re-checked
    under row locks). The new review's ``rejections`` are the refusals of this
    application only. Idempotent: the same review applied twice is recorded once.
    Returns the new ``ClusterReview`` (outcome applied, stale or rejected). Raises
    ``ClusterReview.DoesNotExist`` if the review is not part of the source dry run,
    ``EmbeddingError`` if the embedder fails.
    """
    run = ConsolidationRun.objects.get(pk=run_id)
    preview = ClusterReview.objects.get(pk=review_id, run_id=run.source_run_id)
    existing = run.reviews.filter(key=preview.key).first()
    if existing is not None:
        return existing
    checked = recheck(previewed_decision(preview))
    verdict = Verdict(
        actions=tuple(parse_action(item, preview.raw_response) for item in preview.actions),
        reasoning=preview.reasoning,
        raw=preview.raw_response,
        model=preview.model,
        prompt_version=preview.prompt_version,
        llm_calls=0,  # the dry run paid for the judge; nothing is asked again
        attempts=0,
    )
    embeddings: dict[str, Any] = {}
    if checked.new_contents:
        embeddings = dict(zip(checked.new_contents, embedder.embed(list(checked.new_contents)), strict=True))
    decision = merging.Decision(
        run_id=run.pk,
        user_id=preview.user_id,
        key=preview.key,
        snapshot=tuple(preview.snapshot),
        similarities=dict(preview.similarities),
        judge=preview.judge,
        verdict=verdict,
        accepted=checked.accepted,
        rejections=checked.rejections,
        prepass=checked.prepass,
        embeddings=embeddings,
    )
    return merging.record_review(decision=decision, dry_run=False, embedding_model=embedder.model_name)


def _members(entry: dict[str, Any]) -> list[str]:
    """The aliases a stored action names."""
    if entry.get("action") == "merge":
        return [str(a) for a in entry.get("ids") or ()]
    return [*(str(a) for a in entry.get("old") or ()), str(entry.get("new", ""))]


def _action_stale(entry: dict[str, Any], rows: dict[str, dict[str, Any]], truths: dict[int, Truth]) -> bool:
    """Whether a previewed action names a member changed since the preview (``merging.is_fresh``;
    a member it would retire must also still be consolidatable)."""
    for alias in _members(entry):
        row = rows.get(alias)
        if row is None:
            return True
        retiring = alias != entry.get("new") and not row.get("protected")
        truth = truths.get(int(row["id"]))
        if not merging.is_fresh(truth, row, retiring=retiring, max_generation=app_settings.MAX_GENERATION):
            return True
    return False


def stale_previews(previews: Sequence[ClusterReview]) -> set[int]:
    """The ids of ``previews`` that would apply nothing now: each of their previewed
    actions names a member changed, retired or protected since (one query). A preview
    with one action still fresh is not stale (that action would apply)."""
    ids = {int(row["id"]) for p in previews for row in p.snapshot or () if row.get("id") is not None}
    truths = {t.pk: t for t in Truth.all_objects.filter(pk__in=ids).defer("embedding")}
    stale = set()
    for preview in previews:
        rows = {str(row["alias"]): row for row in preview.snapshot or () if "alias" in row}
        entries = preview.applied_actions or []
        if entries and all(_action_stale(e, rows, truths) for e in entries):
            stale.add(preview.pk)
    return stale


def start_application(
    *,
    dry_run_id: Any,
    actor: str,
    review_ids: Sequence[int] | None = None,
    trigger: str = ConsolidationRun.Trigger.ADMIN,
    execution: str = ConsolidationRun.Execution.QUEUED,
    send: Callable[[Sequence[ConsolidationJob]], None] | None,
) -> tuple[ConsolidationRun, list[int]]:
    """Create and start the run that applies dry run ``dry_run_id``; return it and the
    preview review ids it applies.

    ``review_ids`` chooses some of the dry run's previewed clusters (None: every one); a
    dry run is applied once, whole or in part. The run is made like any run
    (``lifecycle.create_run``) and carries the dry run's stored settings
    (``application_settings``); it is started like any run (``lifecycle.start_run`` with the
    previews; ``send``: the queue's, as there) and finished, recovered and retried by its
    jobs like any run. ``execution``
    in process: its jobs are left for ``execution.apply_sync``. Transaction: one, locking
    the dry run's row, so two clicks make one application. Raises ``ApplyRefused``
    (``apply_refusal``'s and ``choose_previews``' reasons; every preview
    stale counts only for a whole application) and writes nothing then.
    """
    with transaction.atomic():
        dry = ConsolidationRun.objects.select_for_update().get(pk=dry_run_id)
        previews = list(dry.reviews.filter(outcome=ClusterReview.Outcome.PREVIEW).order_by("id"))
        stale = len(stale_previews(previews)) if dry.dry_run and review_ids is None else 0
        refusal = apply_refusal(
            run=dry, application=dry.applications.order_by("created_at").first(), previews=len(previews), stale=stale
        )
        if refusal is not None:
            raise ApplyRefused(refusal)
        chosen = choose_previews(run=dry, previews=previews, review_ids=review_ids)
        run = lifecycle.create_run(
            trigger=trigger,
            execution=execution,
            threshold=dry.threshold,
            judge=dry.judge,
            user_id=dry.user_filter_id,
            source_run=dry,
            notes=f"Applies {_scope(chosen, previews)} of dry run {dry.pk}; requested by {actor}.",
        )
        run.effective_settings = application_settings(dry=dry, current=run.effective_settings or {})
        run.save(update_fields=["effective_settings"])
        lifecycle.start_run(run, previews=chosen, send=send)
    logger.info("run %s applies dry run %s (%d of %d clusters)", run.pk, dry.pk, len(chosen), len(previews))
    return run, [p.pk for p in chosen]


def _scope(chosen: Sequence[ClusterReview], previews: Sequence[ClusterReview]) -> str:
    if len(chosen) == len(previews):
        return "the verdicts"
    return f"the verdicts of {len(chosen)} of {len(previews)} previewed clusters"


#: The stored settings an application takes from its dry run: what the preview was judged under.
FROM_DRY_RUN = ("similarity_threshold", "risk_policy")


def application_settings(*, dry: ConsolidationRun, current: dict[str, Any]) -> dict[str, Any]:
    """The settings stored on the application of dry run ``dry``: ``current`` (the live
    settings now, as ``create_run`` stored them) with the dry run's ``FROM_DRY_RUN``, and the
    lower of the two retirement caps: applying a preview never loosens a cap set since.
    Stage modes stay ``current``'s (an application runs no stage). Pure."""
    previewed = dry.effective_settings or {}
    stored = {**current, **{k: previewed[k] for k in FROM_DRY_RUN if k in previewed}}
    caps = [int(c) for c in (current.get("max_retirements_per_run"), previewed.get("max_retirements_per_run"))
            if c is not None]
    if caps:
        stored["max_retirements_per_run"] = min(caps)
    return stored
