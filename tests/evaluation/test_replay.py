"""Replaying a real model's recorded replies: clusters matched by their members' contents
(ids change with batching), unmatched clusters kept and counted as misses, second looks
answered from a recording or by the bound asked for, and ``eval_judge --recorded`` end to
end through litellm into the real pipeline."""

from __future__ import annotations

import json
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from iris_consolidation.evaluation import replay
from iris_consolidation.exceptions import InvalidInput
from iris_consolidation.llm import hygiene
from iris_consolidation.services.hygiene import withheld


def _judge_call(clusters: list[list[tuple[str, str]]], answers: list[list[dict[str, Any]]]) -> dict[str, Any]:
    """One recorded judge call: clusters of (alias, content), and each cluster's actions."""
    sent = {
        "clusters": [
            {
                "id": f"c{i}",
                "truths": [
                    {"id": a, "content": c, "created_at": "2026-01-01T00:00:00Z", "generation": 0, "protected": False}
                    for a, c in cluster
                ],
            }
            for i, cluster in enumerate(clusters, 1)
        ]
    }
    reply = {"clusters": [{"id": f"c{i}", "actions": a, "reasoning": "rec"} for i, a in enumerate(answers, 1)]}
    return {
        "set": "golden",
        "contract": "judge",
        "prompt_version": "judge-test",
        "messages": [
            {"role": "system", "content": "..."},
            {"role": "user", "content": f"<truths>\n{json.dumps(sent)}\n</truths>"},
        ],
        "reply": json.dumps(reply),
    }


def _incoming(*clusters: list[tuple[str, str]]) -> list[dict[str, Any]]:
    return _judge_call(list(clusters), [[] for _ in clusters])["messages"]


MERGE = {
    "action": "merge",
    "ids": ["t1", "t2"],
    "content": "Has a son named Tomas",
    "reason": "'father of a boy' = 'son'",
}


def test_a_cluster_is_matched_by_its_contents_whatever_its_aliases_and_order():
    recordings = replay.Recordings()
    recordings.add(
        _judge_call([[("t1", "Has a son named Tomas"), ("t2", "Is the father of a boy called Tomas")]], [[MERGE]])
    )
    server = replay.ReplayServer(recordings)

    # Batched behind another cluster: aliases t3, t4, in the other order.
    answer = json.loads(
        server.answer(
            _incoming(
                [("t1", "Likes tea"), ("t2", "Enjoys tea")],
                [("t3", "Is the father of a boy called Tomas"), ("t4", "Has a son named Tomas")],
            )
        )
    )

    first, second = answer["clusters"]
    assert first == {"id": "c1", "actions": [], "reasoning": "no recorded reply"}
    assert second["actions"] == [{**MERGE, "ids": ["t4", "t3"]}]
    assert (server.stats.matched, server.stats.missed, server.stats.proposed_total) == (1, 1, 1)


def test_a_second_look_is_answered_from_its_recording_else_by_the_bound():
    check = {"id": "v1", "action": "merge", "truths": [{"id": "t1", "content": "A"}, {"id": "t2", "content": "B"}]}
    recordings = replay.Recordings()
    recordings.add(
        {
            "contract": "second_look",
            "messages": [
                {
                    "role": "user",
                    "content": f"<checks>\n{json.dumps({'checks': [{**check, 'content': 'A; B'}]})}\n</checks>",
                }
            ],
            "reply": json.dumps({"checks": [{"id": "v1", "verdict": "withdraw", "reason": "two facts"}]}),
        }
    )
    server = replay.ReplayServer(recordings, second_looks="confirm")

    def ask(content: str) -> dict[str, Any]:
        message = f"<checks>\n{json.dumps({'checks': [{**check, 'id': 'v7', 'content': content}]})}\n</checks>"
        return json.loads(server.answer([{"role": "user", "content": message}]))["checks"][0]

    assert ask("A; B") == {"id": "v7", "verdict": "withdraw", "reason": "two facts"}
    assert ask("A and B")["verdict"] == "confirm"
    assert dict(server.stats.second_looks) == {"recorded withdraw": 1, "confirm": 1}


def test_a_bad_recording_file_is_a_clear_error(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"messages": []}\nnot json\n')
    with pytest.raises(InvalidInput, match=r"bad.jsonl:1: .*'reply'"):
        replay.load_recordings([path])
    with pytest.raises(InvalidInput, match="no such recording file"):
        replay.load_recordings([tmp_path / "missing.jsonl"])


def _case(case_id: str, contents: tuple[str, str], expected: str, actions: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "id": case_id,
        "cluster": [
            {
                "id": alias,
                "content": c,
                "origin": "promoted",
                "pinned": False,
                "generation": 0,
                "score": 1,
                "created_at": f"2026-01-0{i}T09:00:00Z",
            }
            for i, (alias, c) in enumerate(zip("ab", contents, strict=True), 1)
        ],
        "expected": expected,
        "actions": actions,
        "must_keep": [],
    }


