"""Incremental passes: the window of a run, the per-user cursor and the checkpoint.

Which truths seed clusters (neighbours may be any live truth of the user, older ones
included):
- ``cursor`` (default): per user, truths positioned after the user's cursor, a
  position ``(updated_at, id)``; a user without a cursor gets a first, full pass;
- ``full`` (``--full``): every consolidatable truth, cursor ignored;
- ``last`` / ``fallback`` / ``duration`` / ``iso`` (``--since``): truths with
  ``updated_at`` at or after the window's start: the last successful run's
  checkpoint (``last``; ``fallback`` = ``DAYS_FALLBACK`` days back when there is
  none), a duration such as ``7d``, or an ISO 8601 time.

The cursor moves at the end of a run, only over seeds whose clusters were fully
judged and applied (outcome applied, kept or rejected by the validator, with no
action dropped as stale or over the cap), only when the seeds covered everything
after the old cursor, and never in a dry run. The checkpoint (the run's snapshot
time, ``window_until``) is written only when a real run completes with no failed
cluster, so a partial run leaves the previous one and the next ``--since last``
covers the gap.

Limits, by design: positions use ``updated_at``, which ``Truth.save()`` sets; a host
that edits truths with ``QuerySet.update()`` must set ``updated_at`` itself (and clear
``embedding`` when the content changes, so phase 1 re-embeds it). A truth whose
transaction commits while a pass reads its seeds, with an ``updated_at`` older than
seeds already visible, can be passed over until it changes again or ``--full`` runs.
A cursor holds only for the threshold it was moved at (its run's): a run at another
threshold gives that user a full pass, since other pairs reach the threshold then.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db.models import Count, Q
from django.db.models import Window as Over
from django.utils import timezone
from django.utils.dateparse import parse_date, parse_datetime

from ... import run_settings
from ...conf import app_settings
from ...exceptions import InvalidWindow
from ...models import ClusterReview, ConsolidationCursor, ConsolidationRun, Truth, UserPass
from .validation import Code

logger = logging.getLogger(__name__)

BAD_SINCE = (
    "--since must be 'last', an ISO 8601 time (2026-11-01 or 2026-11-01T08:00:00Z) or a duration "
    "such as 90m, 12h, 7d or 2w; got {value!r}."
)
FUTURE_SINCE = "--since {value!r} is in the future ({when}); pick a time in the past."
BAD_FALLBACK = "IRIS_CONSOLIDATION_DAYS_FALLBACK must be a number of days > 0; got {value!r}."

DURATION = re.compile(r"^\s*(\d+)\s*([smhdw])\s*$")
UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


class WindowMode:
    """Values of ``ConsolidationRun.window_mode``."""

    CURSOR = "cursor"
    FULL = "full"
    LAST = "last"
    FALLBACK = "fallback"
    DURATION = "duration"
    ISO = "iso"


Position = tuple[datetime, int]


@dataclass(frozen=True, kw_only=True)
class Window:
    """A resolved window: how seeds are chosen and from when (``since`` None: no time bound)."""

    mode: str
    since: datetime | None
    until: datetime
    previous_checkpoint: datetime | None
    checkpoint_run: Any = None


def last_checkpoint(*, user_id: int | None) -> ConsolidationRun | None:
    """The latest real run that wrote a checkpoint covering ``user_id``'s scope.

    A run over every user covers any single user; a single-user run covers only that user.
    """
    runs = ConsolidationRun.objects.filter(dry_run=False).filter(checkpoint__isnull=False)
    scope = Q(user_filter__isnull=True)
    if user_id is not None:
        scope |= Q(user_filter_id=user_id)
    return runs.filter(scope).order_by("-checkpoint").first()


def resolve_window(
    *, since: str | None, full: bool = False, user_id: int | None = None, now: datetime | None = None
) -> Window:
    """Turn ``--since`` / ``--full`` into a ``Window``; reads only.

    Raises ``InvalidWindow`` with a one-line message for a value that is not
    ``last``, an ISO 8601 date or time, or a duration; or for a time in the future.
    """
    now = now or timezone.now()
    previous = last_checkpoint(user_id=user_id)
    previous_at = previous.checkpoint if previous else None
    if full:
        return Window(mode=WindowMode.FULL, since=None, until=now, previous_checkpoint=previous_at)
    if since is None:
        return Window(mode=WindowMode.CURSOR, since=None, until=now, previous_checkpoint=previous_at)
    text = str(since).strip()
    if text.lower() == "last":
        if previous is not None:
            return Window(
                mode=WindowMode.LAST,
                since=previous_at,
                until=now,
                previous_checkpoint=previous_at,
                checkpoint_run=previous.pk,
            )
        days = app_settings.DAYS_FALLBACK
        if not isinstance(days, (int, float)) or isinstance(days, bool) or days <= 0:
            raise InvalidWindow(BAD_FALLBACK.format(value=days))
        return Window(mode=WindowMode.FALLBACK, since=now - timedelta(days=days), until=now, previous_checkpoint=None)
    match = DURATION.match(text)
    if match:
        delta = timedelta(**{UNITS[match.group(2)]: int(match.group(1))})
        return Window(mode=WindowMode.DURATION, since=now - delta, until=now, previous_checkpoint=previous_at)
    when = _parse_time(text)
    if when is None:
        raise InvalidWindow(BAD_SINCE.format(value=text))
    if when > now:
        raise InvalidWindow(FUTURE_SINCE.format(value=text, when=when.isoformat()))
    return Window(mode=WindowMode.ISO, since=when, until=now, previous_checkpoint=previous_at)


def _parse_time(text: str) -> datetime | None:
    """An aware datetime from an ISO 8601 time or date (midnight, current time zone)."""
    try:
        when = parse_datetime(text.replace("Z", "+00:00") if text.endswith("Z") else text)
        if when is None:
            day = parse_date(text)
            if day is None:
                return None
            when = datetime(day.year, day.month, day.day)
    except ValueError:
        return None
    if timezone.is_naive(when):
        when = timezone.make_aware(when)
    return when


def apply_window(run: ConsolidationRun, window: Window) -> None:
    """Copy ``window`` onto the (unsaved or saved) run's fields; the caller saves."""
    run.window_mode = window.mode
    run.window_since = window.since
    run.window_until = window.until
    run.previous_checkpoint = window.previous_checkpoint


