"""``retry_consolidation`` and ``consolidation_status``."""

from __future__ import annotations

import uuid
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django_q.models import Schedule

from iris_consolidation import run_display
from iris_consolidation.management.commands.consolidation_status import Command as Status
from iris_consolidation.management.commands.retry_consolidation import Command as Retry
from iris_consolidation.models import ConsolidationJob, ConsolidationRun
from iris_consolidation.services.queue import scheduling
from iris_consolidation.services.run import lifecycle

pytestmark = pytest.mark.django_db


def _run(*args: str) -> str:
    out = StringIO()
    call_command(*args, stdout=out, stderr=StringIO())
    return out.getvalue()


def test_retry_requeues_the_failed_cluster_and_the_run_completes(failed_run, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        out = _run("retry_consolidation", str(failed_run.pk))

    failed_run.refresh_from_db()
    assert out.strip() == Retry.REQUEUED.format(count=1, run_id=failed_run.pk)
    assert (failed_run.status, failed_run.failed, failed_run.merged, failed_run.clusters_done) == ("done", 0, 1, 1)
    job = ConsolidationJob.objects.get(run=failed_run, kind="cluster")
    assert (job.status, job.round) == ("done", 1)


def test_retry_with_nothing_failed_says_so(failed_run, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        _run("retry_consolidation", str(failed_run.pk))

    assert _run("retry_consolidation", str(failed_run.pk)).strip() == Retry.NOTHING.format(run_id=failed_run.pk)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("not-a-uuid", Retry.BAD_ID.format(value="not-a-uuid")),
        (str(uuid.UUID(int=7)), Retry.UNKNOWN_RUN.format(value=str(uuid.UUID(int=7)))),
    ],
)
def test_retry_refuses_a_bad_or_unknown_run_id(value, message):
    with pytest.raises(CommandError) as info:
        _run("retry_consolidation", value)

    assert str(info.value) == message and info.value.returncode == 1


def test_retry_refuses_a_run_that_was_not_queued():
    run = lifecycle.create_run(trigger="command", execution="in_process")

    with pytest.raises(CommandError, match="only queued runs have jobs to retry"):
        _run("retry_consolidation", str(run.pk))


def test_status_shows_the_last_run_the_next_due_and_what_is_in_flight(failed_run, settings):
    from django.utils import timezone

    from iris_consolidation.management.commands.consolidation_status import _when

    in_flight = lifecycle.create_run(trigger="schedule")
    in_flight.status = "running"
    in_flight.save()
    ConsolidationJob.objects.create(run=in_flight, kind="user", key="user:1", user_id=failed_run.jobs.first().user_id)
    weekly = Schedule.objects.get(name=scheduling.WEEKLY)

    lines = _run("consolidation_status").splitlines()

    assert lines[0].startswith(f"Last run: {in_flight.pk} (schedule, running)")
    assert lines[1] == Status.NEXT_DUE.format(
        when=_when(weekly.next_run), cron="0 5 * * 0", tz=timezone.get_current_timezone_name()
    )
    assert lines[2] == Status.IN_FLIGHT.format(count=1)
    assert lines[3].endswith("jobs queued=1 running=0 waiting=0 done=0 failed=0")
    assert lines[4] == Status.FLIGHT_EMBEDDED.format(users_done=0, users=0, embedded=0)
    # The failed run's jobs ran here, yet only a heartbeat says a worker is alive: none beats.
    assert lines[5] == f"Workers: {run_display.NO_WORKER}"
    assert lines[6] == "Jobs: 1 queued, 0 running, 0 waiting (rate limited), 1 failed"
    assert lines[7].startswith("Throughput: ")
    assert lines[8] == Status.BY_STATUS.format(counts="pending=0 running=1 done=0 partial=0 failed=1 cancelled=0")
    assert lines[9] == Status.LOCK_FREE


def test_status_says_a_run_waits_for_a_worker_when_none_is_seen(user_factory):
    from datetime import timedelta

    from django.utils import timezone

    user = user_factory("alice")
    run = lifecycle.create_run(trigger="command")
    long_ago = timezone.now() - timedelta(minutes=10)
    ConsolidationRun.objects.filter(pk=run.pk).update(status="running", started_at=long_ago)
    ConsolidationJob.objects.create(run=run, kind="user", key=f"user:{user.pk}", user=user, created_at=long_ago)

    out = _run("consolidation_status")

    assert f"  {run.pk} (command, {Status.WAITING_FOR_WORKER}) started" in out
    assert f"Workers: {run_display.NO_WORKER}" in out


def test_status_says_when_the_weekly_run_is_overdue():
    from datetime import timedelta

    from django.utils import timezone

    Schedule.objects.filter(name=scheduling.WEEKLY).update(next_run=timezone.now() - timedelta(days=3))

    assert _run("consolidation_status").splitlines()[1].endswith(Status.OVERDUE)


def test_status_without_runs_or_schedule(settings):
    settings.IRIS_CONSOLIDATION_SCHEDULE_CRON = ""
    scheduling.ensure_schedules()

    lines = _run("consolidation_status").splitlines()

    assert lines[:3] == [Status.NO_RUN, Status.NOT_SCHEDULED, Status.IN_FLIGHT.format(count=0)]
    assert ConsolidationRun.objects.count() == 0
