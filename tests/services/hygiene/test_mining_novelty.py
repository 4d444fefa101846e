"""Mining adds only what is new: proposals compared by meaning with the user's stored
truths, written in their style, a change judged beside the truth it changes, the cap
keeping the newest and proposing the rest again. Through litellm against the scripted
stub (``llm_stub.mining_by_text``) and offline."""

from __future__ import annotations

from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.utils import timezone

from iris_consolidation.embeddings import get_embedder
from iris_consolidation.llm import get_judge_client
from iris_consolidation.llm import hygiene as prompts
from iris_consolidation.models import RetiredReason, StageResult, Truth
from iris_consolidation.services.hygiene import mining, novelty, stages
from iris_consolidation.services.pipeline.clustering import CandidateCluster
from tests import llm_stub
from tests.services.hygiene.test_mining import make_session, started

pytestmark = pytest.mark.django_db


@pytest.fixture
def ana(user_factory, truth_factory):
    """Ana's stored truths name her ("Ana ..."); a session of hers an hour ago."""
    user = user_factory("ana")
    embedder = get_embedder()
    for text in ("Ana lives in Porto", "Ana works as a nurse", "Ana has two cats", "Ana is training for a marathon"):
        truth_factory(text, user=user, embedding=embedder.embed([text])[0])
    make_session(
        user,
        "s1",
        at=timezone.now() - timedelta(hours=1),
        messages=[
            ("user", "My two cats keep me busy, and I started playing the clarinet."),
            ("other", "Nice!"),
            ("user", "Also, I ran my first marathon last month!"),
        ],
    )
    return user


def mine(run, user):
    return stages.run_mine(run, user.pk, embedder=get_embedder(), client=get_judge_client("llm"))


def judged_clusters(llm_server):
    """Every cluster the judge was sent, in order (``{"id", "truths"}`` as on the wire)."""
    return [c for r in llm_server.chat_requests() if llm_stub.is_judge_call(r["json"])
            for c in llm_stub.StubLLMServer.clusters_of(r)]


def live(user):
    return set(Truth.objects.filter(user=user).values_list("content", flat=True))


def test_a_new_fact_is_added_and_a_restatement_is_not(llm_server, ana, run_factory):
    llm_server.handler = llm_stub.mining_by_text(
        {
            "clarinet": [
                llm_stub.mined("Has two cats", evidence=("m1",)),  # the stored twin, without the name
                llm_stub.mined("Ana plays the clarinet", evidence=("m1",)),
            ],
        }
    )
    result = mine(started(run_factory(since="7d")), ana)

    assert live(ana) == {
        "Ana lives in Porto",
        "Ana works as a nurse",
        "Ana has two cats",
        "Ana is training for a marathon",
        "Ana plays the clarinet",
    }
    cats = Truth.objects.get(content="Ana has two cats")
    skipped = {f["content"]: f["why"] for f in result.findings[1:] if f["outcome"] == "skipped"}
    assert skipped["Has two cats"].startswith(f"restates truth #{cats.pk}: every word of it is there")
    data = llm_stub.StubLLMServer.data_of(llm_server.chat_requests()[0])
    # The model is told how her truths name her, and sees the stored truths nearest to what she said.
    assert data["subject"] == "Ana"
    assert {k["content"] for k in data["known"]} == {
        "Ana lives in Porto",
        "Ana works as a nurse",
        "Ana has two cats",
        "Ana is training for a marathon",
    }


def test_a_change_is_judged_beside_the_truth_it_changes_and_superseded(llm_server, ana):
    """At a threshold no pair reaches (and no attribute joins a plan and its outcome), the
    only group the judge sees is the change and the truth it changes; a judge that
    supersedes when asked retires the plan."""
    llm_server.handler = llm_stub.mining_by_text(
        {
            "marathon": [
                llm_stub.mined(
                    "Ana ran her first marathon in November 2026",
                    evidence=("m3",),
                    changes="Ana is training for a marathon",
                )
            ]
        },
        judge=llm_stub.supersede_when_asked,
    )
    llm_server.second_looks = "confirm"
    call_command("consolidate_truths", "--sync", "--full", "--threshold", "0.99", stdout=StringIO())

    ran = Truth.objects.get(content="Ana ran her first marathon in November 2026")
    training = Truth.all_objects.get(content="Ana is training for a marathon")
    assert training.retired_at is not None and training.superseded_by_id == ran.pk
    groups = [sorted(t["content"] for t in c["truths"]) for c in judged_clusters(llm_server)]
    assert groups == [["Ana is training for a marathon", "Ana ran her first marathon in November 2026"]]
    finding = next(f for f in StageResult.objects.get(stage="mine").findings[1:] if f["outcome"] == "added")
    assert finding["changes"] == training.pk


