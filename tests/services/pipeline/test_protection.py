"""Protected truths (pinned, created by the user or the assistant, at the max generation)
are never retired or reworded, whatever the judge says, and the rule is re-checked
under the row lock when a truth changes between judging and writing.

The judge here is the LLM judge through litellm against the scripted stub server.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from django.utils import timezone

from iris_consolidation.embeddings import LocalEmbedder
from iris_consolidation.llm import get_judge_client
from iris_consolidation.llm.base import JudgeClient, JudgeRequest, Verdict
from iris_consolidation.models import ClusterReview, Origin, RetiredReason, Truth
from iris_consolidation.services.pipeline.validation import Code
from iris_consolidation.services.pipeline.validation_messages import AT_GENERATION_LIMIT, PROTECTED_RETIRED
from tests import llm_stub
from tests.conftest import vector_at
from tests.helpers import consolidate, merge_dict, supersede_dict, truth_state

pytestmark = pytest.mark.django_db

PROTECTIONS = {
    "pinned": {"pinned": True},
    "user": {"origin": Origin.USER},
    "agent": {"origin": Origin.AGENT},
    "max-generation": {"generation": 5, "origin": Origin.CONSOLIDATED},
}
#: Protected truths that may survive a merge as they are. A truth at the generation
#: limit takes part in no action at all (golden case G33).
ABSORBERS = [kind for kind in PROTECTIONS if kind != "max-generation"]
# A supersede's newer statement must say that the state changed (a validator rule),
# so these pairs would be superseded if nothing protected the old one.
OLD_HOME, NEW_HOME = "Lives in Lisbon", "Moved to Berlin"


def _refusal(kind: str, alias: str) -> tuple[Code, str]:
    """The validator's code and reason for refusing to retire or reword a protected ``alias``."""
    if kind == "max-generation":
        return Code.GENERATION_LIMIT, AT_GENERATION_LIMIT.format(alias=alias, limit=5)
    return Code.PROTECTED, PROTECTED_RETIRED.format(alias=alias)


@pytest.fixture(scope="module")
def embedder() -> LocalEmbedder:
    return LocalEmbedder()


@pytest.mark.parametrize("kind", PROTECTIONS)
def test_judge_cannot_supersede_a_protected_truth(llm_server, truth_factory, embedder, kind):
    old = truth_factory(OLD_HOME, embedding=vector_at(1.0), **PROTECTIONS[kind])
    new = truth_factory(NEW_HOME, user=old.user, embedding=vector_at(0.9))
    llm_server.script = [llm_stub.verdict([supersede_dict(["t1"], "t2", reason="moved")])]
    before = truth_state()

    review = consolidate(new, old, client=get_judge_client(), embedder=embedder)

    assert truth_state() == before
    assert review.outcome == ClusterReview.Outcome.REJECTED and review.applied is False
    code, reason = _refusal(kind, "t1")
    # The whole stored refusal once, its text included (the run page shows it).
    moved = supersede_dict(["t1"], "t2", reason="moved")
    assert review.rejections == [{"action": moved, "code": code, "reason": reason}]
    assert llm_server.truths_of(llm_server.chat_requests()[0])[0]["protected"] is True


@pytest.mark.parametrize("kind", PROTECTIONS)
def test_judge_cannot_reword_a_protected_truth_in_a_merge(llm_server, truth_factory, embedder, kind):
    protected = truth_factory("Works as a nurse", embedding=vector_at(1.0), **PROTECTIONS[kind])
    other = truth_factory("Is a nurse", user=protected.user, embedding=vector_at(0.9))
    llm_server.script = [llm_stub.verdict([merge_dict(["t1", "t2"], "Is a nurse by profession")])]
    before = truth_state()

    review = consolidate(protected, other, client=get_judge_client(), embedder=embedder)

    assert truth_state() == before
    assert review.rejections[0]["code"] == _refusal(kind, "t1")[0]


