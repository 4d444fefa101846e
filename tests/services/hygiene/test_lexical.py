"""The lexical arm: greedy Jaccard clusters within one kind, interleaved with the embedding's;
a pair the embedding misses is judged; a Jaccard match alone never merges."""

from __future__ import annotations

import random

import pytest
from django.utils import timezone

from iris_consolidation.embeddings import LocalEmbedder
from iris_consolidation.llm import get_judge_client
from iris_consolidation.llm.base import JudgeRequest, MemberView
from iris_consolidation.llm.rules import RuleJudge
from iris_consolidation.models import Origin, Truth
from iris_consolidation.services.hygiene import lexical, stages
from iris_consolidation.services.pipeline.clustering import CandidateCluster
from iris_consolidation.services.run import decide
from tests import llm_stub
from tests.conftest import unit_vector, vector_at

pytestmark = pytest.mark.django_db


@pytest.fixture(scope="module")
def embedder() -> LocalEmbedder:
    return LocalEmbedder()


def _started(run):
    run.started_at = timezone.now()
    run.save(update_fields=["started_at"])
    return run


def test_jaccard_over_normalised_tokens():
    a = lexical.token_set("Has a dog named Rex.")
    b = lexical.token_set("has a DOG named rex")
    c = lexical.token_set("Has a cat named Rex")
    assert lexical.jaccard(a, b) == 1.0
    assert lexical.jaccard(a, c) == pytest.approx(4 / 6)
    assert lexical.jaccard(frozenset(), frozenset()) == 0.0


def test_clusters_stay_within_one_kind_and_compare_with_the_seed(truth_factory, user_factory):
    user = user_factory()
    seed = truth_factory("Goes hiking in the Alps every summer", user=user)
    near = truth_factory("Goes hiking in the Alps every summer.", user=user)
    other_kind = truth_factory("goes hiking in the alps every summer", user=user, kind="preference")
    # Close to ``near`` but not to the seed: no chaining.
    truth_factory("Went hiking in the Alps last summer with Ana", user=user)
    clusters = lexical.find_lexical_clusters(user_id=user.pk)
    assert [c.member_ids for c in clusters] == [(seed.pk, near.pk)]
    assert clusters[0].similarities == (1.0, 1.0)
    assert other_kind.pk not in clusters[0].member_ids


def _brute_force_clusters(user_id: int, threshold: float) -> list[tuple[int, ...]]:
    """The greedy Jaccard clusters with every pair compared (no prefix filter): the reference."""
    rows = list(Truth.objects.filter(user_id=user_id).order_by("created_at", "id").values_list("id", "kind", "content"))
    tokens = {pk: lexical.token_set(text) for pk, _, text in rows}
    assigned: set[int] = set()
    found = []
    for seed, kind, _ in rows:
        if seed in assigned or not tokens[seed]:
            continue
        scored = sorted(
            (-lexical.jaccard(tokens[seed], tokens[pk]), pk)
            for pk, k, _ in rows
            if pk != seed
            and pk not in assigned
            and k == kind
            and lexical.jaccard(tokens[seed], tokens[pk]) >= threshold
        )[:7]
        if scored:
            ids = (seed, *(pk for _, pk in scored))
            assigned.update(ids)
            found.append(ids)
    return found


@pytest.mark.parametrize("dense_up_to", [0, lexical.DENSE_PAIRS_UP_TO], ids=["prefix filter", "matrix product"])
@pytest.mark.parametrize("threshold", [0.5, 0.6, 0.75])
def test_prefix_filter_finds_exactly_the_pairs_of_a_full_comparison(
    truth_factory, user_factory, threshold, settings, monkeypatch, dense_up_to
):
    """Words drawn from a small vocabulary with a few very common ones (the lists a prefix
    filter skips), sets of 1-9 words, two kinds: the clusters equal the brute-force ones,
    by either way of finding the pairs."""
    import random

    monkeypatch.setattr(lexical, "DENSE_PAIRS_UP_TO", dense_up_to)
    settings.IRIS_CONSOLIDATION_MAX_CLUSTER_SIZE = 8
    settings.IRIS_CONSOLIDATION_MIN_CLUSTER_SIZE = 2
    rng = random.Random(int(threshold * 100))
    common = ["likes", "the", "has", "a"]
    rare = [f"word{i}" for i in range(25)]
    user = user_factory()
    for i in range(160):
        words = rng.sample(common, rng.randint(0, 3)) + rng.sample(rare, rng.randint(1, 4))
        truth_factory(" ".join(words), user=user, kind=("fact", "preference")[i % 2])
    found = [c.member_ids for c in lexical.find_lexical_clusters(user_id=user.pk, threshold=threshold)]
    assert found == _brute_force_clusters(user.pk, threshold)
    assert len(found) >= 5  # the data has clusters to compare


