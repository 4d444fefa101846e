"""The operator's console on a laptop screen, in Chromium at 1360 px: the
key columns of each list stay on screen, the run page opens with its summary, the
live settings speak plainly, and the console is styled with DJANGO_DEBUG false."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from playwright.sync_api import expect

from iris_consolidation.embeddings import LOCAL_MODEL_NAME
from iris_consolidation.models import Truth
from tests.conftest import vector_at
from tests.helpers import rules_run, waiting_run

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

WIDTH = 1360
ROOT = Path(__file__).resolve().parents[2]


def _pairs(user, count):
    """``count`` pairs of truths the rule judge merges (one spelling differs in case)."""
    made = []
    for i in range(count):
        first = Truth.objects.create(
            user=user,
            content=f"Drinks green tea number {i} every morning",
            embedding=vector_at(1.0, axis=2 * i, towards=2 * i + 1),
            embedding_model=LOCAL_MODEL_NAME,
        )
        second = Truth.objects.create(
            user=user,
            content=f"drinks green tea number {i} every morning.",
            embedding=vector_at(0.97, axis=2 * i, towards=2 * i + 1),
            embedding_model=LOCAL_MODEL_NAME,
        )
        made.append((first, second))
    return made


def _on_screen(page, selector):
    """Whether the element lies within the 1360 px viewport and within the visible part
    of the list's scrolling box (the admin scrolls a too-wide table sideways)."""
    box = page.locator(selector).bounding_box()
    frame = page.locator("#changelist .results").bounding_box()
    assert box is not None and frame is not None, selector
    return box["x"] >= frame["x"] and box["x"] + box["width"] <= min(frame["x"] + frame["width"], WIDTH)


def test_runs_list_shows_each_runs_outcome_counts_on_screen(logged_in, live_server, user_factory, artifacts):
    page = logged_in
    user = user_factory("alice")
    _pairs(user, 2)
    run = rules_run(user)
    assert run.merged == 2

    page.goto(f"{live_server.url}/admin/iris_consolidation/consolidationrun/")

    row = page.locator("#result_list tbody tr").first
    expect(row.locator("td.field-outcome_display")).to_contain_text("merged 2")
    expect(row.locator("td.field-outcome_display")).to_contain_text("4 truths retired")
    expect(row.locator("td.field-kind_display")).to_have_text("Real run (in process)by command")
    page.screenshot(path=str(artifacts / "console-run-list.png"), full_page=True)
    for column in ("outcome_display", "llm_display", "duration_display"):
        assert _on_screen(page, f"#result_list th.column-{column}"), column


def test_truth_and_audit_lists_keep_their_key_columns_on_screen(logged_in, live_server, user_factory, artifacts):
    page = logged_in
    alice, bob = user_factory("alice"), user_factory("bob")
    for user in (alice, bob):
        _pairs(user, 2)
    rules_run(alice)  # its retirements and merges fill the audit

    page.goto(f"{live_server.url}/admin/iris_consolidation/truth/")
    for column in ("kind", "generation", "is_live_display", "stated_on", "lineage_link"):
        assert _on_screen(page, f"#result_list th.column-{column}"), column
    # The user filter is a search box with suggestions, not a link per user.
    page.fill("#iris-user-filter", "bo")
    expect(page.locator("#iris-user-options option[value='bob']")).to_have_count(1)
    page.screenshot(path=str(artifacts / "console-truth-list.png"), full_page=True)
    page.fill("#iris-user-filter", "bob")
    page.locator("form.iris-user-filter input[type=submit]").click()
    expect(page.locator("#result_list tbody tr")).to_have_count(4)  # bob's, all live

    page.goto(f"{live_server.url}/admin/iris_consolidation/truthchange/")
    page.screenshot(path=str(artifacts / "console-audit-list.png"), full_page=True)
    for column in ("user", "short_reason", "actor_display", "review_link", "run_link"):
        assert _on_screen(page, f"#result_list th.column-{column}"), column


