"""selectors.get_lineage and list_undo_steps: shape of the graph and bounded queries."""

from __future__ import annotations

import pytest

from iris_consolidation import selectors
from iris_consolidation.models import LineageEvent, Truth
from tests import lineage_builder as lb

pytestmark = pytest.mark.django_db


def test_lineage_of_a_generation_5_truth_reaches_every_original(user_factory):
    root, firsts, _ = lb.generation_tree(user_factory())

    graph = selectors.get_lineage(truth=root)

    assert root.generation == 5
    # 31 merges (16 + 8 + 4 + 2 + 1), one event per retired source: 32 + 16 + 8 + 4 + 2
    assert len(graph.ancestry) == 62
    assert len({e.review_id for e in graph.ancestry}) == 31
    sources = {e.source_id for e in graph.ancestry}
    assert {t.pk for t in firsts} <= sources
    assert all(e.review is not None and e.review.reasoning for e in graph.ancestry)
    assert graph.forward == ()


def test_lineage_takes_three_queries_whatever_the_depth(user_factory, django_assert_num_queries):
    shallow, _, _ = lb.generation_tree(user_factory(), generations=1)
    deep, _, _ = lb.generation_tree(user_factory(), generations=5)

    with django_assert_num_queries(3):
        small = selectors.get_lineage(truth=shallow)
    with django_assert_num_queries(3):
        big = selectors.get_lineage(truth=deep)
        # everything the presenter touches is already loaded
        [(e.source.content, e.result.content, e.review.run.dry_run) for e in big.ancestry]

    assert len(small.ancestry) == 2 and len(big.ancestry) == 62


def test_forward_lineage_follows_a_retired_truth_to_what_replaced_it(user_factory):
    user = user_factory()
    a, b, c = lb.originals(user, 3)
    run = lb.new_run()
    ab = lb.merge([a, b], content="Has a son named Tomas", run=run)
    abc = lb.merge([ab, c], content="Has a son called Tomas", run=run)
    a.refresh_from_db()

    graph = selectors.get_lineage(truth=a)

    assert [(e.source_id, e.result_id) for e in graph.forward] == [(a.pk, ab.pk), (ab.pk, abc.pk)]


def test_lineage_never_shows_another_users_truth(user_factory):
    alice, bob = user_factory("alice"), user_factory("bob")
    a1, a2 = lb.originals(alice, 2)
    merged = lb.merge([a1, a2], content="Has a son named Tomas", run=lb.new_run())
    stranger = Truth.objects.create(user=bob, content="Bob's private fact")
    # A corrupt row linking another user's truth into alice's lineage must not leak it.
    LineageEvent.objects.create(action="merge", source=stranger, result=merged, reason="corrupt")

    graph = selectors.get_lineage(truth=merged)

    shown = {e.source_id for e in graph.ancestry} | {e.result_id for e in graph.ancestry}
    assert stranger.pk not in shown
    assert shown == {a1.pk, a2.pk, merged.pk}


def test_undo_step_lists_the_latest_review_in_force(user_factory):
    user = user_factory()
    a, b = lb.originals(user, 2)
    merged = lb.merge([a, b], content="Has a son named Tomas", run=lb.new_run())

    steps = selectors.list_undo_steps(truth=merged)

    assert len(steps) == 1
    assert steps[0].creates_truth is True
    assert steps[0].source_ids == tuple(sorted([a.pk, b.pk]))
    assert steps[0].action == "merge"
