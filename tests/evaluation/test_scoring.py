"""Scoring the judge: eval_judge on the golden sets and on same/different pairs."""

from __future__ import annotations

import json
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from iris_consolidation.embeddings import LocalEmbedder
from iris_consolidation.evaluation import pair_scoring, scoring
from iris_consolidation.llm import get_judge_client
from iris_consolidation.models import ClusterReview, ConsolidationRun, Truth
from tests import llm_stub

pytestmark = pytest.mark.django_db

#: Hostile modes after which no golden case may be harmful (the issue's "Done when"),
#: plus the hardest one, the shortest member's text.
STRUCTURAL_MODES = [
    "outside_ids",
    "retire_protected",
    "wrong_supersede",
    "no_reason",
    "non_json",
    "cut_json",
    "drop_number",
    "drop_date",
    "drop_name",
    "drop_negation",
    "role_swap",
    "merge_all",
    "shortest",
    "oldest",
]


def _write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _member(alias: str, content: str, day: int, **fields: object) -> dict:
    return {
        "id": alias,
        "content": content,
        "origin": "promoted",
        "pinned": False,
        "generation": 0,
        "score": 30,
        "created_at": f"2026-01-{day:02d}T09:00:00Z",
        **fields,
    }


def _eval(*args: str) -> list[str]:
    out = StringIO()
    call_command("eval_judge", *args, stdout=out)
    return out.getvalue().splitlines()


def test_golden_set_with_the_rule_judge_is_never_harmful(shared_dir):
    lines = _eval("--golden", str(shared_dir / "eval" / "judge_golden.jsonl"), "--judge", "rules")

    assert lines[-1] == "correct=21/40 harmful=0"
    assert "KEEP_SEPARATE: 17/17" in lines
    assert ConsolidationRun.objects.count() == 0 and Truth.all_objects.count() == 0  # rolled back


def test_public_cases_with_the_rule_judge_are_never_harmful(shared_dir):
    lines = _eval("--golden", str(shared_dir / "eval" / "public_cases.jsonl"), "--judge", "rules")

    assert lines[-1] == "correct=7/14 harmful=0"


@pytest.mark.parametrize("mode", STRUCTURAL_MODES)
def test_golden_set_is_never_harmful_whatever_the_model_answers(shared_dir, llm_server, mode):
    llm_server.handler = llm_stub.hostile(mode)
    cases = scoring.load_cases(shared_dir / "eval" / "judge_golden.jsonl")

    report = scoring.score_golden(cases, client=get_judge_client("llm"), embedder=LocalEmbedder())

    assert [r.case.id for r in report.results if r.harmful] == []
    assert report.total == 40 and report.llm_calls >= 38  # G35/B-style pre-pass cases need no call


def test_shortest_member_attack_keeps_the_golden_true_merges(shared_dir, llm_server):
    llm_server.handler = llm_stub.hostile("shortest")
    cases = scoring.load_cases(shared_dir / "eval" / "judge_golden.jsonl")

    report = scoring.score_golden(cases, client=get_judge_client("llm"), embedder=LocalEmbedder())

    merged = {r.case.id for r in report.results if r.correct and r.case.expected == "MERGE"}
    # Merges whose shortest text keeps every detail and content word, or says it in an
    # everyday rewording (G01 "father of a boy" / "son", G07 "jogs before noon" / "runs
    # in the morning", G10 "speaks fluent" / "fluent in": Language.phrase_equivalences);
    # G05 (Portuguese "no" reads as a negation), G06/G35 (the shortest text drops names)
    # and G08 (negation on one side only) are refused, never applied wrongly.
    assert merged == {"G01", "G02", "G03", "G04", "G07", "G09", "G10", "G37", "G40"}
    assert report.correct == 30  # as many as before the word checks of the validator
    assert report.harmful == 0


@pytest.mark.parametrize("mode", ["merge_all", "shortest", "oldest"])
def test_public_cases_are_never_harmful_under_a_careless_model(shared_dir, llm_server, mode):
    """B07 (two facts about Birch & Co) and B15 (one frame, two choices) joined or
    swallowed: refused."""
    llm_server.handler = llm_stub.hostile(mode)
    cases = scoring.load_cases(shared_dir / "eval" / "public_cases.jsonl")

    report = scoring.score_golden(cases, client=get_judge_client("llm"), embedder=LocalEmbedder())

    assert [r.case.id for r in report.results if r.harmful] == []
    by_id = {r.case.id: r for r in report.results}
    assert by_id["B07"].correct and by_id["B15"].correct


