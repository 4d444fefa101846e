"""Mining's novelty check (``hygiene/recheck``): a proposal near a stored truth the mining call
did not offer, and every carried proposal, is shown beside its nearest stored truths before it
is added. Through litellm against the scripted stub."""

from __future__ import annotations

from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.utils import timezone

from iris_consolidation.embeddings import get_embedder
from iris_consolidation.exceptions import JudgeResponseInvalid
from iris_consolidation.llm import get_judge_client
from iris_consolidation.llm import hygiene as prompts
from iris_consolidation.models import ConsolidationRun, StageResult, Truth
from iris_consolidation.services.hygiene import mining, recheck, stages
from iris_consolidation.services.pipeline import forecast
from tests import llm_stub
from tests.services.hygiene.test_mining import make_session, started
from tests.services.hygiene.test_mining_novelty import live

pytestmark = pytest.mark.django_db

DOGS = "Has two dogs: Toby and Buddy"
#: Says what DOGS says in other words: the local check lets it through (cosine 0.87, "pair" and
#: "owns" not in DOGS).
DOGS_AGAIN = "Owns a pair of dogs named Toby and Buddy"


@pytest.fixture
def ana(user_factory, truth_factory):
    """Ana's stored truths name her; a session of hers an hour ago (test_mining_novelty's)."""
    user = user_factory("ana")
    embedder = get_embedder()
    for text in ("Ana lives in Porto", "Ana works as a nurse", "Ana has two cats", "Ana is training for a marathon"):
        truth_factory(text, user=user, embedding=embedder.embed([text])[0])
    make_session(user, "s1", at=timezone.now() - timedelta(hours=1),
                 messages=[("user", "My two cats keep me busy, and I started playing the clarinet.")])
    return user


def mine(run, user):
    return stages.run_mine(run, user.pk, embedder=get_embedder(), client=get_judge_client("llm"))


def checks_sent(llm_server):
    return [r for r in llm_server.chat_requests() if llm_stub.is_check_call(r["json"])]


@pytest.fixture
def bo(user_factory, llm_server, run_factory, settings):
    """Bo's first pass under a cap of one: the newer session's DOGS is added, the older
    session's DOGS_AGAIN carried to the next pass."""
    user = user_factory("bo")
    now = timezone.now()
    make_session(user, "old", at=now - timedelta(days=3), messages=[("user", "I own a pair of dogs, Toby and Buddy.")])
    make_session(user, "new", at=now - timedelta(days=1), messages=[("user", "I have two dogs now, Toby and Buddy.")])
    llm_server.handler = llm_stub.mining_by_text(
        {"pair": [llm_stub.mined(DOGS_AGAIN)], "two dogs": [llm_stub.mined(DOGS)]}
    )
    settings.IRIS_CONSOLIDATION_MAX_NEW_TRUTHS = 1
    first = mine(started(run_factory(since="7d")), user)
    assert live(user) == {DOGS}
    assert [f["content"] for f in first.findings[1:] if f.get("carry")] == [DOGS_AGAIN]
    return user


def test_a_carried_restatement_is_not_added(bo, llm_server, run_factory):
    llm_server.handler = llm_stub.mining_by_text({}, check=llm_stub.check_by_text({"pair": ("restates", DOGS)}))
    again = mine(started(run_factory(since=timezone.now().isoformat())), bo)

    assert live(bo) == {DOGS}
    dogs = Truth.objects.get(content=DOGS)
    (finding,) = again.findings[1:]
    assert finding["why"] == f"novelty check: restates truth #{dogs.pk} (scripted)"
    assert "carry" not in finding  # answered: nothing left to carry
    (sent,) = checks_sent(llm_server)
    proposal = llm_stub.StubLLMServer.data_of(sent)["proposals"][0]
    assert proposal["content"] == DOGS_AGAIN and [s["content"] for s in proposal["stored"]] == [DOGS]
    assert again.findings[0]["checks"] == 1
    assert mining.user_ids_to_mine(started(run_factory(since=timezone.now().isoformat()))) == []


@pytest.mark.parametrize("reply", [llm_stub.text('{"answers": [{"id": "p1", '), llm_stub.error(500)],
                         ids=["broken JSON", "500"])
def test_a_failed_check_adds_nothing_and_carries_the_proposal_again(bo, llm_server, run_factory, reply):
    llm_server.handler = llm_stub.mining_by_text({}, check=lambda payload: reply)
    failed = mine(started(run_factory(since=timezone.now().isoformat())), bo)

    assert live(bo) == {DOGS}
    (finding,) = failed.findings[1:]
    assert finding["carry"] is True
    assert finding["why"].startswith("not checked (the check failed: ")
    assert finding["why"].endswith("proposed again at the next pass")
    # The next pass checks it again, and adds it when the check finds it new.
    llm_server.handler = llm_stub.mining_by_text({})
    mine(started(run_factory(since=timezone.now().isoformat())), bo)
    assert live(bo) == {DOGS, DOGS_AGAIN}


