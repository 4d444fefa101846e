"""Cancel and retry from the console: each asks first (GET shows what it does, POST acts),
each is written to the run's history, and a cancelled run is neither failed nor retried."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.urls import reverse
from django.utils.html import escape

from iris_consolidation import run_display
from iris_consolidation.admin import run_actions
from iris_consolidation.models import ConsolidationJob, ConsolidationRun
from iris_consolidation.services.queue import recovery
from tests.helpers import waiting_run

pytestmark = pytest.mark.django_db

RUNS = reverse("admin:iris_consolidation_consolidationrun_changelist")


def _url(run, view="change"):
    return reverse(f"admin:iris_consolidation_consolidationrun_{view}", args=[run.pk])


def test_cancel_asks_first_and_changes_nothing_until_confirmed(admin_client, user_factory):
    run = waiting_run(user_factory("alice"))
    page = admin_client.get(_url(run)).content.decode()
    assert f'href="{_url(run, "cancel")}"' in page  # a link to the confirmation, not a form that acts

    confirm = admin_client.get(_url(run, "cancel")).content.decode()

    run.refresh_from_db()
    assert run.status == "running" and ConsolidationJob.objects.get(run=run).status == "queued"
    assert escape(run_actions.CANCEL_LINES[0].format(count=1)) in confirm
    assert 'value="Yes, cancel this run"' in confirm and '<form method="post"' in confirm


def test_a_confirmed_cancel_is_cancelled_in_the_history_and_not_offered_for_retry(admin_client, user_factory):
    run = waiting_run(user_factory("alice"))

    response = admin_client.post(_url(run, "cancel"), follow=True)

    run.refresh_from_db()
    assert run.status == ConsolidationRun.Status.CANCELLED and run.finished_at is not None
    page = response.content.decode()
    assert "Cancelled by admin at " in page  # the run page's history
    assert "iris-run-history" in page and "Retry the failed clusters" not in page
    assert "failed job" not in page
    assert _url(run, "retry") not in page


def test_right_after_a_cancel_the_run_list_claims_no_worker_and_no_failure(admin_client, user_factory):
    run = waiting_run(user_factory("alice"))
    admin_client.post(_url(run, "cancel"))

    html = admin_client.get(RUNS).content.decode()

    assert "took or finished a job" not in html
    assert escape(run_display.NO_WORKER) in html
    assert "0 queued, 0 running, 0 waiting (rate limited), 0 failed" in html
    assert ">Cancelled<" in html


def test_a_cancelled_run_is_refused_by_retry_in_the_admin_and_the_command(admin_client, user_factory):
    run = waiting_run(user_factory("alice"))
    admin_client.post(_url(run, "cancel"))
    refusal = recovery.CANCELLED_NOT_RETRIED.format(run=str(run.pk)[:8])

    confirm = admin_client.get(_url(run, "retry")).content.decode()
    posted = admin_client.post(_url(run, "retry"), follow=True).content.decode()
    with pytest.raises(CommandError, match="was cancelled before any worker took a job"):
        call_command("retry_consolidation", str(run.pk), stdout=StringIO())

    run.refresh_from_db()
    assert escape(refusal) in confirm and 'value="Yes, retry' not in confirm
    assert escape(refusal) in posted
    assert run.status == "cancelled" and ConsolidationJob.objects.get(run=run).status == "failed"
    assert "Retried" not in run.notes


def test_cancel_of_a_started_run_is_refused_on_its_confirmation_page(admin_client, user_factory):
    run = waiting_run(user_factory("alice"))
    ConsolidationJob.objects.filter(run=run).update(status="running", deliveries=1)

    confirm = admin_client.get(_url(run, "cancel")).content.decode()

    assert "has started" in confirm and 'value="Yes, cancel this run"' not in confirm


def test_retry_asks_first_then_requeues_and_writes_the_history(
    admin_client, failed_run, django_capture_on_commit_callbacks
):
    confirm = admin_client.get(_url(failed_run, "retry")).content.decode()
    failed_run.refresh_from_db()
    assert failed_run.status == "failed"
    assert escape(run_actions.RETRY_LINES[0].format(count=1)) in confirm

    with django_capture_on_commit_callbacks(execute=True):
        response = admin_client.post(_url(failed_run, "retry"), follow=True)

    failed_run.refresh_from_db()
    assert failed_run.status == "done"
    assert "Retried by admin at " in failed_run.notes and "re-queued 1 failed job(s)" in failed_run.notes
    assert "Retried by admin at " in response.content.decode()


def test_the_retry_action_on_the_run_list_asks_first(admin_client, failed_run, user_factory):
    cancelled = waiting_run(user_factory("bob"))
    admin_client.post(_url(cancelled, "cancel"))
    data = {"action": "retry_failed_clusters", "_selected_action": [str(failed_run.pk), str(cancelled.pk)]}

    confirm = admin_client.post(RUNS, data).content.decode()

    failed_run.refresh_from_db()
    assert failed_run.status == "failed"
    assert run_actions.RETRY_MANY_TITLE.format(count=1) in confirm
    assert escape(recovery.CANCELLED_NOT_RETRIED.format(run=str(cancelled.pk)[:8])) in confirm
    assert 'name="post" value="yes"' in confirm