def test_the_judge_is_told_which_truth_a_mined_change_changes(llm_server, ana):
    """"Works as a midwife" states no change word; the judge sees the miner's mark
    (``"changes"``: the nurse truth's alias), and the validator takes it in place of a
    change word, so the supersede goes to the second look, which confirms it here."""
    llm_server.handler = llm_stub.mining_by_text(
        {"clarinet": [llm_stub.mined("Ana works as a midwife", evidence=("m1",), changes="Ana works as a nurse")]},
        judge=llm_stub.supersede_when_asked,
    )
    llm_server.second_looks = "confirm"
    call_command("consolidate_truths", "--sync", "--full", "--threshold", "0.99", stdout=StringIO())

    midwife = Truth.objects.get(content="Ana works as a midwife")
    nurse = Truth.all_objects.get(content="Ana works as a nurse")
    assert nurse.superseded_by_id == midwife.pk
    [cluster] = judged_clusters(llm_server)
    by_content = {t["content"]: t for t in cluster["truths"]}
    assert by_content["Ana works as a midwife"]["changes"] == by_content["Ana works as a nurse"]["id"]
    assert "changes" not in by_content["Ana works as a nurse"]


def test_without_changes_the_same_truth_is_new_and_not_judged_beside_the_old_one(llm_server, ana):
    llm_server.handler = llm_stub.mining_by_text(
        {"marathon": [llm_stub.mined("Ana ran her first marathon in November 2026", evidence=("m3",))]},
        judge=llm_stub.supersede_when_asked,
    )
    call_command("consolidate_truths", "--sync", "--full", "--threshold", "0.99", stdout=StringIO())

    assert {"Ana is training for a marathon", "Ana ran her first marathon in November 2026"} <= live(ana)
    groups = [sorted(t["content"] for t in c["truths"]) for c in judged_clusters(llm_server)]
    assert ["Ana is training for a marathon", "Ana ran her first marathon in November 2026"] not in groups


def test_a_superseded_habit_is_not_revived_unless_the_model_declares_a_change(
    llm_server, ana, run_factory, truth_factory
):
    embedder = get_embedder()
    quit_ = truth_factory("Ana quit coffee", user=ana, embedding=embedder.embed(["Ana quit coffee"])[0])
    habit = truth_factory(
        "Ana drinks coffee every morning", user=ana, embedding=embedder.embed(["Ana drinks coffee every morning"])[0]
    )
    Truth.all_objects.filter(pk=habit.pk).update(
        retired_at=timezone.now(), retired_reason=RetiredReason.SUPERSEDED, superseded_by=quit_
    )
    llm_server.handler = llm_stub.mining_by_text({"clarinet": [llm_stub.mined("Drinks coffee every morning")]})
    result = mine(started(run_factory(since="7d")), ana)
    assert "Drinks coffee every morning" not in live(ana)
    why = result.findings[1]["why"]
    assert why.startswith(f"restates truth #{habit.pk}: every word of it is there") and why.endswith(
        ", retired (superseded)"
    )
    # Declared as a change of the live "quit": the old value stated again is new, and judged beside it.
    llm_server.handler = llm_stub.mining_by_text(
        {"clarinet": [llm_stub.mined("Ana drinks coffee every morning again", changes="Ana quit coffee")]}
    )
    mine(started(run_factory(since="7d")), ana)
    assert "Ana drinks coffee every morning again" in live(ana)


def test_a_change_naming_a_truth_not_offered_is_refused(llm_server, ana, run_factory):
    llm_server.handler = lambda payload: llm_stub.text(
        '{"truths": [{"content": "Ana lives in Berlin", "kind": "fact", "confidence": "high", '
        '"evidence": ["m3"], "changes": "k99", "reason": "moved"}]}'
    )
    result = mine(started(run_factory(since="7d")), ana)

    assert "Ana lives in Berlin" not in live(ana)
    assert [f["why"] for f in result.findings[1:]] == [
        "model reply refused: changes names a truth that was not offered"
    ]


def test_the_cap_keeps_the_newest_and_proposes_the_rest_again(llm_server, user_factory, run_factory, settings):
    user = user_factory("bo")
    now = timezone.now()
    make_session(user, "old", at=now - timedelta(days=3), messages=[("user", "I had no pets back then.")])
    make_session(user, "new", at=now - timedelta(days=1), messages=[("user", "I have two dogs now, Toby and Buddy.")])
    llm_server.handler = llm_stub.mining_by_text(
        {
            "no pets": [llm_stub.mined("Has no pets", evidence=("m1",))],
            "two dogs": [llm_stub.mined("Has two dogs: Toby and Buddy", evidence=("m1",))],
        }
    )
    settings.IRIS_CONSOLIDATION_MAX_NEW_TRUTHS = 1
    first = mine(started(run_factory(since="7d")), user)
    assert live(user) == {"Has two dogs: Toby and Buddy"}
    assert [(f["content"], f.get("carry")) for f in first.findings[1:] if f["outcome"] == "skipped"] == [
        ("Has no pets", True)
    ]

    # The next pass's window holds no session: what the cap skipped is proposed again, without a
    # mining call: the novelty check (scripted "new") sees it beside the stored truths first.
    calls = len(llm_server.chat_requests())
    later = started(run_factory(since=now.isoformat()))
    assert mining.user_ids_to_mine(later) == [user.pk]
    again = mine(later, user)
    assert live(user) == {"Has two dogs: Toby and Buddy", "Has no pets"}
    assert [(f["content"], f["outcome"], f["session"]) for f in again.findings[1:]] == [("Has no pets", "added", "old")]
    assert [llm_stub.is_check_call(r["json"]) for r in llm_server.chat_requests()[calls:]] == [True]
    # Nothing is left to carry: a third pass has no user to mine.
    assert mining.user_ids_to_mine(started(run_factory(since=now.isoformat()))) == []


