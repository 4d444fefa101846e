"""Migrations and the pgvector schema they build on the real PostgreSQL."""

from __future__ import annotations

import re
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.db import connection, transaction
from django.db.migrations.executor import MigrationExecutor

from iris_consolidation.choices import judge_identity
from iris_consolidation.models import EMBEDDING_DIMENSIONS, Truth
from iris_consolidation.querysets import set_hnsw_search
from tests.conftest import vector_at

pytestmark = pytest.mark.django_db

INDEX = "truth_embedding_hnsw"


def _fetchall(sql: str, params: list | None = None) -> list[tuple]:
    with connection.cursor() as cursor:
        cursor.execute(sql, params or [])
        return cursor.fetchall()


def test_models_and_migrations_agree():
    out = StringIO()

    call_command("makemigrations", "iris_consolidation", "--check", "--dry-run", stdout=out)

    assert "No changes detected" in out.getvalue()


def test_migrations_create_the_vector_extension():
    assert _fetchall("SELECT extname FROM pg_extension WHERE extname = 'vector'") == [("vector",)]


def test_embedding_column_has_the_configured_dimensions():
    rows = _fetchall(
        "SELECT format_type(atttypid, atttypmod) FROM pg_attribute "
        "WHERE attrelid = %s::regclass AND attname = 'embedding'",
        [Truth._meta.db_table],
    )

    assert rows == [(f"vector({EMBEDDING_DIMENSIONS})",)]


def test_hnsw_index_opclass_orders_by_the_operator_that_querysets_use():
    """The index's opclass must provide the very operator ``CosineDistance`` compiles to,
    or PostgreSQL can never use the index for the neighbour query."""
    sql, _ = Truth.objects.with_cosine_distance(vector_at(1.0)).query.sql_with_params()
    used = re.search(r'"embedding"\s+(\S+)\s', sql).group(1)

    rows = _fetchall(
        """
        SELECT am.amname, opc.opcname, op.oprname
        FROM pg_index i
        JOIN pg_class ic ON ic.oid = i.indexrelid
        JOIN pg_opclass opc ON opc.oid = i.indclass[0]
        JOIN pg_am am ON am.oid = opc.opcmethod
        JOIN pg_amop amop ON amop.amopfamily = opc.opcfamily AND amop.amoppurpose = 'o'
        JOIN pg_operator op ON op.oid = amop.amopopr
        WHERE ic.relname = %s
        """,
        [INDEX],
    )

    assert used == "<=>"
    assert rows == [("hnsw", "vector_cosine_ops", "<=>")]


def test_nearest_neighbour_query_can_be_served_by_the_hnsw_index(truth_factory):
    truths = [truth_factory(f"t{i}", embedding=vector_at(1.0 - i / 100)) for i in range(30)]
    query = Truth.objects.for_user(truths[0].user_id).nearest(vector_at(1.0), limit=5)

    with transaction.atomic():
        set_hnsw_search(ef_search=100)
        with connection.cursor() as cursor:
            # On 30 rows a full sort is cheapest; forbid it so the planner shows
            # whether the index can order by the query's distance at all.
            cursor.execute("SET LOCAL enable_sort = off")
        plan = query.explain()
        found = list(query.values_list("id", flat=True))

    assert f"Index Scan using {INDEX}" in plan
    assert "Order By: (embedding <=> " in plan
    assert found == [t.pk for t in truths[:5]]


def _migrate(target: str) -> Any:
    """Migrate the app to ``target`` and return the historical apps at that state."""
    executor = MigrationExecutor(connection)
    executor.migrate([("iris_consolidation", target)])
    executor.loader.build_graph()
    return executor.loader.project_state([("iris_consolidation", target)]).apps


@pytest.fixture
def latest_after() -> Any:
    """Migrate back to the newest migration when the test is done."""
    yield
    executor = MigrationExecutor(connection)
    executor.migrate(executor.loader.graph.leaf_nodes())


@pytest.mark.django_db(transaction=True)
def test_run_mode_becomes_dry_run_beside_execution_and_back(latest_after):
    apps = _migrate("0016_run_dry_run")
    Run = apps.get_model("iris_consolidation", "ConsolidationRun")
    for mode in ("queued", "sync", "dry_run"):
        Run.objects.create(threshold=0.8, mode=mode, notes=mode)

    apps = _migrate("0018_remove_run_mode")
    Run = apps.get_model("iris_consolidation", "ConsolidationRun")
    after = {r.notes: (r.dry_run, r.execution) for r in Run.objects.all()}
    assert after == {"queued": (False, "queued"), "sync": (False, "in_process"), "dry_run": (True, "queued")}

    apps = _migrate("0016_run_dry_run")
    Run = apps.get_model("iris_consolidation", "ConsolidationRun")
    assert {r.notes: r.mode for r in Run.objects.all()} == {"queued": "queued", "sync": "sync", "dry_run": "dry_run"}


@pytest.mark.django_db(transaction=True)
def test_run_judge_kind_and_model_come_from_the_judge_name(latest_after):
    apps = _migrate("0019_run_judge_kind")
    Run = apps.get_model("iris_consolidation", "ConsolidationRun")
    for judge in ("rules", "llm:openai/gpt-4o-mini", "bench", ""):
        Run.objects.create(threshold=0.8, judge=judge)

    apps = _migrate("0020_run_judge_kind_backfill")
    Run = apps.get_model("iris_consolidation", "ConsolidationRun")

    assert {r.judge: (r.judge_kind, r.judge_model) for r in Run.objects.all()} == {
        "rules": ("rules", ""), "llm:openai/gpt-4o-mini": ("llm", "openai/gpt-4o-mini"), "bench": ("", ""), "": ("", "")
    }


def test_judge_identity_reads_a_judge_name_as_the_backfill_did():
    assert [judge_identity(n) for n in ("rules", "llm:openai/gpt-4o-mini", "bench", "", None)] == [
        ("rules", ""), ("llm", "openai/gpt-4o-mini"), ("", ""), ("", ""), ("", "")
    ]