def test_merge_of_two_protected_truths_is_refused(llm_server, truth_factory, embedder):
    # Paraphrases, not equal texts: the deterministic pre-pass would merge an equal
    # text into a protected one before the model is asked.
    a = truth_factory("Works as a nurse", embedding=vector_at(1.0), pinned=True)
    b = truth_factory("Is a nurse", user=a.user, embedding=vector_at(1.0), origin=Origin.USER)
    c = truth_factory("Has a job as a nurse", user=a.user, embedding=vector_at(0.99))
    llm_server.script = [llm_stub.verdict([merge_dict(["t1", "t2", "t3"], "Works as a nurse")])]
    before = truth_state()

    review = consolidate(c, a, b, client=get_judge_client(), embedder=embedder)

    assert truth_state() == before
    assert review.rejections[0]["code"] == Code.TWO_PROTECTED


@pytest.mark.parametrize("kind", ABSORBERS)
def test_protected_truth_may_absorb_a_duplicate_with_its_exact_text(
    llm_server, truth_factory, embedder, kind
):
    protected = truth_factory("Works as a nurse", embedding=vector_at(1.0), **PROTECTIONS[kind])
    dup = truth_factory("Is a nurse", user=protected.user, embedding=vector_at(0.9))
    llm_server.script = [llm_stub.verdict([merge_dict(["t1", "t2"], "Works as a nurse")])]
    kept = truth_state()[protected.pk]

    review = consolidate(protected, dup, client=get_judge_client(), embedder=embedder)

    assert review.outcome == ClusterReview.Outcome.APPLIED
    assert truth_state()[protected.pk] == kept
    assert Truth.all_objects.get(pk=dup.pk).superseded_by_id == protected.pk
    assert Truth.all_objects.count() == 2


def test_truth_at_the_generation_limit_absorbs_nothing(llm_server, truth_factory, embedder):
    limit = truth_factory("Works as a nurse", embedding=vector_at(1.0), **PROTECTIONS["max-generation"])
    dup = truth_factory("Is a nurse", user=limit.user, embedding=vector_at(0.9))
    llm_server.script = [llm_stub.verdict([merge_dict(["t1", "t2"], "Works as a nurse")])]
    before = truth_state()

    review = consolidate(limit, dup, client=get_judge_client(), embedder=embedder)

    assert truth_state() == before
    assert review.outcome == ClusterReview.Outcome.REJECTED
    assert review.rejections[0]["code"] == Code.GENERATION_LIMIT


# --- re-checked under the lock ----------------------------------------------------------


class ChangesAfterJudging:
    """A judge that takes long enough for the world to change: it asks the real
    judge, then runs ``change`` (another writer) before the verdict is applied."""

    def __init__(self, inner: JudgeClient, change: Callable[[], None]) -> None:
        self.inner = inner
        self.change = change
        self.name = inner.name

    def judge(self, request: JudgeRequest) -> Verdict:
        verdict = self.inner.judge(request)
        self.change()
        return verdict


@pytest.mark.parametrize(
    "change",
    [{"pinned": True}, {"origin": Origin.USER}, {"origin": Origin.AGENT}, {"generation": 5}],
    ids=["pinned", "user", "agent", "max-generation"],
)
def test_truth_protected_after_judging_is_not_retired(llm_server, truth_factory, embedder, change):
    old = truth_factory(OLD_HOME, embedding=vector_at(1.0))
    new = truth_factory(NEW_HOME, user=old.user, embedding=vector_at(0.9))
    llm_server.script = [llm_stub.verdict([supersede_dict(["t1"], "t2", reason="moved")])]
    # .update() leaves updated_at alone: only the protection re-check can catch this.
    judge = ChangesAfterJudging(get_judge_client(), lambda: Truth.objects.filter(pk=old.pk).update(**change))

    review = consolidate(old, new, client=judge, embedder=embedder)

    old.refresh_from_db()
    assert old.is_live and old.superseded_by_id is None
    assert Truth.objects.filter(pk=new.pk).exists()
    assert review.outcome == ClusterReview.Outcome.STALE
    assert review.rejections[0]["code"] == Code.STALE_MEMBER


