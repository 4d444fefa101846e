"""Phase 1 by neighbourhoods and attributes (``services/pipeline/neighbourhoods.py``): a
state change in other words reaches the judge, restatements stay in one group, groups
stay within their cap and around the pass's seeds."""

from __future__ import annotations

from datetime import UTC, datetime
from io import StringIO

import numpy as np
import pytest
from django.core.management import call_command

from iris_consolidation.embeddings import LocalEmbedder
from iris_consolidation.models import Truth
from iris_consolidation.services.pipeline import neighbourhoods
from iris_consolidation.services.pipeline.exact_search import exact_pairs
from iris_consolidation.services.pipeline.vectors import UserVectors
from tests import llm_stub

pytestmark = pytest.mark.django_db

OTHERS = [
    "Plays the violin in a community orchestra", "Has a sister named Ines", "Enjoys hiking in the Alps",
    "Drinks black coffee every morning", "Is learning to bake sourdough bread", "Supports the Lisbon football club",
    "Reads science fiction novels", "Volunteers at the animal shelter on Saturdays",
]


def _embedded(user, texts: list[str], *, start: datetime) -> list[Truth]:
    vectors = LocalEmbedder(threads=1).embed(texts)
    return [
        Truth.objects.create(user=user, content=t, embedding=v, embedding_model=LocalEmbedder.model_name,
                             created_at=start.replace(day=1 + i))
        for i, (t, v) in enumerate(zip(texts, vectors, strict=True))
    ]


def _supersede_lisbon_by_berlin(payload):
    """A model that supersedes "Lives in Lisbon" by the Berlin move whenever both are asked
    about together, and keeps everything else."""
    entries = []
    for cluster in llm_stub.StubLLMServer.clusters_of({"json": payload}):
        by_text = {t["content"]: t["id"] for t in cluster["truths"]}
        actions = []
        if "Lives in Lisbon" in by_text and "Moved to Berlin in September 2025" in by_text:
            actions.append({"action": "supersede", "old": [by_text["Lives in Lisbon"]],
                            "new": by_text["Moved to Berlin in September 2025"],
                            "reason": "moved from Lisbon to Berlin: the home changed"})
        entries.append({"id": cluster["id"], "actions": actions, "reasoning": "scripted"})
    return llm_stub.clusters_reply(entries)


def _lisbon_user(user_factory):
    user = user_factory()
    lisbon, = _embedded(user, ["Lives in Lisbon"], start=datetime(2025, 3, 1, tzinfo=UTC))
    others = _embedded(user, OTHERS, start=datetime(2025, 5, 1, tzinfo=UTC))
    berlin, = _embedded(user, ["Moved to Berlin in September 2025"], start=datetime(2025, 9, 1, tzinfo=UTC))
    return user, lisbon, berlin, others


def test_a_move_in_other_words_reaches_the_judge_and_supersedes(llm_server, user_factory):
    user, lisbon, berlin, others = _lisbon_user(user_factory)
    llm_server.handler = _supersede_lisbon_by_berlin
    llm_server.second_looks = "confirm"

    call_command("consolidate_truths", "--sync", stdout=StringIO(), stderr=StringIO())

    lisbon = Truth.all_objects.get(pk=lisbon.pk)
    assert lisbon.retired_at is not None and lisbon.superseded_by_id == berlin.pk
    assert Truth.objects.filter(pk=berlin.pk).exists()
    assert Truth.objects.filter(pk__in=[t.pk for t in others]).count() == len(others)
    asked = [t["content"] for r in llm_server.chat_requests() for t in llm_server.truths_of(r)]
    assert "Lives in Lisbon" in asked and "Moved to Berlin in September 2025" in asked


def test_without_the_attribute_arm_the_greedy_clusters_never_ask(llm_server, user_factory, settings):
    """The other side: greedy seed clusters at the default threshold put the move in no
    cluster with Lisbon (cosine far below it), so the same model is never asked and
    nothing is retired."""
    settings.IRIS_CONSOLIDATION_NEIGHBOURHOODS = False
    user, lisbon, berlin, _ = _lisbon_user(user_factory)
    llm_server.handler = _supersede_lisbon_by_berlin
    llm_server.second_looks = "confirm"

    call_command("consolidate_truths", "--sync", stdout=StringIO(), stderr=StringIO())

    assert Truth.objects.filter(pk__in=[lisbon.pk, berlin.pk]).count() == 2
    for request in llm_server.chat_requests():
        for cluster in llm_server.clusters_of(request):
            assert {"Lives in Lisbon", "Moved to Berlin in September 2025"} - {t["content"] for t in cluster["truths"]}


def _users(texts: list[str], *, seeds: list[bool] | None = None) -> UserVectors:
    vectors = LocalEmbedder(threads=1).embed(texts).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    can_seed = np.asarray(seeds if seeds is not None else [True] * len(texts), dtype=bool)
    return UserVectors(ids=np.arange(1, len(texts) + 1, dtype=np.int64), vectors=vectors, can_seed=can_seed)


def _groups(users: UserVectors, *, k: int = 4, size: int = 10, rounds: int = 4):
    pairs = exact_pairs(users, threshold=0.30, memory_bytes=1 << 24)
    edges = neighbourhoods.neighbour_edges(users, pairs, k=k)
    return neighbourhoods.neighbourhood_groups(users, edges, user_id=1, max_size=size, rounds=rounds)


GREEN = ["Favourite colour is green", "Green is the user's favourite colour", "Likes green best of all colours"]


def test_a_restatement_group_stays_together_among_other_truths():
    texts = [*OTHERS, GREEN[0], "Has a red bicycle", GREEN[1], "Paints with blue watercolours", GREEN[2]]
    users = _users(texts)
    green_ids = {texts.index(g) + 1 for g in GREEN}
    groups = _groups(users)
    assert any(green_ids <= set(g.member_ids) for g in groups)


def test_groups_keep_their_cap_and_form_around_seeds():
    texts = [f"Likes green tea number {i}" for i in range(30)] + OTHERS
    seeds = [i % 3 == 0 for i in range(len(texts))]
    users = _users(texts, seeds=seeds)
    groups = _groups(users, size=6)
    assert groups and all(len(g.member_ids) <= 6 for g in groups)
    # Every group holds a seed, and puts it first.
    for g in groups:
        assert seeds[g.member_ids[0] - 1]
    # No seed: no group.
    assert _groups(_users(texts, seeds=[False] * len(texts))) == []


def test_attribute_windows_need_a_seed_and_skip_covered_windows():
    texts = ["Lives in Lisbon", "Enjoys hiking in the Alps", "Moved to Berlin in September 2025",
             "Works at Northwind as an analyst", "Switched jobs and now works at Contoso as a data engineer"]
    users = _users(texts)
    groups = neighbourhoods.attribute_groups(users, list(enumerate(texts, start=1)), user_id=1, max_size=10)
    assert [g.member_ids for g in groups] == [(1, 3), (4, 5)]  # "home", then "work"
    users = _users(texts, seeds=[False, True, False, True, True])
    groups = neighbourhoods.attribute_groups(users, list(enumerate(texts, start=1)), user_id=1, max_size=10)
    assert [g.member_ids for g in groups] == [(4, 5)]
    assert neighbourhoods.add_new(groups, groups) == groups
