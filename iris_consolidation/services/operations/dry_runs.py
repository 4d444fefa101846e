"""Apply a dry run's verdicts as a real run, without asking the judge again.

``apply_refusal`` says whether a dry run can be applied; the queue's
``lifecycle.start_application`` then creates the applying run (``source_run`` points at the
dry run) and starts one apply job per previewed cluster, each running ``apply_review``.
``apply_review`` never trusts the preview: it rebuilds the judge's request from the
review's snapshot, validates the verdict
again with ``validation.validate`` (the rules may have changed since), and hands it
to ``merging.record_review``, which re-reads the members under row locks and drops
any action whose members changed, were retired or became protected since the dry
run (freshness). No model is called; merged contents are embedded afresh.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from ...choices import MergeProtection
from ...conf import app_settings
from ...embeddings import Embedder
from ...llm.base import JudgeRequest, MemberView, Verdict
from ...llm.parsing import parse_action
from ...models import ClusterReview, ConsolidationRun
from ..pipeline import merging, validation

logger = logging.getLogger(__name__)

NOT_A_DRY_RUN = "Run {run} is not a dry run; only a dry run's verdicts can be applied."
NOT_FINISHED = "Dry run {run} is still in progress; apply it once it has finished."
NOTHING_TO_APPLY = "Dry run {run} proposed no change; there is nothing to apply."
ALREADY_APPLIED = "Dry run {run} has already been applied as run {application}."


def _short(run_id: Any) -> str:
    return str(run_id)[:8]


def apply_refusal(*, run: ConsolidationRun, application: ConsolidationRun | None, previews: int) -> str | None:
    """Why ``run``'s verdicts cannot be applied now (a message below), or None if they can.

    ``application``: the run that already applied it, if any; ``previews``: how many
    of its reviews have the outcome preview. Pure.
    """
    if not run.dry_run:
        return NOT_A_DRY_RUN.format(run=_short(run.pk))
    if run.finished_at is None:
        return NOT_FINISHED.format(run=_short(run.pk))
    if application is not None:
        return ALREADY_APPLIED.format(run=_short(run.pk), application=_short(application.pk))
    if not previews:
        return NOTHING_TO_APPLY.format(run=_short(run.pk))
    return None


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


def apply_review(*, run_id: Any, review_id: int, embedder: Embedder) -> ClusterReview:
    """Apply preview review ``review_id`` of ``run_id``'s dry run within run ``run_id``.

    Re-validates, embeds new merged contents (outside any transaction), then records
    through ``merging.record_review`` (one transaction, freshness re-checked under
    row locks). Idempotent: the same review applied twice is recorded once. Returns
    the new ``ClusterReview`` (outcome applied, stale or rejected). Raises
    ``ClusterReview.DoesNotExist`` if the review is not part of the source dry run,
    ``EmbeddingError`` if the embedder fails.
    """
    run = ConsolidationRun.objects.get(pk=run_id)
    preview = ClusterReview.objects.get(pk=review_id, run_id=run.source_run_id)
    existing = run.reviews.filter(key=preview.key).first()
    if existing is not None:
        return existing
    request = _request_from_snapshot(preview.snapshot)
    actions = tuple(parse_action(item, preview.raw_response) for item in preview.actions)
    verdict = Verdict(
        actions=actions,
        reasoning=preview.reasoning,
        raw=preview.raw_response,
        model=preview.model,
        prompt_version=preview.prompt_version,
        llm_calls=0,  # the dry run paid for the judge; nothing is asked again
        attempts=0,
    )
    result = validation.validate(
        request, actions, max_length=app_settings.MAX_CONTENT_LENGTH, max_generation=app_settings.MAX_GENERATION
    )
    new_contents = [
        a.content.strip()
        for a in result.accepted
        if a.action == "merge" and MergeProtection.of_members(request.member(i) for i in a.ids).needs_embedding
    ]
    embeddings: dict[str, Any] = {}
    if new_contents:
        embeddings = dict(zip(new_contents, embedder.embed(new_contents), strict=True))
    draft = merging.ReviewDraft(
        run_id=run.pk,
        user_id=preview.user_id,
        key=preview.key,
        snapshot=tuple(preview.snapshot),
        similarities=dict(preview.similarities),
        judge=preview.judge,
        verdict=verdict,
        accepted=result.accepted,
        rejections=result.rejections,
        embeddings=embeddings,
    )
    return merging.record_review(draft=draft, dry_run=False, embedding_model=embedder.model_name)
