"""The operator's console, without a browser: what each page says and
counts. The browser checks (layout at 1360 px, static files) are in tests/browser."""

from __future__ import annotations

import pytest
from django.urls import reverse
from django.utils.html import escape

from iris_consolidation import inventory_display, run_display, selectors
from iris_consolidation.admin import records as records_admin
from iris_consolidation.admin import run_actions
from iris_consolidation.conf import app_settings
from iris_consolidation.embeddings import LOCAL_MODEL_NAME
from iris_consolidation.llm.base import Action
from iris_consolidation.models import ConsolidationRun, LineageEvent, LiveSettings, Truth
from iris_consolidation.services.operations import dry_runs
from tests import lineage_builder as lb
from tests.conftest import vector_at
from tests.helpers import rules_run, waiting_run

pytestmark = pytest.mark.django_db

RUNS = reverse("admin:iris_consolidation_consolidationrun_changelist")
LIVE_ADD = reverse("admin:iris_consolidation_livesettings_add")


def run_url(run):
    return reverse("admin:iris_consolidation_consolidationrun_change", args=[run.pk])


def truth_url(truth, view="change"):
    return reverse(f"admin:iris_consolidation_truth_{view}", args=[truth.pk])


def _tea(user, *, axis=7):
    first = Truth.objects.create(
        user=user,
        content="Drinks green tea every morning",
        embedding=vector_at(1.0, axis=axis, towards=axis + 1),
        embedding_model=LOCAL_MODEL_NAME,
    )
    second = Truth.objects.create(
        user=user,
        content="drinks green tea every morning.",
        embedding=vector_at(0.97, axis=axis, towards=axis + 1),
        embedding_model=LOCAL_MODEL_NAME,
    )
    return first, second


# --- the run list and the run page ----------------------------------------------------


def test_run_list_puts_the_nonzero_outcome_counts_in_one_column(admin_client, user_factory):
    user = user_factory("alice")
    _tea(user)
    run = rules_run(user)

    html = admin_client.get(RUNS).content.decode()

    assert run.merged == 1 and run.retired == 2
    assert '<span class="iris-count iris-count-merged">merged <b>1</b></span>' in html
    assert "2 truths retired" in html
    assert "iris-count-failed" not in html  # zero counts are left out of the list
    assert "Real run (in process)" in html and ">Queued<" not in html


def test_outcome_counts_name_each_outcome_once():
    run = ConsolidationRun(
        merged=1, superseded=2, retired=3, kept=4, rejected=5, stale=6, failed=7, deferred=8, threshold=0.75
    )

    counts = run_display.outcome_counts(run)

    assert [(c.label, c.value) for c in counts] == [
        ("merged", 1),
        ("superseded", 2),
        ("kept", 4),
        ("rejected", 5),
        ("stale", 6),
        ("failed", 7),
        ("deferred", 8),
    ]


@pytest.mark.parametrize(
    ("cost", "tokens", "unpriced", "shown", "brief"),
    [
        (0.00123, 500, 0, "$0.0012", "$0.0012"),
        (0.00123, 500, 2, "$0.0012+ (some calls had no price for this model, so the cost is higher)", "$0.0012+"),
        (0.0, 500, 1, "unknown (no price for this model)", "unknown"),
        (0.0, 500, 0, "unknown (no price for this model)", "unknown"),
        (0.0, 0, 0, "none (no tokens used)", "none"),
    ],
)
def test_one_cost_rule_priced_partly_priced_unpriced_and_none(cost, tokens, unpriced, shown, brief):
    assert inventory_display.cost_text(cost=cost, tokens=tokens, unpriced=unpriced) == shown
    assert inventory_display.cost_text(cost=cost, tokens=tokens, unpriced=unpriced, brief=True) == brief


def test_a_partly_priced_run_shows_the_same_cost_in_the_admin_and_on_the_command_line(admin_client, user_factory):
    run = lb.new_run(user_id=user_factory("alice").pk)
    run.tokens, run.cost, run.unpriced = 900, 0.0021, 1
    run.inventory = {"llm": {"calls": 2, "tokens": 900, "cost": 0.0021, "cost_known": False}}
    run.save()
    words = "$0.0021+ (some calls had no price for this model, so the cost is higher)"

    html = admin_client.get(run_url(run)).content.decode()
    report = "\n".join(inventory_display.report_lines(run))
    fields = dict(item.split("=") for item in inventory_display.spend_fields(run).split())

    assert f"cost {escape(words)}" in html
    assert f"cost {words};" in report
    assert fields["cost"] == "$0.0021+"


