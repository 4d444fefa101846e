"""Each reviewed cluster counts once in its run's counters: merged and
superseded count applied actions; kept, rejected, stale, failed and deferred count
clusters, and a cluster of one outcome never shows up in another's counter."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from iris_consolidation.llm.base import Action, Verdict
from iris_consolidation.models import ClusterReview, ConsolidationRun, Truth
from iris_consolidation.services.pipeline import judging, merging, validation
from iris_consolidation.services.run import decide
from tests import lineage_builder as lb

pytestmark = pytest.mark.django_db

COUNTERS = ("merged", "superseded", "kept", "rejected", "stale", "failed", "deferred")
SAME = Action(action="merge", ids=("t1", "t2"), content="Drinks green tea every morning", reason="Same fact.")


def _counts(run: ConsolidationRun) -> dict[str, int]:
    run.refresh_from_db()
    return {name: getattr(run, name) for name in COUNTERS if getattr(run, name)}


def _record(truths, actions, *, run, error="", edit_before_write=None):
    """Judge ``actions`` over ``truths`` as the pipeline does, optionally changing a
    member between judging and writing (what makes a cluster stale)."""
    request, by_alias = judging.build_request(list(truths))
    snapshot = decide.snapshot_members(by_alias, request)
    verdict = None if error else Verdict(actions=tuple(actions), reasoning="r", raw="{}", model="m", prompt_version="p")
    result = validation.validate(request, tuple(actions), max_length=1000, max_generation=5)
    if edit_before_write is not None:
        edit_before_write()
    decision = merging.Decision(
        run_id=run.pk,
        user_id=truths[0].user_id,
        key=judging.cluster_key(list(truths)),
        snapshot=snapshot,
        similarities={},
        judge="test",
        verdict=verdict,
        accepted=result.accepted if not error else (),
        rejections=result.rejections if not error else (),
        error=error,
    )
    return merging.record_review(decision=decision, dry_run=run.dry_run)


@pytest.fixture
def run(user_factory):
    return lb.new_run(user_id=user_factory("alice").pk)


def _same_pair(user):
    """Two spellings of one statement: a merge of them keeps every detail."""
    first = Truth.objects.create(
        user=user, content="Drinks green tea every morning", created_at=timezone.now() - timedelta(days=3)
    )
    second = Truth.objects.create(
        user=user, content="drinks green tea every morning.", created_at=timezone.now() - timedelta(days=2)
    )
    return [first, second]


@pytest.fixture
def pair(run):
    return _same_pair(run.user_filter)


def test_a_merge_counts_as_merged_only(run, pair):
    review = _record(pair, [SAME], run=run)

    assert review.outcome == ClusterReview.Outcome.APPLIED
    assert _counts(run) == {"merged": 1}


def test_a_supersede_counts_as_superseded_only(run):
    old = Truth.objects.create(
        user=run.user_filter, content="Lives in Lisbon", created_at=timezone.now() - timedelta(days=9)
    )
    new = Truth.objects.create(
        user=run.user_filter, content="Moved to Berlin in May", created_at=timezone.now() - timedelta(days=2)
    )
    action = Action(action="supersede", old=("t1",), new="t2", reason="The later statement replaces it.")

    review = _record([old, new], [action], run=run)

    assert review.outcome == ClusterReview.Outcome.APPLIED
    assert _counts(run) == {"superseded": 1}


def test_a_cluster_left_alone_counts_as_kept_only(run, pair):
    review = _record(pair, [], run=run)

    assert review.outcome == ClusterReview.Outcome.KEPT
    assert _counts(run) == {"kept": 1}


def test_a_refused_proposal_counts_as_rejected_not_kept(run, pair):
    invented = Action(action="merge", ids=("t1", "t2"), content="Has a daughter named Ana", reason="Same.")

    review = _record(pair, [invented], run=run)

    assert review.outcome == ClusterReview.Outcome.REJECTED
    assert _counts(run) == {"rejected": 1}


def test_two_refused_proposals_in_one_cluster_count_once(run, user_factory):
    truths = lb.originals(run.user_filter, 3)
    bad = [
        Action(action="merge", ids=("t1", "t2"), content="Has a daughter named Ana", reason="Same."),
        Action(action="merge", ids=("t2", "t3"), content="Owns a boat in Porto", reason="Same."),
    ]

    _record(truths, bad, run=run)

    assert _counts(run) == {"rejected": 1}


def test_a_cluster_whose_member_changed_first_counts_as_stale_not_kept_or_rejected(run, pair):
    def edit():
        Truth.objects.filter(pk=pair[0].pk).update(
            content="Drinks green tea every morning, no sugar", updated_at=timezone.now()
        )

    review = _record(pair, [SAME], run=run, edit_before_write=edit)

    assert review.outcome == ClusterReview.Outcome.STALE
    assert _counts(run) == {"stale": 1}


def test_a_failed_judge_counts_as_failed_only(run, pair):
    review = _record(pair, [], run=run, error="LLM judge unavailable: timeout")

    assert review.outcome == ClusterReview.Outcome.FAILED
    assert _counts(run) == {"failed": 1}


def test_a_cluster_over_the_retirement_cap_counts_as_deferred(run, pair):
    ConsolidationRun.objects.filter(pk=run.pk).update(effective_settings={"max_retirements_per_run": 1})
    run.refresh_from_db()

    review = _record(pair, [SAME], run=run)

    assert review.outcome == ClusterReview.Outcome.REJECTED
    assert _counts(run) == {"deferred": 1}


def test_the_counts_of_a_run_add_up_to_its_reviewed_clusters(run, user_factory):
    user = run.user_filter
    _record(_same_pair(user), [SAME], run=run)  # merged
    _record(lb.originals(user, 2), [], run=run)  # kept
    _record(
        lb.originals(user, 2),
        [Action(action="merge", ids=("t1", "t2"), content="Has a daughter named Ana", reason="Same.")],
        run=run,
    )  # rejected
    _record(lb.originals(user, 2), [], run=run, error="boom")  # failed

    run.refresh_from_db()
    clusters = run.kept + run.rejected + run.stale + run.failed + run.deferred + 1  # + the merged cluster
    assert (run.clusters_done, clusters) == (4, 4)
    assert _counts(run) == {"merged": 1, "kept": 1, "rejected": 1, "failed": 1}
