"""The truth list and change page: filters, search, actions, permissions, query counts."""

from __future__ import annotations

import re

import pytest
from django.contrib.messages import get_messages
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from iris_consolidation.admin import run_actions
from iris_consolidation.admin import truths as truth_admin
from iris_consolidation.embeddings import LOCAL_MODEL_NAME
from iris_consolidation.models import ConsolidationRun, Truth
from tests.conftest import vector_at

pytestmark = pytest.mark.django_db

CHANGELIST = reverse("admin:iris_consolidation_truth_changelist")


def _ids(response):
    return {int(pk) for pk in re.findall(r'name="_selected_action" value="(\d+)"', response.content.decode())}


def _messages(response):
    return [str(m) for m in get_messages(response.wsgi_request)]


def test_list_shows_live_truths_by_default_and_retired_on_request(admin_client, two_step_lineage):
    live = {two_step_lineage["abc"].pk}
    retired = {two_step_lineage[k].pk for k in ("a", "b", "c", "ab")}

    assert _ids(admin_client.get(CHANGELIST)) == live
    assert _ids(admin_client.get(CHANGELIST, {"status": "retired"})) == retired
    assert _ids(admin_client.get(CHANGELIST, {"status": "all"})) == live | retired


def test_search_finds_truths_by_content_and_by_username(admin_client, truth_factory, user_factory):
    alice, bob = user_factory("alice"), user_factory("bob")
    tea = truth_factory("Likes green tea", user=alice)
    chess = truth_factory("Plays chess", user=bob)

    assert _ids(admin_client.get(CHANGELIST, {"q": "green"})) == {tea.pk}
    assert _ids(admin_client.get(CHANGELIST, {"q": "bob"})) == {chess.pk}


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ({"origin__exact": "user"}, {"by_user"}),
        ({"pinned__exact": "1"}, {"pinned"}),
        ({"generation": "1"}, {"gen1"}),
        ({"score": "3"}, {"high"}),
        ({"score": "0"}, {"by_user", "pinned", "gen1"}),
    ],
)
def test_filters_narrow_the_list(admin_client, truth_factory, params, expected):
    made = {
        "by_user": truth_factory("Made by the person", origin="user", score=0.1),
        "pinned": truth_factory("Pinned one", pinned=True, score=0.2),
        "gen1": truth_factory("A merge", origin="consolidated", generation=1, score=0.0),
        "high": truth_factory("High score", score=0.9),
    }

    assert _ids(admin_client.get(CHANGELIST, params)) == {made[name].pk for name in expected}


def test_user_filter_picks_one_users_truths_by_username(admin_client, truth_factory, user_factory):
    alice, bob = user_factory("alice"), user_factory("bob")
    mine = truth_factory("x", user=alice)
    truth_factory("y", user=bob)

    response = admin_client.get(CHANGELIST, {"user": "alice"})

    assert _ids(response) == {mine.pk}
    html = response.content.decode()
    assert 'name="user" value="alice"' in html  # the search box keeps the choice
    # Links by id (older bookmarks) still filter.
    assert _ids(admin_client.get(CHANGELIST, {"user__id__exact": alice.pk})) == {mine.pk}


def test_user_filter_is_a_search_box_not_a_link_per_user(admin_client, truth_factory, user_factory):
    for name in ("alice", "bob", "carol"):
        truth_factory("x", user=user_factory(name))

    html = admin_client.get(CHANGELIST).content.decode()

    assert 'id="iris-user-filter"' in html
    assert "?user=bob" not in html.split('id="changelist-filter"')[1]


def test_user_suggestions_are_users_with_truths_matching_the_term(admin_client, truth_factory, user_factory):
    truth_factory("x", user=user_factory("alice"))
    truth_factory("y", user=user_factory("alicia"))
    truth_factory("z", user=user_factory("bob"))
    user_factory("alina")  # no truths

    response = admin_client.get(reverse("admin:iris_consolidation_truth_users"), {"term": "ALI"})

    assert response.json() == {"results": ["alice", "alicia"]}


def test_user_suggestions_need_the_view_permission_on_truths(client, django_user_model):
    staff = django_user_model.objects.create_user("staff", password="pw", is_staff=True)
    client.force_login(staff)

    response = client.get(reverse("admin:iris_consolidation_truth_users"), {"term": "a"})

    assert response.status_code == 403


def test_embeddings_are_never_shown_as_numbers(admin_client, truth_factory):
    truth = truth_factory("Has a vector", embedding=vector_at(0.123456, axis=0, towards=1))

    change = admin_client.get(reverse("admin:iris_consolidation_truth_change", args=[truth.pk])).content.decode()
    listing = admin_client.get(CHANGELIST).content.decode()

    assert f"present, 384 dimensions ({LOCAL_MODEL_NAME})" in change
    for html in (change, listing):
        assert "0.123456" not in html and "0.99235" not in html


