"""The console's pages in the operator's words: live settings show the value in force and
refuse a negative budget as a form error, a truth list finds a partial username and
says so, retired truths say why and by what, a consolidated truth's text is read-only."""

from __future__ import annotations

import pytest
from django.contrib.messages import get_messages
from django.urls import reverse
from django.utils.html import escape

from iris_consolidation.admin import records, truths
from iris_consolidation.conf import app_settings
from iris_consolidation.models import ConsolidationRun, LiveSettings, Truth
from tests import lineage_builder as lb
from tests.helpers import waiting_run

pytestmark = pytest.mark.django_db

LIVE_ADD = reverse("admin:iris_consolidation_livesettings_add")
TRUTHS = reverse("admin:iris_consolidation_truth_changelist")


def test_live_settings_stage_menus_show_the_mode_in_force(admin_client):
    html = admin_client.get(LIVE_ADD).content.decode()

    assert f">Use the default (currently {app_settings.MINE})</option>" in html
    assert f">Use the default (currently {app_settings.NOISE})</option>" in html
    assert f">Use the default (currently {app_settings.RISK_POLICY})</option>" in html
    assert "---------" not in html and "Empty: IRIS_CONSOLIDATION_" not in html
    assert records.NO_RECORD_TITLE in html and "<h1>Add live settings</h1>" not in html


def test_a_negative_budget_is_a_form_error_in_words(admin_client):
    response = admin_client.post(LIVE_ADD, {"max_cost_per_run": "-1", "enabled": "unknown",
                                            "scheduled_dry_run_only": "unknown"})

    html = response.content.decode()
    assert response.status_code == 200 and not LiveSettings.objects.exists()
    assert records.COST_RANGE in html and "is violated" not in html


def test_a_partial_username_finds_its_users_and_says_so(admin_client, user_factory):
    alice = user_factory("alice")
    Truth.objects.create(user=alice, content="Likes tea")
    Truth.objects.create(user=user_factory("bob"), content="Likes coffee")

    response = admin_client.get(TRUTHS, {"user": "ali"})

    html = response.content.decode()
    assert "Likes tea" in html and "Likes coffee" not in html
    assert [str(m) for m in get_messages(response.wsgi_request)] == [
        truths.NO_SUCH_USER_BUT.format(name="ali", names="alice")
    ]


def test_retired_truths_say_why_and_what_replaced_them(admin_client, two_step_lineage):
    ab = two_step_lineage["ab"]
    html = admin_client.get(TRUTHS, {"status": "retired"}).content.decode()

    assert "column-retired_reason" in html and "column-replaced_by" in html
    assert f'<a href="{reverse("admin:iris_consolidation_truth_change", args=[ab.pk])}">#{ab.pk}</a>' in html
    assert "column-replaced_by" not in admin_client.get(TRUTHS).content.decode()  # the live list keeps its width


def test_a_consolidated_truths_text_is_read_only_with_the_reason(admin_client, two_step_lineage):
    abc = two_step_lineage["abc"]
    url = reverse("admin:iris_consolidation_truth_change", args=[abc.pk])

    page = admin_client.get(url).content.decode()
    admin_client.post(url, {"content": "Edited by hand", "kind": abc.kind, "score": "0.5", "source": ""})

    assert escape(truths.CONSOLIDATED_TEXT) in page and 'name="content"' not in page
    assert Truth.all_objects.get(pk=abc.pk).content == abc.content


def test_a_waiting_run_page_says_so_in_its_title_and_cancels(admin_client, user_factory):
    run = waiting_run(user_factory("alice"))
    page_url = reverse("admin:iris_consolidation_consolidationrun_change", args=[run.pk])

    page = admin_client.get(page_url).content.decode()
    response = admin_client.post(reverse("admin:iris_consolidation_consolidationrun_cancel", args=[run.pk]))

    assert f"<title>Run {str(run.pk)[:8]} (Real run, waiting for a worker)" in page
    assert "Cancel this run" in page
    run.refresh_from_db()
    assert response.status_code == 302 and run.status == "cancelled"
    after = admin_client.get(page_url).content.decode()
    assert "(Real run, cancelled)" in after and "Cancel this run" not in after


def test_a_dry_run_in_the_list_reads_as_a_preview(admin_client, user_factory):
    user = user_factory("alice")
    a, b = lb.originals(user, 2)
    dry = lb.new_run(dry_run=True, user_id=user.pk)
    ConsolidationRun.objects.filter(pk=dry.pk).update(merged=1, retired=2, clusters_done=1)

    html = admin_client.get(reverse("admin:iris_consolidation_consolidationrun_changelist")).content.decode()

    assert "would merge <b>1</b>" in html and "would retire 2 truths" in html
    assert "merged <b>1</b>" not in html and "2 truths retired" not in html


def test_empty_notes_and_rules_say_which_stage_mode_leaves_them_empty(admin_client, settings):
    settings.IRIS_CONSOLIDATION_RELOCATE = "report"
    settings.IRIS_CONSOLIDATION_PROMOTE = "report"

    notes = admin_client.get(reverse("admin:iris_consolidation_note_changelist"))
    rules = admin_client.get(reverse("admin:iris_consolidation_learnedrule_changelist"))

    from iris_consolidation.admin import knowledge

    assert [str(m) for m in get_messages(notes.wsgi_request)] == [knowledge.EMPTY_REPORT.format(
        what="notes", stage="relocate", mode="report", setting="IRIS_CONSOLIDATION_RELOCATE")]
    assert [str(m) for m in get_messages(rules.wsgi_request)][-1] == knowledge.EMPTY_REPORT.format(
        what="learned rules", stage="promote", mode="report", setting="IRIS_CONSOLIDATION_PROMOTE")


def test_the_review_list_says_what_each_cluster_was_about(admin_client, two_step_lineage):
    html = admin_client.get(reverse("admin:iris_consolidation_clusterreview_changelist")).content.decode()

    assert "column-about" in html and f"<q>{escape(two_step_lineage['a'].content)}</q>" in html and "(+1)" in html


def test_the_audit_list_names_who_made_each_change_in_words(admin_client, user_factory):
    from iris_consolidation.models import TruthChange

    user = user_factory("dana")
    truth = Truth.objects.create(user=user, content="Likes tea")
    TruthChange.objects.create(truth=truth, user=user, action="retired", reason="noise", actor="hygiene:noise")
    TruthChange.objects.create(truth=truth, user=user, action="created", reason="merged", actor="llm:openai/gpt-x")

    html = admin_client.get(reverse("admin:iris_consolidation_truthchange_changelist")).content.decode()

    assert ">the noise stage<" in html and ">the model openai/gpt-x (judge)<" in html