# --- phase 1: which truths seed clusters ----------------------------------------------


def _after(position: Position) -> Q:
    """Truths positioned strictly after ``position`` in ``(updated_at, id)`` order."""
    updated_at, pk = position
    return Q(updated_at__gt=updated_at) | Q(updated_at=updated_at, id__gt=pk)


def begin_user_pass(
    *, run: ConsolidationRun, user_id: int, max_generation: int | None = None,
    positions: Sequence[Position] | None = None,
) -> tuple[Q | None, int]:
    """Record the user's pass for ``run``; return the seed filter for clustering and
    the number of seeds (the caller adds it to the run's ``seeds`` once:
    ``run/plan.count_user_plans``).

    The filter is None for "every consolidatable truth" (full pass, or a user with no
    cursor in cursor mode). Writes one ``UserPass`` row (an upsert, idempotent per run
    and user). ``positions``: the ``(updated_at, id)`` of every consolidatable truth of
    the user at ``max_generation``, if the caller has read them (``passes.UserPass``): the
    seeds are then counted from them. Queries: three (the cursor, the seeds' count and
    last position in one, the upsert), two with ``positions``.
    """
    max_generation = max_generation or app_settings.MAX_GENERATION
    cursor = ConsolidationCursor.objects.filter(user_id=user_id).select_related("run").first()
    bound = seed_bound(run, cursor)
    seed_filter = _after(bound) if bound is not None else None
    if positions is not None:
        row = user_pass_row(run, user_id, cursor=cursor, positions=positions)
    else:
        seeds = Truth.objects.for_user(user_id).consolidatable(max_generation=max_generation)
        if seed_filter is not None:
            seeds = seeds.filter(seed_filter)
        # The last seed and, over every seed (a window on the whole set), their count.
        last = (
            seeds.annotate(total=Over(Count("id")))
            .order_by("-updated_at", "-id")
            .values_list("updated_at", "id", "total")
            .first()
        )
        row = _pass_row(run, user_id, cursor=cursor, bound=bound, count=int(last[2]) if last else 0,
                        last=(last[0], last[1]) if last else None)
    record_user_passes([row])
    return seed_filter, row.seeds


def cursors_of(user_ids: Sequence[int]) -> dict[int, ConsolidationCursor]:
    """The cursors of several users (with their runs) in one query, for ``user_pass_row``."""
    return {c.user_id: c for c in ConsolidationCursor.objects.filter(user_id__in=list(user_ids)).select_related("run")}


def seed_bound(run: ConsolidationRun, cursor: ConsolidationCursor | None) -> Position | None:
    """The ``(updated_at, id)`` after which the user's truths seed clusters in ``run``
    (None: every consolidatable truth): the cursor's position in cursor mode (if it
    still holds, ``_cursor_holds``), the window's start in a ``since`` window."""
    if run.window_mode == WindowMode.FULL or not run.window_mode:
        return None
    if run.window_mode == WindowMode.CURSOR:
        return (cursor.updated_at, cursor.truth_id) if cursor is not None and _cursor_holds(cursor, run) else None
    assert run.window_since is not None
    # updated_at >= since is "after (since - 1 µs, any id)"; ids are positive.
    return (run.window_since - timedelta(microseconds=1), 2**62)


