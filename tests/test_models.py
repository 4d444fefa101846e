"""Models on the real PostgreSQL: constraints, managers, soft retirement."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import IntegrityError, transaction
from django.db.models import ProtectedError
from django.utils import timezone

from iris_consolidation.models import (
    ClusterReview,
    ConsolidationRun,
    LineageEvent,
    Origin,
    RetiredReason,
    Truth,
)
from tests.conftest import vector_at

pytestmark = pytest.mark.django_db


def _violates(constraint: str, write) -> None:
    """Run ``write`` and assert PostgreSQL refuses it with ``constraint``."""
    with pytest.raises(IntegrityError) as info, transaction.atomic():
        write()
    assert constraint in str(info.value)


def test_default_manager_shows_live_truths_only(truth_factory):
    live = truth_factory("Lives in Berlin")
    retired = truth_factory("Lives in Lisbon")
    Truth.all_objects.filter(pk=retired.pk).update(
        retired_at=timezone.now(), superseded_by=live, retired_reason=RetiredReason.SUPERSEDED
    )

    assert list(Truth.objects.values_list("pk", flat=True)) == [live.pk]
    assert not Truth.objects.filter(pk=retired.pk).exists()


def test_all_objects_shows_retired_truths_with_their_replacement(truth_factory):
    live = truth_factory("Lives in Berlin")
    retired = truth_factory("Lives in Lisbon")
    Truth.all_objects.filter(pk=retired.pk).update(
        retired_at=timezone.now(), superseded_by=live, retired_reason=RetiredReason.SUPERSEDED
    )

    assert sorted(Truth.all_objects.values_list("pk", flat=True)) == sorted([live.pk, retired.pk])
    assert list(Truth.all_objects.retired().values_list("pk", flat=True)) == [retired.pk]
    reloaded = Truth.all_objects.get(pk=retired.pk)
    assert reloaded.is_live is False
    assert reloaded.superseded_by_id == live.pk


def test_reverse_relations_follow_the_default_manager_and_hide_retired_truths(truth_factory):
    """``truth.replaces`` uses ``objects`` (live only), so replaced truths need
    ``manager="all_objects"``; a lineage reader that forgets it sees nothing."""
    live = truth_factory("Lives in Berlin")
    retired = truth_factory("Lives in Lisbon")
    Truth.all_objects.filter(pk=retired.pk).update(
        retired_at=timezone.now(), superseded_by=live, retired_reason=RetiredReason.SUPERSEDED
    )

    assert list(live.replaces.values_list("pk", flat=True)) == []
    assert list(live.replaces(manager="all_objects").values_list("pk", flat=True)) == [retired.pk]


def test_related_access_reaches_retired_truths_through_the_base_manager(truth_factory):
    live = truth_factory("Lives in Berlin")
    retired = truth_factory("Lives in Lisbon")
    Truth.all_objects.filter(pk=retired.pk).update(
        retired_at=timezone.now(), superseded_by=live, retired_reason=RetiredReason.MERGED
    )
    event = LineageEvent.objects.create(action=LineageEvent.Action.MERGE, source=retired, result=live)

    event = LineageEvent.objects.get(pk=event.pk)

    assert event.source.content == "Lives in Lisbon"
    assert event.source.retired_reason == "merged"


def test_a_truth_cannot_supersede_itself(truth_factory):
    truth = truth_factory("Likes tea")

    _violates(
        "truth_not_superseded_by_itself",
        lambda: Truth.all_objects.filter(pk=truth.pk).update(
            superseded_by=truth, retired_at=timezone.now(), retired_reason=RetiredReason.MERGED
        ),
    )


def test_retirement_needs_both_a_time_and_a_reason(truth_factory):
    truth = truth_factory("Likes tea")

    _violates(
        "truth_retirement_complete",
        lambda: Truth.all_objects.filter(pk=truth.pk).update(retired_at=timezone.now()),
    )
    _violates(
        "truth_retirement_complete",
        lambda: Truth.all_objects.filter(pk=truth.pk).update(retired_reason=RetiredReason.MERGED),
    )
    assert Truth.objects.get(pk=truth.pk).retired_reason == ""


def test_unknown_origin_is_refused_by_the_database(user_factory):
    user = user_factory()

    _violates("truth_origin_valid", lambda: Truth.objects.create(user=user, content="x", origin="rumour"))
    assert Truth.all_objects.count() == 0


@pytest.mark.parametrize("content", ["", "   ", "\n\t"])
def test_blank_content_is_refused_by_the_database(user_factory, content):
    user = user_factory()

    _violates("truth_content_not_blank", lambda: Truth.objects.create(user=user, content=content))


def test_run_threshold_must_be_in_zero_one(db):
    _violates("run_threshold_in_range", lambda: ConsolidationRun.objects.create(threshold=0))
    _violates("run_threshold_in_range", lambda: ConsolidationRun.objects.create(threshold=1.01))
    assert ConsolidationRun.objects.create(threshold=1.0).threshold == 1.0


def test_one_review_per_run_and_cluster_key(run_factory, user_factory):
    run, user = run_factory(), user_factory()
    ClusterReview.objects.create(run=run, user=user, key="k1", outcome=ClusterReview.Outcome.KEPT)

    _violates(
        "review_once_per_run_and_cluster",
        lambda: ClusterReview.objects.create(run=run, user=user, key="k1", outcome=ClusterReview.Outcome.KEPT),
    )


def test_lineage_event_cannot_point_at_its_own_source(truth_factory):
    truth = truth_factory("Likes tea")

    _violates(
        "lineage_not_self",
        lambda: LineageEvent.objects.create(action=LineageEvent.Action.MERGE, source=truth, result=truth),
    )


def test_a_replacement_truth_cannot_be_deleted_while_it_replaces_another(truth_factory):
    live = truth_factory("Lives in Berlin")
    retired = truth_factory("Lives in Lisbon")
    Truth.all_objects.filter(pk=retired.pk).update(
        retired_at=timezone.now(), superseded_by=live, retired_reason=RetiredReason.SUPERSEDED
    )

    with pytest.raises(ProtectedError):
        live.delete()
    assert Truth.all_objects.count() == 2


def test_embedding_of_the_wrong_dimension_is_refused_by_the_database(user_factory):
    user = user_factory()

    with pytest.raises(Exception, match="expected 384 dimensions, not 512"), transaction.atomic():
        Truth.objects.create(user=user, content="x", embedding=[0.1] * 512)
    assert Truth.all_objects.count() == 0


def test_embedding_round_trips_through_pgvector(truth_factory):
    vector = vector_at(0.6)
    truth = truth_factory("Likes tea", embedding=vector)

    stored = list(Truth.objects.get(pk=truth.pk).embedding)

    assert len(stored) == 384
    assert stored[:3] == pytest.approx([0.6, 0.8, 0.0], abs=1e-6)


def test_defaults_of_a_new_truth(user_factory):
    truth = Truth.objects.create(user=user_factory(), content="Has a son named Tomas")

    assert (truth.origin, truth.kind, truth.pinned, truth.generation, truth.score, truth.corroborations) == (
        Origin.PROMOTED,
        "fact",
        False,
        0,
        0.0,
        1,
    )
    assert truth.is_live and truth.retired_reason == "" and truth.embedding is None


def test_str_of_a_truth_is_short(truth_factory):
    truth = truth_factory("x" * 100)

    assert str(truth) == f"#{truth.pk} " + "x" * 57 + "..."
    assert str(truth_factory("Likes tea")).endswith(" Likes tea")


def test_run_duration_and_dry_run_flag(db):
    now = timezone.now()
    run = ConsolidationRun.objects.create(
        threshold=0.8, dry_run=True, started_at=now, finished_at=now + timedelta(seconds=2.5)
    )

    assert run.dry_run is True
    assert run.duration_seconds == 2.5
    assert ConsolidationRun(threshold=0.8).duration_seconds is None
    assert str(run).startswith(f"Run {str(run.pk)[:8]} (Dry run, Pending)")


def test_a_real_runs_name_says_real_run_not_its_queue_mode():
    run = ConsolidationRun.objects.create(threshold=0.8, execution="queued")

    assert str(run) == f"Run {str(run.pk)[:8]} (Real run, Pending)"


def test_merge_protection_states_the_consequences_of_protection_once():
    from iris_consolidation.choices import MergeProtection

    none = MergeProtection.of(("t1", "t2"), lambda alias: False)
    one = MergeProtection.of(("t1", "t2", "t3"), lambda alias: alias == "t2")
    two = MergeProtection.of(("t1", "t2", "t3"), lambda alias: alias != "t1")

    assert (none.keeper, none.allowed, none.retiring, none.needs_embedding) == (None, True, ("t1", "t2"), True)
    assert (one.keeper, one.allowed, one.retiring, one.needs_embedding) == ("t2", True, ("t1", "t3"), False)
    assert (two.keeper, two.allowed, two.retiring) == ("t2", False, ("t1",))
