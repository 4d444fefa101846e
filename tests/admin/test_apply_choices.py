"""Applying a dry run from the admin: the confirmation page lists its previewed clusters,
each with a box (stale ones not offered); only the ticked clusters are applied; what the
application refused is listed on the dry run's page."""

from __future__ import annotations

import pytest
from django.contrib.messages import get_messages
from django.urls import reverse
from django.utils.html import escape

from iris_consolidation.admin import run_actions
from iris_consolidation.embeddings import get_embedder
from iris_consolidation.llm.rules import RuleJudge
from iris_consolidation.models import ClusterReview, ConsolidationRun, Truth
from iris_consolidation.services.operations import dry_runs
from iris_consolidation.services.queue import dispatch, execution
from tests.conftest import vector_at

pytestmark = pytest.mark.django_db

PAIRS = (
    ("Drinks green tea every morning", "drinks green tea every morning."),
    ("Works as a nurse", "works as a nurse."),
    ("Plays the cello", "plays the cello."),
)


def apply_url(run):
    return reverse("admin:iris_consolidation_consolidationrun_apply", args=[run.pk])


def run_url(run):
    return reverse("admin:iris_consolidation_consolidationrun_change", args=[run.pk])


@pytest.fixture
def dry(user_factory, truth_factory, run_factory):
    """Three clusters of one user, each two spellings of one statement, and a finished dry
    run (rule judge) that would merge each: three previews."""
    user = user_factory("alice")
    for axis, pair in zip((2, 4, 6), PAIRS, strict=True):
        for n, content in enumerate(pair):
            truth_factory(content, user=user, embedding=vector_at(1.0 - 0.03 * n, axis=axis))
    run = run_factory(dry_run=True, user_id=user.pk)
    run = execution.run_sync(run=run, client=RuleJudge(), embedder=get_embedder())
    assert run.merged == 3
    return run


def _previews(run):
    """The run's previews by the content of their first member."""
    return {r.snapshot[0]["content"]: r for r in run.reviews.filter(outcome=ClusterReview.Outcome.PREVIEW)}


def _box(review_id):
    return f'name="review" value="{review_id}" id="review-{review_id}"'


def test_the_confirmation_page_offers_each_fresh_preview_and_not_a_stale_one(admin_client, dry):
    previews = _previews(dry)
    Truth.objects.filter(content=PAIRS[1][1]).update(content="works as a night nurse.")

    html = admin_client.get(apply_url(dry)).content.decode()

    for pair in (PAIRS[0], PAIRS[2]):
        assert f"{_box(previews[pair[0]].pk)} checked>" in html
    assert f"{_box(previews[PAIRS[1][0]].pk)} disabled>" in html and "stale: changed since" in html
    assert escape(run_actions.OUTDATED_PREVIEWS.format(outdated=1, previews=3)) in html
    assert "Apply as a real run" in html


def test_only_the_ticked_clusters_are_applied(admin_client, dry, django_capture_on_commit_callbacks):
    previews = _previews(dry)
    chosen = [previews[PAIRS[0][0]].pk, previews[PAIRS[2][0]].pk]

    with django_capture_on_commit_callbacks(execute=True):  # the test queue runs the apply jobs in process
        admin_client.post(apply_url(dry), {"chosen": "1", "review": [str(pk) for pk in chosen]})

    application = ConsolidationRun.objects.get(source_run=dry)
    assert (application.merged, application.retired, application.clusters_found) == (2, 4, 2)
    assert sorted(application.reviews.values_list("key", flat=True)) == sorted(
        previews[PAIRS[n][0]].key for n in (0, 2)
    )
    assert "2 of 3 previewed clusters" in application.notes
    live = set(Truth.objects.filter(user=dry.user_filter).values_list("content", "origin"))
    assert set(PAIRS[1]) <= {content for content, origin in live if origin == "promoted"}  # not applied
    assert {content for content, origin in live if origin == "consolidated"} == {PAIRS[0][0], PAIRS[2][0]}


def test_ticking_nothing_applies_nothing(admin_client, dry):
    response = admin_client.post(apply_url(dry), {"chosen": "1"})

    messages = [str(m) for m in get_messages(response.wsgi_request)]
    assert messages == [dry_runs.NOTHING_CHOSEN.format(run=str(dry.pk)[:8])]
    assert not ConsolidationRun.objects.filter(source_run=dry).exists()


def test_an_id_that_is_not_a_preview_of_this_dry_run_is_refused(admin_client, dry):
    response = admin_client.post(apply_url(dry), {"chosen": "1", "review": ["999999", "x"]})

    messages = [str(m) for m in get_messages(response.wsgi_request)]
    assert messages == [dry_runs.NOT_A_PREVIEW.format(ids="#-1, #999999", run=str(dry.pk)[:8])]
    assert not ConsolidationRun.objects.filter(source_run=dry).exists()


def test_the_dry_run_page_lists_what_its_application_refused(admin_client, dry):
    previews = _previews(dry)
    application, _ = dry_runs.start_application(
        dry_run_id=dry.pk, actor="operator", execution="in_process", send=dispatch.send_jobs
    )
    changed = Truth.objects.get(content=PAIRS[1][1])
    changed.content = "works as a night nurse."
    changed.save()  # after the confirmation, before the worker: the freshness check refuses it
    execution.apply_sync(run=application, embedder=get_embedder())

    html = admin_client.get(run_url(dry)).content.decode()

    assert "1 action was refused on apply (listed below)." in html
    review = application.reviews.get(key=previews[PAIRS[1][0]].key)
    assert review.outcome == ClusterReview.Outcome.STALE
    first = Truth.all_objects.get(content=PAIRS[1][0])
    row = f"Review #{review.pk}</a>: Merge #{first.pk} + #{changed.pk}, refused: "
    assert row in html and escape(f"#{changed.pk} changed or was retired after the judge saw it") in html


def test_an_application_that_refused_nothing_says_so(admin_client, dry, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        admin_client.post(apply_url(dry))

    html = admin_client.get(run_url(dry)).content.decode()

    assert "; nothing was refused." in html and "iris-application-refusals" not in html
