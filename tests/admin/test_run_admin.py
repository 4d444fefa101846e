"""Runs and reviews in the admin: list, run page, preview marking, progress, applying a
dry run, permissions and query counts."""

from __future__ import annotations

import pytest
from django.contrib.messages import get_messages
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from iris_consolidation.admin import run_actions
from iris_consolidation.admin import runs as run_admin
from iris_consolidation.embeddings import LOCAL_MODEL_NAME, get_embedder
from iris_consolidation.llm.base import Action
from iris_consolidation.llm.rules import RuleJudge
from iris_consolidation.models import ConsolidationRun, Truth
from iris_consolidation.services.operations import dry_runs
from iris_consolidation.services.queue import execution
from tests import lineage_builder as lb
from tests.conftest import vector_at

pytestmark = pytest.mark.django_db

RUNS = reverse("admin:iris_consolidation_consolidationrun_changelist")
REVIEWS = reverse("admin:iris_consolidation_clusterreview_changelist")


def run_url(run):
    return reverse("admin:iris_consolidation_consolidationrun_change", args=[run.pk])


def apply_url(run):
    return reverse("admin:iris_consolidation_consolidationrun_apply", args=[run.pk])


def _messages(response):
    return [str(m) for m in get_messages(response.wsgi_request)]


@pytest.fixture
def dry_run(user_factory, run_factory):
    user = user_factory("alice")
    for text, sim in (("Drinks green tea every morning", 1.0), ("drinks green tea every morning.", 0.97)):
        Truth.objects.create(
            user=user, content=text, embedding=vector_at(sim, axis=2), embedding_model=LOCAL_MODEL_NAME
        )
    return execution.run_sync(
        run=run_factory(dry_run=True, user_id=user.pk), client=RuleJudge(), embedder=get_embedder()
    )


def _reviews(run, count):
    """``count`` reviews on ``run``, each over its own pair of truths (some merged, some kept)."""
    user = run.user_filter
    for i in range(count):
        a, b = lb.originals(user, 2)
        actions = (
            [Action(action="merge", ids=("t1", "t2"), content="Has a son named Tomas", reason=lb.SAME_SON)]
            if i % 2
            else []
        )
        lb.judge_and_record([a, b], actions, run=run, reasoning=f"Cluster {i}.")


def test_run_list_shows_mode_status_counts_and_marks_dry_runs(admin_client, dry_run, run_factory):
    run_factory()

    html = admin_client.get(RUNS).content.decode()

    assert "Dry run (preview)" in html and "iris-preview" in html
    assert str(dry_run.pk)[:8] in html
    assert "1 of 1 clusters" in html  # clusters done / found


def test_run_page_shows_each_review_with_members_decision_reasoning_and_figures(admin_client, user_factory):
    user = user_factory("alice")
    run = lb.new_run(user_id=user.pk)
    a, b = lb.originals(user, 2)
    merged = lb.merge([a, b], content="Has a son named Tomas", run=run, reasoning="Both are about his son Tomas.")

    html = admin_client.get(run_url(run)).content.decode()

    assert "Cluster reviews (1)" in html
    assert a.content in html and b.content in html
    assert f"Merge #{a.pk} + #{b.pk}" in html and "Merge t1" not in html and "<td>t1</td>" not in html
    assert "Both are about his son Tomas." in html
    assert "420 tokens" in html and "830 ms" in html
    assert reverse("admin:iris_consolidation_truth_lineage", args=[merged.pk]) in html
    assert "Undo this consolidation" in html
    assert "Preview: dry run." not in html


def test_run_page_says_why_a_verdict_was_not_applied(admin_client, user_factory):
    user = user_factory("alice")
    run = lb.new_run(user_id=user.pk)
    first = Truth.objects.create(user=user, content="Likes coffee")
    second = Truth.objects.create(user=user, content="Does not like coffee")
    lb.judge_and_record(
        [first, second],
        [Action(action="merge", ids=("t1", "t2"), content="Likes coffee", reason="x")],
        run=run,
        reasoning="They look alike.",
    )

    html = admin_client.get(run_url(run)).content.decode()

    assert "Rejected by the validator" in html
    assert "Why it was not applied" in html and "drops the negation" in html


def test_dry_run_page_is_marked_as_a_preview_and_offers_to_apply(admin_client, dry_run):
    html = admin_client.get(run_url(dry_run)).content.decode()

    assert "Preview: dry run." in html and "nothing was written" in html
    assert "would apply (preview)" in html
    assert (
        "A real run would review 1 cluster of 1 user: 0 answered from the verdict cache, 1 by the pre-pass "
        "(no model call); none would go to the model. Cost: nothing: the rule judge calls no model." in html
    )
    assert "users=1" not in html
    assert apply_url(dry_run) in html


def test_viewer_sees_the_dry_run_but_cannot_apply_it(staff_client, dry_run):
    client = staff_client("view_consolidationrun", "view_truth")

    page = client.get(run_url(dry_run))

    assert page.status_code == 200 and apply_url(dry_run) not in page.content.decode()
    assert client.get(apply_url(dry_run)).status_code == 403
    assert client.post(apply_url(dry_run)).status_code == 403
    assert not ConsolidationRun.objects.filter(source_run=dry_run).exists()


