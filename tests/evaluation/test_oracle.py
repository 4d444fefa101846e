"""The oracle judge (labels, no model), eval_judge --oracle and calibrate_threshold."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from iris_consolidation.embeddings import LocalEmbedder
from iris_consolidation.evaluation import calibration, oracle, pair_scoring
from iris_consolidation.llm.base import JudgeRequest, MemberView
from iris_consolidation.management.commands.calibrate_threshold import Command
from iris_consolidation.models import ClusterReview, ConsolidationRun, Truth
from iris_consolidation.services.pipeline import validation

pytestmark = pytest.mark.django_db

#: One user's truths: two restatements the pre-pass proves, two paraphrases, two
#: lines a labeller took for one fact although their numbers differ, one paraphrase
#: further apart, and a fact of its own. Cosine similarities (MiniLM): dog 0.96,
#: jazz 0.93, cats 0.94, nurse 0.83; every other pair below 0.6.
TEXTS = [
    "i have a dog.",
    "I have a dog",
    "i love jazz music.",
    "jazz is the music i love.",
    "i have two cats.",
    "i have 3 cats.",
    "i am a nurse.",
    "i work as a nurse in a hospital.",
    "i grew up on a farm.",
]
SAME = [(0, 1), (2, 3), (4, 5), (6, 7)]


@pytest.fixture(autouse=True)
def _no_attribute_groups(settings):
    """These count what each threshold puts in one group; the attribute arm offers the dog
    and cat lines together ("pets") at any threshold (tests/services/pipeline/test_neighbourhoods.py)."""
    settings.IRIS_CONSOLIDATION_SAME_ATTRIBUTE = False


def _write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


@pytest.fixture
def pairs_file(tmp_path: Path) -> Path:
    truths = [
        {
            "user": "p1",
            "content": c,
            "origin": "promoted",
            "created_at": f"2024-01-01T09:{i:02d}:00Z",
            "source": f"s{i}",
        }
        for i, c in enumerate(TEXTS)
    ]
    _write_jsonl(tmp_path / "o.truths.jsonl", truths)
    pairs = [
        {"user": "p1", "a": TEXTS[i], "b": TEXTS[j], "label": "same" if (i, j) in SAME else "different"}
        for i in range(len(TEXTS))
        for j in range(i + 1, len(TEXTS))
    ]
    return _write_jsonl(tmp_path / "o.pairs.jsonl", pairs)


def _member(alias: str, content: str) -> MemberView:
    return MemberView(alias=alias, content=content, created_at=datetime(2024, 1, 1, tzinfo=UTC))


def test_oracle_merges_only_members_labelled_same_with_every_other_member():
    judge = oracle.OracleJudge([("a b", "b a"), ("b a", "c"), ("x", "y")])
    request = JudgeRequest(
        members=(_member("t1", "a b"), _member("t2", "b a"), _member("t3", "c"), _member("t4", "x"), _member("t5", "y"))
    )

    verdict = judge.judge(request)

    # "c" is the same as "b a" but not as "a b": it never chains into their merge.
    assert [(a.ids, a.content) for a in verdict.actions] == [(("t1", "t2"), "a b. b a."), (("t4", "t5"), "x. y.")]
    assert verdict.llm_calls == 1 and verdict.model == "oracle"


def test_oracle_keeps_everything_when_no_pair_is_labelled_same():
    verdict = oracle.OracleJudge([]).judge(JudgeRequest(members=(_member("t1", "a"), _member("t2", "b"))))

    assert verdict.actions == () and verdict.reasoning == oracle.NOTHING


def test_joined_content_keeps_every_text_in_order():
    assert oracle.joined_content(["i like dogs", " dogs are great! ", "really?"]) == (
        "i like dogs. dogs are great! really?"
    )


def test_oracle_merges_pass_the_validator_with_every_detail_kept():
    judge = oracle.OracleJudge([("i have 2 kids named Ann and Bo.", "Ann and Bo are my 2 kids.")])
    request = JudgeRequest(
        members=(
            _member("t1", "i have 2 kids named Ann and Bo."),
            _member("t2", "Ann and Bo are my 2 kids."),
        )
    )

    result = validation.validate(request, judge.judge(request).actions, max_length=1000, max_generation=5)

    assert len(result.accepted) == 1 and result.rejections == ()


def test_eval_judge_oracle_measures_clustering_and_validation(pairs_file):
    out = StringIO()
    call_command("eval_judge", "--pairs", str(pairs_file), "--oracle", "--threshold", "0.75", stdout=out)
    lines = out.getvalue().splitlines()

    # 4 clusters (dog, jazz, cats, nurse); the pre-pass settles the dog lines, so 3 judge
    # calls; the cats' numbers differ, so the validator refuses that labelled merge (the oracle
    # joins the texts: two numbers side by side).
    assert lines[0] == (
        "judge oracle, threshold 0.75: 1 users, 9 truths, 4 clusters, 3 merges, 0 supersedes, "
        "1 rejected, 0 failed, 3 model calls"
    )
    assert lines[1] == "judge calls: 3 (33.3 per 100 truths), batched by 8 clusters per user: 1 (11.1 per 100 truths)"
    assert lines[2] == f"refusals by code: {validation.Code.SIDE_BY_SIDE}=1"
    assert lines[3] == "clustered together: tp=4 fp=0 precision=1.000 recall=1.000"
    assert lines[-1] == "pairs=36 same=4 tp=3 fp=0 fn=1 precision=1.000 recall=0.750 f1=0.857"
    assert ConsolidationRun.objects.count() == 0 and ClusterReview.objects.count() == 0
    assert Truth.all_objects.count() == 0


def test_eval_judge_oracle_needs_a_pairs_file(tmp_path):
    with pytest.raises(CommandError) as info:
        call_command("eval_judge", "--golden", str(tmp_path / "g.jsonl"), "--oracle", stdout=StringIO())

    assert str(info.value) == "--oracle judges from the labels of a pairs file: give --pairs FILE."


def test_each_threshold_starts_from_the_same_truths(pairs_file):
    low, high, again = pair_scoring.score_pairs_at(
        pairs_file, thresholds=[0.75, 0.9, 0.75], embedder=LocalEmbedder(), oracle=True
    )

    # 0.90 clusters dog, jazz and cats only (nurse is at 0.83): one merge fewer found.
    assert (high.clusters, high.tp, high.rejected) == (3, 2, 1)
    assert (low.clusters, low.tp) == (again.clusters, again.tp) == (4, 3)
    assert Truth.all_objects.count() == 0


def test_calibrate_threshold_prints_one_row_per_threshold(pairs_file):
    out = StringIO()
    call_command("calibrate_threshold", "--pairs", str(pairs_file), "--thresholds", "0.75,0.9", stdout=out)
    lines = out.getvalue().splitlines()

    assert lines[1] == "1 users, 9 truths, 36 pairs (4 same); judge: oracle"
    assert lines[2].split() == Command.PAIRS_HEADER.split()
    assert lines[3].split() == ["0.75", "4", "33.3", "11.1", "0.750", "1.000", "1.000", "1", "side_by_side=1"]
    assert lines[4].split() == ["0.90", "3", "22.2", "11.1", "0.500", "1.000", "0.750", "1", "side_by_side=1"]
    assert len(lines) == 5 and Truth.all_objects.count() == 0


def test_calibrate_threshold_counts_clusters_of_a_truths_file(pairs_file):
    counts = calibration.count_clusters(
        pairs_file.with_name("o.truths.jsonl"), embedder=LocalEmbedder(), thresholds=(0.75, 0.9)
    )

    assert [(c.threshold, c.truths, c.clusters, c.batched_calls) for c in counts] == [(0.75, 9, 4, 1), (0.9, 9, 3, 1)]
    assert round(counts[0].clusters_per_100, 1) == 44.4 and Truth.all_objects.count() == 0


@pytest.mark.parametrize("raw", ["0.5,1.5", ",", "abc"])
def test_calibrate_threshold_refuses_a_bad_threshold_in_one_line(pairs_file, raw):
    with pytest.raises(CommandError) as info:
        call_command("calibrate_threshold", "--pairs", str(pairs_file), "--thresholds", raw, stdout=StringIO())

    assert "\n" not in str(info.value) and str(info.value)


def test_batched_calls_round_up_per_user():
    assert pair_scoring.batched_calls([9, 3, 0, 8]) == 2 + 1 + 0 + 1
