"""Incremental passes: per-user cursor, window, checkpoint. LLM path through the stub server."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from iris_consolidation.exceptions import InvalidWindow
from iris_consolidation.models import ConsolidationCursor, ConsolidationRun, Truth, UserPass
from iris_consolidation.services.pipeline import incremental
from tests import llm_stub
from tests.conftest import vector_at
from tests.incremental_support import judged_contents, make_pairs, run_pass

pytestmark = pytest.mark.django_db


def _fail_on(marker: str):
    """A stub handler answering non-JSON to any cluster whose members mention ``marker``
    (the judge retries, then records the cluster as failed)."""

    def handler(payload):
        if marker in payload["messages"][-1]["content"]:
            return llm_stub.text("I cannot answer that as JSON.")
        return llm_stub.verdict()

    return handler


def test_second_pass_over_unchanged_truths_makes_no_judge_call(llm_server, truth_factory, user_factory):
    user = user_factory()
    make_pairs(truth_factory, user, 3)

    first = run_pass()
    second = run_pass()

    # One user's three clusters go to the judge in one call (CLUSTERS_PER_CALL).
    assert first.clusters_found == 3 and first.llm_calls == 1
    assert len(llm_server.chat_requests()) == 1
    assert (second.seeds, second.clusters_found, second.llm_calls, second.cache_hits) == (0, 0, 0, 0)


def test_edited_truth_is_judged_again_with_only_its_cluster(llm_server, truth_factory, user_factory):
    user = user_factory()
    pairs = make_pairs(truth_factory, user, 3)
    run_pass()
    edited = Truth.objects.get(pk=pairs[1][1].pk)
    edited.content = "fact 1 b, now with more detail"
    edited.embedding = vector_at(0.88, axis=2, towards=3)  # the host re-embeds what it edits
    edited.save()

    run = run_pass()

    assert judged_contents(llm_server, since=1) == [{"fact 1 a", "fact 1 b, now with more detail"}]
    assert (run.seeds, run.clusters_found, run.llm_calls) == (1, 1, 1)


def test_cursors_are_per_user(llm_server, truth_factory, user_factory):
    alice, bob = user_factory("alice"), user_factory("bob")
    make_pairs(truth_factory, alice, 1, prefix="alice")
    bob_pairs = make_pairs(truth_factory, bob, 1, prefix="bob")
    run_pass()
    truth = Truth.objects.get(pk=bob_pairs[0][0].pk)
    truth.content = "bob 0 a, edited"
    truth.save()

    run = run_pass()

    assert judged_contents(llm_server, since=2) == [{"bob 0 a, edited", "bob 0 b"}]
    assert UserPass.objects.get(run=run, user=alice).seeds == 0


def test_full_pass_ignores_the_cursor(llm_server, truth_factory, user_factory):
    user = user_factory()
    make_pairs(truth_factory, user, 3)
    run_pass()

    full = run_pass(full=True)

    assert (full.window_mode, full.seeds, full.clusters_found) == ("full", 6, 3)
    # Every cluster was "keep" last time: the verdict cache answers, the judge is not asked.
    assert (full.llm_calls, full.cache_hits, full.kept) == (0, 3, 3)
    assert len(llm_server.chat_requests()) == 1


def test_a_cursor_moved_at_another_threshold_does_not_hold(llm_server, truth_factory, user_factory):
    user = user_factory()
    make_pairs(truth_factory, user, 3)  # cosine 0.9 inside each pair
    strict = run_pass(threshold=0.95)
    again = run_pass(threshold=0.95)

    loose = run_pass(threshold=0.85)

    assert (strict.seeds, strict.clusters_found) == (6, 0)
    assert ConsolidationCursor.objects.get(user=user).run_id == loose.pk
    assert again.seeds == 0  # same threshold: the cursor holds
    assert (loose.seeds, loose.clusters_found, loose.llm_calls) == (6, 3, 1)
    assert len(llm_server.chat_requests()) == 1


def test_dry_run_never_moves_the_cursor(llm_server, truth_factory, user_factory):
    user = user_factory()
    make_pairs(truth_factory, user, 2)

    dry = run_pass(dry_run=True)

    assert dry.clusters_found == 2
    assert not ConsolidationCursor.objects.exists()
    assert dry.checkpoint is None
    real = run_pass()
    assert real.seeds == 4  # the dry run left no cursor: a first, full pass
    assert ConsolidationCursor.objects.filter(user=user).exists()


def test_cursor_stops_before_a_failed_cluster_and_the_next_pass_retries_it(llm_server, truth_factory, user_factory):
    user = user_factory()
    pairs = make_pairs(truth_factory, user, 3)
    llm_server.handler = _fail_on("fact 1")

    failed = run_pass()

    assert (failed.status, failed.failed, failed.kept) == ("partial", 1, 2)
    cursor = ConsolidationCursor.objects.get(user=user)
    first_failed = Truth.objects.get(pk=pairs[1][0].pk)
    assert (cursor.updated_at, cursor.truth_id) < (first_failed.updated_at, first_failed.pk)
    assert (cursor.updated_at, cursor.truth_id) >= (pairs[0][1].updated_at, pairs[0][1].pk)

    llm_server.handler = None
    retry = run_pass()

    # Only the failed cluster reaches the judge; the later "keep" cluster is re-seeded
    # but answered by the verdict cache.
    assert judged_contents(llm_server, since=len(llm_server.chat_requests()) - retry.llm_calls) == [
        {"fact 1 a", "fact 1 b"}
    ]
    assert (retry.status, retry.llm_calls, retry.cache_hits) == ("done", 1, 1)


def test_failed_run_keeps_the_old_checkpoint_and_the_next_run_covers_the_gap(llm_server, truth_factory, user_factory):
    user = user_factory()
    make_pairs(truth_factory, user, 1)
    first = run_pass(since="last")
    assert first.window_mode == "fallback" and first.checkpoint is not None
    make_pairs(truth_factory, user, 1, prefix="gap")  # on the same axes as pair 0: its cluster mixes both
    llm_server.handler = _fail_on("gap")

    failed = run_pass(since="last")

    assert failed.failed == 1 and failed.checkpoint is None
    assert failed.window_since == first.checkpoint
    assert ConsolidationRun.objects.get(pk=first.pk).checkpoint == first.checkpoint
    llm_server.handler = None
    before = len(llm_server.chat_requests())

    covering = run_pass(since="last")

    assert (covering.window_mode, covering.window_since, covering.previous_checkpoint) == (
        "last",
        first.checkpoint,
        first.checkpoint,
    )
    assert any({"gap 0 a", "gap 0 b"} & members for members in judged_contents(llm_server, since=before))
    assert covering.status == "done" and covering.checkpoint > first.checkpoint


def test_since_duration_seeds_only_recently_changed_truths(llm_server, truth_factory, user_factory):
    user = user_factory()
    old, recent = make_pairs(truth_factory, user, 2)
    Truth.objects.filter(pk__in=[old[0].pk, old[1].pk]).update(updated_at=timezone.now() - timedelta(days=10))

    run = run_pass(since="7d")

    assert run.window_mode == "duration"
    assert abs((run.window_until - run.window_since) - timedelta(days=7)) < timedelta(seconds=1)
    assert run.seeds == 2
    assert judged_contents(llm_server) == [{"fact 1 a", "fact 1 b"}]


def test_since_window_after_the_cursor_does_not_move_it(llm_server, truth_factory, user_factory):
    """A --since window that starts after the cursor skipped truths: the cursor must stay."""
    user = user_factory()
    now = timezone.now()
    make_pairs(truth_factory, user, 1)
    Truth.objects.update(updated_at=now - timedelta(days=10))
    run_pass()
    cursor = ConsolidationCursor.objects.get(user=user)
    make_pairs(truth_factory, user, 1, prefix="skipped", start=1)
    Truth.objects.filter(content__startswith="skipped").update(updated_at=now - timedelta(days=5))
    make_pairs(truth_factory, user, 1, prefix="recent", start=2)

    run = run_pass(since=(now - timedelta(days=3)).isoformat())

    assert run.seeds == 2 and judged_contents(llm_server, since=1) == [{"recent 2 a", "recent 2 b"}]
    assert ConsolidationCursor.objects.get(user=user).updated_at == cursor.updated_at


# --- window resolution ---------------------------------------------------------------


@pytest.mark.parametrize("value", ["yesterday", "7x", "-3d", "2026-13-45", ""])
def test_bad_since_values_are_refused_with_one_line(value):
    with pytest.raises(InvalidWindow) as info:
        incremental.resolve_window(since=value)

    assert "\n" not in str(info.value) and "--since" in str(info.value)


def test_since_in_the_future_is_refused():
    tomorrow = (timezone.now() + timedelta(days=1)).date().isoformat()

    with pytest.raises(InvalidWindow, match="in the future"):
        incremental.resolve_window(since=tomorrow)


def test_since_accepts_iso_times_dates_and_durations():
    now = timezone.now()

    iso = incremental.resolve_window(since="2026-01-02T03:04:05Z", now=now)
    day = incremental.resolve_window(since="2026-01-02", now=now)
    weeks = incremental.resolve_window(since="2w", now=now)

    assert (iso.mode, iso.since.isoformat()) == ("iso", "2026-01-02T03:04:05+00:00")
    assert (day.mode, day.since.date().isoformat()) == ("iso", "2026-01-02")
    assert (weeks.mode, now - weeks.since) == ("duration", timedelta(weeks=2))


def test_last_without_checkpoint_falls_back_to_the_setting(settings):
    settings.IRIS_CONSOLIDATION_DAYS_FALLBACK = 3
    now = timezone.now()

    window = incremental.resolve_window(since="last", now=now)

    assert (window.mode, now - window.since, window.previous_checkpoint) == ("fallback", timedelta(days=3), None)


def test_last_checkpoint_of_a_single_user_run_does_not_cover_everyone(run_factory, user_factory):
    alice = user_factory()
    single = run_factory(user_id=alice.pk)
    single.checkpoint = timezone.now() - timedelta(hours=1)
    single.save()

    assert incremental.last_checkpoint(user_id=None) is None
    assert incremental.last_checkpoint(user_id=alice.pk).pk == single.pk


def test_queued_run_moves_the_cursor_when_its_last_cluster_finishes(
    llm_server, truth_factory, user_factory, django_capture_on_commit_callbacks
):
    from io import StringIO

    from django.core.management import call_command

    user = user_factory()
    make_pairs(truth_factory, user, 2)

    # Queued; the tasks are sent on commit and the test queue runs them in process.
    for _ in range(2):
        with django_capture_on_commit_callbacks(execute=True):
            call_command("consolidate_truths", stdout=StringIO())

    first, second = ConsolidationRun.objects.order_by("created_at")
    assert (first.execution, first.status, first.clusters_found) == ("queued", "done", 2)
    assert ConsolidationCursor.objects.get(user=user).run_id == first.pk
    assert (second.seeds, second.clusters_found) == (0, 0)
    assert len(llm_server.chat_requests()) == 1  # the user's two clusters went in one task, one call
