"""A user's pass through the stages of phase 1: what its stages share.

``user_pass`` opens one (``UserPass``): the user's stage results already recorded and live
truths (``PassRow``, ``pass_rows``), read once, and the results it records, written in one
insert when the caller holds one transaction. A batch of users (``run/plan``) builds its
``UserPass`` rows itself, from one read of every user's rows. The stages take the pass as
their ``shared`` argument (``stages.run_at``, ``stages.candidate_clusters``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, NamedTuple

import numpy as np
from django.conf import settings
from django.db import connection
from django.db.models import BooleanField, ExpressionWrapper

from ...choices import protected_q
from ...conf import app_settings
from ...models import ConsolidationRun, StageResult, Truth
from ..pipeline import vectors
from . import relocation


def pass_time(run: ConsolidationRun) -> datetime:
    """The pass time of ``run`` (decay and quality are computed at it): when it started."""
    return run.started_at or run.created_at


class PassRow(NamedTuple):
    """A live truth as a user's pass reads it (``pass_rows``; ``UserPass.rows``)."""

    id: int
    kind: str
    content: str
    pointer: bool
    relevance: float
    held_since: datetime | None
    last_decayed: datetime | None
    last_accessed: datetime | None
    updated_at: datetime
    consolidatable: bool

    @property
    def position(self) -> tuple[datetime, int]:
        """``(updated_at, id)``: the truth's place in the incremental order (``incremental``)."""
        return (self.updated_at, self.id)


#: The columns of a ``UserPass`` row, in order (``PassRow``).
PASS_FIELDS = PassRow._fields


def pass_rows(truths: Any, *, by_user: bool = False) -> Any:
    """The ``PASS_FIELDS`` rows of the live ``truths`` (a ``Truth`` queryset) in
    (created_at, id) order; ``by_user``: each row led by its ``user_id``, in (user_id,
    created_at, id) order (a batch of users' rows, ``run/plan``)."""
    leading = ("user_id",) if by_user else ()
    consolidatable = ExpressionWrapper(~protected_q(max_generation=app_settings.MAX_GENERATION),
                                       output_field=BooleanField())
    return (truths.annotate(consolidatable=consolidatable, pointer=relocation.is_pointer())
            .order_by(*leading, "created_at", "id").values_list(*leading, *PASS_FIELDS))


def reads_binary_dates() -> bool:
    """Whether rows with dates may be read in PostgreSQL's binary format (``vectors.stream_rows``)
    and give what the ORM gives: with psycopg 3, and with ``USE_TZ`` (psycopg's binary dates are
    aware; Django makes them naive for ``USE_TZ = False`` in its text reads only)."""
    return settings.USE_TZ and vectors.is_psycopg3(connection)


def read_rows(rows: Any) -> list[tuple[Any, ...]]:
    """The rows of a ``values_list`` queryset (``pass_rows``, or a batch's rows with their
    vectors), as the ORM gives them, read in one round trip (inside a transaction) in
    PostgreSQL's binary format where ``reads_binary_dates``, else through the ORM. The binary
    read skips the ORM's parse of each date from text: a user's 10,000 rows in 18 against 88 ms
    (best of five, 5 December 2026). Memory: the whole result, as the ORM's read (it too fetches
    it at once)."""
    if not reads_binary_dates():
        return list(rows)
    return [row for batch in vectors.stream_rows(rows, vectors.FETCH_ROWS, small=True) for row in batch]


@dataclass(frozen=True, kw_only=True)
class PassFacts:
    """What a user's pass knows before it starts, read with the run (``run/plan``'s
    first query), so that its stages skip the reads that would find nothing: whether
    (run, user) has stage results already (a second delivery), whether an undo ever
    separated truths of the user (``keep_undone_apart``), and whether the user has any
    session message (``mining``)."""

    recorded: bool = True
    undone: bool = True
    messages: bool = True