@pytest.mark.django_db
def test_eval_judge_recorded_replays_through_litellm_and_scores_both_bounds(tmp_path: Path):
    cases = tmp_path / "cases.jsonl"
    son = ("Has a son named Tomas", "Is the father of a boy called Tomas")
    jazz = ("Enjoys jazz", "Does not enjoy jazz")
    cases.write_text(
        json.dumps(_case("C1", son, "MERGE", [{"action": "merge", "ids": ["a", "b"]}]))
        + "\n"
        + json.dumps(_case("C2", jazz, "KEEP_SEPARATE", []))
        + "\n"
    )
    # Fused, not set side by side (that an invariant refuses): the polarity signal decides.
    joined = {"action": "merge", "ids": ["t1", "t2"], "content": "Enjoys and does not enjoy jazz", "reason": "same"}
    recording = tmp_path / "recorded.jsonl"
    recording.write_text(
        json.dumps(_judge_call([[("t1", son[0]), ("t2", son[1])]], [[MERGE]]))
        + "\n"
        + json.dumps(_judge_call([[("t1", jazz[0]), ("t2", jazz[1])]], [[joined]]))
        + "\n"
    )
    out = StringIO()

    with pytest.raises(CommandError, match="1 case"):  # the confirmed bound lets the careless join through
        call_command("eval_judge", "--recorded", str(recording), "--data", str(cases), stdout=out)

    text = out.getvalue()
    confirm, withdraw = text.split("== ")[1:]
    assert "second looks without a recording: confirm" in confirm and "correct=1/2 harmful=1" in confirm
    assert "sent to the second look 1 (50.0%)" in confirm
    assert "second looks without a recording: withdraw" in withdraw and "correct=2/2 harmful=0" in withdraw
    assert "refused by code: second_look_withdrawn=1" in withdraw
    assert "clusters matched 2, missed 0" in withdraw


def test_eval_judge_data_goes_with_one_recording(tmp_path):
    with pytest.raises(CommandError, match="one --recorded file"):
        call_command("eval_judge", "--recorded", "a.jsonl", "b.jsonl", "--data", "c.jsonl", stdout=StringIO())


@pytest.mark.django_db
def test_eval_judge_also_replays_new_replies_joined_to_their_requests(tmp_path: Path):
    """A model answerer's replies file (``{"id", "reply"}``) is read with the requests file
    beside it and answers the groups the first recording misses; the first file's reply
    wins where both record a cluster."""
    cases = tmp_path / "cases.jsonl"
    son = ("Has a son named Tomas", "Is the father of a boy called Tomas")
    tea = ("Likes green tea", "Likes green tea a lot")
    cases.write_text(
        json.dumps(_case("C1", son, "MERGE", [{"action": "merge", "ids": ["a", "b"]}]))
        + "\n"
        + json.dumps(_case("C2", tea, "MERGE", [{"action": "merge", "ids": ["a", "b"]}]))
        + "\n"
    )
    recording = tmp_path / "recorded.jsonl"
    recording.write_text(json.dumps(_judge_call([[("t1", son[0]), ("t2", son[1])]], [[MERGE]])) + "\n")
    tea_merge = {"action": "merge", "ids": ["t1", "t2"], "content": "Likes green tea a lot", "reason": "same"}
    new_son = _judge_call([[("t1", son[0]), ("t2", son[1])]], [[]])  # a later "keep": the first file wins
    new_tea = _judge_call([[("t1", tea[0]), ("t2", tea[1])]], [[tea_merge]])
    requests = tmp_path / "new.requests.jsonl"
    requests.write_text(
        "".join(json.dumps({"id": f"r{i}", "messages": c["messages"]}) + "\n" for i, c in enumerate((new_son, new_tea)))
    )
    replies = tmp_path / "new.replies.jsonl"
    replies.write_text(
        "".join(json.dumps({"id": f"r{i}", "reply": c["reply"]}) + "\n" for i, c in enumerate((new_son, new_tea)))
    )
    out = StringIO()

    call_command(
        "eval_judge",
        "--recorded",
        str(recording),
        "--also",
        str(replies),
        "--data",
        str(cases),
        "--second-looks",
        "confirm",
        stdout=out,
    )

    text = out.getvalue()
    assert f"== {recording} with {replies} (set golden)" in text
    assert "clusters matched 2, missed 0" in text
    assert "correct=2/2 harmful=0" in text