def test_offline_mining_writes_in_the_stored_truths_style(ana, run_factory):
    make_session(
        ana,
        "s2",
        at=timezone.now() - timedelta(minutes=5),
        messages=[
            ("user", "I play chess."),
            ("user", "My favorite color is red."),
            ("user", "I have two cats."),
        ],
    )
    stages.run_mine(started(run_factory(since="7d")), ana.pk, embedder=get_embedder(), client=None)
    # "Has two cats" restates "Ana has two cats"; the others are new, in her truths' style.
    assert live(ana) - {
        "Ana lives in Porto",
        "Ana works as a nurse",
        "Ana has two cats",
        "Ana is training for a marathon",
    } == {"Ana plays chess", "Ana's favorite color is red"}


@pytest.mark.parametrize(
    ("text", "truth", "expected"),
    [
        ("Has four dogs", "Andrew has four dogs", True),
        ("Has 4 dogs", "Andrew has four dogs", True),
        ("Andrew loves hiking", "Andrew enjoys hiking in the mountains", True),
        ("Has two dogs", "Andrew has three dogs", False),
        ("Likes coffee", "Andrew does not like coffee", False),
        ("Lives in Berlin", "Andrew lives in Lisbon", False),
        ("Andrew adopted a puppy", "Andrew wants to adopt a puppy one day", True),
    ],
)
def test_restated_compares_words_numbers_and_negations(text, truth, expected):
    assert novelty.restated(text, truth, subject="Andrew") is expected


def test_subject_of_takes_the_name_the_truths_begin_with():
    assert novelty.subject_of(["Andrew has four dogs", "Andrew works at a bank", "The dog is called Toby"]) == "Andrew"
    assert novelty.subject_of(["Has four dogs", "Works at a bank", "Is tall"]) is None
    assert novelty.subject_of([]) is None
    assert novelty.subject_of(["I have a dog", "I live in Ohio", "My sister is a nurse"]) == "I"


def test_in_style_names_the_person_as_the_truths_do():
    assert novelty.in_style("Lives in Porto", "Ana") == "Ana lives in Porto"
    assert novelty.in_style("Their favorite color is red", "Ana") == "Ana's favorite color is red"
    assert novelty.in_style("Lives in Porto", None) == "Lives in Porto"
    assert novelty.in_style("Lives in Porto", "I") == "Lives in Porto"  # no verb is conjugated


def test_with_changes_adds_the_pair_unless_it_is_a_group_already():
    mine_result = StageResult(
        stage="mine",
        findings=[
            {"window": {}},
            {"outcome": "added", "truth_id": 7, "changes": 3, "changes_similarity": 0.31},
            {"outcome": "added", "truth_id": 8},
        ],
    )
    pair = CandidateCluster(user_id=1, member_ids=(7, 3), similarities=(1.0, 0.31))
    apart = [CandidateCluster(user_id=1, member_ids=(3, 4), similarities=(1.0, 0.8))]
    larger = [CandidateCluster(user_id=1, member_ids=(3, 4, 7), similarities=(1.0, 0.8, 0.7))]
    already = [CandidateCluster(user_id=1, member_ids=(3, 7), similarities=(1.0, 0.8))]
    # The pair first: decided before another group can merge the changed truth away.
    assert novelty.with_changes(apart, mine_result, user_id=1) == [pair, *apart]
    # Among a larger group the judge may miss the change: it is asked about the pair too.
    assert novelty.with_changes(larger, mine_result, user_id=1) == [pair, *larger]
    assert novelty.with_changes(already, mine_result, user_id=1) == already
    assert novelty.with_changes([*apart, *already], mine_result, user_id=1) == [*already, *apart]
    assert novelty.with_changes(apart, None, user_id=1) == apart


def test_the_prompt_asks_for_new_or_changed_truths_only():
    assert '"changes"' in prompts.MINING_SYSTEM and "NEW or CHANGED" in prompts.MINING_SYSTEM
    items, rejected = prompts.parse_mining(
        '{"truths": [{"content": "Lives in Berlin", "confidence": "high", "evidence": ["m1"], "changes": "k1"},'
        ' {"content": "Plays chess", "confidence": "high", "evidence": ["m1"], "changes": ["k1"]}]}',
        user_message_ids={"m1"},
        known_ids={"k1"},
    )
    assert [(i.content, i.changes) for i in items] == [("Lives in Berlin", "k1")]
    assert [r.why for r in rejected] == ["changes names a truth that was not offered"]
