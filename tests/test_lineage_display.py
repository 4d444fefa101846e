"""lineage_display (the tree, the picture's layout) and run_display (review cards, run progress)."""

from __future__ import annotations

import pytest

from iris_consolidation import lineage_display, lineage_picture, review_display, run_display, selectors
from iris_consolidation.llm.base import Action
from iris_consolidation.models import ConsolidationRun, Truth
from iris_consolidation.services.operations import undo
from tests import lineage_builder as lb

pytestmark = pytest.mark.django_db


def _display(truth, **kwargs):
    return lineage_display.rows_for(selectors.get_lineage(truth=truth), **kwargs)


def test_picture_gives_each_original_its_own_row_and_puts_the_truth_on_the_right(user_factory):
    root, originals, _ = lb.generation_tree(user_factory(), generations=5)

    picture = _display(root).picture

    nodes = {n.id: n for n in picture.nodes}
    leaf_rows = sorted(nodes[t.pk].y for t in originals)
    assert [b - a for a, b in zip(leaf_rows, leaf_rows[1:], strict=False)] == [lineage_picture.ROW] * 31
    assert nodes[root.pk].x == max(n.x for n in picture.nodes)
    assert {nodes[t.pk].x for t in originals} == {min(n.x for n in picture.nodes)}
    assert picture.height == pytest.approx(2 * lineage_picture.MARGIN + 14 + 32 * lineage_picture.ROW)
    assert all(n.x + 8 <= picture.width for n in picture.nodes)


def test_parents_sit_between_their_sources(user_factory):
    user = user_factory()
    a, b = lb.originals(user, 2)
    ab = lb.merge([a, b], content="Has a son named Tomas", run=lb.new_run())

    nodes = {n.id: n for n in _display(ab).picture.nodes}

    assert nodes[ab.pk].y == pytest.approx((nodes[a.pk].y + nodes[b.pk].y) / 2)


def test_an_original_has_no_picture(user_factory):
    (only,) = lb.originals(user_factory(), 1)

    display = _display(only)

    assert display.picture is None and display.steps == 0 and display.root.is_leaf


def test_sources_show_the_text_the_judge_saw(user_factory):
    user = user_factory()
    a, b = lb.originals(user, 2)
    ab = lb.merge([a, b], content="Has a son named Tomas", run=lb.new_run())
    judged = a.content
    Truth.all_objects.filter(pk=a.pk).update(content="Rewritten later")

    source = next(s for s in _display(ab).root.sources if s.id == a.pk)

    assert source.text == judged and source.current_text == "Rewritten later"


def test_an_undone_step_is_marked_in_the_tree_and_the_picture(user_factory):
    user = user_factory()
    a, b = lb.originals(user, 2)
    ab = lb.merge([a, b], content="Has a son named Tomas", run=lb.new_run())
    undo.undo_consolidation(truth_id=ab.pk, actor="operator", reason="Different boys.")

    display = _display(Truth.all_objects.get(pk=ab.pk))

    step = display.root.steps[0]
    assert step.undone is not None and step.undone.actor == "operator" and step.undone.reason == "Different boys."
    assert {e.css_class for e in display.picture.edges} == {"iris-edge-undone"}
    assert display.root.status == "retired: consolidation undone"
    restored = _display(Truth.objects.get(pk=a.pk))
    assert [n.reason for n in restored.root.restored_by] == ["Different boys."]
    assert restored.forward[0].undone is not None


def test_deep_boxes_start_collapsed(user_factory):
    root, _, _ = lb.generation_tree(user_factory(), generations=3)

    display = _display(root, open_depth=2)

    depths = {}
    stack = [display.root]
    while stack:
        box = stack.pop()
        depths.setdefault(box.depth, set()).add(box.open)
        stack.extend(box.sources)
    assert depths == {0: {True}, 1: {True}, 2: {False}, 3: {False}}


def test_review_card_of_a_preview_says_nothing_was_written(user_factory):
    user = user_factory()
    a, b = lb.originals(user, 2)
    review = lb.judge_and_record(
        [a, b],
        [Action(action="merge", ids=("t1", "t2"), content="Has a son named Tomas", reason=lb.SAME_SON)],
        run=lb.new_run(dry_run=True),
        reasoning="Both describe Tomas.",
    )

    card = review_display.review_card(review)

    assert card.is_preview and not card.undoable
    assert [m.text for m in card.members] == [a.content, b.content]
    assert card.decisions[0].summary == f"Merge #{a.pk} + #{b.pk}"
    assert card.decisions[0].status == "would apply (preview)"
    assert card.why_not == ("Dry run: previewed only, nothing was written.",)


def test_review_card_of_a_rejected_verdict_says_why(user_factory):
    user = user_factory()
    first = Truth.objects.create(user=user, content="Likes coffee")
    second = Truth.objects.create(user=user, content="Does not like coffee")
    review = lb.judge_and_record(
        [first, second],
        [Action(action="merge", ids=("t1", "t2"), content="Likes coffee", reason="Same.")],
        run=lb.new_run(),
        reasoning="They look alike.",
    )

    card = review_display.review_card(review)

    assert card.outcome == "rejected" and not card.applied
    assert card.decisions[0].status == "refused (why below)"
    assert len(card.why_not) == 1 and "negation" in card.why_not[0]  # each reason once
    assert "t1" not in card.why_not[0] and "t2" not in card.why_not[0]


def test_run_progress_counts_users_and_clusters():
    run = ConsolidationRun(threshold=0.75, status="running", users=2, users_done=2, clusters_found=8, clusters_done=2)

    progress = run_display.run_progress(run)

    assert progress.in_progress and progress.percent == 40  # (2 + 2) of (2 + 8)
    run.status = "done"
    assert run_display.run_progress(run).percent == 100
