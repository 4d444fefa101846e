"""``consolidate_truths --apply RUN_ID``: a dry run applied from the command line, queued by
default or here with ``--sync``; one-line errors that change nothing."""

from __future__ import annotations

import uuid
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from iris_consolidation.management.commands.consolidate_truths import Command
from iris_consolidation.models import ConsolidationJob, ConsolidationRun, RetiredReason, Truth
from iris_consolidation.services.operations import dry_runs
from tests.conftest import vector_at
from tests.helpers import truth_state

pytestmark = pytest.mark.django_db


def run_command(*args: str) -> str:
    out = StringIO()
    call_command("consolidate_truths", *args, stdout=out, stderr=StringIO())
    return out.getvalue()


@pytest.fixture
def dry(truth_factory):
    """Two spellings of one statement and a finished dry run (rule judge) that would merge them."""
    a = truth_factory("Works as a nurse", embedding=vector_at(1.0))
    truth_factory("works as a nurse.", user=a.user, embedding=vector_at(0.99))
    run_command("--dry-run")
    run = ConsolidationRun.objects.get(dry_run=True)
    assert run.merged == 1 and Truth.objects.count() == 2
    return run


def test_apply_sync_applies_the_dry_run_here_and_says_what_it_did(dry):
    out = run_command("--apply", str(dry.pk), "--sync")

    application = ConsolidationRun.objects.get(source_run=dry)
    assert application.execution == "in_process" and application.trigger == "command"
    assert out.splitlines()[-1] == Command.APPLIED.format(
        dry=dry.pk, merged=1, superseded=0, retired=2, refused=0, run=application.pk
    )
    (merged,) = Truth.objects.all()
    assert merged.origin == "consolidated"
    assert set(Truth.all_objects.exclude(pk=merged.pk).values_list("retired_reason", flat=True)) == {
        RetiredReason.MERGED
    }


def test_apply_queues_by_default_and_prints_the_run_id(dry):
    out = run_command("--apply", str(dry.pk))

    application = ConsolidationRun.objects.get(source_run=dry)
    assert out.strip() == Command.DISPATCHED.format(run_id=application.pk)
    job = ConsolidationJob.objects.get(run=application)
    assert (job.kind, job.status) == ("apply", "queued")
    assert Truth.objects.count() == 2  # nothing applied until a worker runs the job


def test_apply_of_a_dry_run_whose_every_preview_went_stale_is_refused(dry):
    # Its member changed since: nothing is left to apply (the admin offers no Apply either).
    Truth.objects.filter(content="works as a nurse.").update(content="works as a night nurse.")

    with pytest.raises(CommandError) as info:
        run_command("--apply", str(dry.pk), "--sync")

    assert str(info.value) == dry_runs.ALL_STALE.format(run=str(dry.pk)[:8], previews=1)
    assert not ConsolidationRun.objects.filter(source_run=dry).exists()


def test_apply_sync_lists_each_refusal_with_truth_numbers(dry, truth_factory):
    user = Truth.objects.first().user
    tea = truth_factory("Drinks green tea", user=user, embedding=vector_at(1.0, axis=5))
    truth_factory("drinks green tea.", user=user, embedding=vector_at(0.99, axis=5))
    run_command("--dry-run")
    second = ConsolidationRun.objects.filter(dry_run=True).latest("created_at")
    assert second.merged == 2
    tea.content = "Drinks green tea at noon"
    tea.save()

    out = run_command("--apply", str(second.pk), "--sync").splitlines()

    application = ConsolidationRun.objects.get(source_run=second)
    (refused,) = [line for line in out if line.startswith("  refused:")]
    assert refused.startswith(f"  refused: Merge #{tea.pk} + #") and f"#{tea.pk}" in refused.split(": ", 2)[2]
    assert out[-1] == Command.APPLIED.format(
        dry=second.pk, merged=1, superseded=0, retired=2, refused=1, run=application.pk
    )


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("not-a-uuid", Command.BAD_RUN_ID.format(value="not-a-uuid")),
        (str(uuid.UUID(int=7)), Command.UNKNOWN_RUN.format(value=str(uuid.UUID(int=7)))),
    ],
)
def test_apply_an_unknown_run_is_one_line_and_changes_nothing(dry, value, message):
    before = truth_state(with_decay=True)

    with pytest.raises(CommandError) as info:
        run_command("--apply", value, "--sync")

    assert str(info.value) == message and info.value.returncode == 1
    assert ConsolidationRun.objects.count() == 1 and truth_state(with_decay=True) == before


def test_apply_a_run_that_is_not_a_dry_run_is_refused(dry):
    run_command("--sync")  # a real run: it makes the merge
    real = ConsolidationRun.objects.get(dry_run=False)

    with pytest.raises(CommandError) as info:
        run_command("--apply", str(real.pk))

    assert str(info.value) == dry_runs.NOT_A_DRY_RUN.format(run=str(real.pk)[:8])
    assert not ConsolidationRun.objects.filter(source_run=real).exists()


def test_apply_a_dry_run_already_applied_is_refused(dry):
    run_command("--apply", str(dry.pk), "--sync")
    application = ConsolidationRun.objects.get(source_run=dry)

    with pytest.raises(CommandError) as info:
        run_command("--apply", str(dry.pk), "--sync")

    assert str(info.value) == dry_runs.ALREADY_APPLIED.format(run=str(dry.pk)[:8], application=str(application.pk)[:8])
    assert ConsolidationRun.objects.filter(source_run=dry).count() == 1


def test_apply_takes_no_option_of_a_pass(dry):
    with pytest.raises(CommandError) as info:
        run_command("--apply", str(dry.pk), "--dry-run", "--threshold", "0.5")

    assert str(info.value) == Command.APPLY_ALONE.format(options="--dry-run, --threshold")
    assert not ConsolidationRun.objects.filter(source_run=dry).exists()
