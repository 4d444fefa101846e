"""Apply a dry run as it was previewed: its accepted actions, not a second judgement.

``apply_refusal`` says whether a dry run can be applied; ``start_application`` then
creates the applying run (``source_run`` points at the
dry run) and starts one apply job per chosen preview, each running ``apply_review``.

What a dry run decided for a cluster is stored on its preview review whole: ``decision``
holds the ``merging.Decision`` its ``record_review`` wrote (``Decision.to_json``: the members
as judged, the verdict, the accepted actions in apply order, the pre-pass's first, each with
the ``signals`` the validator raised and the ``second_look`` answer that confirmed it, the
spend); ``applied_actions`` records which of those actions the preview applied (the dry run
may have refused some, as stale or past its cap), with ``stage`` and ``truth_ids``.
``previewed_decision`` reads the stored decision back, restricted to those actions.
``apply_review`` writes that decision again, in the applying run: signals are not read
again and no second look is asked, so an action the dry run's second look confirmed, or a
model's action naming a pre-pass keeper, applies as previewed. What is checked again:
the invariants (``validation.check_invariants``: ids, protection, generation limit,
direction, nothing lost; a model's action against the members as the pre-pass left them,
as the dry run checked it) and, in ``merging.record_review`` under row locks, freshness
(members unchanged since the preview, still consolidatable) and the retirement cap. Each
refusal is recorded on the application's review and listed on the dry run's page
(``application_refusals``). No model is called; merged contents are embedded afresh. A
review stored before decisions were kept (``decision`` empty) is applied from its columns
(``applied_actions``, ``actions``, ``snapshot``), as it was before.

``stale_previews`` says which previews no longer apply at all (every action names a
member changed since), so that the admin offers only what can still be applied.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from django.db import transaction

from ...choices import MergeProtection
from ...conf import app_settings
from ...embeddings import Embedder
from ...exceptions import ApplyRefused
from ...llm.base import Action, JudgeRequest, MemberView, Spend, Verdict
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


def _request_from_snapshot(snapshot: Sequence[dict[str, Any]]) -> JudgeRequest:
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
                changes=row.get("changes"),
            )
            for row in snapshot
        )
    )


def _entry_wire(entry: dict[str, Any]) -> dict[str, Any]:
    """A previewed action entry without what its recording added (stage, truth ids, result)."""
    return {k: v for k, v in entry.items() if k not in ("stage", "truth_ids", "result_id")}


def _as_previewed(stored: merging.Decision, entries: Sequence[dict[str, Any]]) -> merging.Decision | None:
    """``stored`` with only the accepted actions its preview applied (``entries``, in order;
    the dry run may have refused some as stale or past its cap), or None when ``entries``
    are not such a part of it (the review's records disagree)."""
    kept: list[tuple[bool, Action]] = []
    for index, action in enumerate(stored.accepted):
        entry = entries[len(kept)] if len(kept) < len(entries) else None
        prepass = index < stored.prepass
        if entry is not None and _entry_wire(entry) == action.as_wire() and (entry.get("stage") == PREPASS) == prepass:
            kept.append((prepass, action))
    if len(kept) != len(entries):
        return None
    return replace(stored, accepted=tuple(a for _, a in kept), prepass=sum(1 for p, _ in kept if p))


def _rebuilt(preview: ClusterReview) -> merging.Decision:
    """The decision of a preview stored without one (``decision`` empty), from its columns:
    the judge's actions, its reasoning and reply, and the previewed actions in apply order."""
    entries = preview.applied_actions
    actions = [(entry.get("stage") == PREPASS, merging.action_of(entry)) for entry in entries]
    verdict = Verdict(
        actions=tuple(parse_action(item, preview.raw_response) for item in preview.actions),
        reasoning=preview.reasoning,
        raw=preview.raw_response,
        model=preview.model,
        prompt_version=preview.prompt_version,
    )
    return merging.Decision(
        run_id=preview.run_id,
        user_id=preview.user_id,
        key=preview.key,
        snapshot=tuple(preview.snapshot),
        similarities=dict(preview.similarities),
        judge=preview.judge,
        verdict=verdict,
        accepted=(*(a for pre, a in actions if pre), *(a for pre, a in actions if not pre)),
        prepass=sum(1 for pre, _ in actions if pre),
    )


def previewed_decision(preview: ClusterReview) -> merging.Decision:
    """The decision ``preview`` recorded, as previewed: its stored ``Decision``
    (``ClusterReview.decision``) with the accepted actions the preview applied.

    A review stored before decisions were kept (``decision`` empty), or whose previewed
    actions (``applied_actions``, what the dry run's page shows) are not those of its stored
    decision (a record edited since), gives the decision its columns record (``_rebuilt``):
    what the operator saw is what is checked. Raises ``StoredDecisionInvalid`` for a stored
    decision of another format, ``JudgeResponseInvalid`` for a recorded action that is not one.
    """
    if preview.decision is None:
        return _rebuilt(preview)
    found = _as_previewed(merging.Decision.from_json(preview.decision), preview.applied_actions)
    if found is None:
        logger.warning("review %s: its previewed actions differ from its stored decision; applying those", preview.pk)
        return _rebuilt(preview)
    return found


@dataclass(frozen=True, kw_only=True)
class Rechecked:
    """A previewed decision after the invariants were checked again: the actions still
    standing, in apply order (``prepass`` of them first), the refusals, and for each
    standing merge whether it makes a new truth (which needs an embedding)."""

    accepted: tuple[Action, ...]
    rejections: tuple[validation.Rejection, ...]
    prepass: int
    new_contents: tuple[str, ...]


def recheck(decision: merging.Decision) -> Rechecked:
    """Check ``decision``'s accepted actions against the invariants again, as the dry run
    checked them: the pre-pass's against the members as judged (``snapshot``), the judge's
    against the members as the standing pre-pass merges leave them (``judging.after_prepass``:
    a keeper stands for its merge). No signal is read again. Pure."""
    limits = {"max_length": app_settings.MAX_CONTENT_LENGTH, "max_generation": app_settings.MAX_GENERATION}
    request = _request_from_snapshot(decision.snapshot)
    pre = validation.check_invariants(request, decision.accepted[: decision.prepass], **limits)
    merges = [a for a in pre.accepted if a.action == "merge"]
    model_request = judging.after_prepass(request, merges, max_generation=limits["max_generation"])
    judged = validation.check_invariants(model_request, decision.accepted[decision.prepass :], **limits)
    new_contents = [
        a.content.strip()
        for request, result in ((request, pre), (model_request, judged))
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
    """Apply preview review ``review_id`` of ``run_id``'s dry run within run ``run_id``: its
    stored decision (``previewed_decision``) written again, its actions re-checked (``recheck``).

    What is written is the stored decision in run ``run_id``, with the actions still
    standing, their refusals, and fresh vectors of its new merged contents; no model is
    asked, so it carries no spend, calls or latency, and the dry run's judgement failures
    stay the dry run's. Embeds (outside any transaction), then records through
    ``merging.record_review`` (one transaction, freshness and the run's cap re-checked
    under row locks). The new review's ``rejections`` are the refusals of this
    application only. Idempotent: the same review applied twice is recorded once.
    Returns the new ``ClusterReview`` (outcome applied, stale or rejected). Raises
    ``ClusterReview.DoesNotExist`` if the review is not part of the source dry run,
    ``StoredDecisionInvalid`` for a stored decision of another format, ``EmbeddingError``
    if the embedder fails.
    """
    run = ConsolidationRun.objects.get(pk=run_id)
    preview = ClusterReview.objects.get(pk=review_id, run_id=run.source_run_id)
    existing = run.reviews.filter(key=preview.key).first()
    if existing is not None:
        return existing
    stored = previewed_decision(preview)
    checked = recheck(stored)
    embeddings: dict[str, Any] = {}
    if checked.new_contents:
        embeddings = dict(zip(checked.new_contents, embedder.embed(list(checked.new_contents)), strict=True))
    verdict = stored.verdict
    if verdict is not None:  # nothing is asked again: no call, attempt, latency or spend
        verdict = replace(verdict, llm_calls=0, attempts=0, latency_ms=0, tokens=0, cost=0.0, spend=Spend())
    decision = replace(
        stored,
        run_id=run.pk,
        verdict=verdict,
        accepted=checked.accepted,
        rejections=checked.rejections,
        prepass=checked.prepass,
        failed=(),
        error="",
        failure="",
        embeddings=embeddings,
        spend=Spend(),
        asked_model=False,
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