def pass_bound(row: UserPass) -> Position | None:
    """The seed bound a ``UserPass`` row records (``seed_bound``)."""
    if row.bound_updated_at is None or row.bound_id is None:
        return None
    return (row.bound_updated_at, row.bound_id)


def user_pass_row(
    run: ConsolidationRun, user_id: int, *, cursor: ConsolidationCursor | None, positions: Sequence[Position]
) -> UserPass:
    """The (unsaved) ``UserPass`` row of the user's pass, its seeds counted from the
    ``(updated_at, id)`` of the user's consolidatable truths. No query."""
    bound = seed_bound(run, cursor)
    after = [p for p in positions if bound is None or p > bound]  # ``_after(bound)``
    return _pass_row(run, user_id, cursor=cursor, bound=bound, count=len(after), last=max(after) if after else None)


def _pass_row(
    run: ConsolidationRun, user_id: int, *, cursor: ConsolidationCursor | None, bound: Position | None,
    count: int, last: Position | None,
) -> UserPass:
    cursor_position: Position | None = (cursor.updated_at, cursor.truth_id) if cursor else None
    # The seeds cover everything after the cursor when their bound is at or before it.
    covers = bound is None or (cursor_position is not None and bound <= cursor_position)
    return UserPass(
        run=run,
        user_id=user_id,
        bound_updated_at=bound[0] if bound else None,
        bound_id=bound[1] if bound else None,
        cursor_updated_at=cursor_position[0] if cursor_position else None,
        cursor_id=cursor_position[1] if cursor_position else None,
        covers_cursor=covers,
        seeds=count,
        last_seed_updated_at=last[0] if last else None,
        last_seed_id=last[1] if last else None,
    )


def record_user_passes(rows: Sequence[UserPass]) -> None:
    """Write ``UserPass`` rows in one upsert (idempotent per run and user). Queries: one."""
    if not rows:
        return
    UserPass.objects.bulk_create(
        list(rows),
        update_conflicts=True,
        unique_fields=["run", "user"],
        update_fields=[
            "bound_updated_at", "bound_id", "cursor_updated_at", "cursor_id", "covers_cursor", "seeds",
            "last_seed_updated_at", "last_seed_id",
        ],
    )


def _cursor_holds(cursor: ConsolidationCursor, run: ConsolidationRun) -> bool:
    """Whether ``cursor`` still says which truths ``run`` need not seed.

    Only at the threshold the cursor was moved at: truths judged alone at 0.9 may
    form clusters at 0.8 (and, by greedy assignment, others at 0.95). A cursor whose
    run is gone (deleted) is trusted.
    """
    return cursor.run is None or cursor.run.threshold == run.threshold


# --- end of run: move cursors, write the checkpoint ------------------------------------


DEFERRING_CODES = frozenset({Code.STALE_MEMBER, Code.CAP_REACHED})


def review_completes(review: ClusterReview) -> bool:
    """Whether ``review``'s cluster was fully judged and applied (the cursor may pass it)."""
    done = (ClusterReview.Outcome.APPLIED, ClusterReview.Outcome.KEPT, ClusterReview.Outcome.REJECTED)
    if review.outcome not in done or review.error:
        return False
    return not any(r.get("code") in DEFERRING_CODES for r in review.rejections or ())


def _position(row: dict[str, Any]) -> Position | None:
    when = parse_datetime(str(row.get("updated_at") or ""))
    if when is None or row.get("id") is None:
        return None
    return (when, int(row["id"]))


def _blocked_by_user(run: ConsolidationRun) -> dict[int, Position | None]:
    """Per user, the earliest member position of a cluster that did not complete.

    None for a user with an incomplete review whose members are unknown (e.g. a
    cluster that ran out of its rate-limit window): that user's cursor stays put.
    """
    blocked: dict[int, Position | None] = {}
    clean = run.reviews.filter(
        outcome__in=[ClusterReview.Outcome.APPLIED, ClusterReview.Outcome.KEPT], rejections=[], error=""
    )
    candidates = run.reviews.exclude(pk__in=clean.values("pk"))
    for review in candidates.only("id", "user_id", "outcome", "error", "rejections", "snapshot"):
        if review_completes(review):
            continue
        positions = [p for p in (_position(row) for row in review.snapshot or ()) if p is not None]
        if not positions:
            blocked[review.user_id] = None
            continue
        if review.user_id in blocked and blocked[review.user_id] is None:
            continue
        earliest = min(positions)
        current = blocked.get(review.user_id)
        blocked[review.user_id] = earliest if current is None else min(current, earliest)
    return blocked