def test_run_page_says_unknown_for_an_unpriced_models_cost(admin_client, user_factory):
    run = lb.new_run(user_id=user_factory("alice").pk)
    run.tokens, run.cost = 1234, 0.0
    run.save()

    html = admin_client.get(run_url(run)).content.decode()

    assert "cost unknown (no price for this model)" in html
    assert "0.0000" not in html


def test_run_page_summary_shows_what_the_run_stored(admin_client, user_factory):
    user = user_factory("alice")
    _tea(user)
    run = rules_run(user)

    html = admin_client.get(run_url(run)).content.decode()

    summary = html.split('class="iris-run-summary"')[1].split("</section>")[0]
    assert "truths changed after each user&#x27;s cursor" in summary  # the window
    assert "none → " in summary  # the checkpoint written
    assert "0 clusters answered from the verdict cache" in summary
    assert '<th scope="row">before</th><td>2</td>' in summary
    assert '<th scope="row">after</th><td>1</td>' in summary
    assert f"similarity threshold: <strong>{app_settings.SIMILARITY_THRESHOLD}</strong>" in summary
    assert "Reason: Same statement" in summary and "Drinks green tea every morning" in summary


def test_run_page_lists_changes_first_and_folds_kept_clusters(admin_client, user_factory):
    user = user_factory("alice")
    kept = lb.originals(user, 2)
    tea = _tea(user)
    run = lb.new_run(user_id=user.pk)
    first = lb.judge_and_record(kept, [], run=run, reasoning="Different facts.")  # kept, reviewed first
    lb.judge_and_record(
        tea,
        [Action(action="merge", ids=("t1", "t2"), content="Drinks green tea every morning", reason="same")],
        run=run,
        reasoning="Same.",
    )

    html = admin_client.get(run_url(run)).content.decode()

    reviews = html.split('id="reviews"')[1]
    assert reviews.index("iris-outcome-applied") < reviews.index(f'id="review-{first.pk}"')
    assert f'<details class="iris-kept-card"><summary>Review #{first.pk}: kept, no change' in reviews


def test_dry_run_whose_every_preview_a_later_run_made_offers_no_apply(admin_client, user_factory):
    user = user_factory("alice")
    _tea(user)
    dry = rules_run(user, dry_run=True)
    assert dry.merged == 1
    rules_run(user)  # a real run makes the same merge: the preview is now stale
    apply_url = reverse("admin:iris_consolidation_consolidationrun_apply", args=[dry.pk])

    page = admin_client.get(run_url(dry)).content.decode()
    confirm = admin_client.get(apply_url).content.decode()

    refusal = escape(dry_runs.ALL_STALE.format(run=str(dry.pk)[:8], previews=1))
    assert refusal in page and apply_url not in page  # no "Apply" link
    assert refusal in confirm and "Apply as a real run" not in confirm


def test_a_fresh_dry_run_has_no_outdated_warning(admin_client, user_factory):
    user = user_factory("alice")
    _tea(user)
    dry = rules_run(user, dry_run=True)

    assert "Before applying:" not in admin_client.get(run_url(dry)).content.decode()


# --- truths: dates, history, missing objects ------------------------------------------


def test_truth_page_labels_when_it_was_last_stated_and_when_it_was_made(admin_client, user_factory):
    user = user_factory("alice")
    _tea(user)
    rules_run(user)
    merged = Truth.objects.get(user=user, origin="consolidated")

    html = admin_client.get(truth_url(merged)).content.decode()

    assert "Last stated:" in html and "Made:" in html
    made = selectors.get_made_at(truth=merged)
    assert made == merged.changes.earliest("created_at").created_at  # its "created" audit row
    assert merged.created_at < made  # the newest source's date, then the merge
    assert LineageEvent.objects.filter(result=merged).exists()


