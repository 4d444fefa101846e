"""The console's presenters against the database: every count, badge and sentence from
the fields the pipeline stored, in the operator's words (previews as previews, truths by
number, each reason once, one sentence per undo, a waiting run cancelled whole)."""

from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from iris_consolidation import inventory_display, lineage_display, review_display, run_display, selectors
from iris_consolidation.choices import REPLAY_MODEL
from iris_consolidation.conf import app_settings
from iris_consolidation.embeddings import LOCAL_MODEL_NAME
from iris_consolidation.exceptions import CancelRefused
from iris_consolidation.llm.base import Action
from iris_consolidation.models import ConsolidationJob, ConsolidationRun, Truth
from iris_consolidation.services.operations import undo
from iris_consolidation.services.pipeline.forecast import Forecast
from iris_consolidation.services.queue import cancel
from iris_consolidation.services.run import lifecycle
from tests import lineage_builder as lb
from tests.conftest import vector_at
from tests.helpers import rules_run, waiting_run

pytestmark = pytest.mark.django_db
ROOT = Path(__file__).resolve().parents[1]


def _pairs(user, count):
    for i in range(count):
        for text, similarity in ((f"Drinks green tea number {i} every morning", 1.0),
                                 (f"drinks green tea number {i} every morning.", 0.97)):
            vector = vector_at(similarity, axis=2 * i, towards=2 * i + 1)
            Truth.objects.create(user=user, content=text, embedding=vector, embedding_model=LOCAL_MODEL_NAME)


def test_a_dry_runs_counts_say_would_and_a_real_runs_do_not(user_factory):
    user = user_factory("alice")
    _pairs(user, 2)

    dry = rules_run(user, dry_run=True)
    real = rules_run(user)

    assert [(c.label, c.value) for c in run_display.outcome_counts(dry, nonzero_only=True)] == [("would merge", 2)]
    assert run_display.retired_text(dry) == "would retire 4 truths"
    assert [(c.label, c.value) for c in run_display.outcome_counts(real, nonzero_only=True)] == [("merged", 2)]
    assert run_display.retired_text(real) == "4 truths retired"


def test_an_application_still_queued_is_not_said_to_be_applied(user_factory):
    user = user_factory("alice")
    application = lifecycle.create_run(trigger="admin", threshold=0.75, user_id=user.pk)

    queued = run_display.application_line(application)
    ConsolidationRun.objects.filter(pk=application.pk).update(status="running")
    application.refresh_from_db()
    running_untaken = run_display.application_line(application, started=False)
    running = run_display.application_line(application, started=True)
    ConsolidationRun.objects.filter(pk=application.pk).update(status="done")
    application.refresh_from_db()

    assert "queued" in queued and "nothing is applied" in queued and "were applied" not in queued
    assert running_untaken == queued and running == "They are being applied as run {run}."
    assert run_display.application_line(application) == "They were applied as run {run}; nothing was refused."
    assert run_display.application_line(application, refused=2) == (
        "They were applied as run {run}; 2 actions were refused on apply (listed below)."
    )


def test_a_partly_refused_review_is_badged_so_and_names_truths_by_number(user_factory):
    user = user_factory("alice")
    nurse, nurse_again, likes, dislikes = (
        Truth.objects.create(user=user, content=text)
        for text in ("Works as a nurse", "works as a nurse.", "Likes coffee", "Does not like coffee")
    )
    review = lb.judge_and_record(
        [nurse, nurse_again, likes, dislikes],
        [
            Action(action="merge", ids=("t1", "t2"), content="Works as a nurse", reason="t1 and t2 are the same."),
            Action(action="merge", ids=("t3", "t4"), content="Likes coffee", reason="Same."),
        ],
        run=lb.new_run(user_id=user.pk),
        reasoning="Pre-pass (no model call): t1+t2: Same statement.\nt3 and t4 look alike to the model.",
    )

    card = review_display.review_card(review)

    assert card.badge == "Partly applied (1 of 2)"
    assert [d.summary for d in card.decisions] == [f"Merge #{nurse.pk} + #{nurse_again.pk}",
                                                   f"Merge #{likes.pk} + #{dislikes.pk}"]
    assert card.decisions[0].reason == f"#{nurse.pk} and #{nurse_again.pk} are the same."
    assert card.decisions[1].status.startswith("refused: ") and "negation" in card.decisions[1].status
    assert [(p.label, p.text) for p in card.reasoning_parts] == [
        ("Pre-pass (no model call)", f"#{nurse.pk}+#{nurse_again.pk}: Same statement."),
        (f"Model's reasoning ({lb.MODEL})", f"#{likes.pk} and #{dislikes.pk} look alike to the model."),
    ]
    assert card.proposed_content == ""  # each decision shows its own text instead of both run together