def test_a_proposal_the_check_leaves_out_is_carried(bo, llm_server, run_factory):
    llm_server.handler = llm_stub.mining_by_text({}, check=lambda payload: llm_stub.text('{"answers": []}'))
    result = mine(started(run_factory(since=timezone.now().isoformat())), bo)
    assert live(bo) == {DOGS}
    assert [(f["why"], f.get("carry")) for f in result.findings[1:]] == [
        (recheck.SKIP_UNCHECKED.format(why=recheck.NO_ANSWER), True)
    ]


def test_a_fresh_proposal_near_a_truth_the_model_was_not_shown_is_checked(llm_server, ana, run_factory, settings):
    """The mining call offers no known truth: "Ana was promoted to head nurse" (cosine 0.87 to
    "Ana works as a nurse") goes to the check; the clarinet, near no stored truth, does not."""
    settings.IRIS_CONSOLIDATION_MINING_KNOWN_TRUTHS = 0
    llm_server.handler = llm_stub.mining_by_text(
        {"clarinet": [llm_stub.mined("Ana was promoted to head nurse"), llm_stub.mined("Ana plays the clarinet")]},
        check=llm_stub.check_by_text({"head nurse": ("restates", "Ana works as a nurse")}),
    )
    result = mine(started(run_factory(since="7d")), ana)

    assert "Ana plays the clarinet" in live(ana) and "Ana was promoted to head nurse" not in live(ana)
    (sent,) = checks_sent(llm_server)
    assert [p["content"] for p in llm_stub.StubLLMServer.data_of(sent)["proposals"]] == [
        "Ana was promoted to head nurse"
    ]
    nurse = Truth.objects.get(content="Ana works as a nurse")
    skipped = {f["content"]: f["why"] for f in result.findings[1:] if f["outcome"] == "skipped"}
    assert skipped == {"Ana was promoted to head nurse": f"novelty check: restates truth #{nurse.pk} (scripted)"}
    # Its spend is the run's, as a stage call (the stub's usage: 70 tokens a call).
    assert ConsolidationRun.objects.get().stage_calls == 2


def test_a_change_the_check_finds_is_judged_beside_the_truth_and_superseded(llm_server, ana, settings):
    settings.IRIS_CONSOLIDATION_MINING_KNOWN_TRUTHS = 0
    llm_server.handler = llm_stub.mining_by_text(
        {"clarinet": [llm_stub.mined("Ana was promoted to head nurse")]},
        check=llm_stub.check_by_text({"head nurse": ("changes", "Ana works as a nurse")}),
        judge=llm_stub.supersede_when_asked,
    )
    llm_server.second_looks = "confirm"
    call_command("consolidate_truths", "--sync", "--full", "--threshold", "0.99", stdout=StringIO())

    head = Truth.objects.get(content="Ana was promoted to head nurse")
    nurse = Truth.all_objects.get(content="Ana works as a nurse")
    assert nurse.superseded_by_id == head.pk
    finding = next(f for f in StageResult.objects.get(stage="mine").findings[1:] if f["outcome"] == "added")
    assert finding["changes"] == nurse.pk
    assert finding["reason"].endswith(f"the novelty check found it changes truth #{nurse.pk}: scripted")


def test_parse_check_keeps_only_answers_naming_the_proposals_own_truths():
    answers = prompts.parse_check(
        '{"answers": [{"id": "p1", "answer": "restates", "truth": "s1", "reason": "same"},'
        ' {"id": "p2", "answer": "changes", "truth": "s1"}, {"id": "p3", "answer": "maybe"},'
        ' {"id": "p4", "answer": "new", "truth": "s2"}, {"id": "p5", "answer": "new"}, {"id": "p5", "answer": "new"}]}',
        offered={"p1": {"s1"}, "p2": {"s2"}, "p3": {"s1"}, "p4": {"s2"}, "p5": set()},
    )
    assert answers == {
        "p1": prompts.CheckAnswer(answer="restates", truth="s1", reason="same"),
        "p4": prompts.CheckAnswer(answer="new", truth="", reason=""),
    }
    with pytest.raises(JudgeResponseInvalid):
        prompts.parse_check('{"checks": []}', offered={})


def test_the_estimate_counts_the_check_of_a_carried_proposal_as_a_pass_sends_it(bo, llm_server, settings):
    """No session in the window: the estimate builds the carried proposal's check as the pass
    builds it (its tokens counted on it), expects no mining call's check or change pair."""
    settings.IRIS_CONSOLIDATION_MODEL = "openai/gpt-4o-mini"  # priced in litellm's local map
    now = timezone.now().isoformat()
    out = StringIO()
    call_command("consolidate_truths", "--estimate", "--since", now, stdout=out)
    line = out.getvalue()
    before = len(llm_server.chat_requests())
    call_command("consolidate_truths", "--sync", "--since", now, stdout=StringIO())

    import litellm

    (sent,) = checks_sent(llm_server)
    assert len(llm_server.chat_requests()) > before
    tokens = litellm.token_counter(model="openai/gpt-4o-mini", messages=sent["json"]["messages"])
    completion = forecast.CHECK_COMPLETION_TOKENS_PER_PROPOSAL  # one proposal
    assert f"mine calls=0 tokens 0+~0, check calls=1 tokens {tokens}+~{completion}," in line
    assert "mined change pairs" not in line
    assert live(bo) == {DOGS, DOGS_AGAIN}  # the stub's check: new
