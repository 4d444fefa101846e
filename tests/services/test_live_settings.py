"""Live settings: the admin-edited record overrides the Django settings on the next run."""

from __future__ import annotations

from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.utils import timezone

from iris_consolidation.conf import app_settings
from iris_consolidation.embeddings import get_embedder
from iris_consolidation.llm import get_judge_client
from iris_consolidation.models import ConsolidationCursor, ConsolidationRun, LiveSettings, Truth
from iris_consolidation.services import consolidation, live_settings
from tests.conftest import vector_at
from tests.incremental_support import make_pairs

pytestmark = pytest.mark.django_db


def _command_run() -> ConsolidationRun:
    call_command("consolidate_truths", "--sync", "--full", stdout=StringIO(), stderr=StringIO())
    return ConsolidationRun.objects.order_by("-created_at").first()


def test_live_threshold_takes_effect_on_the_next_run_without_restart(truth_factory, user_factory):
    make_pairs(truth_factory, user_factory(), 2)  # pairs at cosine 0.9

    before = _command_run()
    LiveSettings.objects.create(similarity_threshold=0.95)  # as the admin would save it
    during = _command_run()
    LiveSettings.objects.filter(pk=1).update(similarity_threshold=None)
    after = _command_run()

    assert (before.threshold, before.clusters_found) == (0.75, 2)
    assert (during.threshold, during.clusters_found) == (0.95, 0)
    assert during.effective_settings["overridden"] == ["similarity_threshold"]
    assert (after.threshold, after.clusters_found) == (0.75, 2)
    assert app_settings.SIMILARITY_THRESHOLD == 0.75  # the Django setting stays the default


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

    first = consolidation.run_sync(
        run=consolidation.create_run(trigger="command", mode="sync"), client=client, embedder=get_embedder()
    )

    assert (first.retired, first.merged) == (2, 1)
    assert any("cap of 2" in r["reason"] for r in first.reviews.get(outcome="rejected").rejections)
    cursor = ConsolidationCursor.objects.get(user=user)
    deferred = Truth.objects.get(content="Owns car number 1")
    assert (cursor.updated_at, cursor.truth_id) < (deferred.updated_at, deferred.pk)

    second = consolidation.run_sync(
        run=consolidation.create_run(trigger="command", mode="sync"), client=client, embedder=get_embedder()
    )

    assert (second.retired, second.merged) == (2, 1)
    assert Truth.objects.filter(origin="consolidated").count() == 2


# --- scheduled passes -----------------------------------------------------------------


def test_scheduled_pass_is_skipped_when_disabled(truth_factory, user_factory):
    make_pairs(truth_factory, user_factory(), 1)
    LiveSettings.objects.create(enabled=False)

    run, decision = live_settings.start_scheduled_pass()

    assert run is None and decision.reason == live_settings.SCHEDULE_DISABLED
    assert not ConsolidationRun.objects.exists()


def test_scheduled_pass_is_dry_run_only_when_set_and_then_waits_for_the_interval(truth_factory, user_factory):
    truth_factory("Has a dog named Rex", embedding=vector_at(1.0))
    truth_factory("has a dog named Rex.", embedding=vector_at(0.95))
    LiveSettings.objects.create(scheduled_dry_run_only=True, interval_hours=24)

    run, _ = live_settings.start_scheduled_pass()

    run.refresh_from_db()
    assert (run.trigger, run.mode, run.status, run.merged) == ("schedule", "dry_run", "done", 1)
    assert Truth.objects.filter(origin="consolidated").count() == 0
    again, decision = live_settings.start_scheduled_pass()
    assert again is None and decision.reason.startswith("The last scheduled pass started")
    later = live_settings.decide_scheduled_pass(now=timezone.now() + timedelta(hours=24))
    assert (later.start, later.mode) == (True, "dry_run")


def test_interval_change_applies_to_the_next_decision(truth_factory, user_factory):
    make_pairs(truth_factory, user_factory(), 1)
    live_settings.start_scheduled_pass()
    in_two_days = timezone.now() + timedelta(days=2)

    assert live_settings.decide_scheduled_pass(now=in_two_days).start is False  # weekly by default
    LiveSettings.objects.create(interval_hours=24)
    assert live_settings.decide_scheduled_pass(now=in_two_days).start is True
