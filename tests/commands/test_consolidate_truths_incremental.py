"""``consolidate_truths --since / --full`` and the inventory report it prints."""

from __future__ import annotations

from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from iris_consolidation import inventory_display
from iris_consolidation.management.commands.consolidate_truths import Command
from iris_consolidation.models import ConsolidationRun, Truth
from iris_consolidation.services.pipeline import incremental
from tests.conftest import vector_at

pytestmark = pytest.mark.django_db


def _call(*args: str) -> str:
    out = StringIO()
    call_command("consolidate_truths", *args, stdout=out, stderr=StringIO())
    return out.getvalue()


@pytest.fixture
def duplicates(truth_factory):
    truth_factory("Has a dog named Rex", embedding=vector_at(1.0), score=0.6)
    truth_factory("has a dog named Rex.", embedding=vector_at(0.95), score=0.8)


def test_since_duration_prints_and_stores_the_resolved_window(duplicates):
    output = _call("--sync", "--since", "7d")

    run = ConsolidationRun.objects.get()
    assert (run.window_mode, run.window_until - run.window_since) == ("duration", timedelta(days=7))
    assert inventory_display.window_line(run) in output
    assert run.window_since.isoformat().replace("+00:00", "Z") in output


def test_report_names_counts_changes_and_both_checkpoints(duplicates):
    first = _call("--sync", "--since", "last")
    run = ConsolidationRun.objects.get()

    assert "Inventory:" in first
    assert "  before: live 2; by kind: fact 2; by origin: promoted 2" in first
    assert "  after : live 1; by kind: fact 1; by origin: consolidated 1" in first
    assert "merge #" in first and "reason: Same statement" in first
    assert inventory_display.CHECKPOINT_WRITTEN.format(old="none", new=inventory_display._when(run.checkpoint)) in first

    second = _call("--sync", "--since", "last")
    latest = ConsolidationRun.objects.order_by("-created_at").first()
    assert latest.previous_checkpoint == run.checkpoint
    assert inventory_display.NO_CHANGES in second
    assert f"Checkpoint: {inventory_display._when(run.checkpoint)} -> " in second


def test_dry_run_reports_that_the_checkpoint_is_kept(duplicates):
    output = _call("--dry-run")

    assert inventory_display.CHECKPOINT_KEPT.format(old="none", why="dry run") in output
    assert "would merge #" in output
    assert Truth.objects.count() == 2


def test_bad_since_is_one_clear_error_and_creates_no_run(duplicates):
    with pytest.raises(CommandError) as info:
        _call("--sync", "--since", "last tuesday")

    assert str(info.value) == incremental.BAD_SINCE.format(value="last tuesday")
    assert not ConsolidationRun.objects.exists()


def test_since_and_full_cannot_be_combined(duplicates):
    with pytest.raises(CommandError, match="not allowed with argument"):
        _call("--sync", "--since", "7d", "--full")

    assert not ConsolidationRun.objects.exists()


def test_full_prints_the_full_window(duplicates):
    output = _call("--sync", "--full")

    assert inventory_display.WINDOW_FULL in output
    assert ConsolidationRun.objects.get().window_mode == "full"


def test_default_window_is_the_cursor(duplicates):
    output = _call("--sync")

    assert inventory_display.WINDOW_CURSOR in output


def test_queued_run_prints_its_window_after_the_batch_id_when_verbose(duplicates):
    out = StringIO()
    call_command("consolidate_truths", "--since", "7d", verbosity=2, stdout=out, stderr=StringIO())

    run = ConsolidationRun.objects.get()
    assert out.getvalue().splitlines() == [f"Dispatched batch: {run.pk}", inventory_display.window_line(run)]
    assert run.window_mode == "duration"


def test_dry_run_banner_comes_before_the_window(duplicates):
    lines = _call("--dry-run").splitlines()

    assert lines[:2] == [Command.DRY_RUN_BANNER, inventory_display.WINDOW_CURSOR]
