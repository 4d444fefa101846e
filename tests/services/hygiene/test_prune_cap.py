"""Decay counts only the disuse the product has seen, and a pass prunes at most a share of
each user's truths: loading old truths with decay and prune applied wipes no memory."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta
from io import StringIO
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command
from django.utils import timezone

from iris_consolidation import api, run_settings
from iris_consolidation.embeddings import get_embedder
from iris_consolidation.inventory_display import stage_lines
from iris_consolidation.models import ConsolidationRun, LiveSettings, RetiredReason, Truth
from iris_consolidation.run_display import stage_phrases
from iris_consolidation.services.hygiene import prune, reports, stages
from iris_consolidation.services.operations import transfer
from tests.conftest import NO_SHARED, SHARED
from tests.services.hygiene.test_mining import make_session

pytestmark = pytest.mark.django_db

SAMPLE = Path(__file__).resolve().parents[3] / "samples" / "demo.truths.jsonl"
LOCOMO = SHARED / "data" / "locomo_observations.truths.jsonl"


def _started(run):
    run.started_at = timezone.now()
    run.save(update_fields=["started_at"])
    return run


def _kept_shares(loaded: Counter) -> dict[int, float]:
    """Per user: the share of the loaded truths that no prune retired."""
    pruned = Counter(Truth.all_objects.filter(retired_reason=RetiredReason.PRUNED).values_list("user_id", flat=True))
    return {user: 1 - pruned[user] / n for user, n in loaded.items()}


def _apply_decay_and_prune(settings, *args: str) -> ConsolidationRun:
    settings.IRIS_CONSOLIDATION_DECAY = "apply"
    settings.IRIS_CONSOLIDATION_PRUNE = "apply"
    call_command("consolidate_truths", "--sync", *args, stdout=StringIO(), stderr=StringIO())
    return ConsolidationRun.objects.order_by("-created_at").first()


def test_the_freshly_loaded_sample_keeps_its_truths_through_a_whole_pass(settings):
    """The sample's truths are dated 2025: held since today, so decay and prune applied in a
    whole pass retire none of them (on the code before, 45 of 57, every user under 41%)."""
    transfer.load_truths(SAMPLE, create_users=True)
    loaded = Counter(Truth.objects.values_list("user_id", flat=True))
    assert min(Truth.objects.values_list("created_at", flat=True)) < timezone.now() - timedelta(days=200)
    run = _apply_decay_and_prune(settings)
    assert run.status == ConsolidationRun.Status.DONE
    kept = _kept_shares(loaded)
    assert len(kept) == 4 and min(kept.values()) >= 0.95, kept
    report = run.inventory["stages"]
    assert report["decay"]["mode"] == "apply" and report["prune"]["mode"] == "apply"
    assert report["prune"]["examined"] > 0 and report["prune"]["applied"] == 0


def test_freshly_loaded_locomo_truths_keep_95_percent_with_decay_and_prune_applied(settings):
    """LoCoMo is dated 2023: before, one such pass pruned 1,000 of 1,973 truths (the run's
    retirement cap stopped it) and 8 of 16 users kept none."""
    if not LOCOMO.is_file():
        pytest.skip(NO_SHARED)
    transfer.load_truths(LOCOMO, create_users=True)
    loaded = Counter(Truth.objects.values_list("user_id", flat=True))
    run = _apply_decay_and_prune(settings, "--only", "decay,prune")
    kept = _kept_shares(loaded)
    assert len(kept) == 16 and min(kept.values()) >= 0.95, kept
    # Decay ran and wrote, over the seconds since the truths were loaded, not the years since 2023.
    assert run.inventory["stages"]["decay"]["applied"] == 1973
    assert min(Truth.objects.values_list("relevance", flat=True)) > 0.99


def test_a_truly_stale_user_is_pruned_up_to_the_cap_and_no_further(truth_factory, user_factory, run_factory, settings):
    """Truths held for 400 days whose last use was long ago: every one is below the floor,
    10% of them are pruned (the lowest first), the rest refused and reported; a fresh
    user beside them loses nothing."""
    settings.IRIS_CONSOLIDATION_DECAY = "apply"
    settings.IRIS_CONSOLIDATION_PRUNE = "apply"
    long_ago = timezone.now() - timedelta(days=400)
    stale_user, fresh_user = user_factory(), user_factory()
    stale = [
        truth_factory(
            f"Went to concert number {i}", user=stale_user, created_at=long_ago, kind="working", relevance=0.5 + i / 100
        )
        for i in range(30)
    ]
    api.record_access([t.pk for t in stale], at=long_ago + timedelta(days=1))
    fresh = [
        truth_factory(f"Likes walk number {i}", user=fresh_user, created_at=long_ago, held_since=timezone.now())
        for i in range(12)
    ]
    run = _started(run_factory())
    for user in (stale_user, fresh_user):
        stages.run_at(stages.When.BEFORE_CLUSTERING, run, user.pk)
        stages.run_prune(run, user.pk)
    result = run.stage_results.get(stage="prune", user=stale_user)
    assert (result.examined, result.affected, result.applied, result.refused) == (30, 30, 3, 27)
    pruned = set(Truth.all_objects.filter(retired_reason=RetiredReason.PRUNED).values_list("id", flat=True))
    assert pruned == {t.pk for t in stale[:3]}  # the lowest relevance first
    assert sum(f["refused"] for f in result.findings) == 27 and not any(
        f["refused"] and f["retired"] for f in result.findings
    )
    assert all(Truth.objects.filter(pk=t.pk).exists() for t in fresh)
    run.refresh_from_db()
    assert run.retired == 3
    report = reports.summarise(run)["prune"]
    assert report["users_capped"] == 1
    assert report["text"] == "pruned 3 of 42 truths, 7%; 27 more refused: above the cap of 10%"


def test_the_prune_cap_comes_from_the_live_settings_and_refuses_a_bad_setting(settings, run_factory):
    LiveSettings.objects.create(max_prune_share=0.25)
    assert run_settings.prune_share(run_factory()) == 0.25
    LiveSettings.objects.all().delete()
    settings.IRIS_CONSOLIDATION_MAX_PRUNE_SHARE = 1.5
    with pytest.raises(ImproperlyConfigured, match="MAX_PRUNE_SHARE must be a number from 0 to 1"):
        run_settings.get_effective_settings()
    assert [run_settings.prune_allowance(share=0.1, live=n) for n in (9, 10, 30, 63)] == [0, 1, 3, 6]


def test_a_mined_truth_dated_by_its_old_session_is_not_pruned_by_its_own_pass(user_factory, run_factory, settings):
    settings.IRIS_CONSOLIDATION_DECAY = "apply"
    settings.IRIS_CONSOLIDATION_PRUNE = "apply"
    settings.IRIS_CONSOLIDATION_MAX_PRUNE_SHARE = 1.0  # the floor alone decides
    user = user_factory()
    said = datetime(2023, 5, 8, 13, 56, tzinfo=UTC)
    make_session(user, "old", at=said, messages=[("user", "I work as a nurse."), ("user", "I live in Porto.")])
    run = _started(run_factory(full=True))
    stages.run_mine(run, user.pk, embedder=get_embedder(), client=None)
    mined = list(Truth.objects.filter(user=user))
    assert len(mined) == 2 and all(t.created_at < said + timedelta(minutes=5) for t in mined)
    stages.run_at(stages.When.BEFORE_CLUSTERING, run, user.pk)
    result = stages.run_prune(run, user.pk)
    assert (result.affected, result.applied) == (0, 0)
    assert set(Truth.objects.filter(user=user).values_list("relevance", flat=True)) == {1.0}


@pytest.mark.parametrize(
    ("counts", "expected"),
    [
        (
            {"found": 62, "live": 63, "share": 0.1, "refused": 56},
            "would prune 62 of 63 truths, 98%: above the cap of 10%, 56 refused",
        ),
        ({"found": 3, "live": 63, "share": 0.1, "refused": 0}, "would prune 3 of 63 truths, 5% (cap 10%)"),
        (
            {"found": 62, "live": 63, "share": 0.1, "refused": 56, "pruned": 6},
            "pruned 6 of 63 truths, 10%; 56 more refused: above the cap of 10%",
        ),
        ({"found": 1, "live": 1000, "share": 0.1, "refused": 0}, "would prune 1 of 1000 truths, <1% (cap 10%)"),
        ({"found": 0, "live": 63, "share": 0.1, "refused": 0}, ""),
    ],
)
def test_prune_counts_are_stated_with_their_share_and_the_cap(counts, expected):
    assert prune.share_text(**counts) == expected


def test_reports_state_the_prune_share_and_cap(truth_factory, user_factory, run_factory, settings):
    """Report mode: the command's report, the run list's phrase and the run page say the count
    with its share and the cap."""
    user = user_factory()
    old = timezone.now() - timedelta(days=800)
    for i in range(20):
        truth_factory(f"Old thing {i}", user=user, created_at=old)
    run = _started(run_factory())
    stages.run_at(stages.When.BEFORE_CLUSTERING, run, user.pk)
    stages.run_prune(run, user.pk)
    ConsolidationRun.objects.filter(pk=run.pk).update(inventory={"stages": reports.summarise(run)})
    run.refresh_from_db()
    text = "would prune 20 of 20 truths, 100%: above the cap of 10%, 18 refused"
    assert text in stage_phrases(run)
    assert f"      {text} (1 user held back by the cap)" in stage_lines(run.inventory["stages"])
    assert Truth.objects.filter(user=user).count() == 20  # report mode changes nothing


def test_the_live_settings_show_what_the_next_pass_would_prune_before_saving_prune_as_apply(
    truth_factory, user_factory, admin_client
):
    """Prune switched to apply: the page shows the next pass's prune with the settings being
    saved (here a cap of 20%) and saves only once confirmed; a save that leaves prune in
    apply asks nothing again."""
    from django.urls import reverse

    stale, fresh = user_factory(), user_factory()
    old = timezone.now() - timedelta(days=800)
    for i in range(20):
        truth_factory(f"Old thing {i}", user=stale, created_at=old)
    for i in range(5):
        truth_factory(f"New thing {i}", user=fresh, held_since=timezone.now())
    url = reverse("admin:iris_consolidation_livesettings_add")
    fields = {
        "enabled": "unknown",
        "scheduled_dry_run_only": "unknown",
        "prune_mode": "apply",
        "decay_mode": "apply",
        "max_prune_share": "0.2",
    }
    asked = admin_client.post(url, fields)
    assert asked.status_code == 200 and not LiveSettings.objects.exists()
    assert (
        "the next pass would prune 20 of 25 truths, 80%: above the cap of 20%, 16 refused; 4 would be "
        "pruned, 1 user held back by the cap"
    ) in asked.content.decode()
    saved = admin_client.post(url, {**fields, "confirm_prune": "on"})
    assert saved.status_code == 302
    assert run_settings.get_effective_settings().stage_modes["prune"] == "apply"
    assert run_settings.get_effective_settings().max_prune_share == 0.2
    change = reverse("admin:iris_consolidation_livesettings_change", args=[1])
    assert admin_client.post(change, {**fields, "max_prune_share": "0.1"}).status_code == 302
    assert LiveSettings.objects.get().max_prune_share == 0.1
    # Prune back in report mode: switching it to apply asks again.
    assert admin_client.post(change, {**fields, "prune_mode": "report"}).status_code == 302
    assert admin_client.post(change, fields).status_code == 200
    assert LiveSettings.objects.get().prune_mode == "report"
    assert Truth.objects.count() == 25  # a preview changes nothing
