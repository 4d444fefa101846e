"""A small user's phase 1 costs a handful of queries: the round trips, not the work on
twenty truths, are most of its time."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from iris_consolidation.embeddings import LOCAL_MODEL_NAME
from iris_consolidation.models import LineageEvent, StageResult, Truth
from iris_consolidation.services.run import lifecycle
from iris_consolidation.services.run import plan as run_plan
from tests.conftest import vector_at

pytestmark = pytest.mark.django_db

#: A small user's whole dry-run pass (every stage in its default mode): the run with what
#: the pass must know first; the synchronous_commit switch; the user's truths; the
#: cursor; the pass's upsert; the vectors; the stage results' insert; the run's counters
#: (the forecast read under its lock, the update).
SMALL_PASS_QUERIES = 9
TRANSACTION_CONTROL = ("SAVEPOINT", "RELEASE SAVEPOINT", "ROLLBACK TO SAVEPOINT", "BEGIN", "COMMIT")


class _NoEmbedder:
    model_name = LOCAL_MODEL_NAME

    def embed(self, texts):
        raise AssertionError("every truth has its embedding")


def _small_user(user_factory, n: int = 21):
    user = user_factory()
    now = timezone.now()
    Truth.all_objects.bulk_create([
        Truth(user=user, content=f"Likes hiking trail number {i} near town {i % 5}", created_at=now - timedelta(days=i),
              embedding=vector_at(0.5 + 0.5 * (i % 7) / 7, towards=1 + i % 3), embedding_model=LOCAL_MODEL_NAME,
              source=f"q:{i}")
        for i in range(n)
    ])
    return user


def _statements(ctx: CaptureQueriesContext) -> list[str]:
    return [q["sql"] for q in ctx.captured_queries if not q["sql"].startswith(TRANSACTION_CONTROL)]


def test_small_user_pass_costs_a_handful_of_queries(user_factory):
    user = _small_user(user_factory)
    run = lifecycle.create_run(trigger="command", dry_run=True, judge="rules")
    with CaptureQueriesContext(connection) as ctx:
        clusters = run_plan.plan_user(run_id=run.pk, user_id=user.pk, embedder=_NoEmbedder())
    statements = _statements(ctx)
    assert len(statements) <= SMALL_PASS_QUERIES, "\n".join(statements)
    assert clusters
    assert set(StageResult.objects.filter(run=run, user=user).values_list("stage", flat=True)) >= {
        "mine", "noise", "decay", "semantic", "lexical"}


def test_second_delivery_reads_the_recorded_results_and_an_undo_is_still_kept_apart(user_factory):
    """What the first query says is there (recorded results, an undo) is read, not skipped."""
    user = _small_user(user_factory)
    run = lifecycle.create_run(trigger="command", dry_run=True, judge="rules")
    first = run_plan.plan_user(run_id=run.pk, user_id=user.pk, embedder=_NoEmbedder())
    a, b = first[0].member_ids[:2]
    LineageEvent.objects.create(action=LineageEvent.Action.UNDO, source_id=a, result_id=b, actor="test")
    with CaptureQueriesContext(connection) as ctx:
        again = run_plan.plan_user(run_id=run.pk, user_id=user.pk, embedder=_NoEmbedder())
    assert any('"iris_consolidation_lineageevent"' in sql for sql in _statements(ctx))
    assert any('FROM "iris_consolidation_stageresult"' in sql for sql in _statements(ctx))
    assert all(not {a, b} <= set(c.member_ids) for c in again)
    assert StageResult.objects.filter(run=run, user=user, stage="noise").count() == 1