def test_editing_the_content_drops_the_stale_embedding(admin_client, truth_factory):
    truth = truth_factory("Old text", embedding=vector_at(1.0))
    url = reverse("admin:iris_consolidation_truth_change", args=[truth.pk])

    response = admin_client.post(url, {"content": "New text", "kind": "fact", "score": "0.5", "source": ""})

    assert response.status_code == 302
    truth.refresh_from_db()
    assert truth.content == "New text" and truth.embedding is None and truth.embedding_model == ""


def test_pin_and_unpin_actions_change_live_truths(admin_client, truth_factory):
    first, second = truth_factory("one"), truth_factory("two")

    response = admin_client.post(CHANGELIST, {"action": "pin_selected", "_selected_action": [first.pk, second.pk]})

    assert _messages(response) == [truth_admin.PINNED.format(count=2)]
    assert set(Truth.objects.filter(pinned=True).values_list("pk", flat=True)) == {first.pk, second.pk}

    admin_client.post(CHANGELIST, {"action": "unpin_selected", "_selected_action": [first.pk]})

    assert set(Truth.objects.filter(pinned=True).values_list("pk", flat=True)) == {second.pk}


def test_staff_with_view_permission_cannot_pin(staff_client, truth_factory):
    truth = truth_factory("one")
    client = staff_client("view_truth")

    page = client.get(CHANGELIST)
    client.post(CHANGELIST, {"action": "pin_selected", "_selected_action": [truth.pk]})

    assert page.status_code == 200 and "pin_selected" not in page.content.decode()
    truth.refresh_from_db()
    assert truth.pinned is False


def test_queue_dry_run_creates_one_preview_run_per_user_of_the_selection(
    admin_client, user_factory, django_capture_on_commit_callbacks
):
    alice, bob = user_factory("alice"), user_factory("bob")
    picked = [
        Truth.objects.create(
            user=user, content=text, embedding=vector_at(sim, axis=4), embedding_model=LOCAL_MODEL_NAME
        )
        for user in (alice, bob)
        for text, sim in (("Drinks green tea every morning", 1.0), ("drinks green tea every morning.", 0.98))
    ]

    with django_capture_on_commit_callbacks(execute=True):  # the runs' tasks are sent on commit
        response = admin_client.post(
            CHANGELIST, {"action": "queue_dry_run", "_selected_action": [t.pk for t in picked]}
        )

    runs = ConsolidationRun.objects.order_by("user_filter_id")
    assert [(r.dry_run, r.trigger, r.user_filter_id) for r in runs] == [
        (True, "admin", alice.pk),
        (True, "admin", bob.pk),
    ]
    message, *warnings = _messages(response)
    assert message.startswith("Queued a dry run for 2 user(s): ")
    # The tests' queue runs jobs in this process, and no worker's heartbeat beats: the warning says so.
    assert warnings == [run_actions.NO_WORKER_QUEUED]
    for run in runs:
        assert reverse("admin:iris_consolidation_consolidationrun_change", args=[run.pk]) in message
        assert run.merged == 1  # the sync queue of the tests ran it
    assert Truth.objects.count() == 4  # a dry run writes no truth


def test_queue_real_run_consolidates_the_users_of_the_selection(
    admin_client, user_factory, django_capture_on_commit_callbacks
):
    user = user_factory("alice")
    picked = [
        Truth.objects.create(
            user=user, content=text, embedding=vector_at(sim, axis=4), embedding_model=LOCAL_MODEL_NAME
        )
        for text, sim in (("Drinks green tea every morning", 1.0), ("drinks green tea every morning.", 0.97))
    ]

    with django_capture_on_commit_callbacks(execute=True):  # the run's tasks are sent on commit
        admin_client.post(CHANGELIST, {"action": "queue_real_run", "_selected_action": [picked[0].pk]})

    run = ConsolidationRun.objects.get()
    assert (run.dry_run, run.execution, run.status, run.merged) == (False, "queued", "done", 1)
    assert Truth.objects.get(user=user).origin == "consolidated"


def test_truths_cannot_be_deleted_from_the_admin(admin_client, truth_factory):
    truth = truth_factory("keep me")

    listing = admin_client.get(CHANGELIST).content.decode()
    response = admin_client.get(reverse("admin:iris_consolidation_truth_delete", args=[truth.pk]))

    assert "delete_selected" not in listing
    assert response.status_code == 403