def test_a_refused_review_gives_each_reason_once_naming_the_action(user_factory):
    user = user_factory("alice")
    texts = ("Likes coffee", "Does not like coffee", "Likes tea")
    a, b, c = (Truth.objects.create(user=user, content=t) for t in texts)
    review = lb.judge_and_record(
        [a, b, c],
        [
            Action(action="merge", ids=("t1", "t2"), content="Likes coffee", reason="Same."),
            Action(action="merge", ids=("t2", "t3"), content="Likes tea", reason="Same."),
        ],
        run=lb.new_run(user_id=user.pk),
        reasoning="They look alike.",
    )

    card = review_display.review_card(review)

    assert not card.applied
    assert len(card.why_not) == len(set(card.why_not)) == len(review.rejections)
    assert card.why_not[0].startswith(f"Merge #{a.pk} + #{b.pk}: ")
    assert all(d.status == "refused (why below)" for d in card.decisions)
    assert not any(re.search(r"\bt[1-3]\b", reason) for reason in card.why_not)


def test_one_undo_of_three_truths_is_one_sentence(user_factory):
    user = user_factory("alice")
    a, b, c = lb.originals(user, 3)
    merged = lb.merge([a, b, c], content="Has a son named Tomas", run=lb.new_run(user_id=user.pk))
    undo.undo_consolidation(truth_id=merged.pk, actor="operator", reason="Three different boys.")

    display = lineage_display.rows_for(selectors.get_lineage(truth=Truth.all_objects.get(pk=merged.pk)))

    (note,) = display.root.undone
    assert set(note.other_ids) == {a.pk, b.pk, c.pk}
    assert note.reason == "Three different boys."


def test_a_waiting_run_is_cancelled_with_its_jobs(user_factory):
    run = waiting_run(user_factory("alice"))

    count = cancel.cancel_waiting_run(run_id=run.pk, actor="operator")

    run.refresh_from_db()
    assert count == 1 and run.status == "cancelled" and cancel.is_cancelled(run)
    assert "Cancelled by operator at " in run.notes and "1 queued job(s) will not run" in run.notes
    # Its jobs are closed (with the cancel's note), yet nothing of the run counts as failed.
    assert list(ConsolidationJob.objects.filter(run=run).values_list("status", flat=True)) == ["failed"]
    assert selectors.count_failed_jobs(run=run) == 0 and selectors.get_queue_overview().jobs["failed"] == 0


def test_a_run_a_worker_has_started_is_not_cancelled(user_factory):
    run = waiting_run(user_factory("alice"))
    ConsolidationJob.objects.filter(run=run).update(status="running", deliveries=1, started_at=timezone.now())

    with pytest.raises(CancelRefused, match="has started"):
        cancel.cancel_waiting_run(run_id=run.pk, actor="operator")

    run.refresh_from_db()
    assert run.status == "running" and not cancel.is_cancelled(run)
    assert ConsolidationJob.objects.get(run=run).status == "running"