def test_run_page_opens_with_its_summary_and_lists_changes_first(logged_in, live_server, user_factory, artifacts):
    page = logged_in
    user = user_factory("alice")
    _pairs(user, 2)
    for content, similarity in (("Lives in Lisbon", 1.0), ("Works as a nurse", 0.9)):
        Truth.objects.create(
            user=user,
            content=content,
            embedding=vector_at(similarity, axis=40, towards=41),
            embedding_model=LOCAL_MODEL_NAME,
        )
    run = rules_run(user)
    assert run.merged == 2 and run.kept == 1

    page.goto(f"{live_server.url}/admin/iris_consolidation/consolidationrun/{run.pk}/change/")

    summary = page.locator(".iris-run-summary")
    expect(summary).to_contain_text("truths changed after each user's cursor")
    expect(summary.locator("dd").nth(2)).to_contain_text("none → ")
    expect(summary).to_contain_text("answered from the verdict cache")
    expect(summary.locator(".iris-inventory")).to_contain_text("before")
    expect(summary.locator(".iris-changes li")).to_have_count(2)
    expect(summary).to_contain_text("cost none (no tokens used)")
    # Changes first, open; the kept clusters last, their group folded with its count.
    groups = page.locator("#reviews ~ details.iris-outcome-group")
    expect(groups.first).to_have_class("iris-outcome-group iris-group-applied")
    expect(groups.first.locator("article").first).to_be_visible()
    expect(groups.last.locator("summary.iris-group-head")).to_have_text("Kept (no action) (1)")
    expect(page.locator("details.iris-kept-card")).to_have_count(1)
    expect(page.locator("details.iris-kept-card article")).not_to_be_visible()
    page.screenshot(path=str(artifacts / "console-run-page.png"), full_page=True)


def test_live_settings_reject_a_threshold_of_1_5_in_plain_words(logged_in, live_server, user_factory, artifacts):
    page = logged_in
    user_factory("alice")

    page.goto(f"{live_server.url}/admin/iris_consolidation/livesettings/")
    expect(page.locator("select[name=enabled] option").first).to_have_text("Use the default (currently yes)")
    expect(page.locator("input[name=_addanother]")).to_have_count(0)
    page.fill("input[name=similarity_threshold]", "1.5")
    page.fill("input[name=allowed_usernames]", "alice, nobody")
    page.locator("input[name=_save]").click()

    errors = page.locator(".errorlist")
    expect(errors.first).to_be_visible()
    expect(page.locator("#content")).to_contain_text("above 0 and at most 1")
    expect(page.locator("#content")).to_contain_text("No user named “nobody”")
    assert "live_settings_threshold_in_range" not in page.content()
    page.screenshot(path=str(artifacts / "console-live-settings.png"), full_page=True)

    page.fill("input[name=similarity_threshold]", "0.8")
    page.fill("input[name=allowed_usernames]", "alice")
    page.locator("input[name=_save]").click()
    expect(page.locator("ul.messagelist li.success")).to_be_visible()
    expect(page.locator("input[name=allowed_usernames]")).to_have_value("alice")
    expect(page.locator(".field-in_force")).to_contain_text("users: alice (#")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_console_is_styled_with_debug_off_under_runserver(page, artifacts, tmp_path):
    """The README's way: ``manage.py runserver`` with DJANGO_DEBUG false serves the CSS."""
    port = _free_port()
    env = {**os.environ, "DJANGO_DEBUG": "false"}
    log = tmp_path / "runserver.log"
    with log.open("wb") as output:
        server = subprocess.Popen(
            [sys.executable, "manage.py", "runserver", "--noreload", "--skip-checks", f"127.0.0.1:{port}"],
            cwd=ROOT,
            env=env,
            stdout=output,
            stderr=subprocess.STDOUT,
        )
    try:
        url = f"http://127.0.0.1:{port}"
        # The server is waited for while it runs (a loaded machine may take long to start it);
        # if it stops, the test fails with what it printed.
        deadline = time.monotonic() + 120
        up = False
        while not up and time.monotonic() < deadline and server.poll() is None:
            try:
                urllib.request.urlopen(f"{url}/static/admin/css/base.css", timeout=1)
                up = True
            except OSError:
                time.sleep(0.2)
        assert up, f"runserver did not serve (exit status {server.poll()}):\n{log.read_text()}"
        for path in ("/static/admin/css/base.css", "/static/iris_consolidation/admin.css"):
            with urllib.request.urlopen(url + path, timeout=5) as response:
                assert response.status == 200 and "text/css" in response.headers["Content-Type"]
        page.goto(f"{url}/admin/login/")
        # base.css styles the header: without it, the header has no background colour.
        background = page.locator("#header").evaluate("e => getComputedStyle(e).backgroundColor")
        assert background not in ("rgba(0, 0, 0, 0)", "transparent")
        page.screenshot(path=str(artifacts / "console-login-debug-off.png"), full_page=True)
    finally:
        server.terminate()
        server.wait(timeout=10)


