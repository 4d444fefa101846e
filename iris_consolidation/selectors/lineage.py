"""A truth's recorded past: its lineage (ancestors and descendants), the undo steps still in
force, its history (audit rows, lineage events, admin edits) and when its row was made.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.contrib.contenttypes.models import ContentType
from django.db import connection
from django.db.models import (
    Q,
)
from django.db.models.expressions import RawSQL

from ..llm.base import truth_names, with_truth_numbers
from ..models import (
    ClusterReview,
    LineageEvent,
    Origin,
    RetiredReason,
    Truth,
    TruthChange,
)

# --- lineage -----------------------------------------------------------------------

#: Deepest walk of a lineage, in steps. Merges stop at generation 5 (MAX_GENERATION),
#: but chains of supersedes keep a truth's generation, so the walk has its own bound.
LINEAGE_MAX_DEPTH = 64

_WALK_SQL = """
WITH RECURSIVE walk(id, next_id, depth) AS (
    SELECT e.id, e.{step_from}, 1 FROM {table} e
    WHERE e.{step_to} = %s AND e.action IN ('merge', 'supersede')
  UNION
    SELECT e.id, e.{step_from}, w.depth + 1 FROM {table} e
    JOIN walk w ON e.{step_to} = w.next_id
    WHERE e.action IN ('merge', 'supersede') AND w.depth < %s
)
SELECT id FROM walk
"""


@dataclass(frozen=True, kw_only=True)
class LineageGraph:
    """A truth's lineage as recorded facts (no formatting).

    ``ancestry``: merge and supersede events into ``root`` and, transitively, into its
    sources, down to generation 0. ``forward``: merge and supersede events out of
    ``root`` and onwards (what it became). ``undos``: undo events touching any truth
    of either. Events are ordered oldest first and carry ``source``, ``result`` and
    ``review`` (with ``review.run``) already loaded. Every truth belongs to
    ``root``'s user.
    """

    root: Truth
    ancestry: tuple[LineageEvent, ...]
    forward: tuple[LineageEvent, ...]
    undos: tuple[LineageEvent, ...]


def _walk(*, root: Truth, backwards: bool, max_depth: int) -> list[LineageEvent]:
    table = connection.ops.quote_name(LineageEvent._meta.db_table)
    sql = _WALK_SQL.format(
        table=table,
        step_to="result_id" if backwards else "source_id",
        step_from="source_id" if backwards else "result_id",
    )
    return list(
        LineageEvent.objects.filter(pk__in=RawSQL(sql, [root.pk, max_depth]))
        # Never show another user's truth, even if a row were to link across users.
        .filter(source__user_id=root.user_id, result__user_id=root.user_id)
        .select_related("source", "result", "review", "review__run")
        .defer("source__embedding", "result__embedding", "review__raw_response", "review__decision")
        .order_by("created_at", "id")
    )


def get_lineage(*, truth: Truth, max_depth: int = LINEAGE_MAX_DEPTH) -> LineageGraph:
    """The lineage of ``truth``: ancestors to generation 0, descendants, undos.

    Queries: three, whatever the size (two recursive CTEs and one for undo events).
    ``max_depth`` bounds each walk in steps (cycles can only appear after undos and
    are cut there). Reads only.
    """
    ancestry = _walk(root=truth, backwards=True, max_depth=max_depth)
    forward = _walk(root=truth, backwards=False, max_depth=max_depth)
    ids = {truth.pk}
    for event in (*ancestry, *forward):
        ids.update((event.source_id, event.result_id))
    undos = list(
        LineageEvent.objects.filter(action=LineageEvent.Action.UNDO)
        .filter(Q(source_id__in=ids) | Q(result_id__in=ids))
        .filter(source__user_id=truth.user_id, result__user_id=truth.user_id)
        .select_related("source", "result")
        .defer("source__embedding", "result__embedding")
        .order_by("created_at", "id")
    )
    return LineageGraph(root=truth, ancestry=tuple(ancestry), forward=tuple(forward), undos=tuple(undos))


# --- undo --------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class UndoStep:
    """One consolidation step into ``truth`` that is still in force.

    ``events``: the merge or supersede events of one review whose sources are still
    retired into ``truth``. ``creates_truth``: whether that review made ``truth``
    (a merge result), in which case undoing it retires ``truth``.
    """

    truth: Truth
    review: ClusterReview | None
    events: tuple[LineageEvent, ...]
    creates_truth: bool

    @property
    def source_ids(self) -> tuple[int, ...]:
        return tuple(sorted(e.source_id for e in self.events))

    @property
    def reasoning(self) -> str:
        """The review's reasoning with truth numbers for its call's aliases ("" without a review)."""
        if self.review is None:
            return ""
        return with_truth_numbers(self.review.reasoning, truth_names(self.review.snapshot))

    @property
    def action(self) -> str:
        """merge or supersede; ``restore`` for a noise or prune retirement (no events)."""
        return self.events[0].action if self.events else "restore"


def list_undo_steps(*, truth: Truth) -> list[UndoStep]:
    """The steps into ``truth`` that an undo could reverse, latest first (one query).

    A step is in force while its sources are still retired into ``truth``; the
    latest one is the only one an undo of ``truth`` may reverse.
    """
    events = (
        LineageEvent.objects.filter(result_id=truth.pk)
        .filter(action__in=[LineageEvent.Action.MERGE, LineageEvent.Action.SUPERSEDE])
        .filter(source__superseded_by_id=truth.pk, source__retired_at__isnull=False)
        .exclude(source__retired_reason=RetiredReason.UNDONE)
        .select_related("source", "review")
        .defer("source__embedding", "review__raw_response", "review__decision")
        .order_by("-created_at", "-id")
    )
    grouped: dict[int | None, list[LineageEvent]] = {}
    for event in events:
        grouped.setdefault(event.review_id, []).append(event)
    steps = []
    for group in grouped.values():
        review = group[0].review
        if review is not None:
            creates = truth.pk not in {int(row["id"]) for row in review.snapshot}
        else:
            creates = truth.origin == Origin.CONSOLIDATED and all(e.action == LineageEvent.Action.MERGE for e in group)
        steps.append(UndoStep(truth=truth, review=review, events=tuple(group), creates_truth=creates))
    return steps


def has_consolidation_history(*, truth: Truth) -> bool:
    """Whether any merge or supersede ever led into ``truth`` (undone or not)."""
    return (
        LineageEvent.objects.filter(result_id=truth.pk)
        .exclude(action=LineageEvent.Action.UNDO)
        .exists()
    )


# --- the truth admin's history and dates -----------------------------------------


@dataclass(frozen=True, kw_only=True)
class TruthHistory:
    """Everything recorded about one truth, each list oldest first.

    ``changes``: its ``TruthChange`` audit rows (with ``review`` and ``run`` loaded);
    ``events``: lineage events into or out of it (merge, supersede, undo; with
    ``source``, ``result`` and ``review`` loaded); ``edits``: the admin's ``LogEntry``
    rows for it (with ``user`` loaded).
    """

    truth: Truth
    changes: tuple[Any, ...]
    events: tuple[LineageEvent, ...]
    edits: tuple[Any, ...]


def get_truth_history(*, truth: Truth) -> TruthHistory:
    """The history of ``truth`` (three queries); reads only."""
    # Here, not at the top: only the admin's history reads it, and a host project may
    # leave django.contrib.admin out of INSTALLED_APPS (its models cannot load then).
    from django.contrib.admin.models import LogEntry

    changes = (
        TruthChange.objects.filter(truth_id=truth.pk)
        .select_related("review", "run")
        # The snapshot names a review's aliases: rows recorded with them are shown with truth numbers.
        .defer("review__raw_response", "review__decision")
        .order_by("created_at", "id")
    )
    events = (
        LineageEvent.objects.filter(Q(source_id=truth.pk) | Q(result_id=truth.pk))
        .filter(source__user_id=truth.user_id, result__user_id=truth.user_id)
        .select_related("source", "result", "review")
        .defer("source__embedding", "result__embedding", "review__raw_response", "review__decision")
        .order_by("created_at", "id")
    )
    edits = (
        LogEntry.objects.filter(
            content_type=ContentType.objects.get_for_model(Truth, for_concrete_model=False),
            object_id=str(truth.pk),
        )
        .select_related("user")
        .order_by("action_time", "id")
    )
    return TruthHistory(truth=truth, changes=tuple(changes), events=tuple(events), edits=tuple(edits))


def get_made_at(*, truth: Truth) -> datetime | None:
    """When ``truth``'s row was made: its first audit row, else the first merge or
    supersede into it (one or two queries), else None (a truth older than the audit).

    ``Truth.created_at`` is when the user last stated it (a consolidated truth takes
    its newest source's date, which supersede compares), so it is not this.
    """
    audit = TruthChange.objects.filter(truth_id=truth.pk).order_by("created_at", "id")
    first = audit.values_list("created_at", flat=True).first()
    if first is not None:
        return first
    return (
        LineageEvent.objects.filter(result_id=truth.pk)
        .exclude(action=LineageEvent.Action.UNDO)
        .order_by("created_at", "id")
        .values_list("created_at", flat=True)
        .first()
    )