def test_history_of_a_truth_lists_its_audit_rows_and_lineage_steps(admin_client, user_factory):
    user = user_factory("alice")
    first, second = _tea(user)
    run = rules_run(user)
    merged = Truth.objects.get(user=user, origin="consolidated")

    source_page = admin_client.get(truth_url(first, "history")).content.decode()
    result_page = admin_client.get(truth_url(merged, "history")).content.decode()

    assert "Retired" in source_page and f"Merged into #{merged.pk}" in source_page
    assert f"Made by merging #{first.pk}" in result_page and f"Made by merging #{second.pk}" in result_page
    assert "Created" in result_page and f"run {str(run.pk)[:8]}" in result_page


def test_missing_truth_lineage_is_a_styled_404(admin_client):
    response = admin_client.get(reverse("admin:iris_consolidation_truth_lineage", args=[424242]))

    assert response.status_code == 404
    html = response.content.decode()
    assert 'id="header"' in html and "Truth with ID “424242” doesn’t exist." in html


def test_history_needs_the_view_permission_on_truths(staff_client, user_factory):
    truth = Truth.objects.create(user=user_factory("alice"), content="Private")

    assert staff_client().get(truth_url(truth, "history")).status_code == 403


# --- names and navigation ---------------------------------------------------------------


def test_internal_tables_are_out_of_the_menu_but_still_open(admin_client):
    index = admin_client.get(reverse("admin:app_list", args=["iris_consolidation"])).content.decode()
    runs = admin_client.get(RUNS).content.decode()

    for model, name in (
        ("consolidationcursor", "cursors"),
        ("userpass", "user passes"),
        ("verdictcacheentry", "cached verdicts"),
    ):
        url = reverse(f"admin:iris_consolidation_{model}_changelist")
        assert url not in index
        assert f'<a href="{url}">{name}</a>' in runs
        assert admin_client.get(url).status_code == 200
    assert (
        "User passs" not in admin_client.get(reverse("admin:iris_consolidation_userpass_changelist")).content.decode()
    )


# --- live settings ------------------------------------------------------------------------


def test_live_settings_reject_an_out_of_range_threshold_in_plain_words(admin_client):
    response = admin_client.post(LIVE_ADD, {"similarity_threshold": "1.5", "allowed_usernames": ""})

    html = response.content.decode()
    assert response.status_code == 200 and not LiveSettings.objects.exists()
    assert records_admin.THRESHOLD_RANGE in html
    assert "live_settings_threshold_in_range" not in html


def test_live_settings_pick_users_by_username_and_show_them_so(admin_client, user_factory):
    alice, bob = user_factory("alice"), user_factory("bob")

    refused = admin_client.post(LIVE_ADD, {"allowed_usernames": "alice, nobody"})
    saved = admin_client.post(LIVE_ADD, {"allowed_usernames": "bob, alice", "similarity_threshold": "0.8"})

    assert "No user named “nobody”" in refused.content.decode()
    assert saved.status_code == 302
    row = LiveSettings.objects.get()
    assert set(row.allowed_users.all()) == {alice, bob} and row.similarity_threshold == 0.8
    page = admin_client.get(reverse("admin:iris_consolidation_livesettings_change", args=[row.pk])).content.decode()
    assert 'value="alice, bob"' in page
    names = {f"users: alice (#{alice.pk}), bob (#{bob.pk})", f"users: bob (#{bob.pk}), alice (#{alice.pk})"}
    assert any(text in page for text in names)


def test_live_settings_offer_the_default_and_no_add_another(admin_client):
    html = admin_client.get(LIVE_ADD).content.decode()

    assert ">Use the default (currently yes)</option>" in html
    assert ">Unknown</option>" not in html
    assert "_addanother" not in html
    assert f'placeholder="default: {app_settings.SIMILARITY_THRESHOLD}"' in html  # the local model's default


# --- workers and the queue ------------------------------------------------------------------


def test_queued_run_with_no_worker_says_it_is_waiting_for_one(admin_client, user_factory):
    run = waiting_run(user_factory("alice"), minutes=5)

    html = admin_client.get(run_url(run)).content.decode()

    assert "Waiting for a worker." in html
    assert escape(run_display.WAITING_FOR_WORKER) in html
    assert 'http-equiv="refresh"' not in html  # no endless refreshing


