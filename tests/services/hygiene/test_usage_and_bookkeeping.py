"""The public API (record_access, mark_validated) and merge bookkeeping on a real merge."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from iris_consolidation.api import mark_validated, record_access
from iris_consolidation.embeddings import LocalEmbedder
from iris_consolidation.exceptions import InvalidInput
from iris_consolidation.models import Origin, RetiredReason, Truth
from tests.conftest import vector_at
from tests.helpers import consolidate

pytestmark = pytest.mark.django_db


@pytest.fixture(scope="module")
def embedder() -> LocalEmbedder:
    return LocalEmbedder()


def test_record_access_counts_uses_and_keeps_the_latest_time(truth_factory):
    t = truth_factory("Likes tea")
    late, early = timezone.now(), timezone.now() - timedelta(days=3)
    before = Truth.all_objects.get(pk=t.pk).updated_at
    assert record_access([t.pk, t.pk], at=late) == 1
    assert record_access([t.pk], at=early) == 1
    row = Truth.all_objects.get(pk=t.pk)
    assert (row.access_count, row.last_accessed, row.updated_at) == (2, late, before)
    with pytest.raises(InvalidInput, match="time zone"):
        record_access([t.pk], at=late.replace(tzinfo=None))


def test_record_access_and_mark_validated_leave_retired_truths(truth_factory):
    live = truth_factory("Likes tea")
    gone = truth_factory("Likes coffee", retired_at=timezone.now(), retired_reason=RetiredReason.PRUNED)
    assert record_access([live.pk, gone.pk]) == 1
    assert mark_validated([live.pk, gone.pk]) == 1
    assert mark_validated([live.pk]) == 1  # idempotent
    assert Truth.all_objects.get(pk=live.pk).validated is True
    assert Truth.all_objects.get(pk=gone.pk).validated is False


def test_a_real_merge_combines_the_hygiene_fields(truth_factory, embedder):
    used = timezone.now() - timedelta(days=2)
    a = truth_factory("Works as a nurse", embedding=vector_at(1.0), tags=["job", "health"], access_count=3,
                      relevance=0.5, last_accessed=used - timedelta(days=5))
    b = truth_factory("works as a nurse.", user=a.user, embedding=vector_at(0.99), tags=["health", "work"],
                      access_count=4, relevance=0.7, validated=True, last_accessed=used)
    c = truth_factory("Works as a nurse!", user=a.user, embedding=vector_at(0.98), relevance=0.2)
    review = consolidate(a, b, c, embedder=embedder)
    assert review.applied
    merged = Truth.objects.get(origin=Origin.CONSOLIDATED)
    assert merged.tags == ["job", "health", "work"]
    assert merged.access_count == 7
    assert merged.validated is True
    assert merged.relevance == pytest.approx(0.9)  # 0.7 + 0.1 x 2 retired duplicates
    assert merged.last_accessed == used


def test_merge_relevance_is_capped_at_one_and_a_protected_keeper_absorbs(truth_factory, embedder):
    keeper = truth_factory("Works as a nurse", embedding=vector_at(1.0), origin=Origin.USER, tags=["a"],
                           relevance=0.95)
    other = truth_factory("works as a nurse.", user=keeper.user, embedding=vector_at(0.99), tags=["b"],
                          access_count=2, validated=True)
    before = Truth.all_objects.get(pk=keeper.pk)
    review = consolidate(keeper, other, embedder=embedder)
    assert review.applied
    row = Truth.all_objects.get(pk=keeper.pk)
    assert row.is_live and row.content == "Works as a nurse"
    assert (row.tags, row.access_count, row.validated, row.relevance) == (["a", "b"], 2, True, 1.0)
    assert row.updated_at == before.updated_at
    assert Truth.all_objects.get(pk=other.pk).superseded_by_id == keeper.pk


def test_rule_judge_keeps_the_text_of_the_best_quality_member(truth_factory, embedder):
    a = truth_factory("works as a nurse", embedding=vector_at(1.0), relevance=0.1)
    b = truth_factory("Works as a nurse.", user=a.user, embedding=vector_at(0.99), relevance=1.0, access_count=9)
    consolidate(a, b, embedder=embedder)
    assert Truth.objects.get(origin=Origin.CONSOLIDATED).content == "Works as a nurse."
