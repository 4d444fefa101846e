"""services.dry_runs: a dry run's verdicts applied as a real run, exactly as previewed,
re-checked for freshness and the invariants; queued through tasks (sync queue in tests)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import TestCase
from django.utils import timezone

from iris_consolidation import review_display, selectors
from iris_consolidation.embeddings import LOCAL_MODEL_NAME, get_embedder
from iris_consolidation.exceptions import ApplyRefused
from iris_consolidation.llm.rules import RuleJudge
from iris_consolidation.models import (
    ClusterReview,
    ConsolidationJob,
    ConsolidationRun,
    LiveSettings,
    RetiredReason,
    Truth,
)
from iris_consolidation.services.operations import curation, dry_runs
from iris_consolidation.services.pipeline import validation
from iris_consolidation.services.queue import delivery, dispatch, execution, recovery
from iris_consolidation.services.run import lifecycle
from tests.conftest import vector_at

pytestmark = pytest.mark.django_db


@pytest.fixture
def previewed(user_factory, run_factory):
    """Two spellings of one statement, and a finished dry run that would merge them."""
    user = user_factory("alice")
    first = Truth.objects.create(
        user=user,
        content="Drinks green tea every morning",
        embedding=vector_at(1.0, axis=3),
        embedding_model=LOCAL_MODEL_NAME,
    )
    second = Truth.objects.create(
        user=user,
        content="drinks green tea every morning.",
        embedding=vector_at(0.96, axis=3),
        embedding_model=LOCAL_MODEL_NAME,
    )
    dry = execution.run_sync(
        run=run_factory(dry_run=True, user_id=user.pk), client=RuleJudge(), embedder=get_embedder()
    )
    assert dry.merged == 1 and Truth.objects.filter(user=user).count() == 2
    return {"user": user, "first": first, "second": second, "dry": dry}


def _apply(dry):
    """Apply ``dry`` as the admin does; its apply jobs run inline when the request's
    transaction commits (sync queue)."""
    with TestCase.captureOnCommitCallbacks(execute=True):
        run, _ = dry_runs.start_application(dry_run_id=dry.pk, actor="operator", send=dispatch.send_jobs)
    run.refresh_from_db()
    return run


def _start(dry, **kwargs):
    """Start applying ``dry`` in process without running its jobs yet (``_finish`` runs
    them): what a change between the confirmation page and the worker looks like."""
    run, _ = dry_runs.start_application(
        dry_run_id=dry.pk, actor="operator", execution="in_process", **kwargs, send=dispatch.send_jobs
    )
    return run


def _finish(run):
    return execution.apply_sync(run=run, embedder=get_embedder())


def test_applying_a_dry_run_merges_what_it_previewed(previewed):
    run = _apply(previewed["dry"])

    assert run.source_run_id == previewed["dry"].pk and run.trigger == "admin"
    assert run.status == ConsolidationRun.Status.DONE and run.merged == 1 and run.retired == 2
    assert run.llm_calls == 0  # the judge is not asked again
    review = run.reviews.get()
    preview = previewed["dry"].reviews.get()
    assert review.applied and review.key == preview.key and review.reasoning == preview.reasoning
    merged = Truth.objects.get(user=previewed["user"])
    assert merged.origin == "consolidated" and merged.content == "Drinks green tea every morning"
    assert merged.embedding is not None  # embedded afresh
    for source in (previewed["first"], previewed["second"]):
        source.refresh_from_db()
        assert source.retired_reason == RetiredReason.MERGED and source.superseded_by_id == merged.pk


def test_a_member_changed_since_the_dry_run_makes_its_cluster_stale_and_is_listed(previewed):
    run = _start(previewed["dry"])
    second = previewed["second"]
    second.content = "Drinks green tea every morning, without sugar"
    second.save()

    run = _finish(run)

    review = run.reviews.get()
    assert review.outcome == ClusterReview.Outcome.STALE and not review.applied
    assert [r["code"] for r in review.rejections] == [validation.Code.STALE_MEMBER]
    assert Truth.objects.filter(user=previewed["user"]).count() == 2  # nothing retired, nothing made
    (refusal,) = review_display.application_refusals(selectors.list_application_refusals(application=run))
    names = {previewed["first"].pk, previewed["second"].pk}
    assert refusal.action == "Merge " + " + ".join(f"#{pk}" for pk in sorted(names))
    assert refusal.code == validation.Code.STALE_MEMBER and f"#{second.pk}" in refusal.reason


def test_a_member_pinned_since_the_dry_run_is_not_retired(previewed):
    run = _start(previewed["dry"])
    curation.set_pinned(truth_ids=[previewed["first"].pk], pinned=True)

    run = _finish(run)

    assert run.reviews.get().outcome == ClusterReview.Outcome.STALE
    assert Truth.objects.filter(user=previewed["user"]).count() == 2


def test_a_dry_run_whose_every_preview_went_stale_is_not_applied(previewed):
    curation.set_pinned(truth_ids=[previewed["first"].pk], pinned=True)
    dry = previewed["dry"]

    with pytest.raises(ApplyRefused) as refused:
        dry_runs.start_application(dry_run_id=dry.pk, actor="operator", send=dispatch.send_jobs)

    assert str(refused.value) == dry_runs.ALL_STALE.format(run=str(dry.pk)[:8], previews=1)
    assert not ConsolidationRun.objects.filter(source_run=dry).exists()


def test_the_previewed_actions_are_checked_against_the_invariants_again(previewed):
    # A stored previewed action the invariants refuse (here it invents a place no member
    # states, as if the record had been altered since the dry run) is never applied.
    preview = previewed["dry"].reviews.get()
    preview.applied_actions = [{**preview.applied_actions[0], "content": "Drinks green tea every morning in Lisbon"}]
    preview.save(update_fields=["applied_actions"])

    run = _apply(previewed["dry"])

    review = run.reviews.get()
    assert review.outcome == ClusterReview.Outcome.REJECTED and not review.applied
    assert [r["code"] for r in review.rejections] == [validation.Code.INVENTED_DETAIL]
    assert Truth.objects.filter(user=previewed["user"]).count() == 2


def test_a_dry_run_is_applied_once(previewed):
    first = _apply(previewed["dry"])

    with pytest.raises(ApplyRefused) as refused:
        dry_runs.start_application(dry_run_id=previewed["dry"].pk, actor="operator", send=dispatch.send_jobs)

    assert str(refused.value) == dry_runs.ALREADY_APPLIED.format(
        run=str(previewed["dry"].pk)[:8], application=str(first.pk)[:8]
    )
    assert ConsolidationRun.objects.filter(source_run=previewed["dry"]).count() == 1


def test_only_a_finished_dry_run_can_be_applied(run_factory):
    real = run_factory()
    unfinished = run_factory(dry_run=True)

    with pytest.raises(ApplyRefused) as not_dry:
        dry_runs.start_application(dry_run_id=real.pk, actor="operator", send=dispatch.send_jobs)
    with pytest.raises(ApplyRefused) as not_finished:
        dry_runs.start_application(dry_run_id=unfinished.pk, actor="operator", send=dispatch.send_jobs)

    assert str(not_dry.value) == dry_runs.NOT_A_DRY_RUN.format(run=str(real.pk)[:8])
    assert str(not_finished.value) == dry_runs.NOT_FINISHED.format(run=str(unfinished.pk)[:8])
    assert ConsolidationRun.objects.count() == 2


def test_a_dry_run_that_proposed_nothing_has_nothing_to_apply(user_factory, run_factory):
    user = user_factory()
    Truth.objects.create(
        user=user, content="Likes jazz", embedding=vector_at(1.0, axis=5), embedding_model=LOCAL_MODEL_NAME
    )
    Truth.objects.create(
        user=user, content="Likes rock", embedding=vector_at(0.9, axis=5), embedding_model=LOCAL_MODEL_NAME
    )
    dry = execution.run_sync(
        run=run_factory(dry_run=True, user_id=user.pk), client=RuleJudge(), embedder=get_embedder()
    )
    assert dry.kept == 1

    with pytest.raises(ApplyRefused) as refused:
        dry_runs.start_application(dry_run_id=dry.pk, actor="operator", send=dispatch.send_jobs)

    assert str(refused.value) == dry_runs.NOTHING_TO_APPLY.format(run=str(dry.pk)[:8])


def test_an_application_is_made_like_any_run_and_the_live_cap_applies(previewed):
    """Bug: the application skipped ``create_run``: no effective settings, so the live
    retirement cap did not apply to it."""
    LiveSettings.objects.create(max_retirements_per_run=1)

    run = _apply(previewed["dry"])

    assert run.effective_settings["max_retirements_per_run"] == 1
    review = run.reviews.get()
    assert review.outcome == ClusterReview.Outcome.REJECTED and not review.applied
    assert [r["code"] for r in review.rejections] == [validation.Code.CAP_REACHED]
    assert (run.retired, run.status) == (0, ConsolidationRun.Status.DONE)
    assert Truth.objects.filter(user=previewed["user"]).count() == 2


def test_an_application_has_job_rows_and_a_lost_message_is_recovered(previewed):
    """Bug: the application's tasks had no job rows, so a lost message left it running
    forever and the recovery sweep ignored it."""
    run, review_ids = dry_runs.start_application(
        dry_run_id=previewed["dry"].pk, actor="operator", send=dispatch.send_jobs
    )
    # The transaction's on-commit send never ran here: the message is lost.
    job = ConsolidationJob.objects.get(run=run)
    assert (job.kind, job.status, job.preview_id) == ("apply", "queued", review_ids[0])
    assert ConsolidationRun.objects.get(pk=run.pk).status == ConsolidationRun.Status.RUNNING

    later = timezone.now() + timedelta(seconds=recovery.LOST_MESSAGE_GRACE + 1)
    with TestCase.captureOnCommitCallbacks(execute=True):
        recovered = recovery.recover(broker_idle=lambda: True, now=later)

    assert recovered["resent"] == 1
    run.refresh_from_db()
    assert (run.status, run.merged, run.retired) == (ConsolidationRun.Status.DONE, 1, 2)


def test_a_failed_application_job_is_retried_like_any_run(previewed, settings):
    """An apply job that keeps failing fails the run; ``retry_failed`` applies it again."""
    settings.IRIS_CONSOLIDATION_JOB_ATTEMPTS = 1
    run, _ = dry_runs.start_application(dry_run_id=previewed["dry"].pk, actor="operator", send=dispatch.send_jobs)
    job = delivery.claim(ConsolidationJob.objects.get(run=run).pk, worker="test")
    assert delivery.record_fault(job, error="RuntimeError: boom") == "failed"
    assert lifecycle.refresh_run(run.pk) == ConsolidationRun.Status.FAILED

    with TestCase.captureOnCommitCallbacks(execute=True):
        assert recovery.retry_failed(run.pk) == 1

    run.refresh_from_db()
    assert (run.status, run.merged, run.failed) == (ConsolidationRun.Status.DONE, 1, 0)


def test_applying_a_dry_run_a_later_run_already_made_counts_its_clusters_stale_once(previewed, run_factory):
    """Such an application used to show "kept 1, rejected 1" and no stale count."""
    run = _start(previewed["dry"])
    real = execution.run_sync(
        run=run_factory(execution="queued", user_id=previewed["user"].pk), client=RuleJudge(), embedder=get_embedder()
    )
    assert real.merged == 1  # the same merge, made for real

    run = _finish(run)

    assert run.reviews.get().outcome == ClusterReview.Outcome.STALE
    assert (run.stale, run.kept, run.rejected, run.merged, run.deferred, run.failed) == (1, 0, 0, 0, 0, 0)


def test_an_application_takes_the_dry_runs_threshold_and_policy_and_the_lower_cap():
    dry = ConsolidationRun(
        dry_run=True,
        effective_settings={"max_retirements_per_run": 5, "similarity_threshold": 0.6, "risk_policy": "verify"},
    )
    current = {
        "max_retirements_per_run": 50,
        "similarity_threshold": 0.8,
        "risk_policy": "refuse",
        "stage_modes": {"prune": "apply"},
    }

    stored = dry_runs.application_settings(dry=dry, current=current)

    assert stored == {
        "max_retirements_per_run": 5,  # the dry run's, lower than the live one
        "similarity_threshold": 0.6,
        "risk_policy": "verify",
        "stage_modes": {"prune": "apply"},  # an application runs no stage; the live modes stand
    }
    assert dry_runs.application_settings(dry=dry, current={**current, "max_retirements_per_run": 2})[
        "max_retirements_per_run"
    ] == 2  # a cap lowered since the preview holds
