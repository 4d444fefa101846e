"""``manage.py eval_recall`` and ``evaluation.recall``: what phase 1 puts before the judge."""

from __future__ import annotations

import json
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from iris_consolidation.embeddings import LocalEmbedder
from iris_consolidation.evaluation import recall
from iris_consolidation.models import ConsolidationRun, Truth

pytestmark = pytest.mark.django_db

TRUTHS = [
    ("s1", "Lives in Lisbon", "2025-03-01T09:00:00Z"),
    ("s2", "Has a son named Tomas", "2025-04-01T09:00:00Z"),
    ("s3", "Likes jazz", "2025-05-01T09:00:00Z"),
    ("s4", "Is the father of a boy called Tomas", "2025-06-01T09:00:00Z"),
    ("s5", "Moved to Berlin in September 2025", "2025-09-01T09:00:00Z"),
]


def _jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    truths = _jsonl(tmp_path / "t.truths.jsonl", [
        {"user": "u1", "content": c, "origin": "promoted", "created_at": at, "source": s} for s, c, at in TRUTHS
    ] + [{"user": "u2", "content": "Plays chess", "origin": "promoted", "created_at": "2025-01-01T09:00:00Z",
          "source": "o1"}])
    reference = _jsonl(tmp_path / "ref.jsonl", [
        {"user": "u1", "action": "merge", "sources": ["s2", "s4"], "confidence": "high", "why": "same son"},
        {"user": "u1", "action": "supersede", "sources": ["s1", "s5"], "old": ["s1"], "new": "s5",
         "confidence": "medium", "why": "moved"},
    ])
    member = {"origin": "promoted", "pinned": False, "generation": 0, "score": 30}
    cases = _jsonl(tmp_path / "cases.jsonl", [{
        "id": "C1", "expected": "SUPERSEDE", "must_keep": ["Berlin"],
        "cluster": [{"id": "a", "content": "Lives in Lisbon", "created_at": "2026-03-01T09:00:00Z", **member},
                    {"id": "b", "content": "Moved to Berlin in May", "created_at": "2026-05-01T09:00:00Z", **member}],
        "actions": [{"action": "supersede", "old": ["a"], "new": "b"}],
    }])
    filler = _jsonl(tmp_path / "f.truths.jsonl", [
        {"user": "m", "content": f"I have visited {i} museums this year.", "origin": "promoted",
         "created_at": "2023-01-02T12:00:00Z"} for i in range(120)
    ] + [{"user": "m", "content": "Horror movies are great.", "origin": "promoted",
          "created_at": "2023-01-02T12:00:00Z"}])
    return {"truths": truths, "reference": reference, "cases": cases, "filler": filler}


def test_pair_recall_counts_merges_and_supersedes_apart(files):
    report = recall.reference_recall(files["reference"], files["truths"], embedder=LocalEmbedder())

    assert (report.tallies[("merge", "all")].recalled, report.tallies[("merge", "all")].total) == (1, 1)
    assert (report.tallies[("merge", "high")].recalled, report.tallies[("merge", "high")].total) == (1, 1)
    # Lisbon and Berlin share a group through the "home" attribute (cosine far below 0.40).
    assert (report.tallies[("supersede", "all")].recalled, report.tallies[("supersede", "high")].total) == (1, 0)
    assert (report.cost.users, report.cost.truths) == (2, 6) and report.cost.calls >= 1
    assert Truth.all_objects.count() == 0 and ConsolidationRun.objects.count() == 0


def test_greedy_clusters_miss_the_move(files, settings):
    settings.IRIS_CONSOLIDATION_NEIGHBOURHOODS = False
    report = recall.reference_recall(files["reference"], files["truths"], embedder=LocalEmbedder())

    assert report.tallies[("supersede", "all")].share == 0.0
    assert [p.b for p in report.missed] == ["s5"]


def test_cases_among_other_truths(files):
    report = recall.cases_recall([files["cases"]], files["filler"], embedder=LocalEmbedder())

    assert (report.tallies["supersede"].recalled, report.tallies["supersede"].total) == (1, 1)
    assert report.cost.truths == 102 and report.missed == []


def test_command_prints_both_measures(files):
    out = StringIO()
    call_command("eval_recall", "--reference", str(files["reference"]), "--truths", str(files["truths"]),
                 "--cases", str(files["cases"]), "--filler", str(files["filler"]), stdout=out)
    lines = out.getvalue().splitlines()

    assert lines[1] == "merge     all  1/1 = 1.000"
    assert lines[3] == "supersede all  1/1 = 1.000"
    assert lines[5].startswith("cost: 2 users, 6 truths: ")
    assert "== cases among 100 other truths" in lines and "all       1/1 = 1.000" in lines


def test_a_missing_file_is_a_one_line_error(files, tmp_path):
    with pytest.raises(CommandError) as info:
        call_command("eval_recall", "--reference", str(tmp_path / "nope.jsonl"), "--truths", str(files["truths"]),
                     "--cases", stdout=StringIO())

    assert str(info.value) == f"{tmp_path / 'nope.jsonl'}: no such file."


def test_command_prints_the_calls_of_other_truths_files(files, settings):
    """``--calls``: groups and judge calls per 100 truths of a set with no reference, at the
    settings (greedy clusters when neighbourhoods are off)."""
    out = StringIO()
    call_command("eval_recall", "--reference", "none", "--cases", "--calls", str(files["truths"]), stdout=out)
    cost = recall.cost_of(files["truths"], embedder=LocalEmbedder())
    settings.IRIS_CONSOLIDATION_NEIGHBOURHOODS = False
    greedy = recall.cost_of(files["truths"], embedder=LocalEmbedder())

    assert out.getvalue().splitlines() == [
        f"== calls on {files['truths']}",
        f"cost: 2 users, 6 truths: {cost.groups} groups ({100 * cost.groups / 6:.1f} per 100 truths, "
        f"{cost.members / cost.groups:.2f} members each), judge calls 1 (16.67 per 100 truths)",
    ]
    # The Lisbon/Berlin move and the son's restatement: one group each, one call; greedy clusters
    # at 0.40 find the son only.
    assert (cost.users, cost.truths, cost.calls) == (2, 6, 1) and cost.groups >= 2
    assert (greedy.groups, greedy.calls) == (1, 1)
    assert Truth.all_objects.count() == 0
