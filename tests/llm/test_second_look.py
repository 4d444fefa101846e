"""The second look end to end: a model's action that passes every invariant but raises a
signal goes back to the model (through litellm, to the scripted server on 127.0.0.1) in
one call per batch; only a confirmation with a reason applies it."""

from __future__ import annotations

import json
from typing import Any

import pytest

from iris_consolidation.embeddings import LocalEmbedder
from iris_consolidation.llm import get_judge_client, second_look
from iris_consolidation.models import ClusterReview, LiveSettings, Truth
from iris_consolidation.services.pipeline.validation import Code
from iris_consolidation.services.run import decide
from tests import llm_stub
from tests.helpers import cluster_of, consolidate, judge_request, merge_action, merge_dict, supersede_dict, truth_state

pytestmark = pytest.mark.django_db

EMBEDDER = LocalEmbedder()
#: Joined without loss, a statement and its definition by a negation (they share no word): the
#: invariants pass, the polarity signal fires. (A statement and its opposite joined is refused
#: outright: ``validation_messages.SIDE_BY_SIDE``.)
DEFINITION = ("Is vegan", "Does not eat animal products")
JOINED = merge_dict(["t1", "t2"], "Is vegan; does not eat animal products", "a vegan eats no animal products")


def _run(llm_server: Any, truths: list[Truth], actions: list[dict[str, Any]]) -> ClusterReview:
    """One cluster of ``truths`` consolidated by the LLM judge answering ``actions``."""
    llm_server.script = [llm_stub.verdict(actions)]
    return consolidate(*truths, client=get_judge_client(), embedder=EMBEDDER)


@pytest.fixture
def definition(truth_factory: Any) -> list[Truth]:
    first = truth_factory(DEFINITION[0])
    return [first, truth_factory(DEFINITION[1], user=first.user)]


def test_a_flagged_merge_goes_to_one_second_look_with_a_neutral_question(llm_server, definition):
    llm_server.second_looks = "confirm"

    review = _run(llm_server, definition, [JOINED])

    judge_call, look = llm_server.chat_requests()
    assert "<truths>" in judge_call["json"]["messages"][-1]["content"]
    messages = look["json"]["messages"]
    assert messages[0]["content"] == second_look.SYSTEM_PROMPT
    (check,) = llm_stub.checks_of(look["json"])
    assert check["id"] == "v1" and check["action"] == "merge" and check["content"] == JOINED["content"]
    assert [t["content"] for t in check["truths"]] == list(DEFINITION)
    assert check["concern"] == "t1 and t2 differ in negation: 'not' stands in only one of them."
    # The truths are quoted data between tags, "<" escaped so a truth cannot close them.
    assert messages[-1]["content"].startswith("<checks>\n") and messages[-1]["content"].endswith("\n</checks>")
    assert review.outcome == ClusterReview.Outcome.APPLIED
    (entry,) = review.applied_actions
    assert entry["second_look"] == "scripted confirm"
    assert entry["signals"] == [{"code": Code.POLARITY, "concern": check["concern"]}]
    assert review.llm_calls == 2 and review.tokens == 140  # both calls: 2 x (50 + 20)


@pytest.mark.parametrize(
    ("answer", "code"),
    [
        ({"verdict": "withdraw", "reason": "one is the opposite of the other"}, Code.SECOND_LOOK_WITHDRAWN),
        ({"verdict": "confirm", "reason": ""}, Code.SECOND_LOOK_MISSING),  # a confirmation needs a reason
        ({"verdict": "maybe", "reason": "unsure"}, Code.SECOND_LOOK_MISSING),
        (None, Code.SECOND_LOOK_MISSING),  # the entry is left out
    ],
)
def test_only_a_confirmation_with_a_reason_applies(llm_server, definition, answer, code):
    llm_server.second_looks = None
    entries = [{"id": "v1", **answer}] if answer else []
    llm_server.handler = lambda payload: (
        llm_stub.text(json.dumps({"checks": entries}))
        if llm_stub.is_second_look_call(payload)
        else llm_stub.verdict([JOINED])
    )
    before = truth_state()

    review = _run(llm_server, definition, [JOINED])

    assert truth_state() == before
    assert review.outcome == ClusterReview.Outcome.REJECTED
    assert [r["code"] for r in review.rejections] == [code]
    assert review.rejections[0]["action"]["signals"][0]["code"] == Code.POLARITY


