"""The weekly schedule, no overlap and catch-up, with a controlled clock."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.core.management import call_command
from django_q.models import Schedule

from iris_consolidation import tasks
from iris_consolidation.models import ConsolidationRun, ScheduleLock
from iris_consolidation.services.queue import dispatch, scheduling
from iris_consolidation.services.run import lifecycle
from tests.conftest import vector_at

pytestmark = pytest.mark.django_db

WEDNESDAY = datetime(2026, 7, 1, 12, 0, tzinfo=UTC)
#: Sunday 05:00 in Lisbon in July is 04:00 UTC (summer time).
SUNDAY_5AM = datetime(2026, 7, 5, 4, 0, tzinfo=UTC)
WEEK = timedelta(weeks=1)


@pytest.fixture(autouse=True)
def lisbon(settings, monkeypatch):
    from django_q.conf import Conf

    settings.TIME_ZONE = "Europe/Lisbon"
    monkeypatch.setattr(Conf, "TIME_ZONE", "Europe/Lisbon")  # frozen at import (NOTES.md)
    settings.IRIS_CONSOLIDATION_SCHEDULE_CRON = "0 5 * * 0"
    Schedule.objects.filter(name__startswith="iris_consolidation:").delete()  # made by migrate on the real clock


@pytest.fixture
def truths(truth_factory):
    truth_factory("Works as a nurse", embedding=vector_at(1.0))
    truth_factory("Works as a nurse.", embedding=vector_at(0.95))


def test_weekly_schedule_runs_sunday_at_five_in_time_zone():
    weekly = scheduling.ensure_schedules(now=WEDNESDAY)[scheduling.WEEKLY]

    weekly.refresh_from_db()
    assert weekly.next_run == SUNDAY_5AM
    expected = (dispatch.SCHEDULED_CONSOLIDATION, Schedule.CRON, "0 5 * * 0")
    assert (weekly.func, weekly.schedule_type, weekly.cron) == expected
    assert weekly.intended_date_kwarg == scheduling.SLOT_KWARG
    assert scheduling.next_slot("0 5 * * 0", after=datetime(2026, 12, 2, tzinfo=UTC)) == datetime(
        2026, 12, 6, 5, 0, tzinfo=UTC
    )  # winter time: 05:00 in Lisbon is 05:00 UTC


def test_migrate_leaves_one_weekly_and_one_recovery_schedule():
    call_command("migrate", verbosity=0)
    call_command("migrate", verbosity=0)

    assert Schedule.objects.filter(name=scheduling.WEEKLY).count() == 1
    recovery = Schedule.objects.get(name=scheduling.RECOVERY)
    assert (recovery.func, recovery.schedule_type, recovery.minutes) == (dispatch.RECOVER_JOBS, Schedule.MINUTES, 1)


def test_ensuring_again_keeps_a_missed_slot_due():
    scheduling.ensure_schedules(now=WEDNESDAY)

    scheduling.ensure_schedules(now=WEDNESDAY + 3 * WEEK)  # the cluster was down meanwhile

    assert Schedule.objects.get(name=scheduling.WEEKLY).next_run == SUNDAY_5AM


def test_a_changed_cron_moves_the_next_run(settings):
    scheduling.ensure_schedules(now=WEDNESDAY)
    settings.IRIS_CONSOLIDATION_SCHEDULE_CRON = "30 2 * * 6"  # Saturday 02:30

    scheduling.ensure_schedules(now=WEDNESDAY)

    weekly = Schedule.objects.get(name=scheduling.WEEKLY)
    assert (weekly.cron, weekly.next_run) == ("30 2 * * 6", datetime(2026, 7, 4, 1, 30, tzinfo=UTC))


def test_an_empty_cron_removes_the_weekly_schedule(settings):
    scheduling.ensure_schedules(now=WEDNESDAY)
    settings.IRIS_CONSOLIDATION_SCHEDULE_CRON = ""

    scheduling.ensure_schedules(now=WEDNESDAY)

    assert not Schedule.objects.filter(name=scheduling.WEEKLY).exists()
    assert Schedule.objects.filter(name=scheduling.RECOVERY).exists()


def test_a_bad_cron_is_a_configuration_error(settings):
    from django.core.exceptions import ImproperlyConfigured

    settings.IRIS_CONSOLIDATION_SCHEDULE_CRON = "every sunday"

    with pytest.raises(ImproperlyConfigured, match="not a cron expression"):
        scheduling.ensure_schedules(now=WEDNESDAY)


def test_missed_slots_start_one_catch_up_run(truths):
    back = SUNDAY_5AM + 2 * WEEK + timedelta(days=3)  # three Sundays missed

    fired = [scheduling.start_scheduled_run(scheduled_for=SUNDAY_5AM + i * WEEK, now=back) for i in range(3)]

    started = [f for f in fired if f.run is not None]
    assert len(started) == 1 and ConsolidationRun.objects.filter(trigger="schedule").count() == 1
    assert started[0].run.scheduled_for == SUNDAY_5AM + 2 * WEEK  # the latest slot due
    prefix = scheduling.SKIP_ALREADY_RAN.split("{")[0]
    assert all(f.skipped.startswith(prefix) for f in fired[1:])


def test_no_second_scheduled_run_while_one_is_in_progress(truths):
    first = scheduling.start_scheduled_run(now=SUNDAY_5AM).run
    lifecycle.refresh_run(first.pk, now=SUNDAY_5AM + WEEK - timedelta(minutes=5))  # still making progress

    skipped = scheduling.start_scheduled_run(now=SUNDAY_5AM + WEEK)

    assert skipped.run is None and skipped.skipped.startswith(f"Scheduled run {first.pk} is still in progress")
    assert ConsolidationRun.objects.filter(trigger="schedule").count() == 1


def test_the_lock_of_a_run_that_stopped_progressing_expires_and_the_next_slot_takes_over(truths, settings):
    settings.IRIS_CONSOLIDATION_SCHEDULE_LOCK_TTL = 3 * 3600
    first = scheduling.start_scheduled_run(now=SUNDAY_5AM).run  # its workers die: no progress

    second = scheduling.start_scheduled_run(now=SUNDAY_5AM + WEEK).run

    first.refresh_from_db()
    lock = ScheduleLock.objects.get(name=scheduling.LOCK)
    assert second is not None and lock.run_id == second.pk
    assert first.status == "failed" and "Abandoned" in first.notes
    assert not first.jobs.active().exists()


def test_a_finished_run_releases_the_lock_for_the_next_slot(truths):
    first = scheduling.start_scheduled_run(now=SUNDAY_5AM).run
    first.jobs.update(status="done")
    lifecycle.refresh_run(first.pk, now=SUNDAY_5AM + timedelta(hours=1))
    assert ScheduleLock.objects.get(name=scheduling.LOCK).run_id is None

    second = scheduling.start_scheduled_run(now=SUNDAY_5AM + WEEK + timedelta(minutes=1)).run

    assert second is not None and second.scheduled_for == SUNDAY_5AM + WEEK
    first.refresh_from_db()
    assert first.status == "done"


def test_scheduled_task_reports_a_skip(truths):
    first = tasks.scheduled_consolidation()
    again = tasks.scheduled_consolidation(scheduled_for=first["slot"])

    assert "run_id" in first and again["skipped"].startswith(scheduling.SKIP_ALREADY_RAN.split("{")[0])
