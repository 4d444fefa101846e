"""Decay: idempotent over cadence, weights by kind, the access baseline, protected untouched."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.utils import timezone

from iris_consolidation.api import record_access
from iris_consolidation.models import Origin, Truth
from iris_consolidation.services.hygiene import decay

pytestmark = pytest.mark.django_db


def _relevance(truth: Truth) -> float:
    return Truth.all_objects.get(pk=truth.pk).relevance


def test_decaying_hourly_daily_or_once_gives_the_same_relevance(truth_factory, user_factory):
    t0 = timezone.now() - timedelta(days=60)
    users = [user_factory() for _ in range(3)]
    truths = [truth_factory("Has a dog", user=u, created_at=t0, kind="insight") for u in users]
    end = t0 + timedelta(days=30)
    # Once at the end; daily; hourly for the last two days after daily before.
    decay.decay_user(user_id=users[0].pk, now=end, write=True)
    for day in range(1, 31):
        decay.decay_user(user_id=users[1].pk, now=t0 + timedelta(days=day), write=True)
    for hour in range(1, 30 * 24 + 1, 7):
        decay.decay_user(user_id=users[2].pk, now=t0 + timedelta(hours=hour), write=True)
    decay.decay_user(user_id=users[2].pk, now=end, write=True)

    expected = 0.5 ** (30 * 0.75 / 14)  # insight weighs 0.75, half-life 14 days
    values = [_relevance(t) for t in truths]
    assert values == pytest.approx([expected] * 3, rel=1e-9)
    # A second pass at the same time changes nothing.
    decay.decay_user(user_id=users[0].pk, now=end, write=True)
    assert _relevance(truths[0]) == pytest.approx(expected, rel=1e-12)


def test_weights_by_kind(truth_factory, user_factory, settings):
    settings.IRIS_CONSOLIDATION_HALF_LIFE_DAYS = 10
    user = user_factory()
    t0 = timezone.now() - timedelta(days=100)
    kinds = {"fact": 0.5, "insight": 0.75, "trajectory": 1.0, "working": 2.0, "hobby": 1.0}
    truths = {k: truth_factory(f"A {k} truth", user=user, created_at=t0, kind=k) for k in kinds}
    now = t0 + timedelta(days=10)
    result = decay.decay_user(user_id=user.pk, now=now, write=True)
    assert result.changed == 5
    for kind, weight in kinds.items():
        assert _relevance(truths[kind]) == pytest.approx(0.5**weight), kind


def test_custom_weights_from_the_setting_and_bad_ones_refused(truth_factory, settings):
    settings.IRIS_CONSOLIDATION_DECAY_WEIGHTS = "fact=0,working=4"
    t = truth_factory("Likes tea", kind="fact", created_at=timezone.now() - timedelta(days=40))
    decay.decay_user(user_id=t.user_id, now=timezone.now(), write=True)
    assert _relevance(t) == 1.0  # weight 0: never decays
    settings.IRIS_CONSOLIDATION_DECAY_WEIGHTS = "fact=-1"
    with pytest.raises(ImproperlyConfigured, match="DECAY_WEIGHTS"):
        decay.decay_user(user_id=t.user_id, now=timezone.now(), write=True)


def test_a_use_restarts_the_clock_from_the_use(truth_factory, user_factory):
    user = user_factory()
    t0 = timezone.now() - timedelta(days=50)
    used = truth_factory("Plays chess", user=user, created_at=t0, kind="trajectory")
    unused = truth_factory("Plays go", user=user, created_at=t0, kind="trajectory")
    decay.decay_user(user_id=user.pk, now=t0 + timedelta(days=14), write=True)
    record_access([used.pk], at=t0 + timedelta(days=28))
    decay.decay_user(user_id=user.pk, now=t0 + timedelta(days=42), write=True)
    # used: 14 days, then 14 days from the use (the 14 between don't count); unused: 42.
    assert _relevance(used) == pytest.approx(0.25)
    assert _relevance(unused) == pytest.approx(0.125)


def test_protected_truths_never_decay(truth_factory, user_factory):
    user = user_factory()
    old = timezone.now() - timedelta(days=365)
    protected = [
        truth_factory("Pinned", user=user, created_at=old, pinned=True),
        truth_factory("By the user", user=user, created_at=old, origin=Origin.USER),
        truth_factory("By the agent", user=user, created_at=old, origin=Origin.AGENT),
        truth_factory("At max generation", user=user, created_at=old, origin=Origin.CONSOLIDATED, generation=5),
    ]
    plain = truth_factory("Plain", user=user, created_at=old)
    result = decay.decay_user(user_id=user.pk, now=timezone.now(), write=True)
    assert result.examined == 1
    for t in protected:
        row = Truth.all_objects.get(pk=t.pk)
        assert (row.relevance, row.last_decayed) == (1.0, None)
    assert _relevance(plain) < 1e-3


def test_report_mode_writes_nothing_and_decay_keeps_updated_at(truth_factory):
    t = truth_factory("Has a cat", created_at=timezone.now() - timedelta(days=28))
    before = Truth.all_objects.get(pk=t.pk)
    result = decay.decay_user(user_id=t.user_id, now=timezone.now(), write=False)
    assert result.relevance[t.pk] == pytest.approx(0.5, rel=1e-3)
    assert Truth.all_objects.get(pk=t.pk).relevance == 1.0
    decay.decay_user(user_id=t.user_id, now=timezone.now(), write=True)
    after = Truth.all_objects.get(pk=t.pk)
    assert after.relevance == pytest.approx(0.5, rel=1e-3)
    assert after.updated_at == before.updated_at  # the cursor and freshness checks ignore decay


def test_decay_rows_gives_each_row_the_formula_bit_for_bit():
    """``decay_rows`` (the stage's loop) against ``baseline`` and ``decayed_relevance`` (the
    formula) row by row: weight 0, a kind with no weight, a baseline in the future (no
    time elapsed), an access later or earlier than the last decay, none of either."""
    now = timezone.now()
    weights = {"fact": 0.5, "working": 3.7, "frozen": 0.0}
    marks = [None, now - timedelta(days=40, seconds=7), now - timedelta(hours=5), now + timedelta(days=1)]
    rows, expected = [], {}
    for pk, (kind, decayed, accessed) in enumerate(
        (kind, decayed, accessed) for kind in ("fact", "working", "frozen", "other") for decayed in marks
        for accessed in marks
    ):
        created = now - timedelta(days=300 + pk, microseconds=pk)
        before = 1.0 - pk / 100
        rows.append((pk, f"text {pk}", kind, before, created, decayed, accessed))
        since = decay.baseline(held_since=created, last_decayed=decayed, last_accessed=accessed)
        expected[pk] = decay.decayed_relevance(relevance=before, since=since, now=now,
                                               weight=decay.weight_of(kind, weights), half_life_days=30.0)

    result = decay.decay_rows(rows, now=now, weights=weights, half_life=30.0)

    assert result.relevance == expected  # float equality: the same operations
    assert result.examined == len(rows) == 64
    unchanged = [pk for pk, (_, _, kind, before, *_) in enumerate(rows) if expected[pk] == before]
    # The weight-0 kind's 16, and for each other kind the 7 rows whose baseline is in the future.
    assert len(unchanged) == 16 + 3 * 7
    assert result.changed == len(rows) - len(unchanged)
    assert [f["truth_id"] for f in result.findings] == [pk for pk in expected if pk not in unchanged]


def test_decay_rows_reads_only_the_weights_of_the_kinds_it_meets():
    now = timezone.now()
    rows = [(1, "a", "fact", 0.8, now - timedelta(days=30), None, None)]
    # "note" has no usable weight, but no row is a note: as with ``weight_of`` per row.
    result = decay.decay_rows(rows, now=now, weights={"fact": 1, "note": None}, half_life=30.0)
    assert result.relevance == {1: 0.8 * 0.5 ** ((now - rows[0][4]).total_seconds() / 86400.0 / 30.0)}