def test_truth_pinned_after_judging_is_not_merged_away(llm_server, truth_factory, embedder):
    # A paraphrase: equal texts would be merged by the pre-pass before the judge answers.
    a = truth_factory("Works as a nurse", embedding=vector_at(1.0))
    b = truth_factory("Is a nurse", user=a.user, embedding=vector_at(0.99))
    llm_server.script = [llm_stub.verdict([merge_dict(["t1", "t2"], "Works as a nurse")])]
    judge = ChangesAfterJudging(get_judge_client(), lambda: Truth.objects.filter(pk=b.pk).update(pinned=True))
    before_count = Truth.all_objects.count()

    review = consolidate(a, b, client=judge, embedder=embedder)

    assert Truth.all_objects.count() == before_count
    assert Truth.objects.filter(pk__in=[a.pk, b.pk]).count() == 2
    assert review.rejections[0]["code"] == Code.STALE_MEMBER


def test_truth_edited_after_judging_is_not_retired(llm_server, truth_factory, embedder):
    old = truth_factory(OLD_HOME, embedding=vector_at(1.0))
    new = truth_factory(NEW_HOME, user=old.user, embedding=vector_at(0.9))
    llm_server.script = [llm_stub.verdict([supersede_dict(["t1"], "t2", reason="moved")])]

    def edit() -> None:
        truth = Truth.objects.get(pk=old.pk)
        truth.content = "Lives in Lisbon and Porto"
        truth.save()

    review = consolidate(old, new, client=ChangesAfterJudging(get_judge_client(), edit), embedder=embedder)

    old.refresh_from_db()
    assert (old.content, old.is_live) == ("Lives in Lisbon and Porto", True)
    assert review.outcome == ClusterReview.Outcome.STALE


def test_truth_retired_elsewhere_after_judging_is_left_alone(llm_server, truth_factory, embedder):
    old = truth_factory(OLD_HOME, embedding=vector_at(1.0))
    new = truth_factory(NEW_HOME, user=old.user, embedding=vector_at(0.9))
    elsewhere = truth_factory("Moved to Berlin, Germany", user=old.user, embedding=vector_at(0.5))
    llm_server.script = [llm_stub.verdict([supersede_dict(["t1"], "t2", reason="moved")])]

    def retire_elsewhere() -> None:
        Truth.objects.filter(pk=old.pk).update(
            retired_at=timezone.now(), superseded_by=elsewhere, retired_reason=RetiredReason.SUPERSEDED
        )

    review = consolidate(old, new, client=ChangesAfterJudging(get_judge_client(), retire_elsewhere), embedder=embedder)

    assert Truth.all_objects.get(pk=old.pk).superseded_by_id == elsewhere.pk
    assert review.outcome == ClusterReview.Outcome.STALE
    assert review.applied_actions == []


def test_unchanged_members_of_the_same_verdict_are_still_applied(llm_server, truth_factory, embedder):
    """Only the action naming the changed truth is dropped; the others apply."""
    a = truth_factory("Works as a nurse", embedding=vector_at(1.0))
    b = truth_factory("Is a nurse", user=a.user, embedding=vector_at(0.99))
    c = truth_factory(OLD_HOME, user=a.user, embedding=vector_at(0.98))
    d = truth_factory(NEW_HOME, user=a.user, embedding=vector_at(0.97))
    llm_server.script = [
        llm_stub.verdict([merge_dict(["t1", "t2"], "Works as a nurse"), supersede_dict(["t3"], "t4", reason="moved")])
    ]
    judge = ChangesAfterJudging(get_judge_client(), lambda: Truth.objects.filter(pk=c.pk).update(pinned=True))

    review = consolidate(a, b, c, d, client=judge, embedder=embedder)

    assert review.outcome == ClusterReview.Outcome.APPLIED
    assert [x["action"] for x in review.applied_actions] == ["merge"]
    assert [(r["code"], r["action"]["action"]) for r in review.rejections] == [(Code.STALE_MEMBER, "supersede")]
    assert Truth.objects.filter(pk=c.pk).exists()
    assert not Truth.objects.filter(pk__in=[a.pk, b.pk]).exists()
