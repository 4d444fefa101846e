"""Reads that span models: users to consolidate, run summaries, lineage.

Selectors return querysets, ids or small frozen dataclasses; they never write.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.contrib.auth import get_user_model
from django.db.models import Count, Model

from .exceptions import UnknownUser
from .models import ConsolidationRun, Truth

UNKNOWN_USER = "No user has the id or username {value!r}. Check the value, e.g. with export_truths."


def get_user(*, value: str | int) -> Model:
    """The user whose primary key or username is ``value``; raises ``UnknownUser``."""
    User = get_user_model()
    text = str(value).strip()
    if text.isdigit():
        user = User.objects.filter(pk=int(text)).first()
        if user is not None:
            return user
    user = User.objects.filter(**{User.USERNAME_FIELD: text}).first()
    if user is None:
        raise UnknownUser(UNKNOWN_USER.format(value=text))
    return user


def list_user_ids_to_consolidate(*, user_id: int | None, max_generation: int) -> list[int]:
    """Ids of users with at least two consolidatable truths, ascending (or just ``user_id``)."""
    qs = Truth.objects.consolidatable(max_generation=max_generation)
    if user_id is not None:
        qs = qs.filter(user_id=user_id)
    from django.db.models import Count

    return list(
        qs.values("user_id").annotate(n=Count("id")).filter(n__gte=2).order_by("user_id").values_list("user_id", flat=True)
    )


@dataclass(frozen=True, kw_only=True)
class RunProgress:
    """A run with its jobs counted by status (queued, running, waiting, done, failed)."""

    run: ConsolidationRun
    jobs: dict[str, int]


@dataclass(frozen=True, kw_only=True)
class ConsolidationStatus:
    """What ``consolidation_status`` shows: the last run, the next scheduled one, the runs
    in flight with their jobs, runs counted by status, and the no-overlap lock."""

    last_run: ConsolidationRun | None
    next_due: datetime | None
    cron: str
    in_flight: tuple[RunProgress, ...]
    runs_by_status: dict[str, int]
    lock_run_id: Any = None
    lock_expires_at: datetime | None = None


def get_run_progress(*, run: ConsolidationRun) -> RunProgress:
    """``run`` and its jobs counted by status."""
    from .services.jobs import job_counts

    return RunProgress(run=run, jobs=job_counts(run.pk))


def get_consolidation_status() -> ConsolidationStatus:
    """The queue's state for operators; reads only (one query per run in flight)."""
    from django_q.models import Schedule

    from .conf import app_settings
    from .models import ScheduleLock
    from .services import scheduling

    weekly = Schedule.objects.filter(name=scheduling.WEEKLY).order_by("id").first()
    counts = dict(ConsolidationRun.objects.values_list("status").annotate(n=Count("id")).order_by())
    lock = ScheduleLock.objects.filter(name=scheduling.LOCK).first()
    return ConsolidationStatus(
        last_run=ConsolidationRun.objects.order_by("-created_at").first(),
        next_due=weekly.next_run if weekly is not None else None,
        cron=weekly.cron if weekly is not None else app_settings.SCHEDULE_CRON,
        in_flight=tuple(
            get_run_progress(run=run) for run in ConsolidationRun.objects.in_progress().order_by("created_at")
        ),
        runs_by_status={status: int(counts.get(status, 0)) for status in ConsolidationRun.Status.values},
        lock_run_id=lock.run_id if lock is not None else None,
        lock_expires_at=lock.expires_at if lock is not None and lock.run_id else None,
    )
