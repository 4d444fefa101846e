"""The public API for host projects: report uses and confirmations of truths.

    from iris_consolidation.api import record_access, mark_validated

    record_access([truth.pk for truth in used])   # the assistant used these truths now
    mark_validated([truth.pk])                    # the person confirmed this one

They feed the quality score and decay (``services/hygiene/``): a truth in use keeps
its relevance, an unused one decays and, below the floor, is pruned (soft, undoable).
See docs/pipeline.md ("Quality and use") for a signal receiver example.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from .services.hygiene import usage


def record_access(truth_ids: Iterable[int], at: datetime | None = None) -> int:
    """Count one use of each truth at ``at`` (default now); see ``services.hygiene.usage``."""
    return usage.record_access(truth_ids, at=at)


def mark_validated(truth_ids: Iterable[int]) -> int:
    """Mark truths as confirmed by the host; see ``services.hygiene.usage``."""
    return usage.mark_validated(truth_ids)


__all__ = ["mark_validated", "record_access"]