def test_a_real_run_that_merged_nothing_says_why_and_how_to_see_merges(user_factory):
    user = user_factory("alice")
    for text, similarity in (("Lives in Lisbon", 1.0), ("Works as a nurse", 0.9)):
        Truth.objects.create(user=user, content=text, embedding=vector_at(similarity, axis=40, towards=41),
                             embedding_model=LOCAL_MODEL_NAME)
    kept = rules_run(user)
    _pairs(user, 1)
    merged = rules_run(user)

    lines = inventory_display.nothing_merged_lines(kept)

    assert kept.kept == 1 and lines[0] == "Nothing merged: of 1 cluster reviewed, the judge kept 1."
    assert lines[1] == inventory_display.RULE_JUDGE_WHY
    assert "make demo" in lines[2] and "--replay samples/demo.recorded.jsonl" in lines[2]
    assert merged.merged == 1 and inventory_display.nothing_merged_lines(merged) == []


def test_a_replayed_run_that_merged_nothing_is_not_sent_to_the_demo_it_is(user_factory):
    user = user_factory("alice")
    Truth.objects.create(user=user, content="Lives in Lisbon", embedding=vector_at(1.0, axis=40, towards=41),
                         embedding_model=LOCAL_MODEL_NAME)
    Truth.objects.create(user=user, content="Works as a nurse", embedding=vector_at(0.9, axis=40, towards=41),
                         embedding_model=LOCAL_MODEL_NAME)
    kept = rules_run(user)
    kept.judge_model = REPLAY_MODEL

    lines = inventory_display.nothing_merged_lines(kept)

    assert lines == ["Nothing merged: of 1 cluster reviewed, the judge kept 1.", inventory_display.REPLAYED_WHY]


def test_the_outcome_column_shows_what_the_stages_did(user_factory):
    user = user_factory("alice")
    run = lb.new_run(user_id=user.pk)
    run.inventory = {"stages": {"mine": {"mode": "apply", "applied": 25, "affected": 25},
                                "prune": {"mode": "report", "applied": 0, "affected": 3}}}

    assert run_display.stage_phrases(run) == ["25 truths mined", "would prune 3 truths"]


def test_throughput_counts_only_workers_jobs(user_factory):
    user = user_factory("alice")
    _pairs(user, 1)
    rules_run(user)  # in process: its jobs are no worker's

    overview = selectors.get_queue_overview()

    assert ConsolidationJob.objects.filter(status="done").exists()
    assert overview.done_last_hour == 0 and not overview.worker_seen


def test_the_forecast_reads_as_a_sentence():
    text = inventory_display.forecast_sentence(Forecast.from_dict({"users": 2, "clusters": 3, "prepass": 3}))

    assert text.startswith("A real run would review 3 clusters of 2 users: 0 answered from the verdict cache, 3 by")
    assert "=" not in text


def test_env_example_states_the_threshold_default_the_app_uses(settings):
    text = (ROOT / ".env.example").read_text()
    settings.IRIS_CONSOLIDATION_EMBEDDING_MODEL = "local"
    settings.IRIS_CONSOLIDATION_SIMILARITY_THRESHOLD = None

    block = text.split("IRIS_CONSOLIDATION_SIMILARITY_THRESHOLD")[0].rsplit("\n\n", 1)[-1]
    assert f"{app_settings.SIMILARITY_THRESHOLD:.2f} for the local model" in block
    assert "# IRIS_CONSOLIDATION_SIMILARITY_THRESHOLD=\n" in text  # no number that disagrees


def test_moments_are_dates_for_people():
    moment = timezone.now().replace(microsecond=123456) - timedelta(days=1)
    text = inventory_display.human_when(moment.isoformat())
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d \w+", text), text


def test_the_by_kind_table_keeps_the_kinds_a_run_added(user_factory):
    run = lb.new_run(user_id=user_factory("alice").pk)
    run.inventory = {"before": {"live": 10, "by_kind": {"fact": 10}},
                     "after": {"live": 30, "by_kind": {"fact": 10, "preference": 20}}}

    kinds, rows = run_display.kind_table(run)

    assert kinds == ["fact", "preference"]
    assert rows == [("before", [10, 0], 10), ("after", [10, 20], 30)]
