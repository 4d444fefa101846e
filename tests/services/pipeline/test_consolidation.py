"""services.pipeline.consolidation: the LLM tier stops on a review's failure kind, never
on the wording of its error."""

from __future__ import annotations

import pytest

from iris_consolidation.models import ClusterReview
from iris_consolidation.services.run import decide

pytestmark = pytest.mark.django_db


def _failed(run, user, key: str, *, error: str, failure: str) -> ClusterReview:
    return ClusterReview.objects.create(
        run=run, user=user, key=key, outcome=ClusterReview.Outcome.FAILED, error=error, failure=failure
    )


def test_the_llm_tier_stops_on_the_failure_kind_not_the_wording(run_factory, user_factory):
    run = run_factory(execution="queued")
    reworded, parsed_before = user_factory("reworded"), user_factory("parsed")
    _failed(run, reworded, "a", error="Model endpoint refused the key", failure=ClusterReview.Failure.UNAVAILABLE)
    # The old filter matched this text; a failure of another kind stops nothing now.
    _failed(
        run, parsed_before, "b", error="LLM judge unavailable: rate limited", failure=ClusterReview.Failure.RATE_LIMITED
    )

    assert decide.llm_tier_stopped(run_id=run.pk, user_id=reworded.pk) is True
    assert decide.llm_tier_stopped(run_id=run.pk, user_id=parsed_before.pk) is False


def test_a_review_stopped_by_the_tier_keeps_it_stopped(run_factory, user_factory):
    run = run_factory(execution="queued")
    user = user_factory()
    _failed(run, user, "a", error=decide.LLM_TIER_STOPPED, failure=ClusterReview.Failure.LLM_STOPPED)

    assert decide.llm_tier_stopped(run_id=run.pk, user_id=user.pk) is True
