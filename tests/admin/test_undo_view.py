"""Undo from the admin: confirmation, the round trip, refusals, permissions."""

from __future__ import annotations

import pytest
from django.contrib.messages import get_messages
from django.urls import reverse

from iris_consolidation.admin import undo as undo_admin
from iris_consolidation.admin.base import MISSING_OBJECT
from iris_consolidation.llm.base import truth_names
from iris_consolidation.models import LineageEvent, RetiredReason, Truth
from iris_consolidation.services.operations import undo
from tests import lineage_builder as lb

pytestmark = pytest.mark.django_db


def undo_url(pk):
    return reverse("admin:iris_consolidation_truth_undo", args=[pk])


def _messages(response):
    return [str(m) for m in get_messages(response.wsgi_request)]


def test_confirmation_lists_what_comes_back_and_what_is_retired(admin_client, two_step_lineage):
    abc, ab, c = two_step_lineage["abc"], two_step_lineage["ab"], two_step_lineage["c"]

    html = admin_client.get(undo_url(abc.pk)).content.decode()

    assert undo_admin.TITLE_TRUTH.format(pk=abc.pk) in html
    assert f"Truth #{abc.pk} will be <strong>retired</strong>" in html
    assert ab.content in html and c.content in html
    # The judge's reasoning with truth numbers for its call's labels (t1, t2 name nothing outside the call).
    review = LineageEvent.objects.filter(result=abc).first().review
    names = truth_names(review.snapshot)
    assert set(names.values()) == {f"#{ab.pk}", f"#{c.pk}"}
    reasoning = f"{names['t1']} is already a merge; {names['t2']} adds nothing new about Tomas, so they merge."
    assert reasoning in html and "t1 is already" not in html
    assert Truth.all_objects.get(pk=abc.pk).retired_at is None  # GET writes nothing


def test_undo_round_trip_restores_sources_and_records_who_and_why(admin_client, two_step_lineage):
    abc, ab, c = two_step_lineage["abc"], two_step_lineage["ab"], two_step_lineage["c"]

    response = admin_client.post(undo_url(abc.pk), {"reason": "Tomas in c is a nephew."})

    assert response.status_code == 302
    assert response["Location"] == reverse("admin:iris_consolidation_truth_lineage", args=[abc.pk])
    ids = ", ".join(f"#{pk}" for pk in sorted([ab.pk, c.pk]))
    assert _messages(response) == [
        undo_admin.UNDONE.format(restored=2, ids=ids, fate=undo_admin.FATE_RETIRED.format(truth=abc.pk))
    ]
    abc.refresh_from_db()
    assert abc.retired_reason == RetiredReason.UNDONE
    assert set(Truth.objects.filter(user=two_step_lineage["user"]).values_list("pk", flat=True)) == {ab.pk, c.pk}
    events = LineageEvent.objects.filter(action="undo")
    assert {(e.source_id, e.result_id, e.actor, e.reason) for e in events} == {
        (abc.pk, ab.pk, "admin", "Tomas in c is a nephew."),
        (abc.pk, c.pk, "admin", "Tomas in c is a nephew."),
    }
    lineage = admin_client.get(response["Location"]).content.decode()
    assert "was undone on" in lineage and "Tomas in c is a nephew." in lineage

    # and the restored generation-1 truth can itself be undone next, back to the originals
    admin_client.post(undo_url(ab.pk), {"reason": "b is not about him either."})
    assert set(Truth.objects.filter(user=two_step_lineage["user"]).values_list("pk", flat=True)) == {
        two_step_lineage[k].pk for k in ("a", "b", "c")
    }


def test_undo_without_a_reason_shows_the_form_again_and_changes_nothing(admin_client, two_step_lineage):
    abc = two_step_lineage["abc"]

    response = admin_client.post(undo_url(abc.pk), {"reason": ""})

    assert response.status_code == 200
    assert "This field is required." in response.content.decode()
    assert Truth.all_objects.get(pk=abc.pk).retired_at is None


def test_undo_of_a_truth_consolidated_further_refuses_and_links_the_later_step(admin_client, two_step_lineage):
    ab, abc = two_step_lineage["ab"], two_step_lineage["abc"]

    response = admin_client.post(undo_url(ab.pk), {"reason": "wrong"})

    assert response["Location"] == reverse("admin:iris_consolidation_truth_change", args=[ab.pk])
    (message,) = _messages(response)
    assert message.startswith(undo.CONSOLIDATED_FURTHER.format(truth=ab.pk, later=abc.pk))
    assert f'<a href="{undo_url(abc.pk)}">' in message
    assert not LineageEvent.objects.filter(action="undo").exists()


def test_undo_of_an_original_refuses_on_the_confirmation_page(admin_client, truth_factory):
    truth = truth_factory("Never merged")

    response = admin_client.get(undo_url(truth.pk))

    assert response.status_code == 302
    assert _messages(response) == [undo.NOTHING_TO_UNDO.format(truth=truth.pk)]


def test_staff_with_only_view_permission_gets_403(staff_client, two_step_lineage):
    client = staff_client("view_truth")
    abc = two_step_lineage["abc"]

    assert client.get(undo_url(abc.pk)).status_code == 403
    assert client.post(undo_url(abc.pk), {"reason": "x"}).status_code == 403
    assert Truth.all_objects.get(pk=abc.pk).retired_at is None


def test_anonymous_undo_is_sent_to_login(client, two_step_lineage):
    response = client.post(undo_url(two_step_lineage["abc"].pk), {"reason": "x"})

    assert response.status_code == 302 and response["Location"].startswith(reverse("admin:login"))


def test_undo_of_an_unknown_truth_is_a_404(admin_client):
    response = admin_client.get(undo_url(424242))

    assert response.status_code == 404
    assert MISSING_OBJECT.format(name="Truth", key="424242") == response.context["message"]


def test_undo_from_a_review_page(admin_client, user_factory):
    user = user_factory()
    a, b = lb.originals(user, 2)
    ab = lb.merge([a, b], content="Has a son named Tomas", run=lb.new_run())
    review = LineageEvent.objects.filter(result=ab).first().review
    review_page = reverse("admin:iris_consolidation_clusterreview_change", args=[review.pk])
    review_undo = reverse("admin:iris_consolidation_clusterreview_undo", args=[review.pk])

    assert review_undo in admin_client.get(review_page).content.decode()
    response = admin_client.post(review_undo, {"reason": "Different boys."})

    assert response.status_code == 302
    assert set(Truth.objects.filter(user=user).values_list("pk", flat=True)) == {a.pk, b.pk}
    page = admin_client.get(review_page).content.decode()
    assert "Undone on" in page and "Different boys." in page and review_undo not in page
