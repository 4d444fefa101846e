"""Small helpers shared by the foundation tests (plain functions, no fixtures).

``truth_state()`` photographs every truth row (live and retired, every column) so a
test can assert that a failed or dry write left the table exactly as it was.
"""

from __future__ import annotations

from typing import Any


def _plain(value: Any) -> Any:
    """Embeddings come back as lists or numpy arrays depending on pgvector's version."""
    if hasattr(value, "tolist"):
        return [round(float(x), 6) for x in value.tolist()]
    if isinstance(value, list):
        return [round(float(x), 6) for x in value]
    return value


#: Columns the decay stage writes on every real pass, whatever the judge decides (a clock,
#: like ``updated_at`` for edits); ``tests/services/hygiene/test_decay.py`` checks them.
DECAY_COLUMNS = ("relevance", "last_decayed")


def truth_state(*, with_decay: bool = False) -> dict[int, dict[str, Any]]:
    """Every truth row, keyed by id, with every column (embedding as a rounded list);
    the decay columns only ``with_decay`` (a dry run must leave even those)."""
    from iris_consolidation.models import Truth

    skip = () if with_decay else DECAY_COLUMNS
    return {
        row["id"]: {k: _plain(v) for k, v in row.items() if k not in skip}
        for row in Truth.all_objects.order_by("id").values()
    }


def history_counts() -> dict[str, int]:
    """Row counts of the tables a consolidation writes besides truths."""
    from iris_consolidation.models import ClusterReview, ConsolidationRun, LineageEvent, Truth

    return {
        "truths": Truth.all_objects.count(),
        "reviews": ClusterReview.objects.count(),
        "events": LineageEvent.objects.count(),
        "runs": ConsolidationRun.objects.count(),
        "memberships": ClusterReview.members.through.objects.count(),
    }


def parse_summary(output: str) -> dict[str, str]:
    """The ``key=value`` pairs of the command's ``Summary:`` line."""
    line = next(line for line in output.splitlines() if line.startswith("Summary: "))
    return dict(part.split("=", 1) for part in line.removeprefix("Summary: ").split())


def rules_run(user: Any, *, dry_run: bool = False) -> Any:
    """A run over ``user``'s truths with the rule judge, executed in this process, refreshed."""
    from iris_consolidation.embeddings import get_embedder
    from iris_consolidation.llm.rules import RuleJudge
    from iris_consolidation.services.pipeline import consolidation
    from iris_consolidation.services.queue import execution

    run = consolidation.create_run(
        trigger="command", dry_run=dry_run, execution="in_process", threshold=0.75, user_id=user.pk, judge="rules")
    execution.run_sync(run=run, client=RuleJudge(), embedder=get_embedder())
    run.refresh_from_db()
    return run
