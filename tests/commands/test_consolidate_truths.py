"""``consolidate_truths``: flags, output, errors and exit codes."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from django.db import connection

from iris_consolidation import conf
from iris_consolidation.embeddings import WRONG_DIMENSIONS
from iris_consolidation.llm.litellm_client import MISSING_KEY
from iris_consolidation.management.commands.consolidate_truths import Command
from iris_consolidation.models import ConsolidationRun, Truth
from iris_consolidation.run_settings import BAD_THRESHOLD
from iris_consolidation.selectors import UNKNOWN_USER
from tests.conftest import database_url, vector_at
from tests.helpers import parse_summary, truth_state

pytestmark = pytest.mark.django_db

ROOT = Path(__file__).resolve().parents[2]


def run_command(*args: str) -> str:
    out, err = StringIO(), StringIO()
    call_command("consolidate_truths", *args, stdout=out, stderr=err)
    return out.getvalue()


@pytest.fixture
def duplicates(truth_factory):
    a = truth_factory("Works as a nurse", embedding=vector_at(1.0))
    b = truth_factory("works as a nurse.", user=a.user, embedding=vector_at(0.99))
    c = truth_factory("Likes tea", user=a.user, embedding=vector_at(0.2, towards=2))
    return a, b, c


# --- bad input: one-line error, nothing changed -------------------------------------------


@pytest.mark.parametrize("value", ["0", "1.5", "abc", "-0.2", "nan", ""])
def test_threshold_outside_zero_one_is_refused(duplicates, value):
    before = truth_state(with_decay=True)

    with pytest.raises(CommandError) as info:
        run_command("--sync", "--threshold", value)

    assert str(info.value) == BAD_THRESHOLD.format(value=value)
    assert info.value.returncode == 1
    assert ConsolidationRun.objects.count() == 0
    assert truth_state(with_decay=True) == before


def test_threshold_of_one_is_accepted(duplicates):
    # The embedding arm alone: the lexical arm would find these two (the same words).
    output = run_command("--sync", "--threshold", "1", "--only", "semantic")

    assert ConsolidationRun.objects.get().threshold == 1.0
    assert parse_summary(output)["clusters"] == "0"


@pytest.mark.parametrize("value", ["nobody", "999999", ""])
def test_unknown_user_is_refused(duplicates, value):
    before = truth_state(with_decay=True)

    with pytest.raises(CommandError) as info:
        run_command("--sync", "--user", value)

    assert str(info.value) == UNKNOWN_USER.format(value=value)
    assert ConsolidationRun.objects.count() == 0
    assert truth_state(with_decay=True) == before


def test_missing_api_key_for_the_llm_judge_names_the_variable(duplicates, settings, monkeypatch):
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    settings.IRIS_CONSOLIDATION_JUDGE = "llm"
    settings.IRIS_CONSOLIDATION_MODEL = "anthropic/claude-sonnet-4-5"
    before = truth_state()

    with pytest.raises(CommandError) as info:
        run_command("--sync")

    assert str(info.value) == MISSING_KEY.format(model="anthropic/claude-sonnet-4-5", keys="ANTHROPIC_API_KEY")
    assert "\n" not in str(info.value)
    assert ConsolidationRun.objects.count() == 0
    assert truth_state() == before


def test_embedding_of_the_wrong_dimension_fails_the_run_and_changes_no_truth(llm_server, settings, truth_factory):
    settings.IRIS_CONSOLIDATION_JUDGE = "rules"
    settings.IRIS_CONSOLIDATION_EMBEDDING_MODEL = "openai/stub-embed"
    llm_server.embedding_dimensions = 512
    a = truth_factory("Works as a nurse")
    truth_factory("works as a nurse.", user=a.user)
    before = truth_state()

    with pytest.raises(CommandError) as info:
        run_command("--sync")

    message = WRONG_DIMENSIONS.format(model="openai/stub-embed", got=512, expected=384)
    assert str(info.value).startswith(message)
    assert "litellm cannot ask 'openai/stub-embed' for a width" in str(info.value)
    assert '"local-multilingual"' in str(info.value)
    assert truth_state() == before
    run = ConsolidationRun.objects.get()
    assert (run.status, run.notes, run.embedded) == (ConsolidationRun.Status.FAILED, str(info.value), 0)
    assert len([r for r in llm_server.requests if r["path"].endswith("/embeddings")]) == 1


def test_remote_embedding_model_of_the_right_dimension_embeds_the_truths(llm_server, settings, truth_factory):
    settings.IRIS_CONSOLIDATION_JUDGE = "rules"
    settings.IRIS_CONSOLIDATION_EMBEDDING_MODEL = "openai/stub-embed"
    a = truth_factory("Works as a nurse")
    truth_factory("Likes tea", user=a.user)

    output = run_command("--sync")

    assert parse_summary(output)["embedded"] == "2"
    assert set(Truth.objects.values_list("embedding_model", flat=True)) == {"openai/stub-embed"}
    assert all(len(e) == 384 for e in Truth.objects.values_list("embedding", flat=True))


def test_error_exits_with_status_one_and_a_single_line_on_stderr(db):
    env = {
        **os.environ,
        "DATABASE_URL": database_url(connection.settings_dict),
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    }

    result = subprocess.run(
        [sys.executable, "manage.py", "consolidate_truths", "--threshold", "abc"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == ["CommandError: " + BAD_THRESHOLD.format(value="abc")]


# --- modes and output --------------------------------------------------------------------


def test_default_mode_queues_a_batch_and_prints_its_id(duplicates, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):  # tasks are sent when the command commits
        output = run_command()

    match = re.fullmatch(r"Dispatched batch: ([0-9a-f-]{36})\n", output)
    assert match, output
    run = ConsolidationRun.objects.get(pk=match.group(1))
    assert (run.dry_run, run.execution, run.trigger) == (
        False, ConsolidationRun.Execution.QUEUED, ConsolidationRun.Trigger.COMMAND
    )
    # The test settings run django-q2 tasks in process (q_sync) once sent, so the batch is done.
    assert (run.status, run.merged, run.users_done, run.clusters_done) == ("done", 1, 1, 1)


def test_sync_prints_a_summary_of_the_run(duplicates):
    output = run_command("--sync")

    run = ConsolidationRun.objects.get()
    summary = parse_summary(output)
    assert {
        k: summary[k]
        for k in (
            "users",
            "truths",
            "embedded",
            "clusters",
            "merged",
            "superseded",
            "retired",
            "kept",
            "rejected",
            "stale",
            "deferred",
            "failed",
            "llm_calls",
            "tokens",
            "run",
        )
    } == {
        "users": "1",
        "truths": "3",
        "embedded": "0",
        "clusters": "1",
        "merged": "1",
        "superseded": "0",
        "retired": "2",
        "kept": "0",
        "rejected": "0",
        "stale": "0",
        "deferred": "0",
        "failed": "0",
        "llm_calls": "0",
        "tokens": "0",
        "run": str(run.pk),
    }
    assert float(summary["seconds"]) >= 0.0
    assert (run.dry_run, run.execution, run.status, run.judge) == (False, "in_process", "done", "rules")
    assert f"Run {run.pk}: judge rules, threshold {conf.default_threshold('local')}" in output
    assert "[1/1] user" in output and "[1/1] Applied" in output


def test_sync_with_nothing_to_consolidate_says_so(truth_factory):
    truth_factory("Likes tea", embedding=vector_at(1.0))

    # Only the merge arms: one truth makes no cluster, so the user is not taken.
    output = run_command("--sync", "--only", "semantic,lexical")

    assert Command.NOTHING in output.splitlines()
    assert parse_summary(output)["users"] == "0"
    assert ConsolidationRun.objects.get().status == "done"


def test_a_user_with_a_single_truth_still_gets_the_per_truth_stages(truth_factory, settings):
    """Noise, decay and prune work truth by truth: a user with one consolidatable truth is
    taken when one of them is on, though no cluster can form."""
    settings.IRIS_CONSOLIDATION_NOISE = "apply"
    noise = truth_factory("Upgraded numpy to 2.1.3", embedding=vector_at(1.0))

    output = run_command("--sync")

    assert Command.NOTHING not in output
    run = ConsolidationRun.objects.get()
    assert (run.users, run.clusters_found) == (1, 0)
    assert set(run.stage_results.values_list("stage", flat=True)) == {
        "mine", "noise", "decay", "lexical", "semantic", "relocate", "promote", "prune"
    }
    assert Truth.all_objects.get(pk=noise.pk).retired_reason == "noise"


def test_dry_run_prints_what_it_would_do_and_changes_nothing(duplicates):
    before = truth_state()

    output = run_command("--dry-run")

    lines = output.splitlines()
    assert lines[0] == Command.DRY_RUN_BANNER
    a, b, _ = duplicates
    assert f"      -> would merge #{a.pk} + #{b.pk} into a new truth: Works as a nurse" in lines
    assert f"      #{b.pk}: works as a nurse." in lines
    assert any(line.startswith(f"      reasoning: #{a.pk}+#{b.pk}: Same statement") for line in lines)
    summary = parse_summary(output)
    assert (summary["would_merge"], summary["would_supersede"], summary["would_retire"]) == ("1", "0", "2")
    assert not {"merged", "superseded", "retired"} & set(summary)
    assert truth_state() == before
    run = ConsolidationRun.objects.get()
    assert (run.dry_run, run.status) == (True, "done")
    assert run.reviews.get().outcome == "preview"


def test_dry_run_wins_over_sync(duplicates):
    before = truth_state()

    run_command("--dry-run", "--sync")

    assert ConsolidationRun.objects.get().dry_run
    assert truth_state() == before


@pytest.mark.parametrize("by", ["username", "id"])
def test_user_option_limits_the_run_to_that_user(truth_factory, user_factory, by):
    alice, bob = user_factory("alice"), user_factory("bob")
    for user in (alice, bob):
        truth_factory("Works as a nurse", user=user, embedding=vector_at(1.0))
        truth_factory("works as a nurse.", user=user, embedding=vector_at(0.99))

    output = run_command("--sync", "--user", alice.username if by == "username" else str(alice.pk))

    assert parse_summary(output)["merged"] == "1"
    assert ConsolidationRun.objects.get().user_filter_id == alice.pk
    assert Truth.objects.filter(user=alice).count() == 1
    assert Truth.objects.filter(user=bob).count() == 2


def test_threshold_option_is_used_for_clustering(truth_factory):
    a = truth_factory("Works as a nurse", embedding=vector_at(1.0))
    truth_factory("works as a nurse.", user=a.user, embedding=vector_at(0.85))

    # The embedding arm alone: the lexical arm finds these two at any cosine threshold.
    strict = parse_summary(run_command("--sync", "--threshold", "0.9", "--only", "semantic"))
    loose = parse_summary(run_command("--sync", "--threshold", "0.8", "--only", "semantic"))

    assert (strict["clusters"], loose["clusters"], loose["merged"]) == ("0", "1", "1")
    assert sorted(ConsolidationRun.objects.values_list("threshold", flat=True)) == [0.8, 0.9]


def test_quiet_sync_prints_only_the_summary(duplicates):
    out = StringIO()

    call_command("consolidate_truths", "--sync", verbosity=0, stdout=out)

    assert out.getvalue().count("\n") == 1
    assert out.getvalue().startswith("Summary: users=1 ")


def test_ctrl_c_during_a_sync_run_fails_the_run_in_one_line_and_changes_no_truth(duplicates, monkeypatch):
    """SIGINT in phase 2 (a fresh-user trial left such a run "running" forever, with a traceback)."""
    from iris_consolidation.services.queue import workers

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(workers, "work_cluster_jobs", interrupted)
    before = truth_state()

    with pytest.raises(CommandError) as info:
        run_command("--sync")

    run = ConsolidationRun.objects.get()
    assert str(info.value) == Command.INTERRUPTED.format(run_id=run.pk)
    assert info.value.returncode == 130
    assert (run.status, run.notes) == ("failed", str(info.value))
    assert run.jobs.exclude(status__in=["done", "failed"]).count() == 0
    assert truth_state() == before


def test_an_error_during_a_sync_run_fails_the_run_and_changes_no_truth(duplicates, monkeypatch):
    """`consolidate_truths --sync | head` closed the pipe: a fresh user's trial found the
    run "running" forever, with its jobs queued."""
    from iris_consolidation.services.queue import workers

    def closed(*args, **kwargs):
        raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(workers, "work_cluster_jobs", closed)
    before = truth_state()

    with pytest.raises(BrokenPipeError):
        run_command("--sync")

    run = ConsolidationRun.objects.get()
    assert run.status == "failed"
    assert run.notes.strip() == Command.STOPPED.format(run_id=run.pk, error="BrokenPipeError: [Errno 32] Broken pipe")
    assert run.jobs.exclude(status__in=["done", "failed"]).count() == 0
    assert truth_state() == before


@pytest.mark.django_db
def test_a_failed_run_keeps_the_notes_written_before_the_failure():
    from iris_consolidation.services.run import lifecycle

    run = lifecycle.create_run(trigger="command", execution="in_process")
    ConsolidationRun.objects.filter(pk=run.pk).update(notes="user 7: phase 1 continues in a new delivery\n")
    lifecycle.fail_run(run.pk, note="The embedder failed: boom")
    run.refresh_from_db()
    assert run.status == ConsolidationRun.Status.FAILED
    assert run.notes == "user 7: phase 1 continues in a new delivery\nThe embedder failed: boom"


def test_a_dry_run_names_the_protected_truth_that_survives_and_the_user_by_name(truth_factory, user_factory):
    user = user_factory("ana.ribeiro")
    kept = truth_factory("Is allergic to peanuts", user=user, origin="user", embedding=vector_at(1.0))
    copy = truth_factory("is allergic to peanuts.", user=user, embedding=vector_at(0.99))

    lines = run_command("--dry-run").splitlines()

    assert f"[1/1] user ana.ribeiro (#{user.pk})" in lines
    absorbed = (
        f"      -> would merge #{copy.pk} into protected #{kept.pk} (kept as is, no new truth): Is allergic to peanuts"
    )
    assert absorbed in lines
    assert any(line.startswith("  after : live 1 (projected: ") for line in lines), lines