@pytest.mark.parametrize(
    "reply",
    [
        llm_stub.text("I would confirm it."),
        llm_stub.text('{"checks": [{"id": "v1", "verdict": "conf', finish_reason="length"),
        llm_stub.error(500),
        llm_stub.error(429, headers={"retry-after": "30"}),
        llm_stub.hang(8.0),
    ],
    ids=["garbage", "truncated", "server-error", "rate-limited", "timeout"],
)
def test_a_second_look_that_fails_keeps_the_truths_and_is_asked_again_later(
    llm_server, definition, reply, settings
):
    settings.IRIS_CONSOLIDATION_LLM_TIMEOUT = 2.0
    llm_server.second_looks = None
    llm_server.handler = lambda payload: reply if llm_stub.is_second_look_call(payload) else llm_stub.verdict([JOINED])
    before = truth_state()

    review = _run(llm_server, definition, [JOINED])

    assert truth_state() == before
    assert [r["code"] for r in review.rejections] == [Code.SECOND_LOOK_FAILED]
    assert review.failure == "" and review.outcome == ClusterReview.Outcome.REJECTED
    # Not cached as a "keep": the next run asks the judge again.
    llm_server.handler = None
    llm_server.second_looks = "confirm"
    again = _run(llm_server, definition, [JOINED])
    assert again.outcome == ClusterReview.Outcome.APPLIED


def test_actions_without_a_signal_apply_without_a_second_look(llm_server, truth_factory):
    first = truth_factory("Has a son named Tomas")
    second = truth_factory("Is the father of a boy called Tomas", user=first.user)
    merge = merge_dict(["t1", "t2"], "Has a son named Tomas", "'father of a boy' = 'son'")

    review = _run(llm_server, [first, second], [merge])

    assert review.outcome == ClusterReview.Outcome.APPLIED
    assert len(llm_server.chat_requests()) == 1
    assert "second_look" not in review.applied_actions[0] and "signals" not in review.applied_actions[0]


def test_one_second_look_per_batch_covers_every_flagged_action(llm_server, run_factory, truth_factory):
    first = truth_factory(DEFINITION[0])
    user = first.user
    pairs = [[first, truth_factory(DEFINITION[1], user=user)]]
    pairs.append([truth_factory("Lives in Porto", user=user), truth_factory("Moved to Lisbon", user=user)])
    clusters = [cluster_of(*p) for p in pairs]
    # Aliases run across the call: t1, t2 for the first cluster, t3, t4 for the second.
    supersede = supersede_dict(["t3"], "t4", "moved")
    llm_server.script = [llm_stub.verdict([JOINED, supersede])]
    llm_server.second_looks = "confirm"

    reviews = decide.decide_batch(
        run_id=run_factory().pk, clusters=clusters, client=get_judge_client(), embedder=EMBEDDER
    )

    looks = [r for r in llm_server.chat_requests() if llm_stub.is_second_look_call(r["json"])]
    assert len(looks) == 1 and len(llm_stub.checks_of(looks[0]["json"])) == 1  # the supersede says "moved"
    assert [r.outcome for r in reviews] == ["applied", "applied"]
    assert sum(r.llm_calls for r in reviews) == 2


@pytest.mark.parametrize(
    ("policy", "outcome", "calls", "code"),
    [
        ("verify", "applied", 2, None),
        ("refuse", "rejected", 1, Code.POLARITY),
        ("accept", "applied", 1, None),
    ],
)
def test_the_risk_policy_decides_what_a_flagged_action_gets(
    llm_server, definition, settings, policy, outcome, calls, code
):
    settings.IRIS_CONSOLIDATION_RISK_POLICY = policy
    llm_server.second_looks = "confirm"

    review = _run(llm_server, definition, [JOINED])

    assert review.outcome == outcome and len(llm_server.chat_requests()) == calls
    assert [r["code"] for r in review.rejections] == ([code] if code else [])
    if outcome == "applied":
        assert review.applied_actions[0]["signals"][0]["code"] == Code.POLARITY


