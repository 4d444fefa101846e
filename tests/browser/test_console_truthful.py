"""The console tells the truth, in Chromium at 1360 px: previews read as previews, truths
are named by number, a partly refused review says so, a view-only reader meets the admin's
frame (with the permission named) rather than a bare 403, a waiting run can be cancelled,
live settings show the value in force, retired truths say why."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission
from django.utils import timezone
from playwright.sync_api import expect

from iris_consolidation.admin import base
from iris_consolidation.embeddings import LOCAL_MODEL_NAME
from iris_consolidation.llm.base import Action
from iris_consolidation.models import ConsolidationJob, Truth
from tests import lineage_builder as lb
from tests.browser.conftest import PASSWORD
from tests.conftest import vector_at
from tests.helpers import rules_run, waiting_run

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

ADMIN = "/admin/iris_consolidation"


def _pairs(user, count):
    for i in range(count):
        for text, similarity in ((f"Drinks green tea number {i} every morning", 1.0),
                                 (f"drinks green tea number {i} every morning.", 0.97)):
            vector = vector_at(similarity, axis=2 * i, towards=2 * i + 1)
            Truth.objects.create(user=user, content=text, embedding=vector, embedding_model=LOCAL_MODEL_NAME)


@pytest.fixture
def two_step_lineage(user_factory):
    """a + b -> ab, ab + c -> abc, in two runs (as the admin tests' fixture)."""
    user = user_factory("alice")
    a, b, c = lb.originals(user, 3)
    ab = lb.merge([a, b], content="Has a son named Tomas", run=lb.new_run(user_id=user.pk))
    abc = lb.merge([ab, c], content="Has a son called Tomas", run=lb.new_run(user_id=user.pk))
    return {"user": user, "a": a, "b": b, "c": c, "ab": ab, "abc": abc}


def _within_width(page, selector, width=1360):
    box = page.locator(selector).first.bounding_box()
    assert box is not None, selector
    return box["x"] >= 0 and box["x"] + box["width"] <= width


def test_a_dry_run_reads_as_a_preview_in_the_list_and_on_its_page(logged_in, live_server, user_factory, artifacts):
    page = logged_in
    user = user_factory("alice")
    _pairs(user, 2)
    dry = rules_run(user, dry_run=True)

    page.goto(f"{live_server.url}{ADMIN}/consolidationrun/")
    cell = page.locator("#result_list tbody tr td.field-outcome_display").first
    expect(cell).to_contain_text("would merge 2")
    expect(cell).to_contain_text("would retire 4 truths")
    expect(cell).not_to_contain_text("merged")
    assert _within_width(page, "#result_list th.column-outcome_display")
    page.screenshot(path=str(artifacts / "truthful-dry-run-list.png"), full_page=True)

    page.goto(f"{live_server.url}{ADMIN}/consolidationrun/{dry.pk}/change/")
    expect(page.locator(".iris-run-summary dd").first).to_contain_text("would merge 2")
    expect(page.locator(".iris-run-summary dd").first).to_contain_text("would retire 4 truths")
    expect(page.locator(".iris-preview-banner")).to_contain_text("A real run would review 2 clusters of 1 user")
    modes = page.locator("table.iris-stages tbody td:nth-child(2)").all_inner_texts()
    assert "apply" not in modes and modes.count("would apply (dry run)") == 2, modes
    expect(page.locator("table.iris-stages tbody tr", has_text="semantic")).to_contain_text("would apply (dry run)")
    page.screenshot(path=str(artifacts / "truthful-dry-run-page.png"), full_page=True)


def test_reviews_and_lineage_name_truths_by_number(logged_in, live_server, user_factory, artifacts):
    page = logged_in
    user = user_factory("alice")
    nurse, nurse_again, likes, dislikes = (
        Truth.objects.create(user=user, content=text)
        for text in ("Works as a nurse", "works as a nurse.", "Likes coffee", "Does not like coffee")
    )
    run = lb.new_run(user_id=user.pk)
    review = lb.judge_and_record(
        [nurse, nurse_again, likes, dislikes],
        [
            Action(action="merge", ids=("t1", "t2"), content="Works as a nurse", reason="t1 and t2 are the same."),
            Action(action="merge", ids=("t3", "t4"), content="Likes coffee", reason="Same."),
        ],
        run=run,
        reasoning="t1 and t2 say the same; t3 and t4 look alike.",
    )
    merged = review.applied_actions[0]["result_id"]

    page.goto(f"{live_server.url}{ADMIN}/consolidationrun/{run.pk}/change/")
    card = page.locator(f"#review-{review.pk}")
    expect(card.locator(".iris-badge").first).to_have_text("Partly applied (1 of 2)")
    expect(card).to_contain_text(f"Merge #{nurse.pk} + #{nurse_again.pk}")
    expect(card).to_contain_text(f"#{nurse.pk} and #{nurse_again.pk} say the same; #{likes.pk} and #{dislikes.pk}")
    expect(card.locator("table.iris-members thead")).not_to_contain_text("alias")
    page.screenshot(path=str(artifacts / "truthful-partly-applied.png"), full_page=True)

    page.goto(f"{live_server.url}{ADMIN}/truth/{merged}/lineage/")
    summary = page.locator(".iris-summary .iris-meta")
    expect(summary).to_contain_text("last stated")
    expect(summary).to_contain_text("record made " + timezone.localtime().strftime("%Y-%m-%d"))
    reasoning = page.locator(".iris-step .iris-reasoning").first
    expect(reasoning.locator(".iris-label")).to_have_text(f"Model's reasoning ({lb.MODEL})")
    expect(reasoning).to_contain_text(f"#{nurse.pk} and #{nurse_again.pk} say the same")
    expect(page.locator(".iris-tree")).not_to_contain_text("t1 and t2")
    page.screenshot(path=str(artifacts / "truthful-lineage.png"), full_page=True)


def test_a_view_only_reader_opens_the_console_and_meets_the_frame_on_a_write(page, live_server, user_factory,
                                                                           artifacts, two_step_lineage):
    viewer = user_factory("viewer", is_staff=True)
    viewer.set_password(PASSWORD)
    viewer.save()
    viewer.user_permissions.add(Permission.objects.get(codename="view_truth"))
    abc = two_step_lineage["abc"]
    page.goto(f"{live_server.url}/admin/")
    page.fill("#id_username", "viewer")
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")

    page.goto(f"{live_server.url}{ADMIN}/truth/{abc.pk}/lineage/")
    page.locator(".iris-step-head a", has_text="review #").first.click()
    expect(page.locator("#content h1, #content h2").first).to_be_visible()
    expect(page.locator("article.iris-card")).to_have_count(1)
    page.go_back()
    page.locator(".iris-step-head a").first.click()  # the run
    expect(page.locator(".iris-run-summary")).to_be_visible()

    response = page.goto(f"{live_server.url}{ADMIN}/truth/{abc.pk}/undo/")
    assert response is not None and response.status == 403
    expect(page.locator("#site-name")).to_be_visible()
    expect(page.locator(".errornote")).to_contain_text(base.CHANGE_TRUTHS)
    page.screenshot(path=str(artifacts / "truthful-403-in-frame.png"), full_page=True)


def test_a_waiting_run_is_cancelled_from_its_page(logged_in, live_server, user_factory, artifacts):
    page = logged_in
    run = waiting_run(user_factory("alice"))

    page.goto(f"{live_server.url}{ADMIN}/consolidationrun/{run.pk}/change/")
    assert "waiting for a worker" in page.title() and "Running" not in page.title()
    expect(page.locator(".iris-no-worker")).to_contain_text("Or cancel it")
    page.screenshot(path=str(artifacts / "truthful-waiting-run.png"), full_page=True)
    page.get_by_role("link", name="Cancel this run…").click()
    expect(page.locator("#content-main")).to_contain_text("Cancelling closes them unrun")
    assert ConsolidationJob.objects.get(run=run).status == "queued"  # asking changed nothing
    page.get_by_role("button", name="Yes, cancel this run").click()

    expect(page.locator(".messagelist")).to_contain_text("cancelled: its 1 queued job(s) will not run")
    expect(page.locator(".fieldBox.field-status_display .readonly")).to_have_text("Cancelled")
    expect(page.locator(".iris-run-history")).to_contain_text("Cancelled by ")
    expect(page.get_by_role("link", name="Cancel this run…")).to_have_count(0)
    assert ConsolidationJob.objects.get(run=run).status == "failed"


def test_live_settings_and_the_retired_list_say_what_is_so(logged_in, live_server, user_factory, artifacts,
                                                         two_step_lineage):
    page = logged_in
    page.goto(f"{live_server.url}{ADMIN}/livesettings/")
    expect(page.locator("#content h1")).not_to_have_text("Add live settings")
    expect(page.locator("select[name=mine_mode] option").first).to_have_text("Use the default (currently apply)")
    page.fill("input[name=max_cost_per_run]", "-1")
    page.click("input[name=_save]")
    expect(page.locator(".field-max_cost_per_run .errorlist")).to_contain_text("0 or more")
    expect(page.locator("body")).not_to_contain_text("is violated")
    page.screenshot(path=str(artifacts / "truthful-live-settings.png"), full_page=True)

    page.goto(f"{live_server.url}{ADMIN}/truth/?status=retired")
    expect(page.locator("#result_list th.column-replaced_by")).to_be_visible()
    assert _within_width(page, "#result_list th.column-replaced_by")
    assert _within_width(page, "#result_list th.column-retired_reason")
    page.screenshot(path=str(artifacts / "truthful-retired-list.png"), full_page=True)


def test_the_review_list_keeps_created_on_screen_and_says_what_each_was_about(logged_in, live_server, artifacts,
                                                                            two_step_lineage):
    page = logged_in
    page.goto(f"{live_server.url}{ADMIN}/clusterreview/")

    expect(page.locator("#result_list td.field-about").first).to_contain_text("(+1)")
    frame = page.locator("#changelist .results").bounding_box()
    for column in ("about", "outcome", "created_display"):
        box = page.locator(f"#result_list th.column-{column}").bounding_box()
        assert box is not None and frame is not None
        assert box["x"] + box["width"] <= min(frame["x"] + frame["width"], 1360), column
    page.screenshot(path=str(artifacts / "truthful-review-list.png"), full_page=True)
