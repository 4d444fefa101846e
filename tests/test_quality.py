"""Quality score: bounds and monotonicity in each term (pure, no database)."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

import pytest

from iris_consolidation import quality

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def _q(**kw):
    args = {"relevance": 0.5, "access_count": 3, "last_used": NOW - timedelta(days=7), "validated": False,
            "now": NOW, "half_life_days": 14.0}
    args.update(kw)
    return quality.quality(**args)


def test_quality_is_one_at_best_and_zero_at_worst():
    assert _q(relevance=1.0, access_count=100, last_used=NOW, validated=True) == pytest.approx(1.0)
    worst = _q(relevance=0.0, access_count=0, last_used=NOW - timedelta(days=3650), validated=False)
    assert 0.0 <= worst < 1e-20


@pytest.mark.parametrize(
    "relevance,access,days,validated",
    [(r, a, d, v) for r in (0.0, 0.3, 1.0) for a in (0, 1, 7, 1000) for d in (0, 14, 400) for v in (False, True)],
)
def test_quality_stays_in_zero_to_one(relevance, access, days, validated):
    value = _q(relevance=relevance, access_count=access, last_used=NOW - timedelta(days=days), validated=validated)
    assert 0.0 <= value <= 1.0


def test_quality_rises_with_relevance():
    values = [_q(relevance=r) for r in (0.0, 0.25, 0.5, 0.75, 1.0)]
    assert values == sorted(values) and len(set(values)) == 5
    assert values[-1] - values[0] == pytest.approx(0.45)


def test_quality_rises_with_access_and_the_first_uses_count_most():
    values = [_q(access_count=n) for n in (0, 1, 2, 10, 100, 500)]
    assert values == sorted(values)
    assert values[-1] == values[-2]  # saturated at ACCESS_SATURATION uses
    first = quality.access_term(1) - quality.access_term(0)
    later = quality.access_term(11) - quality.access_term(10)
    assert first == pytest.approx(math.log(2) / math.log(101)) and first > 5 * later


def test_quality_falls_with_time_since_last_use():
    values = [_q(last_used=NOW - timedelta(days=d)) for d in (0, 1, 14, 28, 365)]
    assert values == sorted(values, reverse=True)
    assert quality.recency_term(last_used=NOW - timedelta(days=14), now=NOW, half_life_days=14) == pytest.approx(0.5)
    # A time in the future counts as now.
    assert quality.recency_term(last_used=NOW + timedelta(days=3), now=NOW, half_life_days=14) == 1.0


def test_validation_adds_a_tenth():
    assert _q(validated=True) - _q(validated=False) == pytest.approx(0.10)


def test_out_of_range_relevance_is_clamped():
    assert _q(relevance=7.0) == _q(relevance=1.0)
    assert _q(relevance=-1.0) == _q(relevance=0.0)