@dataclass(kw_only=True)
class UserPass:
    """One user's phase 1 in progress (``user_pass``): what its stages share so that a
    small user's pass costs a handful of queries.

    ``results``: the stage results already recorded for (run, user), read once (a second
    delivery finds them). ``pending``: results recorded during the pass, written in one
    insert by ``flush`` (only when ``buffered``: the pass runs in one transaction).
    ``rows``: the user's live truths (``PASS_FIELDS``) in (created_at, id) order, read
    once on first use; a truth a stage retires is dropped from them (``forget``).
    ``facts``: see ``PassFacts``. ``vectors``: the user's live ``(ids, unit vectors)`` if
    read with other users' (``vectors.users_vectors``), and ``seed_bound``: the
    ``(updated_at, id)`` after which truths seed (None: every consolidatable truth); the
    arms then take their vectors and seeds from the pass, not from a query. ``mined``:
    truths the mine stage added in this pass.
    """

    run_id: Any
    user_id: int
    buffered: bool
    results: dict[str, StageResult]
    facts: PassFacts = field(default_factory=PassFacts)
    pending: list[StageResult] = field(default_factory=list)
    _rows: list[PassRow] | None = None
    vectors: tuple[np.ndarray, np.ndarray] | None = None
    seed_bound: tuple[datetime, int] | None = None
    #: Truths the mine stage added in this pass (not in a delivery before): the pass counts
    #: them with the truths it read before mining (``ConsolidationRun.truths``).
    mined: int = 0

    @property
    def rows(self) -> list[PassRow]:
        if self._rows is None:
            self._rows = [PassRow._make(row) for row in read_rows(pass_rows(Truth.objects.for_user(self.user_id)))]
        return self._rows

    def consolidatable(self) -> list[PassRow]:
        """The rows of the user's consolidatable truths, in order."""
        return [row for row in self.rows if row.consolidatable]

    def seed_ids(self) -> set[int]:
        """Ids of the live truths that may seed: consolidatable and after ``seed_bound``
        (the ``incremental.begin_user_pass`` filter, in memory)."""
        bound = self.seed_bound
        return {row.id for row in self.rows if row.consolidatable and (bound is None or row.position > bound)}

    def user_vectors(self) -> vectors.UserVectors:
        """The ``vectors`` of the truths still live (a stage may have retired some), with
        ``can_seed`` from ``seed_ids``: what ``vectors.load_user_vectors`` would read now.
        Raises ``ValueError`` if the pass was given no vectors."""
        if self.vectors is None:
            raise ValueError("this pass read no vectors")
        ids, unit = self.vectors
        live = np.isin(ids, np.fromiter((row.id for row in self.rows), dtype=np.int64))
        seeds = self.seed_ids()
        can_seed = np.fromiter((int(pk) in seeds for pk in ids[live]), dtype=bool, count=int(live.sum()))
        return vectors.UserVectors(ids=ids[live], vectors=unit[live], can_seed=can_seed)

    def forget(self, truth_ids: Iterable[int]) -> None:
        """Drop retired truths from ``rows`` (if read)."""
        gone = set(truth_ids)
        if self._rows is not None and gone:
            self._rows = [row for row in self._rows if row.id not in gone]

    def flush(self) -> None:
        """Write the pending results in one insert (a row already there is kept)."""
        if self.pending:
            StageResult.objects.bulk_create(self.pending, ignore_conflicts=True)
            self.pending = []


@contextlib.contextmanager
def user_pass(
    run: ConsolidationRun, user_id: int, *, buffered: bool, facts: PassFacts | None = None
) -> Iterator[UserPass]:
    """A pass of ``user_id``'s stages for ``run``: they share one read of the user's stage
    results and live truths (``UserPass``) and, with ``buffered`` (the caller holds one
    transaction around the pass), record their results in one insert at the end. The stages
    get the pass as their ``shared`` argument (``run_at(..., shared=...)``,
    ``candidate_clusters(..., shared=...)``); without it, every stage reads and writes on
    its own. A batch of users builds its ``UserPass`` rows itself (``run/plan``). Queries:
    one on entry (none when ``facts`` say no result is recorded yet)."""
    facts = facts or PassFacts()
    recorded = StageResult.objects.filter(run=run, user_id=user_id) if facts.recorded else ()
    shared = UserPass(
        run_id=run.pk, user_id=user_id, buffered=buffered, results={r.stage: r for r in recorded}, facts=facts,
    )
    yield shared
    shared.flush()