def test_a_job_a_worker_took_recently_does_not_make_a_worker_alive(admin_client, user_factory):
    """Job timestamps say nothing of a worker now (a cancel closes jobs too; a --sync run's
    are no worker's): only the workers' heartbeat does, and none beats here."""
    from django.utils import timezone

    from iris_consolidation.models import ConsolidationJob

    user = user_factory("alice")
    run = waiting_run(user, minutes=5)
    other = lb.new_run(execution="queued", user_id=user.pk)
    ConsolidationJob.objects.create(
        run=other, kind="user", key="user:x", user=user, status="done", started_at=timezone.now(),
        finished_at=timezone.now(),
    )

    overview = selectors.get_queue_overview()

    assert overview.heartbeat and not overview.worker_seen and overview.no_worker
    assert "Waiting for a worker." in admin_client.get(run_url(run)).content.decode()


def test_a_run_just_queued_waits_for_a_worker_at_once_when_no_heartbeat_beats(user_factory):
    run = waiting_run(user_factory("alice"), minutes=0)

    assert selectors.is_waiting_for_worker(run=run, overview=selectors.get_queue_overview())


def test_a_run_just_queued_is_given_a_grace_when_the_heartbeat_cannot_be_read(user_factory, monkeypatch):
    run = waiting_run(user_factory("alice"), minutes=0)
    monkeypatch.setattr(selectors.queue, "heartbeat_visible", lambda: False)

    overview = selectors.get_queue_overview()

    assert not overview.heartbeat and not overview.no_worker
    assert not selectors.is_waiting_for_worker(run=run, overview=overview)
    assert run_display.HEARTBEAT_HIDDEN in dict(run_display.queue_lines(overview))["Workers"]


def test_run_list_shows_workers_jobs_and_throughput(admin_client, user_factory):
    from django.utils import timezone

    from iris_consolidation.models import ConsolidationJob

    user = user_factory("alice")
    waiting_run(user, minutes=5)
    done = lb.new_run(execution="queued", user_id=user.pk)
    for i in range(3):
        ConsolidationJob.objects.create(
            run=done, kind="cluster", key=f"c{i}", user=user, status="done", finished_at=timezone.now()
        )
    ConsolidationJob.objects.create(run=done, kind="cluster", key="bad", user=user, status="failed")

    html = admin_client.get(RUNS).content.decode()

    assert "1 queued, 0 running, 0 waiting (rate limited), 1 failed" in html
    assert "3 jobs done in the last hour" in html
    assert escape(run_display.NO_WORKER) in html and "took or finished a job" not in html


# --- retrying failed clusters from the admin ------------------------------------------------

def test_run_page_offers_to_retry_its_failed_clusters(admin_client, failed_run):
    html = admin_client.get(run_url(failed_run)).content.decode()

    assert "1 failed job." in html
    assert reverse("admin:iris_consolidation_consolidationrun_retry", args=[failed_run.pk]) in html


def test_retry_button_requeues_the_failed_cluster_through_the_retry_service(
    admin_client, failed_run, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        response = admin_client.post(reverse("admin:iris_consolidation_consolidationrun_retry", args=[failed_run.pk]))

    failed_run.refresh_from_db()
    assert response.status_code == 302
    assert (failed_run.status, failed_run.failed, failed_run.merged) == ("done", 0, 1)
    page = admin_client.get(response["Location"]).content.decode()
    assert "iris-failed-jobs" not in page and "re-queued 1 failed job(s)" in page


def test_retry_action_on_the_run_list_requeues_failed_clusters(
    admin_client, failed_run, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        response = admin_client.post(
            RUNS, {"action": "retry_failed_clusters", "_selected_action": [str(failed_run.pk)], "post": "yes"},
            follow=True,
        )

    failed_run.refresh_from_db()
    assert failed_run.status == "done"
    assert run_actions.RETRIED.format(run=str(failed_run.pk)[:8], count=1) in response.content.decode()


def test_retry_needs_the_change_permission_on_truths(staff_client, failed_run):
    client = staff_client("view_truth", "view_consolidationrun")

    response = client.post(reverse("admin:iris_consolidation_consolidationrun_retry", args=[failed_run.pk]))

    assert response.status_code == 403
    failed_run.refresh_from_db()
    assert failed_run.status == "failed"
