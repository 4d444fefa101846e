"""Job rows of queued runs: claims, lost workers, recovery, retries, the run's status."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from iris_consolidation.models import ClusterReview, ConsolidationJob, ConsolidationRun
from iris_consolidation.services.pipeline.clustering import CandidateCluster
from iris_consolidation.services.queue import delivery, recovery
from iris_consolidation.services.run import decide, lifecycle
from iris_consolidation.services.run import jobs as run_jobs
from tests.conftest import vector_at

pytestmark = pytest.mark.django_db

NOW = timezone.now()


@pytest.fixture
def run(run_factory):
    run = run_factory(execution="queued")
    run.status, run.started_at = "running", NOW
    run.save()
    return run


@pytest.fixture
def job(run, truth_factory):
    a = truth_factory("Works as a nurse", embedding=vector_at(1.0))
    b = truth_factory("Works as a nurse.", user=a.user, embedding=vector_at(0.95))
    return run_jobs.create_cluster_jobs(
        run.pk,
        [CandidateCluster(user_id=a.user_id, member_ids=(a.pk, b.pk), similarities=(1.0, 0.95))],
        now=timezone.now(),
    )[0]


def _set(job, **fields):
    ConsolidationJob.objects.filter(pk=job.pk).update(**fields)
    job.refresh_from_db()


def test_claim_takes_a_queued_job_with_a_lease_past_its_timeout(job, settings):
    settings.IRIS_CONSOLIDATION_CLUSTER_JOB_TIMEOUT = 120

    claimed = delivery.claim(job.pk, worker="host:1", now=NOW)

    assert (claimed.status, claimed.deliveries, claimed.worker) == ("running", 1, "host:1")
    assert claimed.lease_until == NOW + timedelta(seconds=120 + delivery.LEASE_MARGIN)
    assert claimed.first_attempt_at == NOW


def test_claim_leaves_a_job_another_worker_holds(job):
    delivery.claim(job.pk, now=NOW)

    assert delivery.claim(job.pk, now=NOW + timedelta(seconds=5)) is None


@pytest.mark.parametrize("status", ["done", "failed"])
def test_claim_leaves_a_finished_job(job, status):
    _set(job, status=status)

    assert delivery.claim(job.pk, now=NOW) is None


def test_claim_leaves_a_waiting_job_to_its_schedule_until_its_time(job):
    _set(job, status="waiting", not_before=NOW + timedelta(seconds=60))

    assert delivery.claim(job.pk, now=NOW) is None
    assert delivery.claim(job.pk, now=NOW + timedelta(seconds=60)).status == "running"


def test_claim_after_the_lease_expired_counts_the_lost_worker_as_a_fault(job):
    first = delivery.claim(job.pk, now=NOW)

    again = delivery.claim(job.pk, now=first.lease_until + timedelta(seconds=1))

    assert (again.deliveries, again.faults, again.error) == (2, 1, delivery.WORKER_LOST)
    assert again.first_attempt_at == NOW  # the retry window keeps its start


def test_job_lost_as_often_as_job_attempts_fails_with_a_recorded_review(job, run, settings):
    settings.IRIS_CONSOLIDATION_JOB_ATTEMPTS = 2
    lease = delivery.claim(job.pk, now=NOW).lease_until
    lease = delivery.claim(job.pk, now=lease + timedelta(seconds=1)).lease_until

    assert delivery.claim(job.pk, now=lease + timedelta(seconds=1)) is None

    job.refresh_from_db()
    run.refresh_from_db()
    assert (job.status, job.faults) == ("failed", 2)
    assert job.error == delivery.GAVE_UP.format(faults=2, attempts=2, error=delivery.WORKER_LOST)
    assert job.review.outcome == ClusterReview.Outcome.FAILED and job.review.error == job.error
    assert (run.failed, run.clusters_done) == (1, 1)


def test_a_stale_delivery_cannot_move_a_job_it_lost(job):
    first = delivery.claim(job.pk, now=NOW)
    delivery.claim(job.pk, now=first.lease_until + timedelta(seconds=1))  # another worker took over

    assert delivery.record_fault(first, error="late") == "ignored"
    assert delivery.defer_batch([first], until=NOW) == 0
    job.refresh_from_db()
    assert (job.status, job.deliveries) == ("running", 2)


def test_recover_requeues_running_jobs_past_their_lease(job, django_capture_on_commit_callbacks):
    lease = delivery.claim(job.pk, now=NOW).lease_until

    with django_capture_on_commit_callbacks() as sent:
        result = recovery.recover(broker_idle=lambda: False, now=lease + timedelta(seconds=1))

    job.refresh_from_db()
    assert result == {"lost": 1, "overdue": 0, "resent": 0}
    assert (job.status, job.faults) == ("queued", 1)
    assert len(sent) == 1


def test_recover_resends_queued_jobs_only_when_the_broker_queue_is_empty(job, django_capture_on_commit_callbacks):
    _set(job, dispatched_at=NOW - timedelta(seconds=recovery.LOST_MESSAGE_GRACE + 1))

    with django_capture_on_commit_callbacks() as busy:
        assert recovery.recover(broker_idle=lambda: False, now=NOW)["resent"] == 0
    with django_capture_on_commit_callbacks() as idle:
        assert recovery.recover(broker_idle=lambda: True, now=NOW)["resent"] == 1

    job.refresh_from_db()
    assert (len(busy), len(idle)) == (0, 1)
    assert job.dispatched_at == NOW and job.status == "queued"


def test_recover_leaves_recently_sent_jobs_alone(job, django_capture_on_commit_callbacks):
    _set(job, dispatched_at=NOW - timedelta(seconds=5))

    with django_capture_on_commit_callbacks() as sent:
        assert recovery.recover(broker_idle=lambda: True, now=NOW) == {"lost": 0, "overdue": 0, "resent": 0}

    assert sent == []


def test_recover_resends_a_waiting_job_whose_schedule_never_fired(job, django_capture_on_commit_callbacks):
    old = NOW - timedelta(seconds=recovery.LOST_MESSAGE_GRACE + 5)
    _set(job, status="waiting", not_before=old, dispatched_at=old)

    with django_capture_on_commit_callbacks() as sent:
        assert recovery.recover(broker_idle=lambda: False, now=NOW)["overdue"] == 1

    assert len(sent) == 1


@pytest.mark.parametrize(
    ("statuses", "expected"),
    [
        (["done", "done"], "done"),
        (["done", "failed"], "partial"),
        (["failed", "failed"], "failed"),
        (["done", "waiting"], "running"),
    ],
)
def test_run_status_is_derived_from_its_jobs(run, user_factory, statuses, expected):
    user = user_factory()
    for i, status in enumerate(statuses):
        ConsolidationJob.objects.create(run=run, kind="user", key=f"user:{i}", user=user, status=status)

    assert lifecycle.refresh_run(run.pk, now=NOW) == expected

    run.refresh_from_db()
    assert (run.finished_at is not None) == (expected != "running")


def test_retry_failed_requeues_in_a_new_round_and_uncounts_the_failure(job, run, django_capture_on_commit_callbacks):
    delivery.claim(job.pk, now=NOW)
    review = decide.record_cluster_failure(
        run_id=run.pk, cluster=run_jobs.candidate(job), judge="llm", error="boom", key=job.review_key()
    )
    delivery.finish_cluster_job(job, review)
    lifecycle.refresh_run(run.pk)
    run.refresh_from_db()
    assert (run.status, run.failed, run.clusters_done) == ("failed", 1, 1)

    with django_capture_on_commit_callbacks() as sent:
        assert recovery.retry_failed(run.pk) == 1

    job.refresh_from_db()
    run.refresh_from_db()
    assert (job.status, job.round, job.faults, job.review_id, job.first_attempt_at) == ("queued", 1, 0, None, None)
    assert job.review_key() != review.key
    assert (run.status, run.failed, run.clusters_done, run.finished_at) == ("running", 0, 0, None)
    assert len(sent) == 1
    assert ClusterReview.objects.filter(pk=review.pk).exists()  # history stays


def test_retry_failed_with_nothing_failed_changes_nothing(job, run):
    assert recovery.retry_failed(run.pk) == 0
    run.refresh_from_db()
    assert run.status == ConsolidationRun.Status.RUNNING


def test_abandon_run_fails_its_unfinished_jobs_and_the_run(job, run):
    assert lifecycle.abandon_run(run.pk, reason="holder died", now=NOW) == 1

    job.refresh_from_db()
    run.refresh_from_db()
    assert (job.status, job.error) == ("failed", lifecycle.ABANDONED.format(reason="holder died"))
    assert (run.status, run.finished_at) == ("failed", NOW)
    assert "holder died" in run.notes
    # The one failure path completes the inventory, as a run that fails in its process does.
    assert run.inventory["after"]["live"] == 2


@pytest.mark.django_db(transaction=True)
def test_fail_run_fails_the_jobs_and_the_run_in_one_transaction(run_factory, truth_factory):
    """While another transaction holds the run's row (a delivery finishing, a refresh),
    ``fail_run`` waits with the jobs locked and unchanged: no reader sees them failed
    with the run still running (a ``refresh_run`` then would have closed the run as
    done, moving its cursors). It used to update the jobs first, in a commit of its own."""
    import threading

    from django.db import connection, transaction

    run = run_factory(execution="queued")
    run.status, run.started_at = "running", NOW
    run.save()
    a = truth_factory("Works as a nurse", embedding=vector_at(1.0))
    b = truth_factory("Works as a nurse.", user=a.user, embedding=vector_at(0.95))
    cluster = CandidateCluster(user_id=a.user_id, member_ids=(a.pk, b.pk), similarities=(1.0, 0.95))
    job = run_jobs.create_cluster_jobs(run.pk, [cluster], now=NOW)[0]
    holding, release = threading.Event(), threading.Event()

    def hold_the_run() -> None:
        try:
            with transaction.atomic():
                ConsolidationRun.objects.select_for_update().get(pk=run.pk)
                holding.set()
                release.wait(10)
        finally:
            connection.close()

    def fail() -> None:
        try:
            lifecycle.fail_run(run.pk, note="The process stopped.")
        finally:
            connection.close()

    holder = threading.Thread(target=hold_the_run)
    holder.start()
    assert holding.wait(10)
    failing = threading.Thread(target=fail)
    failing.start()
    failing.join(1.0)  # fail_run is now waiting for the run's row
    seen_while_waiting = ConsolidationJob.objects.get(pk=job.pk).status
    release.set()
    holder.join(10)
    failing.join(10)

    job.refresh_from_db()
    run.refresh_from_db()
    assert seen_while_waiting == "queued"
    assert (job.status, job.error, run.status) == ("failed", "The process stopped.", "failed")


def test_giving_up_on_a_job_whose_verdict_was_written_keeps_the_verdict(job, run, settings):
    """The worker died after the write, as often as JOB_ATTEMPTS allows."""
    settings.IRIS_CONSOLIDATION_JOB_ATTEMPTS = 1
    from iris_consolidation.models import Truth

    claimed = delivery.claim(job.pk, now=NOW)
    applied = decide.record_cluster_failure(  # stands in for any recorded review
        run_id=run.pk, cluster=run_jobs.candidate(claimed), judge="rules", error="", key=claimed.review_key()
    )

    assert delivery.claim(job.pk, now=claimed.lease_until + timedelta(seconds=1)) is None

    job.refresh_from_db()
    assert (job.status, job.review_id, job.error) == ("done", applied.pk, "")
    assert ClusterReview.objects.filter(run=run).count() == 1
    assert Truth.objects.filter(pk__in=job.member_ids).count() == 2


def test_sweep_leaves_a_running_run_without_job_rows_to_its_own_finish(run_factory):
    """An application of a dry run has no job rows: its reviews finish it, not the sweep."""
    application = run_factory(execution="queued")
    application.status, application.started_at, application.clusters_found = "running", NOW, 3
    application.save()

    recovery.recover(broker_idle=lambda: True, now=NOW)

    application.refresh_from_db()
    assert (application.status, application.finished_at) == ("running", None)


def test_a_run_finished_by_its_jobs_is_closed_with_its_inventory_and_checkpoint(run, job):
    lifecycle.start_run(run)  # captures the inventory's "before"
    ConsolidationJob.objects.filter(run=run, kind="user").update(status="done")  # its phase 1 is done
    _set(job, status="done")

    lifecycle.refresh_run(run.pk, now=NOW)

    run.refresh_from_db()
    assert run.status == "done" and run.checkpoint is not None
    assert run.checkpoint == (run.window_until or run.created_at)
    assert run.inventory["after"] == run.inventory["before"]


def test_a_user_whose_phase_one_failed_keeps_the_cursor(run, truth_factory, user_factory):
    from iris_consolidation.models import ConsolidationCursor
    from iris_consolidation.services.pipeline import incremental

    alice = user_factory("alice")
    truth_factory("Works as a nurse", user=alice, embedding=vector_at(1.0))
    incremental.begin_user_pass(run=run, user_id=alice.pk)  # then clustering failed
    ConsolidationJob.objects.create(
        run=run, kind="user", key=run_jobs.user_job_key(alice.pk), user=alice, status="failed", dispatched_at=NOW
    )

    assert lifecycle.refresh_run(run.pk, now=NOW) == "failed"
    assert not ConsolidationCursor.objects.filter(user=alice).exists()
