"""Live settings: the admin-edited record overrides the Django settings on the next run."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from io import StringIO

import pytest
from django.core.management import call_command

from iris_consolidation import conf, run_settings, tasks
from iris_consolidation.conf import app_settings
from iris_consolidation.embeddings import get_embedder
from iris_consolidation.llm import get_judge_client
from iris_consolidation.models import ConsolidationCursor, ConsolidationRun, LiveSettings, Truth
from iris_consolidation.services.pipeline.validation import Code
from iris_consolidation.services.queue import execution, scheduling
from iris_consolidation.services.run import lifecycle
from tests.conftest import vector_at
from tests.incremental_support import make_pairs

pytestmark = pytest.mark.django_db


def _command_run() -> ConsolidationRun:
    call_command("consolidate_truths", "--sync", "--full", stdout=StringIO(), stderr=StringIO())
    return ConsolidationRun.objects.order_by("-created_at").first()


def test_live_threshold_takes_effect_on_the_next_run_without_restart(truth_factory, user_factory):
    make_pairs(truth_factory, user_factory(), 2)  # pairs at cosine 0.9
    default = conf.default_threshold("local")  # the local embedding model's default

    before = _command_run()
    LiveSettings.objects.create(similarity_threshold=0.95)  # as the admin would save it
    during = _command_run()
    LiveSettings.objects.filter(pk=1).update(similarity_threshold=None)
    after = _command_run()

    assert (before.threshold, before.clusters_found) == (default, 2)
    assert (during.threshold, during.clusters_found) == (0.95, 0)
    assert during.effective_settings["overridden"] == ["similarity_threshold"]
    assert (after.threshold, after.clusters_found) == (default, 2)
    assert app_settings.SIMILARITY_THRESHOLD == default  # the Django setting stays the default


def test_allowlist_limits_the_users_a_run_covers(truth_factory, user_factory):
    alice, bob = user_factory("alice"), user_factory("bob")
    make_pairs(truth_factory, alice, 1)
    make_pairs(truth_factory, bob, 1)
    live = LiveSettings.objects.create()
    live.allowed_users.set([bob])

    run = _command_run()

    assert run.users == 1
    assert set(run.reviews.values_list("user_id", flat=True)) == {bob.pk}
    assert run.inventory["scope"] == {"users": [bob.pk]}


def test_allowlist_setting_names_users_by_username(truth_factory, user_factory, settings):
    alice, bob = user_factory("alice"), user_factory("bob")
    make_pairs(truth_factory, alice, 1)
    make_pairs(truth_factory, bob, 1)
    settings.IRIS_CONSOLIDATION_USER_ALLOWLIST = ["alice"]

    run = _command_run()

    assert set(run.reviews.values_list("user_id", flat=True)) == {alice.pk}


def test_allowlist_of_unknown_users_covers_nobody(truth_factory, user_factory, settings):
    make_pairs(truth_factory, user_factory(), 1)
    settings.IRIS_CONSOLIDATION_USER_ALLOWLIST = ["nobody-by-this-name"]

    assert _command_run().users == 0


def test_live_retirement_cap_defers_the_rest_and_keeps_the_cursor_before_it(truth_factory, user_factory):
    user = user_factory()
    for k in range(2):
        truth_factory(f"Owns car number {k}", user=user, embedding=vector_at(1.0, axis=2 * k, towards=2 * k + 1))
        truth_factory(f"owns car number {k}.", user=user, embedding=vector_at(0.95, axis=2 * k, towards=2 * k + 1))
    LiveSettings.objects.create(max_retirements_per_run=2)
    client = get_judge_client("rules")

    first = execution.run_sync(
        run=lifecycle.create_run(trigger="command", execution="in_process"), client=client, embedder=get_embedder()
    )

    assert (first.retired, first.merged) == (2, 1)
    assert any(r["code"] == Code.CAP_REACHED for r in first.reviews.get(outcome="rejected").rejections)
    cursor = ConsolidationCursor.objects.get(user=user)
    deferred = Truth.objects.get(content="Owns car number 1")
    assert (cursor.updated_at, cursor.truth_id) < (deferred.updated_at, deferred.pk)

    second = execution.run_sync(
        run=lifecycle.create_run(trigger="command", execution="in_process"), client=client, embedder=get_embedder()
    )

    assert (second.retired, second.merged) == (2, 1)
    assert Truth.objects.filter(origin="consolidated").count() == 2


# --- scheduled runs (the weekly schedule's one entry point) ---------------------------

#: A Sunday 05:00 slot of the default cron "0 5 * * 0" (TIME_ZONE UTC in the tests).
SUNDAY_5AM = datetime(2026, 7, 5, 5, 0, tzinfo=UTC)
WEEK = timedelta(weeks=1)


@pytest.fixture
def weekly(settings):
    settings.IRIS_CONSOLIDATION_SCHEDULE_CRON = "0 5 * * 0"


def _finish(run: ConsolidationRun, *, at: datetime) -> None:
    """The run's jobs settled (their tasks ran elsewhere): release its schedule lock."""
    run.jobs.update(status="done")
    lifecycle.refresh_run(run.pk, now=at)