def test_the_live_settings_override_the_risk_policy(llm_server, definition, settings):
    settings.IRIS_CONSOLIDATION_RISK_POLICY = "accept"
    LiveSettings.objects.update_or_create(pk=LiveSettings.SINGLETON_ID, defaults={"risk_policy": "refuse"})

    review = _run(llm_server, definition, [JOINED])

    assert [r["code"] for r in review.rejections] == [Code.POLARITY]
    assert review.run.effective_settings["risk_policy"] == "refuse"


def test_the_second_look_uses_the_verify_model_when_one_is_set(llm_server, definition, settings):
    settings.IRIS_CONSOLIDATION_VERIFY_MODEL = "openai/stub-verifier"
    llm_server.second_looks = "confirm"

    _run(llm_server, definition, [JOINED])

    assert [r["json"]["model"] for r in llm_server.chat_requests()] == ["stub-judge", "stub-verifier"]


def test_a_contradiction_stated_later_with_no_change_word_retires_nothing(llm_server, truth_factory):
    """ "Is a big fan of Keane" then "Cannot stand Keane": no word says the first changed (the
    golden set keeps "Likes jazz" / "Does not like jazz" apart), so the supersede is refused
    by an invariant and no second look is asked, whatever it would answer."""
    old = truth_factory("Is a big fan of the band Keane")
    new = truth_factory("Cannot stand the band Keane", user=old.user)
    llm_server.second_looks = "confirm"
    supersede = supersede_dict(["t1"], "t2", "the later statement contradicts it")

    review = _run(llm_server, [old, new], [supersede])

    assert review.outcome == ClusterReview.Outcome.REJECTED
    assert [r["code"] for r in review.rejections] == [Code.SUPERSEDE_NO_CHANGE]
    assert len(llm_server.chat_requests()) == 1  # the judge only
    assert Truth.objects.filter(user=old.user).count() == 2


def test_the_outcome_of_a_plan_supersedes_it_on_the_second_looks_confirmation(llm_server, truth_factory):
    """ "Plans to run the Lisbon marathon" then "Ran the Lisbon marathon": no change word, but
    the later truth may be the plan's outcome: a signal, applied on confirmation."""
    old = truth_factory("Plans to run the Lisbon marathon")
    new = truth_factory("Ran the Lisbon marathon in October", user=old.user)
    llm_server.second_looks = "confirm"
    supersede = supersede_dict(["t1"], "t2", "the plan was carried out")

    review = _run(llm_server, [old, new], [supersede])

    assert review.outcome == ClusterReview.Outcome.APPLIED
    assert [s["code"] for s in review.applied_actions[0]["signals"]] == [Code.SUPERSEDE_OUTCOME]
    assert Truth.all_objects.get(pk=old.pk).superseded_by_id == new.pk
    assert list(Truth.objects.filter(user=old.user).values_list("content", flat=True)) == [new.content]


def test_the_rule_judge_still_refuses_on_signals(settings, truth_factory):
    """Offline stays conservative: no second look, the signal refuses (here, the rule
    judge's own validation of a lossless join it would never propose)."""
    from iris_consolidation.llm.base import JudgeRequest
    from iris_consolidation.services.pipeline import judging

    request = judge_request(*DEFINITION)

    class Proposes:
        name, calls_model = "proposes", False

        def judge(self, req: JudgeRequest) -> Any:
            from iris_consolidation.llm.base import Verdict

            return Verdict(actions=(merge_action(("t1", "t2"), JOINED["content"], reason="x"),))

    (judgement,) = judging.judge_batch(requests=[request], client=Proposes(), risk_policy="accept")
    assert judgement.accepted == () and [r.code for r in judgement.rejections] == [Code.POLARITY]


def test_the_run_page_shows_the_signals_and_the_second_looks_reason(
    llm_server, definition, admin_client
):
    from django.urls import reverse

    llm_server.second_looks = "confirm"
    review = _run(llm_server, definition, [JOINED])

    html = admin_client.get(reverse("admin:iris_consolidation_consolidationrun_change", args=[review.run_id])).content
    text = html.decode()
    first = definition[0].pk
    assert "Second look: confirmed" in text and "scripted confirm" in text
    assert f"#{first} and #{definition[1].pk} differ in negation" in text