def test_runs_need_the_truth_view_permission_too(staff_client, dry_run):
    client = staff_client("view_consolidationrun")  # runs quote truths: not enough

    assert client.get(run_url(dry_run)).status_code == 403
    assert client.get(RUNS).status_code == 403


def test_apply_view_applies_the_dry_run_as_a_real_run(admin_client, dry_run, django_capture_on_commit_callbacks):
    confirm = admin_client.get(apply_url(dry_run))
    with django_capture_on_commit_callbacks(execute=True):  # the test queue runs the apply jobs in process
        response = admin_client.post(apply_url(dry_run))

    assert confirm.status_code == 200 and "Apply as a real run" in confirm.content.decode()
    application = ConsolidationRun.objects.get(source_run=dry_run)
    assert response["Location"] == run_url(application)
    message, *warnings = _messages(response)
    assert "Queued run" in message and "1 previewed verdict(s)" in message
    assert all(w == run_actions.NO_WORKER_QUEUED for w in warnings)
    assert application.reviews.get().applied
    assert Truth.objects.get(user=dry_run.user_filter).origin == "consolidated"
    page = admin_client.get(run_url(dry_run)).content.decode()
    assert "They were applied as run" in page and apply_url(dry_run) not in page


def test_applying_twice_is_refused_with_a_message(admin_client, dry_run):
    admin_client.post(apply_url(dry_run))
    application = ConsolidationRun.objects.get(source_run=dry_run)

    response = admin_client.post(apply_url(dry_run))

    assert _messages(response)[-1] == dry_runs.ALREADY_APPLIED.format(
        run=str(dry_run.pk)[:8], application=str(application.pk)[:8]
    )
    assert ConsolidationRun.objects.filter(source_run=dry_run).count() == 1


def test_apply_action_on_the_run_list(admin_client, dry_run, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        admin_client.post(RUNS, {"action": "apply_dry_runs", "_selected_action": [dry_run.pk]})

    assert ConsolidationRun.objects.get(source_run=dry_run).merged == 1


def test_an_in_progress_run_shows_progress_and_refreshes_itself(admin_client, run_factory):
    run = run_factory(execution="queued")
    ConsolidationRun.objects.filter(pk=run.pk).update(
        status="running", users=2, users_done=1, clusters_found=10, clusters_done=3
    )

    html = " ".join(admin_client.get(run_url(run)).content.decode().split())

    assert f'<meta http-equiv="refresh" content="{run_admin.REFRESH_SECONDS}">' in html
    assert "3 of 10 clusters reviewed" in html and "1 of 2 users planned" in html
    assert '<progress max="100" value="33">' in html  # (1 + 3) of (2 + 10)


def test_a_finished_run_does_not_refresh(admin_client, dry_run):
    assert 'http-equiv="refresh"' not in admin_client.get(run_url(dry_run)).content.decode()


def test_run_page_filters_reviews_by_outcome(admin_client, user_factory):
    run = lb.new_run(user_id=user_factory("alice").pk)
    _reviews(run, 4)

    html = admin_client.get(run_url(run), {"outcome": "kept"}).content.decode()

    assert html.count('class="iris-card iris-outcome-kept"') == 2
    assert 'class="iris-card iris-outcome-applied"' not in html


@pytest.mark.parametrize("bad_id", ["00000000-0000-0000-0000-000000000000", "not-a-uuid"])
def test_applying_an_unknown_run_is_a_404(admin_client, bad_id):
    response = admin_client.get(reverse("admin:iris_consolidation_consolidationrun_apply", args=[bad_id]))

    assert response.status_code == 404
    assert _messages(response) == []


def test_run_page_query_count_does_not_grow_with_reviews(admin_client, user_factory, django_assert_max_num_queries):
    few, many = lb.new_run(user_id=user_factory("a").pk), lb.new_run(user_id=user_factory("b").pk)
    _reviews(few, 2)
    _reviews(many, 30)

    with CaptureQueriesContext(connection) as small:
        admin_client.get(run_url(few))
    with django_assert_max_num_queries(14):
        html = admin_client.get(run_url(many)).content.decode()

    assert html.count('class="iris-card ') == 30
    with CaptureQueriesContext(connection) as big:
        admin_client.get(run_url(many))
    assert len(big) == len(small)


def test_list_pages_query_counts_do_not_grow_with_rows(admin_client, user_factory):
    run = lb.new_run(user_id=user_factory("a").pk)
    _reviews(run, 2)
    counts = {}
    with CaptureQueriesContext(connection) as q:
        admin_client.get(RUNS)
        counts["runs"] = len(q)
    with CaptureQueriesContext(connection) as q:
        admin_client.get(REVIEWS)
        counts["reviews"] = len(q)
    for _ in range(10):
        _reviews(lb.new_run(user_id=run.user_filter_id), 2)

    with CaptureQueriesContext(connection) as q:
        admin_client.get(RUNS)
        assert len(q) == counts["runs"]
    with CaptureQueriesContext(connection) as q:
        admin_client.get(REVIEWS)
        assert len(q) == counts["reviews"]