def test_scheduled_run_is_skipped_when_disabled(truth_factory, user_factory, weekly):
    make_pairs(truth_factory, user_factory(), 1)
    LiveSettings.objects.create(enabled=False)

    started = scheduling.start_scheduled_run(now=SUNDAY_5AM)

    assert started.run is None and started.skipped == scheduling.SKIP_DISABLED
    assert not ConsolidationRun.objects.exists()


def test_scheduled_task_reports_the_disabled_skip(truth_factory, user_factory, weekly):
    make_pairs(truth_factory, user_factory(), 1)
    LiveSettings.objects.create(enabled=False)

    result = tasks.scheduled_consolidation()

    assert result["skipped"] == scheduling.SKIP_DISABLED and "run_id" not in result


def test_scheduled_run_is_a_dry_run_when_set(truth_factory, django_capture_on_commit_callbacks, weekly):
    truth_factory("Has a dog named Rex", embedding=vector_at(1.0))
    truth_factory("has a dog named Rex.", embedding=vector_at(0.95))
    LiveSettings.objects.create(scheduled_dry_run_only=True)

    with django_capture_on_commit_callbacks(execute=True):  # the test queue runs its tasks in process
        result = tasks.scheduled_consolidation()

    run = ConsolidationRun.objects.get(pk=result["run_id"])
    assert (run.trigger, run.dry_run, run.status, run.merged) == ("schedule", True, "done", 1)
    assert result["dry_run"] is True
    assert Truth.objects.filter(origin="consolidated").count() == 0


def test_every_cron_slot_runs_when_no_interval_is_set(truth_factory, user_factory, weekly):
    make_pairs(truth_factory, user_factory(), 1)
    first = scheduling.start_scheduled_run(now=SUNDAY_5AM).run
    _finish(first, at=SUNDAY_5AM + timedelta(hours=1))

    second = scheduling.start_scheduled_run(now=SUNDAY_5AM + WEEK)

    assert run_settings.get_effective_settings().interval_hours == 0
    assert second.run is not None and second.run.scheduled_for == SUNDAY_5AM + WEEK


def test_a_slot_within_the_live_interval_is_skipped_and_the_next_one_runs(truth_factory, user_factory, settings):
    settings.IRIS_CONSOLIDATION_SCHEDULE_CRON = "0 5 * * *"  # daily slots
    make_pairs(truth_factory, user_factory(), 1)
    LiveSettings.objects.create(interval_hours=48)
    first = scheduling.start_scheduled_run(now=SUNDAY_5AM).run
    _finish(first, at=SUNDAY_5AM + timedelta(hours=1))

    monday = scheduling.start_scheduled_run(now=SUNDAY_5AM + timedelta(days=1, minutes=1))
    tuesday = scheduling.start_scheduled_run(now=SUNDAY_5AM + timedelta(days=2, minutes=1))

    assert monday.run is None and monday.skipped == scheduling.SKIP_NOT_DUE.format(
        last=SUNDAY_5AM.isoformat(), hours=48, slot=(SUNDAY_5AM + timedelta(days=1)).isoformat()
    )
    assert tuesday.run is not None and tuesday.run.scheduled_for == SUNDAY_5AM + timedelta(days=2)


def test_interval_change_applies_to_the_next_slot(truth_factory, user_factory, settings):
    settings.IRIS_CONSOLIDATION_SCHEDULE_CRON = "0 5 * * *"
    make_pairs(truth_factory, user_factory(), 1)
    row = LiveSettings.objects.create(interval_hours=72)
    first = scheduling.start_scheduled_run(now=SUNDAY_5AM).run
    _finish(first, at=SUNDAY_5AM + timedelta(hours=1))
    in_two_days = SUNDAY_5AM + timedelta(days=2)

    assert scheduling.start_scheduled_run(now=in_two_days).run is None
    row.interval_hours = 24
    row.save()
    assert scheduling.start_scheduled_run(now=in_two_days).run is not None


def test_the_live_interval_never_blocks_a_catch_up_after_downtime(truth_factory, user_factory, weekly):
    make_pairs(truth_factory, user_factory(), 1)
    LiveSettings.objects.create(interval_hours=168)
    first = scheduling.start_scheduled_run(now=SUNDAY_5AM).run
    _finish(first, at=SUNDAY_5AM + timedelta(hours=1))
    back = SUNDAY_5AM + 3 * WEEK + timedelta(days=2)  # down for three Sundays

    fired = [scheduling.start_scheduled_run(scheduled_for=SUNDAY_5AM + i * WEEK, now=back) for i in (1, 2, 3)]

    assert [f.run is not None for f in fired] == [True, False, False]
    assert fired[0].run.scheduled_for == SUNDAY_5AM + 3 * WEEK
