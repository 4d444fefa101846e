"""Noise and prune stages (report-only default, apply, undo restores), stage modes and --only."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from iris_consolidation import run_settings
from iris_consolidation.exceptions import InvalidInput, UndoRefused
from iris_consolidation.models import LiveSettings, Origin, RetiredReason, StageResult, Truth, TruthChange
from iris_consolidation.services.hygiene import passes, retire, stages
from iris_consolidation.services.run import lifecycle
from iris_consolidation.services.run import plan as run_plan

pytestmark = pytest.mark.django_db


def _started(run):
    run.started_at = timezone.now()
    run.save(update_fields=["started_at"])
    return run


@pytest.fixture
def noisy(truth_factory, user_factory):
    user = user_factory()
    return {
        "noise": truth_factory("Upgraded numpy to 2.1.3", user=user),
        "heartbeat": truth_factory("Heartbeat OK at 09:00", user=user),
        "pref": truth_factory("The CI build is currently failing", user=user, kind="preference"),
        "pinned": truth_factory("Fixed 3 lint errors", user=user, pinned=True),
        "fact": truth_factory("Ran the Berlin marathon in 3:41:07", user=user),
    }


def test_noise_defaults_to_report_and_retires_nothing(noisy, run_factory):
    run = _started(run_factory())
    result = stages.run_noise(run, noisy["noise"].user_id)
    assert (result.mode, result.examined, result.affected, result.applied) == ("report", 3, 2, 0)
    assert {f["category"] for f in result.findings} == {"version", "heartbeat"}
    assert Truth.objects.filter(user_id=noisy["noise"].user_id).count() == 5


def test_noise_apply_retires_with_reason_and_audit_rows_and_undo_restores(noisy, run_factory, settings):
    settings.IRIS_CONSOLIDATION_NOISE = "apply"
    run = _started(run_factory())
    result = stages.run_noise(run, noisy["noise"].user_id)
    assert (result.affected, result.applied) == (2, 2)
    gone = Truth.all_objects.get(pk=noisy["noise"].pk)
    assert (gone.retired_reason, gone.superseded_by_id) == (RetiredReason.NOISE, None)
    for key in ("pref", "pinned", "fact"):
        assert Truth.all_objects.get(pk=noisy[key].pk).is_live, key
    change = TruthChange.objects.get(truth=gone, action="retired")
    assert (change.run_id, change.actor, change.reason) == (run.pk, "hygiene:noise", "noise: version (sure)")
    run.refresh_from_db()
    assert run.retired == 2
    # A second delivery does nothing again.
    assert stages.run_noise(run, noisy["noise"].user_id).pk == result.pk
    assert StageResult.objects.filter(run=run, stage="noise").count() == 1

    retire.restore(truth_id=gone.pk, actor="ops", reason="it was a real fact")
    back = Truth.all_objects.get(pk=gone.pk)
    assert back.is_live and back.retired_reason == ""
    assert TruthChange.objects.filter(truth=gone, action="restored", actor="ops").exists()
    with pytest.raises(UndoRefused):
        retire.restore(truth_id=gone.pk, actor="ops", reason="again")


@pytest.fixture
def aging(truth_factory, user_factory):
    user = user_factory()
    old = timezone.now() - timedelta(days=400)
    return {
        "old": truth_factory("Went to a concert", user=user, created_at=old, kind="working"),
        "old_but_used": truth_factory("Likes jazz", user=user, created_at=old, kind="working",
                                      last_accessed=timezone.now() - timedelta(hours=1), access_count=5),
        "new": truth_factory("Has a dog", user=user, created_at=timezone.now() - timedelta(days=1)),
        "old_pinned": truth_factory("Born in Porto", user=user, created_at=old, pinned=True),
        "old_user": truth_factory("Is vegetarian", user=user, created_at=old, origin=Origin.USER),
    }


def test_prune_defaults_to_report_with_post_decay_figures(aging, run_factory):
    run = _started(run_factory())
    user_id = aging["old"].user_id
    stages.run_at(stages.When.BEFORE_CLUSTERING, run, user_id)  # decay applies by default
    result = stages.run_prune(run, user_id)
    assert result.mode == "report"
    assert [f["truth_id"] for f in result.findings] == [aging["old"].pk]
    assert result.findings[0]["relevance"] < 0.05
    assert all(Truth.all_objects.get(pk=t.pk).is_live for t in aging.values())


def test_prune_in_a_dry_run_uses_decay_computed_not_written(aging, run_factory, settings):
    settings.IRIS_CONSOLIDATION_PRUNE = "apply"
    run = _started(run_factory(dry_run=True))
    user_id = aging["old"].user_id
    stages.run_at(stages.When.BEFORE_CLUSTERING, run, user_id)
    result = stages.run_prune(run, user_id)
    assert (result.mode, result.affected, result.applied) == ("report", 1, 0)
    assert Truth.all_objects.get(pk=aging["old"].pk).relevance == 1.0  # nothing written


def test_prune_apply_retires_below_the_floor_only_and_undo_restores(aging, run_factory, settings):
    settings.IRIS_CONSOLIDATION_PRUNE = "apply"
    settings.IRIS_CONSOLIDATION_PRUNE_FLOOR = 0.05
    settings.IRIS_CONSOLIDATION_MAX_PRUNE_SHARE = 1.0  # the floor alone (the cap: test_prune_cap.py)
    run = _started(run_factory())
    user_id = aging["old"].user_id
    stages.run_at(stages.When.BEFORE_CLUSTERING, run, user_id)
    result = stages.run_prune(run, user_id)
    assert result.applied == 1
    pruned = Truth.all_objects.get(pk=aging["old"].pk)
    assert pruned.retired_reason == RetiredReason.PRUNED
    for key in ("old_but_used", "new", "old_pinned", "old_user"):
        assert Truth.all_objects.get(pk=aging[key].pk).is_live, key
    retire.restore(truth_id=pruned.pk, actor="ops", reason="still true")
    back = Truth.all_objects.get(pk=pruned.pk)
    assert back.is_live and back.relevance == 1.0


def test_prune_retirements_respect_the_runs_cap(truth_factory, user_factory, run_factory, settings):
    settings.IRIS_CONSOLIDATION_PRUNE = "apply"
    settings.IRIS_CONSOLIDATION_MAX_RETIREMENTS_PER_RUN = 2
    settings.IRIS_CONSOLIDATION_MAX_PRUNE_SHARE = 1.0  # the run's cap alone
    user = user_factory()
    for i in range(4):
        truth_factory(f"Old thing {i}", user=user, relevance=0.01)
    run = _started(run_factory())
    result = stages.run_prune(run, user.pk)
    assert (result.affected, result.applied) == (4, 2)


def test_only_parses_stages_and_refuses_unknown_names_in_one_line():
    assert run_settings.parse_only("prune,noise") == ("noise", "prune")
    assert run_settings.parse_only(None) is None
    with pytest.raises(InvalidInput) as info:
        run_settings.parse_only("noise,dedupe")
    message = str(info.value)
    assert "\n" not in message and "'dedupe'" in message
    assert "mine, noise, decay, lexical, semantic, relocate, promote, prune" in message


def test_narrow_turns_unlisted_stages_off_and_listed_off_ones_to_report():
    modes = {"mine": "apply", "noise": "off", "decay": "apply", "lexical": "apply", "semantic": "apply",
             "relocate": "report", "promote": "off", "prune": "report"}
    assert run_settings.narrow(modes, ("noise", "decay", "promote")) == {
        "mine": "off", "noise": "report", "decay": "apply", "lexical": "off", "semantic": "off",
        "relocate": "off", "promote": "report", "prune": "off",
    }


def test_live_settings_switch_each_stage_and_are_stored_on_the_run(run_factory, settings):
    settings.IRIS_CONSOLIDATION_NOISE = "off"
    LiveSettings.objects.create(prune_mode="apply", lexical_mode="off")
    effective = run_settings.get_effective_settings()
    assert effective.stage_modes == {
        "mine": "apply", "noise": "off", "decay": "report", "lexical": "off", "semantic": "apply",
        "relocate": "report", "promote": "report", "prune": "apply",
    }
    assert {"prune_mode", "lexical_mode"} <= set(effective.overridden)
    run = run_factory()
    assert stages.run_modes(run)["prune"] == "apply"
    LiveSettings.objects.filter(pk=1).update(prune_mode="")
    assert stages.run_modes(run)["prune"] == "apply"  # the run keeps what was in force
    assert stages.run_modes(run_factory())["prune"] == "report"


def test_admin_live_settings_switch_a_stage_mode(admin_client):
    from django.urls import reverse

    fields = {"enabled": "unknown", "scheduled_dry_run_only": "unknown", "prune_mode": "apply", "noise_mode": "off"}
    # Prune to apply is saved once the page has shown what the next pass would prune.
    asked = admin_client.post(reverse("admin:iris_consolidation_livesettings_add"), fields)
    assert asked.status_code == 200 and not LiveSettings.objects.exists()
    saved = admin_client.post(reverse("admin:iris_consolidation_livesettings_add"), {**fields, "confirm_prune": "on"})
    assert saved.status_code == 302
    assert run_settings.get_effective_settings().stage_modes["prune"] == "apply"
    page = admin_client.get(reverse("admin:iris_consolidation_livesettings_change", args=[1])).content.decode()
    assert ("stages: mine apply, noise off, decay report, lexical apply, semantic apply, relocate report, "
            "promote report, prune apply") in page
    bad = admin_client.post(reverse("admin:iris_consolidation_livesettings_change", args=[1]),
                            {"enabled": "unknown", "scheduled_dry_run_only": "unknown", "prune_mode": "delete"})
    assert bad.status_code == 200 and LiveSettings.objects.get().prune_mode == "apply"


def test_only_prune_finds_what_a_whole_pass_finds_and_decay_off_means_no_decay(aging, settings):
    """``--only prune`` leaves the decay stage out of the run but not out of prune's figures:
    decay is configured, so the post-decay relevance counts (a fresh user's trial found
    0 candidates with ``--only noise,prune`` against all of them in a whole pass). Decay
    switched off in the settings is no decay at all."""

    user_id = aging["old"].user_id
    whole = _started(lifecycle.create_run(trigger="command", execution="in_process"))
    only = _started(lifecycle.create_run(trigger="command", execution="in_process", only="prune"))
    assert stages.run_modes(only)["decay"] == "off"
    found_whole = [f["truth_id"] for f in stages.run_prune(whole, user_id).findings]
    found_only = [f["truth_id"] for f in stages.run_prune(only, user_id).findings]
    assert found_only == found_whole == [aging["old"].pk]

    settings.IRIS_CONSOLIDATION_DECAY = "off"
    no_decay = _started(lifecycle.create_run(trigger="command", execution="in_process", only="prune"))
    assert stages.run_prune(no_decay, user_id).findings == []


def test_the_registry_holds_every_stage_in_the_order_of_a_pass():
    assert tuple(s.name for s in stages.REGISTRY) == run_settings.STAGES
    assert [s.name for s in stages.REGISTRY if s.when is stages.When.AFTER_CLUSTERING and s.calls_model] == [
        "relocate", "promote"
    ]


def test_a_pass_reads_its_rows_as_the_orm_gives_them(truth_factory, user_factory):
    """``UserPass.rows``' binary read gives the values the ORM gives, field by field: dates
    set and unset, a pointer, a pinned truth and one past the generation cap, text outside
    ASCII; retired truths and other users' are left out, and the order is (created_at, id)."""
    user, other = user_factory(), user_factory()
    now = timezone.now()
    truth_factory("Lives in Porto", user=user, origin=Origin.CONSOLIDATED, last_decayed=now - timedelta(days=3),
                  relevance=0.41)
    truth_factory("See the note on travel", user=user, tags=["note-pointer", "travel"],
                  last_accessed=now - timedelta(hours=5))
    truth_factory("Prefers tea", user=user, pinned=True, kind="preference")
    truth_factory("Hat einen Hund namens Rex, 犬が好き", user=user, origin=Origin.CONSOLIDATED, generation=99)
    truth_factory("Retired", user=user, retired_at=now, retired_reason=RetiredReason.NOISE)
    truth_factory("Another user's", user=other)
    Truth.objects.filter(user=user, content="Prefers tea").update(created_at=now - timedelta(days=60))
    orm = list(passes.pass_rows(Truth.objects.for_user(user.pk)))

    rows = passes.UserPass(run_id=1, user_id=user.pk, buffered=False, results={}).rows

    assert rows == orm
    assert [row[2] for row in rows] == ["Prefers tea", "Lives in Porto", "See the note on travel",
                                        "Hat einen Hund namens Rex, 犬が好き"]
    assert [row[3] for row in rows] == [False, False, True, False]  # the pointer
    assert [row[9] for row in rows] == [False, True, True, False]  # consolidatable
    assert rows[1][4] == 0.41 and rows[1][6] == now - timedelta(days=3) and rows[2][7] is not None


@pytest.mark.django_db(transaction=True)
def test_a_host_with_naive_dates_gets_the_orms_rows(settings, truth_factory, user_factory):
    """With ``USE_TZ = False`` psycopg's binary dates would be aware where the ORM's are naive
    (decay would then fail to subtract them): a user's pass and a batch read through the ORM."""
    settings.USE_TZ = False
    settings.TIME_ZONE = "Europe/Lisbon"
    connection.close()  # a connection made under these settings, as a host project's
    try:
        user = user_factory()
        truth_factory("Lives in Porto", user=user, last_decayed=timezone.now() - timedelta(days=3))
        orm = list(passes.pass_rows(Truth.objects.for_user(user.pk)))
        assert orm[0][5].tzinfo is None

        rows = passes.UserPass(run_id=1, user_id=user.pk, buffered=False, results={}).rows
        batch, _ = run_plan._rows_and_vectors_of([user.pk])

        assert rows == orm and batch[user.pk] == orm
        assert rows[0][6].tzinfo is None
    finally:
        connection.close()  # the next test connects under its own settings