def test_truth_page_dates_history_and_a_missing_lineage(logged_in, live_server, user_factory, artifacts):
    page = logged_in
    user = user_factory("alice")
    first, _ = _pairs(user, 1)[0]
    rules_run(user)
    merged = Truth.objects.get(user=user, origin="consolidated")

    page.goto(f"{live_server.url}/admin/iris_consolidation/truth/{merged.pk}/change/")
    expect(page.locator(".field-stated_at label")).to_have_text("Last stated:")
    expect(page.locator(".field-made_at label")).to_have_text("Made:")
    page.screenshot(path=str(artifacts / "console-truth-page.png"), full_page=True)

    page.get_by_role("link", name="History").click()
    expect(page.locator("#change-history")).to_contain_text(f"Made by merging #{first.pk}")
    expect(page.locator("#change-history")).to_contain_text("Created")
    page.screenshot(path=str(artifacts / "console-truth-history.png"), full_page=True)

    page.goto(f"{live_server.url}/admin/iris_consolidation/truth/424242/lineage/")
    expect(page.locator("#header")).to_be_visible()
    expect(page.locator(".errornote")).to_contain_text("Truth with ID “424242” doesn’t exist.")
    page.screenshot(path=str(artifacts / "console-missing-lineage.png"), full_page=True)


def test_dry_run_page_warns_when_a_later_run_made_its_merges(logged_in, live_server, user_factory, artifacts):
    page = logged_in
    user = user_factory("alice")
    _pairs(user, 2)
    dry = rules_run(user, dry_run=True)
    rules_run(user)

    page.goto(f"{live_server.url}/admin/iris_consolidation/consolidationrun/{dry.pk}/change/")
    # Every preview is stale: the page says so and offers no Apply.
    expect(page.locator("#content")).to_contain_text("Every one of the 2 previewed cluster(s)")
    expect(page.locator("#content")).to_contain_text("nothing left to apply")
    expect(page.locator(".iris-applylink")).to_have_count(0)
    page.screenshot(path=str(artifacts / "console-dry-run-outdated.png"), full_page=True)


def test_a_queued_run_with_no_worker_says_so(logged_in, live_server, user_factory, artifacts):
    page = logged_in
    run = waiting_run(user_factory("alice"))

    page.goto(f"{live_server.url}/admin/iris_consolidation/consolidationrun/{run.pk}/change/")
    expect(page.locator(".iris-no-worker")).to_contain_text("Waiting for a worker.")
    expect(page.locator(".fieldBox.field-status_display .readonly")).to_have_text("waiting for a worker")
    expect(page.locator("meta[http-equiv=refresh]")).to_have_count(0)
    page.screenshot(path=str(artifacts / "console-run-no-worker.png"), full_page=True)

    page.goto(f"{live_server.url}/admin/iris_consolidation/consolidationrun/")
    expect(page.locator(".iris-queue")).to_contain_text("none seen")
    expect(page.locator(".iris-queue")).to_contain_text("1 queued, 0 running")
    expect(page.locator("#result_list td.field-status_display")).to_have_text("waiting for a worker")
    page.screenshot(path=str(artifacts / "console-run-list-no-worker.png"), full_page=True)
