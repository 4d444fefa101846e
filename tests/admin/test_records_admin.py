"""Admin of the change audit (read-only, filterable) and of the live settings singleton."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission
from django.urls import reverse

from iris_consolidation.conf import app_settings
from iris_consolidation.models import LiveSettings, TruthChange
from iris_consolidation.services.pipeline import truth_events
from iris_consolidation.services.run import lifecycle

pytestmark = pytest.mark.django_db


@pytest.fixture
def changes(truth_factory):
    created = truth_factory("Plays the cello")
    retired = truth_factory("Plays cello")
    return truth_events.record_changes(
        [
            truth_events.Change(truth=created, action=truth_events.CREATED, reason="imported"),
            truth_events.Change(truth=retired, action=truth_events.RETIRED, reason="merged into the cello truth"),
        ],
        actor="rules",
    )


def test_audit_list_shows_changes_and_filters_by_action(admin_client, changes):
    url = reverse("admin:iris_consolidation_truthchange_changelist")

    everything = admin_client.get(url)
    retired_only = admin_client.get(url, {"action__exact": "retired"})

    assert everything.status_code == 200
    assert b"merged into the cello truth" in everything.content and b"imported" in everything.content
    assert retired_only.status_code == 200
    assert b"merged into the cello truth" in retired_only.content
    assert b"imported" not in retired_only.content


def test_audit_is_read_only_in_the_admin(admin_client, changes):
    row = changes[0]

    add = admin_client.get(reverse("admin:iris_consolidation_truthchange_add"))
    post = admin_client.post(
        reverse("admin:iris_consolidation_truthchange_change", args=[row.pk]), {"reason": "rewritten"}
    )
    delete = admin_client.post(reverse("admin:iris_consolidation_truthchange_delete", args=[row.pk]), {"post": "yes"})

    assert (add.status_code, post.status_code, delete.status_code) == (403, 403, 403)
    assert TruthChange.objects.get(pk=row.pk).reason == "imported"


def test_staff_without_view_permission_cannot_see_the_audit(client, django_user_model, changes):
    staff = django_user_model.objects.create_user("staff", password="pw", is_staff=True)
    client.force_login(staff)
    url = reverse("admin:iris_consolidation_truthchange_changelist")

    assert client.get(url).status_code == 403
    staff.user_permissions.add(Permission.objects.get(codename="view_truthchange"))
    assert client.get(url).status_code == 200


def test_audit_quotes_truths_only_to_staff_who_may_view_truths(staff_client, changes):
    row = changes[1]
    urls = [
        reverse("admin:iris_consolidation_truthchange_changelist"),
        reverse("admin:iris_consolidation_truthchange_change", args=[row.pk]),
    ]

    auditor = staff_client("view_truthchange", username="auditor")
    hidden = [auditor.get(url) for url in urls]
    searched = auditor.get(urls[0], {"q": "cello"})
    operator = staff_client("view_truthchange", "view_truth", username="operator")
    shown = [operator.get(url) for url in urls]

    assert [r.status_code for r in hidden + shown] == [200, 200, 200, 200]
    assert all(f"#{row.truth_id}".encode() in r.content for r in hidden)
    assert not any(b"cello" in r.content for r in hidden)
    assert searched.context["cl"].result_count == 0
    assert all(b"merged into the cello truth" in r.content for r in shown)
    assert b"Plays cello" in shown[1].content


def test_live_settings_list_leads_to_add_then_to_the_single_record(admin_client):
    url = reverse("admin:iris_consolidation_livesettings_changelist")

    first = admin_client.get(url)
    saved = admin_client.post(
        reverse("admin:iris_consolidation_livesettings_add"),
        {"similarity_threshold": "0.9", "interval_hours": "24", "enabled": "unknown", "scheduled_dry_run_only": "true"},
    )
    then = admin_client.get(url)

    assert first.status_code == 302 and first.url.endswith("/add/")
    assert saved.status_code == 302
    assert then.status_code == 302 and then.url.endswith("/1/change/")
    row = LiveSettings.objects.get()
    assert (row.similarity_threshold, row.interval_hours, row.enabled, row.scheduled_dry_run_only) == (
        0.9,
        24,
        None,
        True,
    )
    assert admin_client.get(reverse("admin:iris_consolidation_livesettings_add")).status_code == 403
    assert lifecycle.create_run(trigger="command", execution="in_process").threshold == 0.9


def test_live_settings_refuse_a_threshold_out_of_range(admin_client):
    response = admin_client.post(
        reverse("admin:iris_consolidation_livesettings_add"), {"similarity_threshold": "1.5", "enabled": "unknown"}
    )

    assert response.status_code == 200  # the form again, with the error
    assert not LiveSettings.objects.exists()


def test_live_settings_change_page_shows_what_is_in_force(admin_client):
    LiveSettings.objects.create(max_retirements_per_run=7)

    page = admin_client.get(reverse("admin:iris_consolidation_livesettings_change", args=[1]))

    assert page.status_code == 200
    # The threshold in force is the local embedding model's default (conf.py).
    threshold = f"similarity threshold: {app_settings.SIMILARITY_THRESHOLD}".encode()
    assert b"at most 7 retirements per run" in page.content and threshold in page.content