def advance_cursors(run: ConsolidationRun, *, held_users: Iterable[int] = ()) -> int:
    """Move each user's cursor over the seeds this run fully handled; returns users moved.

    Never in a dry run, never for ``held_users`` (their pass did not finish planning).
    The new position is the last seed's, or, when a cluster did not complete, the
    position just before its earliest seed (so that seed and everything after it seed
    the next pass). A cursor never moves backwards.
    """
    if run.dry_run or not _judges_clusters(run):
        return 0
    blocked = _blocked_by_user(run)
    moved = 0
    passes = run.user_passes.filter(covers_cursor=True, seeds__gt=0).exclude(user_id__in=list(held_users))
    for user_pass in passes:
        if user_pass.last_seed_updated_at is None or user_pass.last_seed_id is None:
            continue
        target: Position = (user_pass.last_seed_updated_at, user_pass.last_seed_id)
        if user_pass.user_id in blocked:
            block = blocked[user_pass.user_id]
            if block is None:
                continue
            bound = (
                (user_pass.bound_updated_at, user_pass.bound_id)
                if user_pass.bound_updated_at is not None and user_pass.bound_id is not None
                else None
            )
            # Only members positioned after the seed bound were seeds; older
            # neighbours of a failed cluster do not hold the cursor back.
            if bound is None or block > bound:
                target = min(target, (block[0], block[1] - 1))
        old = (
            (user_pass.cursor_updated_at, user_pass.cursor_id)
            if user_pass.cursor_updated_at is not None and user_pass.cursor_id is not None
            else None
        )
        if old is not None and target <= old:
            # A pass that seeded every truth and completed judged them all at its threshold.
            last_seed = (user_pass.last_seed_updated_at, user_pass.last_seed_id)
            if user_pass.bound_updated_at is None and target == last_seed:
                _restamp_threshold(user_pass.user_id, run)
            continue
        ConsolidationCursor.objects.update_or_create(
            user_id=user_pass.user_id,
            defaults={"updated_at": target[0], "truth_id": target[1], "run": run, "moved_at": timezone.now()},
        )
        user_pass.advanced_updated_at, user_pass.advanced_id = target
        user_pass.save(update_fields=["advanced_updated_at", "advanced_id"])
        moved += 1
    return moved


def _restamp_threshold(user_id: int, run: ConsolidationRun) -> None:
    """Make ``run`` the cursor's run when it judged every seed at another threshold.

    The position stays (it cannot move back); from now on the cursor holds at
    ``run``'s threshold, so the next pass at it seeds only what changed.
    """
    cursor = ConsolidationCursor.objects.filter(user_id=user_id).select_related("run").first()
    if cursor is not None and cursor.run is not None and cursor.run.threshold != run.threshold:
        cursor.run = run
        cursor.moved_at = timezone.now()
        cursor.save(update_fields=["run", "moved_at"])


def _judges_clusters(run: ConsolidationRun) -> bool:
    """Whether ``run`` judges clusters (its lexical or semantic arm applies): a pass run
    with ``--only mine`` or ``--only noise``, say, judged nothing, so it must move neither
    the cursors nor the checkpoint, or the next pass would skip truths never judged."""
    modes = run_settings.run_modes(run)
    return "apply" in (modes["lexical"], modes["semantic"])


def stages_deferred(run: ConsolidationRun) -> bool:
    """Whether a stage of ``run`` left work for a later pass because of the run's budget
    (``hygiene/budget.py``): a mine, relocate or promote result whose first finding counts
    ``deferred``, or a noise finding marked ``deferred``. One query."""
    deferred = Q(stage__in=("mine", "relocate", "promote"), findings__0__deferred__gt=0) | Q(
        stage="noise", findings__contains=[{"deferred": True}]
    )
    return run.stage_results.filter(deferred).exists()


def write_checkpoint(run: ConsolidationRun) -> datetime | None:
    """Set ``run.checkpoint`` (unsaved) if the run is real and completed with no failed
    cluster and none deferred, no stage's work deferred (``stages_deferred``: a budget's
    leftovers must fall in the next ``--since last``), and judged clusters (``_judges_clusters``)."""
    if run.dry_run or run.failed or run.deferred or run.status != ConsolidationRun.Status.DONE:
        return None
    if stages_deferred(run):
        return None
    if not _judges_clusters(run):
        return None
    run.checkpoint = run.window_until or run.created_at
    return run.checkpoint
