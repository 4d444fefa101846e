"""Word-order matches (iii): report-only under the rule judge, merged when an LLM judge
confirms a moved phrase, never when the order swaps who does what (``text.wordorder``)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from iris_consolidation import text
from iris_consolidation.embeddings import LocalEmbedder
from iris_consolidation.llm import get_judge_client
from iris_consolidation.llm.base import Action, JudgeRequest, MemberView
from iris_consolidation.llm.rules import RuleJudge
from iris_consolidation.models import Origin, Truth
from iris_consolidation.services.hygiene import stages
from iris_consolidation.services.pipeline import validation as v
from iris_consolidation.services.run import decide
from tests import llm_stub
from tests.conftest import unit_vector

T0 = datetime(2026, 1, 1, tzinfo=UTC)

#: Same words, one phrase moved: the same statement.
MOVED = [
    ("Prefers tea in the morning", "In the morning prefers tea"),
    ("Runs every morning", "Every morning runs"),
    ("Met Alice in Paris", "In Paris met Alice"),
    ("Goes swimming twice a week", "Twice a week goes swimming"),
    ("My favorite season is winter.", "Winter is my favorite season."),  # MSC's one word-order pair
    ("The manager of Bob is Alice", "Alice is the manager of Bob"),
]
#: Same words, roles or scope swapped: never one statement.
SWAPPED = [
    ("Alice manages Bob", "Bob manages Alice"),
    ("Nadia manages Oskar", "Oskar manages Nadia"),
    ("The dog chased the cat", "The cat chased the dog"),
    ("Moved from Paris to Berlin", "Moved from Berlin to Paris"),
    ("Showed the kid the dog", "Showed the dog the kid"),
    ("Prefers cats to dogs", "Prefers dogs to cats"),
    ("Alice and Bob visited Carol", "Carol and Bob visited Alice"),  # a list's item swapped with a role
    ("Works as an accountant at Birch", "Birch as an accountant at Works"),
    ("A dog is an animal", "An animal is a dog"),
    ("Alice from Paris married Bob", "Alice married Bob from Paris"),  # who is from Paris
    # Harmless, but a phrase moved inside the sentence is never taken (conservative).
    ("Moved to Berlin from Paris", "Moved from Paris to Berlin"),
    ("Works with Bob for Alice", "Works for Alice with Bob"),
    ("Dogs are animals", "Animals are dogs"),
    ("The cat is a pet", "A pet is the cat"),
]

#: Same words, the items of one list in another order: the same statement.
LISTED = [
    ("Alice and Bob are friends", "Bob and Alice are friends"),
    ("Collects stamps, coins and old maps", "Collects old maps, stamps and coins"),
    ("Bakes bread on Saturdays and cycles on Sundays", "Cycles on Sundays and bakes bread on Saturdays"),
    ("Fala inglês e alemão", "Fala alemão e inglês"),
]


def _request(a: str, b: str) -> JudgeRequest:
    return JudgeRequest(members=(
        MemberView(alias="t1", content=a, created_at=T0),
        MemberView(alias="t2", content=b, created_at=T0 + timedelta(days=1)),
    ))


def _merge(content: str) -> Action:
    return Action(action="merge", ids=("t1", "t2"), content=content, reason="same fact, words in another order")


@pytest.mark.parametrize(("a", "b"), MOVED)
def test_a_moved_phrase_is_a_mergeable_word_order_match(a, b):
    assert text.moved_phrase(a, b) and text.moved_phrase(b, a)
    for content in (a, b):
        result = v.validate(_request(a, b), (_merge(content),), max_length=500, max_generation=5)
        assert [r.reason for r in result.rejections] == [] and len(result.accepted) == 1


@pytest.mark.parametrize(("a", "b"), LISTED)
def test_a_list_in_another_order_merges(a, b):
    """The order of a list's items carries no role: an LLM judge's merge stands (the rule
    judge and the pre-pass still leave the pair to a model: they merge only equal words in order)."""
    assert text.list_reordered(a, b) and text.list_reordered(b, a)
    for content in (a, b):
        result = v.validate(_request(a, b), (_merge(content),), max_length=500, max_generation=5)
        assert [r.reason for r in result.rejections] == [] and len(result.accepted) == 1


@pytest.mark.parametrize(("a", "b"), SWAPPED)
def test_a_role_or_scope_swap_never_merges(a, b):
    assert not text.moved_phrase(a, b) and not text.moved_phrase(b, a)
    assert not text.list_reordered(a, b) and not text.list_reordered(b, a)
    for content in (a, b):
        result = v.validate(_request(a, b), (_merge(content),), max_length=500, max_generation=5)
        assert result.accepted == ()
        assert result.rejections[0].code in {v.Code.ROLE_SWAP, v.Code.REORDERED, v.Code.CONTRAST}


def test_the_golden_sets_same_word_pairs_are_only_swaps(shared_dir: Path):
    """Every pair of members with the same words in the shared golden and public sets is
    expected to stay apart, and the rule keeps each apart (G13: Nadia manages Oskar)."""
    pairs = []
    for name in ("judge_golden.jsonl", "public_cases.jsonl"):
        path = shared_dir / "eval" / name
        if not path.is_file():
            pytest.skip(f"{path} is not here")
        for line in path.read_text().splitlines():
            case = json.loads(line)
            texts = [m["content"] for m in case["cluster"]]
            for i, a in enumerate(texts):
                for b in texts[i + 1:]:
                    if text.reordered(a, b):
                        pairs.append((case["id"], case["expected"], text.moved_phrase(a, b)))
    assert pairs == [("G13", "KEEP_SEPARATE", False)]


# --- the pass: the lexical arm finds them, the rule judge reports, an LLM judge confirms -----


@pytest.fixture(scope="module")
def embedder() -> LocalEmbedder:
    return LocalEmbedder()


def _pair(truth_factory, user_factory, a: str, b: str):
    user = user_factory()
    # Orthogonal vectors: only the lexical arm (Jaccard 1.0) makes them a cluster.
    first = truth_factory(a, user=user, embedding=unit_vector(1.0))
    second = truth_factory(b, user=user, embedding=unit_vector(0.0, 1.0))
    return user, first, second


def _run(run_factory):
    run = run_factory()
    run.started_at = timezone.now()
    run.save(update_fields=["started_at"])
    return run


@pytest.mark.django_db
def test_rule_judge_reports_a_moved_phrase_and_keeps_both(truth_factory, user_factory, run_factory, embedder):
    user, a, b = _pair(truth_factory, user_factory, *MOVED[0])
    run = _run(run_factory)
    (cluster,) = stages.candidate_clusters(run, user.pk)
    review = decide.decide_cluster(run_id=run.pk, cluster=cluster, client=RuleJudge(), embedder=embedder)
    assert not review.applied and "reported only, an LLM judge must confirm a merge" in review.reasoning
    assert Truth.objects.filter(pk__in=[a.pk, b.pk]).count() == 2


@pytest.mark.django_db
def test_an_llm_confirmed_moved_phrase_is_merged(truth_factory, user_factory, run_factory, embedder, llm_server):
    user, a, b = _pair(truth_factory, user_factory, *MOVED[0])
    run = _run(run_factory)
    (cluster,) = stages.candidate_clusters(run, user.pk)
    llm_server.script = [llm_stub.verdict([{"action": "merge", "ids": ["t1", "t2"], "content": a.content,
                                            "reason": "the same preference, a phrase moved"}])]
    review = decide.decide_cluster(run_id=run.pk, cluster=cluster, client=get_judge_client(),
                                               embedder=embedder)
    assert review.applied and review.rejections == []
    assert not Truth.objects.filter(pk__in=[a.pk, b.pk]).exists()
    assert Truth.objects.get(user=user, origin=Origin.CONSOLIDATED).content == "Prefers tea in the morning"
    assert len(llm_server.requests) == 1  # the rule pre-pass proved nothing; the model was asked


@pytest.mark.django_db
def test_an_llm_confirmed_role_swap_is_refused(truth_factory, user_factory, run_factory, embedder, llm_server):
    user, a, b = _pair(truth_factory, user_factory, "Alice manages Bob", "Bob manages Alice")
    run = _run(run_factory)
    (cluster,) = stages.candidate_clusters(run, user.pk)
    llm_server.script = [llm_stub.verdict([{"action": "merge", "ids": ["t1", "t2"], "content": a.content,
                                            "reason": "same words"}])]
    review = decide.decide_cluster(run_id=run.pk, cluster=cluster, client=get_judge_client(),
                                               embedder=embedder)
    assert not review.applied
    assert [r["code"] for r in review.rejections] == [v.Code.ROLE_SWAP]
    assert Truth.objects.filter(pk__in=[a.pk, b.pk]).count() == 2