def test_harmful_verdict_is_counted_when_the_expectation_says_keep(tmp_path):
    # Identical texts the rule judge must merge, labelled "keep": the scorer flags the merge.
    path = _write_jsonl(
        tmp_path / "cases.jsonl",
        [
            {
                "id": "X1",
                "cluster": [_member("a", "Likes tea", 1), _member("b", "likes tea.", 2)],
                "expected": "KEEP_SEPARATE",
                "actions": [],
                "must_keep": [],
            }
        ],
    )
    out = StringIO()

    with pytest.raises(CommandError, match="1 case"):
        call_command("eval_judge", "--golden", str(path), "--judge", "rules", stdout=out)

    lines = out.getvalue().splitlines()
    assert lines[-1] == "correct=0/1 harmful=1"
    assert "     harm: merge a+b joins a+b, expected apart" in lines


def test_survivor_and_must_keep_decide_correctness(tmp_path):
    path = _write_jsonl(
        tmp_path / "cases.jsonl",
        [
            {
                "id": "X2",
                "cluster": [_member("a", "Likes tea", 1, pinned=True), _member("b", "likes tea.", 2)],
                "expected": "PROTECTED",
                "actions": [{"action": "merge", "ids": ["a", "b"], "survivor": "a"}],
                "must_keep": ["tea"],
            }
        ],
    )

    report = scoring.score_golden(
        scoring.load_cases(path), client=get_judge_client("rules"), embedder=LocalEmbedder()
    )

    assert [(r.applied, r.correct, r.harms) for r in report.results] == [(("merge a+b",), True, ())]


def test_a_golden_file_with_no_case_is_an_error_not_a_score_of_0_of_0(tmp_path):
    path = tmp_path / "empty.jsonl"
    path.write_text("\n  \n", encoding="utf-8")

    with pytest.raises(CommandError) as info:
        call_command("eval_judge", "--golden", str(path), stdout=StringIO())

    assert str(info.value) == scoring.NO_CASES.format(path=path)


def test_bad_golden_file_is_a_one_line_error(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"id": "X", "cluster": []}\n', encoding="utf-8")

    with pytest.raises(CommandError) as info:
        call_command("eval_judge", "--golden", str(path), stdout=StringIO())

    assert str(info.value) == scoring.BAD_FILE.format(path=path, line=1, problem="field 'expected' is missing")
    assert "\n" not in str(info.value)


def test_pairs_without_their_truths_file_is_a_one_line_error(tmp_path):
    path = _write_jsonl(tmp_path / "x.pairs.jsonl", [])

    with pytest.raises(CommandError) as info:
        call_command("eval_judge", "--pairs", str(path), stdout=StringIO())

    assert str(info.value) == pair_scoring.NO_TRUTHS_FILE.format(path=path, truths=tmp_path / "x.truths.jsonl")


def test_pairs_are_scored_through_embedding_clustering_and_the_judge(tmp_path):
    truths = [
        {"user": "p1", "content": c, "origin": "promoted", "created_at": f"2024-01-01T09:0{i}:00Z", "source": f"s{i}"}
        for i, c in enumerate(["i have a dog.", "I have a dog", "i love jazz music.", "i work as a nurse."])
    ]
    _write_jsonl(tmp_path / "d.truths.jsonl", truths)
    texts = [t["content"] for t in truths]
    pairs = [
        {
            "user": "p1",
            "a": a,
            "b": b,
            "label": "same" if {a, b} == {texts[0], texts[1]} or {a, b} == {texts[2], texts[3]} else "different",
        }
        for i, a in enumerate(texts)
        for b in texts[i + 1 :]
    ]
    path = _write_jsonl(tmp_path / "d.pairs.jsonl", pairs)

    lines = _eval("--pairs", str(path), "--threshold", "0.75", "--judge", "rules")

    # The two dog lines merge (same words); jazz/nurse is labelled "same" but never merges.
    assert lines[-1] == "pairs=6 same=2 tp=1 fp=0 fn=1 precision=1.000 recall=0.500 f1=0.667"
    assert ClusterReview.objects.count() == 0 and Truth.all_objects.count() == 0


@pytest.mark.slow
def test_personachat_pairs_score_with_the_rule_judge(shared_dir):
    lines = _eval(
        "--pairs",
        str(shared_dir / "data" / "personachat_revised.pairs.jsonl"),
        "--threshold",
        "0.75",
        "--judge",
        "rules",
    )

    assert lines[-1].startswith("pairs=2908 same=324 ")
    assert "fp=0 " in lines[-1]
