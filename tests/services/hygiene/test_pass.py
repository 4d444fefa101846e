"""The stages inside one pass: order, --only, the report, dry runs, the queued path."""

from __future__ import annotations

from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from iris_consolidation import tasks
from iris_consolidation.models import ConsolidationRun, Origin, RetiredReason, StageResult, Truth
from iris_consolidation.run_settings import UNKNOWN_STAGE
from iris_consolidation.services.run import lifecycle
from tests.conftest import unit_vector, vector_at
from tests.helpers import parse_summary, truth_state

pytestmark = pytest.mark.django_db


def run_command(*args: str) -> str:
    out = StringIO()
    call_command("consolidate_truths", *args, stdout=out, stderr=StringIO())
    return out.getvalue()


@pytest.fixture
def mixed(truth_factory, user_factory):
    """A user with a paraphrase pair (cosine), a same-words pair the embedding misses, noise
    and a truth too old to keep."""
    user = user_factory("dana")
    old = timezone.now() - timedelta(days=800)
    return {
        "user": user,
        "nurse": [truth_factory("Works as a nurse", user=user, embedding=vector_at(1.0)),
                  truth_factory("works as a nurse.", user=user, embedding=vector_at(0.99))],
        "rex": [truth_factory("Has a boat named Rex.", user=user, embedding=unit_vector(0, 0, 0, 1.0)),
                truth_factory("has a boat named rex", user=user, embedding=unit_vector(0, 0, 0, 0, 1.0))],
        "noise": truth_factory("Upgraded numpy to 2.1.3", user=user, embedding=unit_vector(0, 0, 0, 0, 0, 1.0)),
        "old": truth_factory("Went to a gig once", user=user, created_at=old,
                             embedding=unit_vector(0, 0, 0, 0, 0, 0, 1.0)),
    }


def test_unknown_stage_is_refused_in_one_line_listing_the_stages(mixed):
    before = truth_state(with_decay=True)
    with pytest.raises(CommandError) as info:
        run_command("--sync", "--only", "noise,dedupe")
    assert str(info.value) == UNKNOWN_STAGE.format(
        names="'dedupe'", stages="mine, noise, decay, lexical, semantic, relocate, promote, prune"
    )
    assert ConsolidationRun.objects.count() == 0
    assert truth_state(with_decay=True) == before


def test_a_pass_runs_every_stage_and_reports_each(mixed):
    output = run_command("--sync", "--full")
    run = ConsolidationRun.objects.get()
    report = run.inventory["stages"]
    assert {s: report[s]["mode"] for s in report} == {
        "mine": "apply", "noise": "report", "decay": "report", "lexical": "apply", "semantic": "apply",
        "relocate": "report", "promote": "report", "prune": "report",
    }
    assert (report["mine"]["sessions"], report["mine"]["affected"]) == (0, 0)  # no session to mine
    assert report["promote"]["skipped"] == "skipped: no LLM"
    assert (report["noise"]["affected"], report["noise"]["applied"]) == (1, 0)
    assert report["noise"]["examples"][0]["content"] == "Upgraded numpy to 2.1.3"
    # Decay reports by default: every truth of the user decayed at the pass time, none written.
    assert (report["decay"]["affected"], report["decay"]["applied"]) == (6, 0)
    assert Truth.objects.get(pk=mixed["old"].pk).relevance == 1.0
    assert (report["semantic"]["affected"], report["lexical"]["affected"]) == (1, 1)
    assert [e["content"] for e in report["prune"]["examples"]] == ["Went to a gig once"]
    assert parse_summary(output)["merged"] == "2"  # the nurse pair (cosine) and Rex (Jaccard)
    assert "  noise: report; examined 6, found 1, applied 0;" in output
    assert "  prune: report; examined" in output
    assert run.inventory["before"]["by_kind"] == {"fact": 6}
    assert run.inventory["after"]["by_kind"] == {"fact": 4}
    assert Truth.objects.filter(user=mixed["user"], origin=Origin.CONSOLIDATED).count() == 2
    assert Truth.objects.filter(pk__in=[mixed["noise"].pk, mixed["old"].pk]).count() == 2  # report only


def test_apply_modes_retire_noise_first_and_prune_last(mixed, settings):
    settings.IRIS_CONSOLIDATION_NOISE = "apply"
    settings.IRIS_CONSOLIDATION_PRUNE = "apply"
    settings.IRIS_CONSOLIDATION_MAX_PRUNE_SHARE = 1.0  # a user of six truths: no cap (test_prune_cap.py)
    run_command("--sync", "--full")
    run = ConsolidationRun.objects.get()
    assert Truth.all_objects.get(pk=mixed["noise"].pk).retired_reason == RetiredReason.NOISE
    assert Truth.all_objects.get(pk=mixed["old"].pk).retired_reason == RetiredReason.PRUNED
    noise = StageResult.objects.get(run=run, stage="noise")
    assert noise.examined == 6  # before clustering: the merges had not happened yet
    assert run.retired == 2 + 2 + 2  # two merges of two, noise, prune
    assert run.inventory["after"]["live"] == 2


def test_only_runs_the_named_stages(mixed):
    run_command("--sync", "--full", "--only", "noise,prune")
    run = ConsolidationRun.objects.get()
    assert set(StageResult.objects.filter(run=run).values_list("stage", flat=True)) == {"noise", "prune"}
    assert (run.clusters_found, run.merged) == (0, 0)
    assert Truth.objects.get(pk=mixed["old"].pk).relevance == 1.0  # no decay stage
    # The decay stage is left out of the run, not out of the settings: prune still reads
    # the post-decay relevance, so it finds the old truth as a whole pass does.
    prune = StageResult.objects.get(run=run, stage="prune")
    assert prune.affected == 1 and prune.findings[0]["truth_id"] == mixed["old"].pk


def test_a_dry_run_reports_every_stage_and_changes_no_truth(mixed, settings):
    settings.IRIS_CONSOLIDATION_NOISE = "apply"
    settings.IRIS_CONSOLIDATION_PRUNE = "apply"
    before = truth_state(with_decay=True)
    run_command("--dry-run", "--full")
    run = ConsolidationRun.objects.get()
    assert truth_state(with_decay=True) == before
    report = run.inventory["stages"]
    assert {s: report[s]["mode"] for s in ("noise", "decay", "prune")} == {
        "noise": "report", "decay": "report", "prune": "report"
    }
    assert (report["noise"]["affected"], report["prune"]["affected"]) == (1, 1)
    assert run.merged == 2  # previews of both arms


def test_the_queued_path_runs_the_stages_too(mixed, settings, django_capture_on_commit_callbacks):
    settings.IRIS_CONSOLIDATION_PRUNE = "apply"
    settings.IRIS_CONSOLIDATION_MAX_PRUNE_SHARE = 1.0
    run = lifecycle.create_run(trigger="command", judge="rules", full=True)
    with django_capture_on_commit_callbacks(execute=True):
        tasks.enqueue_run(run)
    run.refresh_from_db()
    assert run.status == "done"
    # Every stage not off by default (mine applies, relocate and promote report).
    assert set(StageResult.objects.filter(run=run).values_list("stage", flat=True)) == {
        "mine", "noise", "decay", "lexical", "semantic", "relocate", "promote", "prune"
    }
    assert Truth.all_objects.get(pk=mixed["old"].pk).retired_reason == RetiredReason.PRUNED
    assert run.inventory["stages"]["prune"]["applied"] == 1