def test_change_page_links_to_lineage_and_offers_undo_only_when_it_applies(
    admin_client, staff_client, two_step_lineage
):
    abc, a = two_step_lineage["abc"], two_step_lineage["a"]
    change = reverse("admin:iris_consolidation_truth_change", args=[abc.pk])

    html = admin_client.get(change).content.decode()
    original = admin_client.get(reverse("admin:iris_consolidation_truth_change", args=[a.pk])).content.decode()
    viewer = staff_client("view_truth", username="viewer").get(change).content.decode()

    assert reverse("admin:iris_consolidation_truth_lineage", args=[abc.pk]) in html
    assert reverse("admin:iris_consolidation_truth_undo", args=[abc.pk]) in html
    assert "Undo this consolidation" not in original  # an original, and retired
    assert reverse("admin:iris_consolidation_truth_lineage", args=[abc.pk]) in viewer
    assert "Undo this consolidation" not in viewer


def test_list_query_count_does_not_grow_with_rows(admin_client, user_factory):
    users = [user_factory(f"u{i}") for i in range(4)]
    Truth.objects.bulk_create([Truth(user=users[0], content=f"fact {i}") for i in range(5)])
    with CaptureQueriesContext(connection) as few:
        assert admin_client.get(CHANGELIST).status_code == 200
    Truth.objects.bulk_create([Truth(user=users[i % 4], content=f"more {i}", generation=i % 3) for i in range(95)])
    with CaptureQueriesContext(connection) as many:
        response = admin_client.get(CHANGELIST)

    assert len(_ids(response)) == 100
    assert len(many) == len(few)
    assert len(many) <= 12


# --- relevance and quality bands; adding a truth by hand ------------------------------------


def _hygiene_truths(truth_factory):
    from datetime import timedelta

    from django.utils import timezone

    now = timezone.now()
    return {
        # relevance 0.1, never used, stated a year ago: quality about 0.05
        "faded": truth_factory("Faded one", relevance=0.1, created_at=now - timedelta(days=365)),
        # relevance 0.6, used 3 times a day ago: about 0.27 + 0.09 + 0.15
        "used": truth_factory("Used one", relevance=0.6, access_count=3, last_accessed=now - timedelta(days=1)),
        # relevance 1, used 200 times just now, validated: 1.0
        "best": truth_factory("Best one", relevance=1.0, access_count=200, last_accessed=now, validated=True),
    }


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ({"relevance": "0"}, {"faded"}),
        ({"relevance": "2"}, {"used"}),
        ({"relevance": "3"}, {"best"}),
        ({"quality": "0"}, {"faded"}),
        ({"quality": "2"}, {"used"}),
        ({"quality": "3"}, {"best"}),
        ({"quality": "1"}, set()),
    ],
)
def test_the_list_filters_by_relevance_and_quality_band(admin_client, truth_factory, params, expected):
    made = _hygiene_truths(truth_factory)

    response = admin_client.get(CHANGELIST, params)

    assert _ids(response) == {made[name].pk for name in expected}
    assert f"?{next(iter(params))}=" in response.content.decode()  # the filter is offered in the sidebar


def test_the_quality_filter_computes_in_sql_what_quality_of_computes(truth_factory):
    from django.utils import timezone

    from iris_consolidation.conf import app_settings
    from iris_consolidation.quality import quality_of

    made = _hygiene_truths(truth_factory)
    now = timezone.now()

    rows = Truth.all_objects.with_quality(now=now, half_life_days=float(app_settings.HALF_LIFE_DAYS))

    by_id = {t.pk: t.quality_now for t in rows.filter(pk__in=[t.pk for t in made.values()])}
    for truth in made.values():
        assert by_id[truth.pk] == pytest.approx(quality_of(truth, now=now), abs=1e-6)
    assert len({round(q, 2) for q in by_id.values()}) == 3


def test_add_truth_page_works_and_audits_the_creation(admin_client, user_factory):
    from iris_consolidation.models import TruthChange

    alice = user_factory("alice")
    add = reverse("admin:iris_consolidation_truth_add")

    page = admin_client.get(add)
    response = admin_client.post(
        add, {"user": alice.pk, "content": "Keeps bees", "kind": "fact", "score": "0.5", "source": ""}
    )

    assert page.status_code == 200 and 'name="content"' in page.content.decode()
    assert response.status_code == 302, response.content.decode()[:2000]
    truth = Truth.objects.get(content="Keeps bees")
    assert (truth.user, truth.score, truth.embedding) == (alice, 0.5, None)
    change = TruthChange.objects.get(truth=truth)
    assert (change.action, change.actor) == ("created", "admin")
    assert admin_client.get(reverse("admin:iris_consolidation_truth_change", args=[truth.pk])).status_code == 200
