"""Admin of sessions, notes and learned rules: staff with the truths' view
permission only, wikilinks rendered, rules with the truths they came from, hand-authored
rules added here and auto-managed ones read-only."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from iris_consolidation.models import ChatSession, LearnedRule, SessionMessage
from iris_consolidation.services.hygiene import promotion, relocation

pytestmark = pytest.mark.django_db


@pytest.fixture
def session(user_factory):
    user = user_factory("ana")
    chat = ChatSession.objects.create(user=user, external_id="locomo-like:s1", started_at=timezone.now())
    SessionMessage.objects.create(session=chat, position=0, external_id="D1:1", role="user", speaker="Ana",
                                  content="I live in Porto.", at=chat.started_at)
    SessionMessage.objects.create(session=chat, position=1, external_id="D1:2", role="other", speaker="Bo",
                                  content="Nice!", at=chat.started_at + timedelta(seconds=30))
    return chat


def test_sessions_need_the_view_permission_on_truths(staff_client, session):
    url = reverse("admin:iris_consolidation_chatsession_changelist")
    assert staff_client("view_chatsession").get(url).status_code == 403
    page = staff_client("view_chatsession", "view_truth", username="reader").get(url)
    assert page.status_code == 200 and "locomo-like:s1" in page.content.decode()


def test_session_page_shows_its_messages_in_order(admin_client, session):
    page = admin_client.get(reverse("admin:iris_consolidation_chatsession_change", args=[session.pk])).content.decode()
    assert page.index("I live in Porto.") < page.index("Nice!")
    assert "D1:2" in page


def test_note_page_renders_wikilinks_and_sources(admin_client, truth_factory):
    a = truth_factory("Deploy runbook for the API:\n- build\n- push\n- migrate")
    b = truth_factory("Deploy runbook for the workers:\n- build\n- push\n- <restart>", user=a.user)
    first, _ = relocation.relocate(move=relocation.rule_move(a, "list"), run=None)
    second, _ = relocation.relocate(move=relocation.rule_move(b, "list"), run=None)
    page = admin_client.get(reverse("admin:iris_consolidation_note_change", args=[second.pk])).content.decode()
    target = reverse("admin:iris_consolidation_note_change", args=[first.pk])
    assert f'<a href="{target}">[[{first.slug}]]</a>' in page
    assert "&lt;restart&gt;" in page and "<restart>" not in page
    assert f"#{b.pk}" in page


def test_learned_rules_show_sources_and_only_hand_authored_ones_are_editable(admin_client, truth_factory):
    truth = truth_factory("Wants answers in British English", corroborations=3)
    auto = LearnedRule.objects.create(user=truth.user, text="Answer in British English.",
                                      fingerprint=promotion.fingerprint("Answer in British English."))
    auto.source_truths.add(truth)
    page = admin_client.get(reverse("admin:iris_consolidation_learnedrule_change", args=[auto.pk])).content.decode()
    assert "Wants answers in British English" in page and 'name="text"' not in page
    added = admin_client.post(reverse("admin:iris_consolidation_learnedrule_add"),
                              {"user": truth.user.pk, "text": "Never   use emoji."})
    assert added.status_code == 302
    hand = LearnedRule.objects.get(hand_authored=True)
    assert (hand.text, hand.fingerprint) == ("Never use emoji.", promotion.fingerprint("Never use emoji."))
    edit = admin_client.get(reverse("admin:iris_consolidation_learnedrule_change", args=[hand.pk])).content.decode()
    assert 'name="text"' in edit
    assert admin_client.post(reverse("admin:iris_consolidation_learnedrule_delete", args=[auto.pk])).status_code == 403


def test_run_page_reports_the_mining_window_and_what_was_added(admin_client, session):
    from io import StringIO

    from django.core.management import call_command

    from iris_consolidation.models import ConsolidationRun

    ChatSession.objects.filter(pk=session.pk).update(started_at=timezone.now() - timedelta(hours=1))
    SessionMessage.objects.filter(session=session).update(at=timezone.now() - timedelta(hours=1))
    call_command("consolidate_truths", "--sync", "--only", "mine,promote", "--since", "7d", verbosity=0,
                 stdout=StringIO())
    run = ConsolidationRun.objects.get()
    page = admin_client.get(reverse("admin:iris_consolidation_consolidationrun_change", args=[run.pk])).content.decode()
    assert "1 sessions, 1 user messages; extractor rules" in page
    assert "added: <q>Lives in Porto</q>" in page and "session:locomo-like:s1 D1:1" in page
    assert "Promote: skipped: no LLM" in page