def test_both_ways_of_finding_pairs_give_the_same_pairs_and_scores(monkeypatch):
    """Random sets (empty ones too) of three kinds at three thresholds: the same pairs, the
    same float64 scores, by prefix filtering and by the matrix product."""
    import random

    import numpy as np

    rng = random.Random(5)
    vocabulary = [f"w{i}" for i in range(40)]
    sets = [frozenset(rng.sample(vocabulary, rng.randint(0, 6))) for _ in range(300)]
    kinds = [("fact", "preference", "working")[rng.randint(0, 2)] for _ in sets]
    for threshold in (0.34, 0.5, 0.8):
        found = []
        for dense_up_to in (0, 10**12):
            monkeypatch.setattr(lexical, "DENSE_PAIRS_UP_TO", dense_up_to)
            a, b, score = lexical.jaccard_pairs(sets, kinds, threshold)
            order = np.lexsort((b, a))
            found.append((a[order].tolist(), b[order].tolist(), score[order].tolist()))
        assert found[0] == found[1]
        assert len(found[0][0]) >= 20


def test_protected_truths_join_but_never_seed(truth_factory, user_factory):
    user = user_factory()
    pinned = truth_factory("Plays the violin at church", user=user, pinned=True)
    plain = truth_factory("plays the violin at church!", user=user)
    clusters = lexical.find_lexical_clusters(user_id=user.pk)
    assert [c.member_ids for c in clusters] == [(plain.pk, pinned.pk)]


def test_interleave_alternates_arms_and_drops_lexical_clusters_inside_a_semantic_one():
    def c(*ids):
        return CandidateCluster(user_id=1, member_ids=ids, similarities=(1.0,) * len(ids))

    semantic = [c(1, 2, 3), c(4, 5)]
    lex = [c(1, 2), c(6, 7), c(8, 9), c(4, 6)]
    merged, added = lexical.interleave(semantic, lex)
    assert [m.member_ids for m in merged] == [(1, 2, 3), (6, 7), (4, 5), (8, 9), (4, 6)]
    assert added == 3


def test_a_truth_with_no_partner_is_a_cluster_only_when_one_member_is_enough():
    """The greedy pass visits only the rows with a partner when a cluster needs two
    members; with a minimum of one, every free seed is a cluster, as before."""
    rows = [(1, "fact", "likes green tea a lot"), (2, "fact", "likes green tea a lot!"),
            (3, "fact", "works night shifts"), (4, "fact", "Likes green tea, a lot"), (5, "fact", "owns a kayak")]
    clusters = {
        size: [c.member_ids for c in lexical.lexical_clusters(rows, user_id=7, seed_ids={1, 2, 3, 4, 5},
                                                               threshold=0.6, max_size=2, min_size=size)]
        for size in (1, 2)
    }
    assert clusters[2] == [(1, 2)]  # 4 is left alone: the cluster is full, and 4's partners are taken
    assert clusters[1] == [(1, 2), (3,), (4,), (5,)]


def test_a_pair_the_embedding_misses_is_judged_and_merged(truth_factory, user_factory, run_factory, embedder):
    user = user_factory()
    # Orthogonal vectors: no cosine cluster at any threshold; the same words (and no
    # attribute's cue: a pet would put them in one group of the semantic arm's attributes).
    a = truth_factory("Has a boat named Rex.", user=user, embedding=unit_vector(1.0))
    b = truth_factory("has a boat named rex", user=user, embedding=unit_vector(0.0, 1.0))
    run = _started(run_factory())
    clusters = stages.candidate_clusters(run, user.pk)
    assert [set(c.member_ids) for c in clusters] == [{a.pk, b.pk}]
    review = decide.decide_cluster(run_id=run.pk, cluster=clusters[0], client=RuleJudge(),
                                               embedder=embedder)
    assert review.applied
    assert not Truth.objects.filter(pk__in=[a.pk, b.pk]).exists()
    assert Truth.objects.get(user=user, origin=Origin.CONSOLIDATED).content == "Has a boat named Rex."
    lexical_row = run.stage_results.get(stage="lexical")
    assert (lexical_row.examined, lexical_row.affected) == (1, 1)
    assert run.stage_results.get(stage="semantic").affected == 0


