"""``consolidate_truths --replay``: a real model's recorded verdicts on the repository's sample
(``samples/demo.recorded.jsonl``), replayed offline through litellm from a server on 127.0.0.1,
as ``make demo`` runs them: the real embedder, the real PostgreSQL + pgvector, the validator."""

from __future__ import annotations

import json
import re
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from iris_consolidation.management.commands.consolidate_truths import Command
from iris_consolidation.models import ConsolidationRun, RetiredReason, StageResult, Truth
from iris_consolidation.services.hygiene import promotion
from iris_consolidation.services.operations import transfer
from tests.helpers import parse_summary

pytestmark = pytest.mark.django_db

SAMPLES = Path(__file__).resolve().parents[2] / "samples"
RECORDED = SAMPLES / "demo.recorded.jsonl"


def consolidate(*args: str) -> str:
    out = StringIO()
    call_command("consolidate_truths", *args, stdout=out, stderr=StringIO())
    return out.getvalue()


@pytest.fixture
def sample(settings):
    settings.IRIS_CONSOLIDATION_JUDGE = "rules"  # what the replay replaces for the command's run
    transfer.load_truths(SAMPLES / "demo.truths.jsonl", create_users=True)


def test_the_demo_replays_the_recorded_verdicts_and_says_whose(sample):
    # Each recording session named in file order, once ("... of 6 December 2026 and ... of 7 December 2026").
    models = dict.fromkeys(json.loads(line)["model"] for line in RECORDED.read_text(encoding="utf-8").splitlines())

    dry = consolidate("--dry-run", "--verbosity", "0", "--replay", str(RECORDED))
    output = consolidate("--sync", "--verbosity", "0", "--replay", str(RECORDED))

    model = " and ".join(models)
    assert output.splitlines()[0].startswith(f"Judge: the recorded verdicts of {model} (judge prompt judge-")
    assert "make demo DEMO_JUDGE=llm" in output.splitlines()[0]
    replayed = re.search(r"Replayed: (\d+) cluster\(s\) answered from the recording, (\d+) not in it", output)
    assert replayed and int(replayed.group(1)) > 0 and replayed.group(2) == "0", output
    assert re.search(r"second looks: [1-9]\d* recorded, 0 not", output), output
    summary = parse_summary(output)
    assert int(summary["merged"]) >= 12 and int(summary["superseded"]) >= 1, summary
    assert parse_summary(dry)["would_merge"] == summary["merged"]
    run = ConsolidationRun.objects.get(pk=summary["run"])
    assert run.status == "done" and run.judge_model == "openai/recorded-replay"
    # A stale fact superseded (the move), a paraphrase in another language merged, a protected truth kept.
    lisbon = Truth.all_objects.get(content="Lives in Lisbon with her family")
    assert lisbon.retired_reason == RetiredReason.SUPERSEDED
    assert lisbon.superseded_by.content == "Moved with her family from Lisbon to Porto in April 2025"
    portuguese = Truth.all_objects.get(content="Todos os anos, em agosto, faz trilhos na Serra da Estrela")
    assert portuguese.retired_reason == RetiredReason.MERGED and "Serra da Estrela" in portuguese.superseded_by.content
    assert Truth.objects.filter(content="Is allergic to peanuts", origin="user", pinned=True).exists()


def test_a_cluster_not_in_the_recording_is_kept(sample, user_factory, truth_factory):
    user = user_factory("eve.new")
    truth_factory("Plays chess on Tuesdays", user=user)
    truth_factory("Plays chess every Tuesday evening", user=user)

    output = consolidate("--sync", "--user", "eve.new", "--verbosity", "0", "--replay", str(RECORDED))

    assert "Replayed: 0 cluster(s) answered from the recording, 1 not in it (kept)" in output, output
    assert Truth.objects.filter(user=user).count() == 2


def test_replay_needs_an_in_process_run_and_a_readable_file(sample, tmp_path):
    with pytest.raises(CommandError, match=re.escape(Command.REPLAY_HERE)):
        consolidate("--replay", str(RECORDED))
    # An estimate runs no pass: a replay, --sync or --dry-run beside it is named, not ignored.
    with pytest.raises(CommandError, match=r"takes no --dry-run or --replay: drop them"):
        consolidate("--estimate", "--dry-run", "--replay", str(RECORDED))
    with pytest.raises(CommandError, match=r"takes no --sync: drop it"):
        consolidate("--estimate", "--sync")
    with pytest.raises(CommandError, match="no such recording file"):
        consolidate("--sync", "--replay", str(tmp_path / "missing.jsonl"))
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"messages": []}\n')
    with pytest.raises(CommandError, match=r"bad.jsonl:1: "):
        consolidate("--sync", "--replay", str(bad))
    assert ConsolidationRun.objects.count() == 0 and Truth.all_objects.filter(retired_at__isnull=False).count() == 0


def _refusals_after_rejected(output: str) -> list[str]:
    """Each "Rejected by the validator" progress line's next line, in order."""
    lines = output.splitlines()
    return [lines[i + 1] for i, line in enumerate(lines) if line.endswith("] Rejected by the validator")]


def test_a_real_pass_prints_each_refusal_with_its_code_as_the_dry_run_does(sample):
    dry = consolidate("--dry-run", "--replay", str(RECORDED))
    real = consolidate("--sync", "--replay", str(RECORDED))

    refused = [line for line in real.splitlines() if line.startswith("      refused (")]
    assert refused == [line for line in dry.splitlines() if line.startswith("      refused (")]
    # The sample's refused verdicts (README): three supersedes that state no change, and nothing else
    # (the vegetarian merge and the Camille merge go to second looks, whose recorded answers confirm).
    assert len(refused) == 3, refused
    assert all(line.startswith("      refused (supersede_no_change): #") for line in refused), refused
    # Every wholly refused cluster says why, on the line after its outcome.
    after_rejected = _refusals_after_rejected(real)
    assert after_rejected and all(line.startswith("      refused (") for line in after_rejected), real
    assert _refusals_after_rejected(real) == _refusals_after_rejected(dry)


def test_a_stage_the_recording_holds_no_call_of_asks_no_model(sample):
    # A truth backed three times is a promotion candidate: the promote stage would ask a model.
    Truth.objects.filter(content="Is allergic to peanuts").update(corroborations=3)

    output = consolidate("--sync", "--verbosity", "0", "--replay", str(RECORDED))

    assert Command.UNRECORDED_STAGES.format(stages="mine, noise, relocate and promote") in output.splitlines()
    run = ConsolidationRun.objects.get(pk=parse_summary(output)["run"])
    promote = StageResult.objects.get(run=run, stage="promote", user__username="ana.ribeiro")
    head = promote.findings[0]
    assert (head["skipped"], head["errors"], head["calls"]) == (promotion.NO_LLM, [], 0)
    assert parse_summary(output)["stage_calls"] == "0"
