"""Helpers for the incremental-pass tests: clusters on controlled vectors, one pass."""

from __future__ import annotations

from typing import Any

from iris_consolidation.embeddings import get_embedder
from iris_consolidation.llm import get_judge_client
from iris_consolidation.models import ConsolidationRun, Truth
from iris_consolidation.services.queue import execution
from iris_consolidation.services.run import lifecycle
from tests.conftest import vector_at


def make_pairs(
    truth_factory: Any, user: Any, n: int, *, prefix: str = "fact", start: int = 0
) -> list[tuple[Truth, Truth]]:
    """``n`` clusters of two truths each (cosine 0.9 inside a pair, 0 across pairs).

    Contents are "<prefix> k a" / "<prefix> k b" for k from ``start``; pair k lives on
    axes 2k and 2k+1, so pairs with the same k but another prefix are neighbours.
    """
    pairs = []
    for k in range(start, start + n):
        a = truth_factory(f"{prefix} {k} a", user=user, embedding=vector_at(1.0, axis=2 * k, towards=2 * k + 1))
        b = truth_factory(f"{prefix} {k} b", user=user, embedding=vector_at(0.9, axis=2 * k, towards=2 * k + 1))
        pairs.append((a, b))
    return pairs


def run_pass(*, dry_run: bool = False, **kwargs: Any) -> ConsolidationRun:
    """Create and run one pass in this process with the configured judge; returns the run."""
    client = get_judge_client()
    run = lifecycle.create_run(trigger="command", dry_run=dry_run, execution="in_process", judge=client.name, **kwargs)
    return execution.run_sync(run=run, client=client, embedder=get_embedder())


def judged_contents(server: Any, since: int = 0) -> list[set[str]]:
    """The member contents of each chat request the stub received from index ``since`` on."""
    return [{t["content"] for t in server.truths_of(r)} for r in server.chat_requests()[since:]]