def test_an_arm_in_report_mode_is_counted_not_judged(truth_factory, user_factory, run_factory, settings):
    settings.IRIS_CONSOLIDATION_LEXICAL = "report"
    user = user_factory()
    truth_factory("Has a dog named Rex.", user=user, embedding=unit_vector(1.0))
    truth_factory("has a dog named rex", user=user, embedding=unit_vector(0.0, 1.0))
    run = _started(run_factory())
    assert stages.candidate_clusters(run, user.pk) == []
    assert run.stage_results.get(stage="lexical").affected == 1


def test_a_negation_pair_found_by_jaccard_never_merges(truth_factory, user_factory, run_factory, embedder,
                                                       llm_server):
    user = user_factory()
    # No attribute's cue ("vegetarian" is one: the semantic arm's "diet" group would hold them).
    a = truth_factory("Is a smoker", user=user, embedding=unit_vector(1.0))
    b = truth_factory("Is not a smoker", user=user, embedding=unit_vector(0.0, 1.0))
    run = _started(run_factory())
    (cluster,) = stages.candidate_clusters(run, user.pk)
    assert set(cluster.member_ids) == {a.pk, b.pk} and cluster.similarities[1] == pytest.approx(0.75)
    # The rule judge keeps them; a careless model that merges them is refused by the validator.
    assert RuleJudge().judge(JudgeRequest(members=(
        MemberView(alias="t1", content=a.content, created_at=a.created_at),
        MemberView(alias="t2", content=b.content, created_at=b.created_at),
    ))).actions == ()
    llm_server.script = [llm_stub.verdict([{"action": "merge", "ids": ["t1", "t2"], "content": "Is a smoker",
                                            "reason": "same"}])]
    review = decide.decide_cluster(run_id=run.pk, cluster=cluster, client=get_judge_client(),
                                               embedder=embedder)
    assert not review.applied and review.rejections
    assert Truth.objects.filter(pk__in=[a.pk, b.pk]).count() == 2


def test_the_rule_judge_reports_word_order_matches_without_merging():
    now = timezone.now()
    request = JudgeRequest(members=(
        MemberView(alias="t1", content="The dog chased the cat", created_at=now),
        MemberView(alias="t2", content="The cat chased the dog", created_at=now),
    ))
    verdict = RuleJudge().judge(request)
    assert verdict.actions == ()
    assert "t1+t2: the same words in another order; reported only" in verdict.reasoning


def test_vector_helper_sanity():
    # vector_at keeps the semantic arm's own tests meaningful next to these.
    assert float(vector_at(1.0)[0]) == 1.0


def test_interleave_drops_what_a_comparison_with_every_semantic_cluster_drops():
    """Interleaving compares a lexical cluster only with the semantic clusters holding its
    seed: on random arms (a truth may be in several semantic clusters, as a nearest pair's
    member is), it keeps and drops the same clusters as a comparison with every one."""
    rng = random.Random(11)
    dropped = 0
    for _ in range(300):
        semantic = [CandidateCluster(user_id=1, member_ids=tuple(rng.sample(range(12), rng.randint(2, 5))),
                                     similarities=()) for _ in range(rng.randint(0, 6))]
        lex = [CandidateCluster(user_id=1, member_ids=tuple(rng.sample(range(12), rng.randint(2, 3))),
                                similarities=()) for _ in range(rng.randint(0, 6))]
        kept = [c for c in lex if not any(set(c.member_ids) <= set(s.member_ids) for s in semantic)]
        dropped += len(lex) - len(kept)
        merged, added = lexical.interleave(semantic, lex)
        assert [id(c) for c in merged if any(c is x for x in lex)] == [id(c) for c in kept]
        assert added == len(kept)
    assert dropped > 50  # the case is exercised