def test_a_replies_file_needs_its_requests_and_each_id(tmp_path):
    replies = tmp_path / "new.replies.jsonl"
    replies.write_text(json.dumps({"id": "r9", "reply": "{}"}) + "\n")
    with pytest.raises(InvalidInput, match=r"new.requests.jsonl, which is missing"):
        replay.load_recordings([replies])
    (tmp_path / "new.requests.jsonl").write_text(json.dumps({"id": "r1", "messages": []}) + "\n")
    with pytest.raises(InvalidInput, match=r"new.replies.jsonl:1: .*no request with this id"):
        replay.load_recordings([replies])
    with pytest.raises(CommandError, match="give --recorded FILE"):
        call_command("eval_judge", "--golden", "g.jsonl", "--also", str(replies), stdout=StringIO())


def test_only_the_stages_a_recording_holds_no_call_of_are_withheld():
    judge_only = replay.Recordings()
    judge_only.add(_judge_call([[("t1", "Has a son"), ("t2", "Has a boy")]], [[]]))
    with_promote = replay.Recordings()
    with_promote.add(_judge_call([[("t1", "Has a son"), ("t2", "Has a boy")]], [[]]))
    # A promotion call recorded without a ``contract``: known by its system prompt.
    with_promote.add({"messages": hygiene.messages_for(hygiene.PROMOTE_SYSTEM, {"candidates": []}), "reply": "{}"})

    assert replay.unrecorded_stages(judge_only) == ("mine", "noise", "relocate", "promote")
    assert replay.unrecorded_stages(with_promote) == ("mine", "noise", "relocate")
    with withheld.withholding(replay.unrecorded_stages(with_promote)):
        assert withheld.is_withheld("relocate") and not withheld.is_withheld("promote")
    assert not withheld.is_withheld("relocate")


@pytest.mark.django_db
def test_eval_judge_writes_the_calls_a_recording_does_not_answer_for_a_model_to_answer(tmp_path: Path):
    """An empty recording with ``--data`` writes every judge call the cases make; a model's
    replies to them, joined by ``benchmarks/join_recording.py``, then answer every cluster
    and leave nothing unanswered."""
    import subprocess
    import sys

    cases = tmp_path / "cases.jsonl"
    son = ("Has a son named Tomas", "Is the father of a boy called Tomas")
    cases.write_text(json.dumps(_case("C1", son, "MERGE", [{"action": "merge", "ids": ["a", "b"]}])) + "\n")
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    requests = tmp_path / "first.requests.jsonl"

    def run(recording: Path) -> str:
        out = StringIO()
        call_command("eval_judge", "--recorded", str(recording), "--data", str(cases), "--second-looks", "withdraw",
                     "--unanswered", str(requests), stdout=out)
        return out.getvalue()

    assert f"1 unanswered call(s) -> {requests}" in run(empty)
    [row] = [json.loads(line) for line in requests.read_text().splitlines()]
    assert row["id"] == "first-001" and row["messages"][0]["role"] == "system"
    sent = json.loads(row["messages"][-1]["content"].split("<truths>\n")[1].split("\n</truths>")[0])
    [cluster] = sent["clusters"]
    assert sorted(t["content"] for t in cluster["truths"]) == sorted(son)
    aliases = [t["id"] for t in cluster["truths"]]
    merge = {"action": "merge", "ids": aliases, "content": "Has a son named Tomas",
             "reason": "'is the father of a boy called' = 'has a son named'"}
    reply = {"clusters": [{"id": cluster["id"], "actions": [merge], "reasoning": "same son"}]}
    replies = tmp_path / "first.replies.jsonl"
    replies.write_text(json.dumps({"id": row["id"], "reply": json.dumps(reply)}) + "\n")
    joined = tmp_path / "joined.jsonl"
    script = Path(__file__).resolve().parents[2] / "benchmarks" / "join_recording.py"
    subprocess.run([sys.executable, str(script), "--set", "golden", "--model", "m", str(joined), str(replies)],
                   check=True, capture_output=True)
    [recorded] = [json.loads(line) for line in joined.read_text().splitlines()]
    assert (recorded["set"], recorded["contract"], recorded["model"]) == ("golden", "judge", "m")
    assert recorded["messages"] == row["messages"] and recorded["reply"] == json.dumps(reply)

    text = run(joined)
    assert "clusters matched 1, missed 0" in text and "correct=1/1 harmful=0" in text
    assert f"0 unanswered call(s) -> {requests}" in text


def test_a_data_file_that_is_not_there_is_named_as_given(tmp_path: Path):
    recording = tmp_path / "golden.jsonl"
    with pytest.raises(InvalidInput, match=r"^--data .*cases.jsonl: no such file\.$"):
        replay.data_for(recording, "golden", tmp_path / "cases.jsonl")
    with pytest.raises(InvalidInput, match=r"its data file .*judge_golden.jsonl is missing; give it with --data"):
        replay.data_for(recording, "golden")
