"""The merge transaction: what a merge writes, and all or nothing when a write fails.

Failures are made real: a CHECK constraint or a trigger added to the test database
for one test (DDL is transactional in PostgreSQL, so the test's rollback removes
them), or a ``post_save`` receiver that raises after some rows were written.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import DatabaseError, IntegrityError, connection
from django.db.models.signals import post_save
from django.utils import timezone

from iris_consolidation import review_display
from iris_consolidation.embeddings import LOCAL_MODEL_NAME, LocalEmbedder
from iris_consolidation.llm.rules import REASON_SAME_TEXT, RuleJudge
from iris_consolidation.models import ClusterReview, ConsolidationRun, LineageEvent, Origin, Truth
from iris_consolidation.services.queue import execution
from iris_consolidation.services.run import decide
from iris_consolidation.signals import truth_changed
from tests.conftest import vector_at
from tests.helpers import consolidate, history_counts, truth_state

pytestmark = pytest.mark.django_db

REVIEW_TABLE = ClusterReview._meta.db_table
LINEAGE_TABLE = LineageEvent._meta.db_table
TRUTH_TABLE = Truth._meta.db_table


@pytest.fixture(scope="module")
def embedder() -> LocalEmbedder:
    return LocalEmbedder()


def _consolidate(*truths: Truth, embedder: LocalEmbedder, run: ConsolidationRun | None = None) -> ClusterReview:
    """``consolidate`` with the rule judge, every member 0.95 from the seed."""
    return consolidate(*truths, embedder=embedder, run=run, similarities=(1.0, *([0.95] * (len(truths) - 1))))


def _sql(statement: str) -> None:
    with connection.cursor() as cursor:
        cursor.execute(statement)


@pytest.fixture
def nurse(truth_factory):
    """Two paraphrases the rule judge merges, with different figures to combine."""
    a = truth_factory(
        "Works as a nurse",
        embedding=vector_at(1.0),
        score=0.4,
        corroborations=2,
        generation=1,
        source="session:1",
        kind="job",
        origin=Origin.CONSOLIDATED,
    )
    b = truth_factory(
        "works as a nurse.",
        user=a.user,
        embedding=vector_at(0.99),
        score=0.9,
        corroborations=3,
        source="session:2\nsession:1",
        kind="job",
    )
    return a, b


@pytest.fixture
def two_pairs(truth_factory):
    """Four truths making two merges in one cluster."""
    a = truth_factory("Works as a nurse", embedding=vector_at(1.0))
    b = truth_factory("works as a nurse.", user=a.user, embedding=vector_at(0.99))
    c = truth_factory("Likes tea", user=a.user, embedding=vector_at(0.98))
    d = truth_factory("likes tea!", user=a.user, embedding=vector_at(0.97))
    return a, b, c, d


def test_merge_creates_the_consolidated_truth_and_retires_its_sources(nurse, run_factory, embedder):
    a, b = nurse
    run = run_factory()

    review = _consolidate(a, b, embedder=embedder, run=run)

    merged = Truth.objects.get(origin=Origin.CONSOLIDATED, generation=2)
    assert merged.content == "Works as a nurse"
    assert (merged.user_id, merged.score, merged.corroborations, merged.kind) == (a.user_id, 0.9, 5, "job")
    assert merged.source == "session:1\nsession:2"
    assert merged.created_at == b.created_at
    assert merged.embedding_model == LOCAL_MODEL_NAME and len(merged.embedding) == 384
    for source in (a, b):
        source = Truth.all_objects.get(pk=source.pk)
        assert (source.superseded_by_id, source.retired_reason) == (merged.pk, "merged")
        assert source.retired_at is not None
    assert list(Truth.objects.values_list("pk", flat=True)) == [merged.pk]
    assert review.outcome == ClusterReview.Outcome.APPLIED and review.applied is True
    assert review.applied_actions[0]["result_id"] == merged.pk
    assert review.applied_actions[0]["truth_ids"] == {"t1": a.pk, "t2": b.pk}
    assert sorted(review.members(manager="all_objects").values_list("pk", flat=True)) == [a.pk, b.pk]


def test_merge_records_one_lineage_event_per_source_with_the_reason(nurse, run_factory, embedder):
    a, b = nurse
    run = run_factory()

    review = _consolidate(a, b, embedder=embedder, run=run)

    merged = Truth.objects.get(origin=Origin.CONSOLIDATED, generation=2)
    events = list(
        LineageEvent.objects.order_by("source_id").values_list(
            "action", "source_id", "result_id", "review_id", "reason", "actor"
        )
    )
    assert events == [
        ("merge", a.pk, merged.pk, review.pk, REASON_SAME_TEXT, "rules"),
        ("merge", b.pk, merged.pk, review.pk, REASON_SAME_TEXT, "rules"),
    ]
    run.refresh_from_db()
    assert (run.merged, run.retired, run.clusters_done, run.kept, run.failed) == (1, 2, 1, 0, 0)


def test_merge_into_a_protected_member_keeps_it_unchanged(truth_factory, embedder):
    pinned = truth_factory("Works as a nurse", embedding=vector_at(1.0), pinned=True)
    dup = truth_factory("works as a nurse.", user=pinned.user, embedding=vector_at(0.99))
    before = truth_state()[pinned.pk]

    review = _consolidate(dup, pinned, embedder=embedder)

    assert truth_state()[pinned.pk] == before
    assert Truth.all_objects.get(pk=dup.pk).superseded_by_id == pinned.pk
    assert Truth.all_objects.count() == 2
    assert review.applied_actions[0]["result_id"] == pinned.pk


def test_truth_changed_is_sent_after_commit_for_each_changed_truth(
    nurse, embedder, django_capture_on_commit_callbacks
):
    a, b = nurse
    received = []

    def listener(sender, truth, action, reason, review, **kwargs):
        received.append((truth.pk, action, reason, review.pk))

    truth_changed.connect(listener)
    try:
        with django_capture_on_commit_callbacks(execute=False) as callbacks:
            review = _consolidate(a, b, embedder=embedder)
        assert received == []  # nothing before the commit
        for callback in callbacks:
            callback()
    finally:
        truth_changed.disconnect(listener)

    merged = Truth.objects.get(origin=Origin.CONSOLIDATED, generation=2)
    assert sorted(received) == sorted(
        [
            (merged.pk, "created", REASON_SAME_TEXT, review.pk),
            (a.pk, "retired", REASON_SAME_TEXT, review.pk),
            (b.pk, "retired", REASON_SAME_TEXT, review.pk),
        ]
    )


def test_cluster_delivered_twice_is_applied_and_counted_once(nurse, run_factory, embedder):
    a, b = nurse
    run = run_factory()
    first = _consolidate(a, b, embedder=embedder, run=run)
    state = truth_state()

    again = _consolidate(a, b, embedder=embedder, run=run)

    assert again.pk == first.pk
    assert truth_state() == state
    assert ClusterReview.objects.count() == 1
    run.refresh_from_db()
    assert (run.clusters_done, run.merged, run.failed) == (1, 1, 0)


# --- all or nothing ---------------------------------------------------------------------


def test_a_constraint_violation_on_the_review_rolls_back_the_merge(nurse, run_factory, embedder):
    a, b = nurse
    run = run_factory()
    before, counts = truth_state(), history_counts()
    # The review is written after the new truth and the retirements: refuse it.
    _sql(f"ALTER TABLE {REVIEW_TABLE} ADD CONSTRAINT test_refuse_applied CHECK (outcome <> 'applied')")

    with pytest.raises(IntegrityError, match="test_refuse_applied"):
        _consolidate(a, b, embedder=embedder, run=run)

    assert truth_state() == before
    assert history_counts() == counts
    run.refresh_from_db()
    assert (run.clusters_done, run.merged, run.retired) == (0, 0, 0)


def test_after_a_failed_write_the_same_cluster_applies_cleanly(nurse, run_factory, embedder):
    a, b = nurse
    run = run_factory()
    _sql(f"ALTER TABLE {REVIEW_TABLE} ADD CONSTRAINT test_refuse_applied CHECK (outcome <> 'applied')")
    with pytest.raises(IntegrityError):
        _consolidate(a, b, embedder=embedder, run=run)
    _sql(f"ALTER TABLE {REVIEW_TABLE} DROP CONSTRAINT test_refuse_applied")

    review = _consolidate(a, b, embedder=embedder, run=run)

    assert review.outcome == ClusterReview.Outcome.APPLIED
    assert Truth.all_objects.count() == 3
    assert Truth.objects.get().origin == Origin.CONSOLIDATED


def test_a_trigger_failing_on_lineage_after_retirements_rolls_everything_back(nurse, run_factory, embedder):
    a, b = nurse
    run = run_factory()
    before, counts = truth_state(), history_counts()
    _sql(
        f"""
        CREATE FUNCTION test_refuse_lineage() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
          RAISE EXCEPTION 'lineage refused after % retirements and % new truths',
            (SELECT count(*) FROM {TRUTH_TABLE} WHERE retired_at IS NOT NULL),
            (SELECT count(*) FROM {TRUTH_TABLE} WHERE origin = 'consolidated' AND generation = 2);
        END $$;
        CREATE TRIGGER test_refuse_lineage BEFORE INSERT ON {LINEAGE_TABLE}
          FOR EACH ROW EXECUTE FUNCTION test_refuse_lineage();
        """
    )

    with pytest.raises(DatabaseError, match="lineage refused after 2 retirements and 1 new truths"):
        _consolidate(a, b, embedder=embedder, run=run)

    assert truth_state() == before
    assert history_counts() == counts


def test_a_receiver_failing_in_the_second_merge_undoes_the_first(
    two_pairs, run_factory, embedder, django_capture_on_commit_callbacks
):
    a, b, c, d = two_pairs
    run = run_factory()
    before, counts = truth_state(), history_counts()
    seen: list[tuple[int, int]] = []

    def explode_on_second_merge(sender, instance, created, **kwargs):
        if created and instance.origin == Origin.CONSOLIDATED:
            written = (
                Truth.all_objects.filter(origin=Origin.CONSOLIDATED).count(),
                Truth.all_objects.retired().count(),
            )
            seen.append(written)
            if len(seen) == 2:
                raise RuntimeError("disk full")

    changed = []
    truth_changed.connect(lambda **kw: changed.append(kw["truth"].pk), weak=False, dispatch_uid="test-changed")
    post_save.connect(explode_on_second_merge, sender=Truth, dispatch_uid="test-explode")
    try:
        with (
            django_capture_on_commit_callbacks(execute=True) as callbacks,
            pytest.raises(RuntimeError, match="disk full"),
        ):
            _consolidate(a, b, c, d, embedder=embedder, run=run)
    finally:
        post_save.disconnect(dispatch_uid="test-explode", sender=Truth)
        truth_changed.disconnect(dispatch_uid="test-changed")

    # The first merge had written its truth and retired two sources when the second failed.
    assert seen == [(1, 0), (2, 2)]
    assert truth_state() == before
    assert history_counts() == counts
    assert callbacks == [] and changed == []
    run.refresh_from_db()
    assert (run.clusters_done, run.merged, run.retired, run.failed) == (0, 0, 0, 0)


def test_a_failed_merge_leaves_a_rerun_of_the_whole_run_able_to_finish(two_pairs, run_factory, embedder):
    a, b, c, d = two_pairs
    failing = run_factory()
    _sql(f"ALTER TABLE {REVIEW_TABLE} ADD CONSTRAINT test_refuse_applied CHECK (outcome <> 'applied')")
    with pytest.raises(IntegrityError):
        execution.run_sync(run=failing, client=RuleJudge(), embedder=embedder)
    _sql(f"ALTER TABLE {REVIEW_TABLE} DROP CONSTRAINT test_refuse_applied")

    run = execution.run_sync(run=run_factory(), client=RuleJudge(), embedder=embedder)

    assert (run.status, run.merged, run.retired) == (ConsolidationRun.Status.DONE, 2, 4)
    assert sorted(Truth.objects.values_list("content", flat=True)) == ["Likes tea", "Works as a nurse"]


def test_merged_truth_takes_the_time_of_its_newest_source(truth_factory, embedder):
    t0 = timezone.now() - timedelta(days=10)
    a = truth_factory("Likes tea", embedding=vector_at(1.0), created_at=t0)
    b = truth_factory("likes tea", user=a.user, embedding=vector_at(0.99), created_at=t0 + timedelta(days=3))

    _consolidate(a, b, embedder=embedder)

    assert Truth.objects.get().created_at == t0 + timedelta(days=3)


def test_a_cluster_gone_stale_before_judging_is_recorded_as_stale_not_failed(nurse, run_factory, embedder):
    """A member retired elsewhere between planning and judging: no judge failed, so the
    run is done (not partial), and the review says why nothing was judged."""
    a, b = nurse
    elsewhere = Truth.objects.create(user=a.user, content="Is a nurse", origin=Origin.USER)  # never clustered

    def retire_b_after_planning(stage, i, n, payload):
        if stage == "clusters":
            Truth.objects.filter(pk=b.pk).update(
                retired_at=timezone.now(), superseded_by=elsewhere, retired_reason="merged"
            )

    run = execution.run_sync(
        run=run_factory(), client=RuleJudge(), embedder=embedder, progress=retire_b_after_planning
    )

    review = ClusterReview.objects.get(run=run)
    assert (review.outcome, review.error, review.skip_reason) == (
        ClusterReview.Outcome.STALE,
        "",
        decide.STALE_CLUSTER,
    )
    assert (review.applied, review.applied_actions) == (False, [])
    assert review_display.review_card(review).why_not == (decide.STALE_CLUSTER,)
    assert [row["id"] for row in review.snapshot] == [a.pk]
    assert (run.status, run.failed, run.clusters_found, run.clusters_done) == (ConsolidationRun.Status.DONE, 0, 1, 1)
    assert run.checkpoint is not None  # a done run writes its checkpoint
    assert Truth.objects.get(pk=a.pk).content == "Works as a nurse"
