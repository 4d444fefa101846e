"""Undo of a noise or prune retirement: through the undo service and the admin's undo page."""

from __future__ import annotations

import pytest
from django.urls import reverse
from django.utils import timezone

from iris_consolidation.exceptions import UndoRefused
from iris_consolidation.models import RetiredReason, Truth, TruthChange
from iris_consolidation.services.hygiene import retire
from iris_consolidation.services.operations import undo

pytestmark = pytest.mark.django_db


@pytest.fixture
def pruned(truth_factory):
    t = truth_factory("Went to a concert", relevance=0.01)
    assert retire.retire(truth_ids=[t.pk], reason=RetiredReason.PRUNED, note={t.pk: "low"}, run=None,
                         actor="hygiene:prune") == [t.pk]
    return Truth.all_objects.get(pk=t.pk)


def test_undo_service_restores_a_pruned_truth(pruned):
    assert undo.reversal_of(pruned).step.action == "restore"
    result = undo.undo_consolidation(truth_id=pruned.pk, actor="ops", reason="still true")
    assert (result.restored_ids, result.truth_retired, result.action) == ((pruned.pk,), False, "restore")
    row = Truth.all_objects.get(pk=pruned.pk)
    assert row.is_live and row.relevance == 1.0
    assert list(TruthChange.objects.filter(truth=row).order_by("id").values_list("action", flat=True)) == [
        "retired", "restored"
    ]
    with pytest.raises(UndoRefused):
        undo.undo_consolidation(truth_id=pruned.pk, actor="ops", reason="twice")


def test_restore_refuses_other_retirements_and_needs_a_reason(truth_factory, pruned):
    merged = truth_factory("Likes tea", retired_at=timezone.now(), retired_reason=RetiredReason.UNDONE)
    with pytest.raises(UndoRefused, match="noise or prune"):
        retire.restore(truth_id=merged.pk, actor="ops", reason="no")
    with pytest.raises(UndoRefused, match="reason"):
        retire.restore(truth_id=pruned.pk, actor="ops", reason="  ")


def test_admin_undo_page_restores_a_pruned_truth(admin_client, pruned):
    url = reverse("admin:iris_consolidation_truth_undo", args=[pruned.pk])
    html = admin_client.get(url).content.decode()
    assert f"Restore truth #{pruned.pk}" in html and "Pruned: relevance or quality below the floor" in html
    # The page is about a stage's retirement, not about a consolidation.
    assert f"Restore truth #{pruned.pk}, retired by the prune stage" in html
    assert "Undo the consolidation that made" not in html and "Why the merge was wrong" not in html
    response = admin_client.post(url, {"reason": "still true"})
    assert response.status_code == 302
    assert Truth.objects.filter(pk=pruned.pk).exists()


def test_a_noise_retirement_shows_why_in_the_admin_and_restores_from_the_truth_page(
    admin_client, truth_factory, run_factory, settings
):
    """The retirement of a stage has no result truth (no lineage edge to draw): its audit
    row, with the run, says why; the truth's page offers the restoration; undo restores."""
    from iris_consolidation.services.hygiene import stages

    settings.IRIS_CONSOLIDATION_NOISE = "apply"
    t = truth_factory("Upgraded numpy to 2.1.3")
    run = run_factory()
    stages.run_noise(run, t.user_id)
    assert Truth.all_objects.get(pk=t.pk).retired_reason == RetiredReason.NOISE

    change = admin_client.get(reverse("admin:iris_consolidation_truth_change", args=[t.pk])).content.decode()
    assert "Restore this truth" in change and "Undo this consolidation" not in change
    lineage = admin_client.get(reverse("admin:iris_consolidation_truth_lineage", args=[t.pk])).content.decode()
    assert "retired: noise: should never have been stored" in lineage
    history = admin_client.get(reverse("admin:iris_consolidation_truth_history", args=[t.pk])).content.decode()
    assert "noise: version" in history and "the noise stage" in history and str(run.pk) in history

    response = admin_client.post(reverse("admin:iris_consolidation_truth_undo", args=[t.pk]), {"reason": "still true"},
                                 follow=True)
    assert f"Restored: truth #{t.pk} is live again (the noise stage" in response.content.decode()
    assert Truth.objects.filter(pk=t.pk).exists()
    assert list(TruthChange.objects.filter(truth=t).order_by("id").values_list("action", "actor")) == [
        ("retired", "hygiene:noise"), ("restored", "admin")
    ]


def test_a_live_truth_offers_no_restoration(admin_client, truth_factory):
    t = truth_factory("Likes tea")
    page = admin_client.get(reverse("admin:iris_consolidation_truth_change", args=[t.pk])).content.decode()
    assert "Restore this truth" not in page and "Undo this consolidation" not in page
