"""The weekly scheduled run: its django-q2 schedules, the no-overlap lock, catch-up.

``ensure_schedules`` creates or updates, by name, two django-q2 ``Schedule`` rows:
the weekly run (cron ``SCHEDULE_CRON``, Sunday 05:00 in TIME_ZONE by default) and the
minutely recovery sweep of queued jobs. It runs after every ``migrate``.

``start_scheduled_run`` is what the weekly task does, the only scheduled entry point.
It honours the live settings (``run_settings.get_effective_settings``): disabled, it
starts nothing; "scheduled passes dry-run only" makes the run a dry run; a live
``interval_hours`` skips a slot that comes sooner than that after the slot of the last
scheduled run (0, the default, runs every slot; a catch-up covers the latest slot due,
so downtime never makes it wait); the allowlist, the retirement cap and
the threshold reach the run through ``create_run``. It starts at most one run per
schedule slot: after downtime, django-q2 fires a missed slot when the cluster comes
back, and every firing covers the latest slot due, so missed weeks give one catch-up
run, not one per week. It never overlaps another scheduled run: the ``ScheduleLock``
row names the run in progress until it finishes or its lock expires
(``SCHEDULE_LOCK_TTL`` without progress: its holder is taken for dead and abandoned).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

from croniter import croniter
from django.core.exceptions import ImproperlyConfigured
from django.db import transaction
from django.utils import timezone
from django_q.models import Schedule
from django_q.utils import localtime

from ...choices import RECOVERY_SCHEDULE, WEEKLY_SCHEDULE
from ...conf import app_settings
from ...llm import get_judge_client
from ...models import ConsolidationRun, ScheduleLock
from ...run_settings import get_effective_settings
from ..run import lifecycle
from . import dispatch

logger = logging.getLogger(__name__)

#: Names of the django-q2 schedules this app owns.
WEEKLY = WEEKLY_SCHEDULE
RECOVERY = RECOVERY_SCHEDULE
#: Keyword argument through which django-q2 passes the slot a firing is for.
SLOT_KWARG = "scheduled_for"
#: Name of the no-overlap lock of scheduled runs.
LOCK = ScheduleLock.SCHEDULED_RUNS

BAD_CRON = "IRIS_CONSOLIDATION_SCHEDULE_CRON is {cron!r}, which is not a cron expression (e.g. '0 5 * * 0')."
SKIP_ALREADY_RAN = "A scheduled run for the slot of {slot} (or a later one) exists already: run {run_id}."
SKIP_OVERLAP = "Scheduled run {run_id} is still in progress (lock until {until}); this slot is skipped."
HOLDER_DIED = "its schedule lock expired at {until} without progress; run {new_id} took over"
SKIP_DISABLED = "Scheduled runs are disabled in the live settings; nothing was started."
SKIP_NOT_DUE = (
    "The last scheduled run was for the slot of {last}, less than the {hours} h between scheduled runs "
    "(live settings' interval) before this slot of {slot}; this slot is skipped."
)
#: Slack subtracted from the interval: slots of a cron in local time move by an hour
#: across a daylight saving change (a daily 05:00 slot is then 23 h after the last).
INTERVAL_SLACK = timedelta(hours=1)


@dataclass(frozen=True, kw_only=True)
class ScheduledStart:
    """What a firing of the weekly schedule did: ``run`` if it started one (its ``mode``
    says whether it is a dry run), else ``skipped``, the reason."""

    slot: datetime
    run: ConsolidationRun | None = None
    skipped: str = ""


def _local(moment: datetime) -> datetime:
    # django-q2's own clock for schedules: TIME_ZONE (or Q_CLUSTER's time_zone).
    return localtime(moment)


def check_cron(cron: str) -> str:
    """``cron`` if croniter accepts it; raises ``ImproperlyConfigured`` otherwise."""
    if not croniter.is_valid(cron):
        raise ImproperlyConfigured(BAD_CRON.format(cron=cron))
    return cron


def next_slot(cron: str, *, after: datetime) -> datetime:
    """The first slot of ``cron`` (in TIME_ZONE) strictly after ``after``; aware datetime."""
    return croniter(check_cron(cron), _local(after)).get_next(datetime)


def latest_slot(cron: str, *, now: datetime) -> datetime:
    """The latest slot of ``cron`` at or before ``now``; aware datetime."""
    return croniter(check_cron(cron), _local(now) + timedelta(seconds=1)).get_prev(datetime)


def ensure_schedules(*, now: datetime | None = None) -> dict[str, object]:
    """Create or update the weekly and recovery schedules by name; idempotent.

    The weekly schedule's ``next_run`` is recomputed only when it is new or its cron
    changed, so a slot missed during downtime stays due (catch-up). An empty
    ``SCHEDULE_CRON`` removes it. Returns the schedules by name (None if removed).
    Raises ``ImproperlyConfigured`` for a cron expression croniter rejects.
    """
    now = now or timezone.now()
    cron = app_settings.SCHEDULE_CRON
    result: dict[str, object] = {}
    with transaction.atomic():
        existing = list(Schedule.objects.select_for_update().filter(name=WEEKLY).order_by("id"))
        for extra in existing[1:]:
            extra.delete()
        weekly = existing[0] if existing else None
        if not cron:
            if weekly is not None:
                weekly.delete()
            result[WEEKLY] = None
        else:
            check_cron(cron)
            if weekly is None or weekly.cron != cron or weekly.schedule_type != Schedule.CRON:
                weekly = weekly or Schedule(name=WEEKLY)
                weekly.cron = cron
                weekly.schedule_type = Schedule.CRON
                weekly.next_run = next_slot(cron, after=now)
            weekly.func = dispatch.SCHEDULED_CONSOLIDATION
            weekly.repeats = -1
            weekly.intended_date_kwarg = SLOT_KWARG
            weekly.args = None
            weekly.kwargs = None
            next_run = weekly.next_run
            weekly.save()
            # Schedule.save() puts a new cron schedule's next_run on the real clock.
            Schedule.objects.filter(pk=weekly.pk).update(next_run=next_run)
            weekly.next_run = next_run
            result[WEEKLY] = weekly
        recovery = Schedule.objects.filter(name=RECOVERY).order_by("id").first()
        if recovery is None:
            recovery = Schedule(name=RECOVERY, next_run=now)
        recovery.func = dispatch.RECOVER_JOBS
        recovery.schedule_type = Schedule.MINUTES
        recovery.minutes = 1
        recovery.repeats = -1
        recovery.save()
        result[RECOVERY] = recovery
    return result


def start_scheduled_run(*, scheduled_for: datetime | None = None, now: datetime | None = None) -> ScheduledStart:
    """Start the run of the latest due slot unless one ran for it or one is in progress.

    ``scheduled_for`` is the slot the firing was for (django-q2's intended date); the
    run covers the latest slot at ``now``, which is the same slot unless the firing is
    a catch-up for older ones. Skips, with the reason: a slot already run, a run in
    progress, scheduled runs disabled, a slot within the live interval of the last
    scheduled run. Transaction: one, holding the lock row; the run's tasks are sent on
    commit. Raises what ``create_run`` and the judge factory raise.
    """
    now = now or timezone.now()
    cron = app_settings.SCHEDULE_CRON
    slot = latest_slot(cron, now=now) if cron else (scheduled_for or now)
    ScheduleLock.objects.get_or_create(name=LOCK)
    with transaction.atomic():
        lock = ScheduleLock.objects.select_for_update().get(name=LOCK)
        scheduled = ConsolidationRun.objects.filter(trigger=ConsolidationRun.Trigger.SCHEDULE)
        done = scheduled.filter(scheduled_for__gte=slot).first()
        if done is not None:
            return ScheduledStart(slot=slot, skipped=SKIP_ALREADY_RAN.format(slot=slot.isoformat(), run_id=done.pk))
        holder = lock.run
        if holder is not None and holder.finished_at is None and lock.expires_at is not None and lock.expires_at > now:
            return ScheduledStart(
                slot=slot, skipped=SKIP_OVERLAP.format(run_id=holder.pk, until=lock.expires_at.isoformat())
            )
        effective = get_effective_settings()
        if not effective.enabled:
            return ScheduledStart(slot=slot, skipped=SKIP_DISABLED)
        last = scheduled.exclude(scheduled_for=None).order_by("-scheduled_for").first()
        gap = timedelta(hours=effective.interval_hours)
        if effective.interval_hours and last is not None and slot < last.scheduled_for + gap - INTERVAL_SLACK:
            reason = SKIP_NOT_DUE.format(
                last=last.scheduled_for.isoformat(), hours=effective.interval_hours, slot=slot.isoformat()
            )
            return ScheduledStart(slot=slot, skipped=reason)
        run = lifecycle.create_run(
            trigger=ConsolidationRun.Trigger.SCHEDULE, dry_run=effective.scheduled_dry_run_only,
            judge=get_judge_client().name,
        )
        run.scheduled_for = slot
        run.save(update_fields=["scheduled_for"])
        if holder is not None and holder.finished_at is None:
            until = lock.expires_at.isoformat() if lock.expires_at else "?"
            lifecycle.abandon_run(holder.pk, reason=HOLDER_DIED.format(until=until, new_id=run.pk), now=now)
        lock.run = run
        lock.acquired_at = now
        lock.expires_at = now + timedelta(seconds=int(app_settings.SCHEDULE_LOCK_TTL))
        lock.save()
        lifecycle.start_run(run, now=now, send=dispatch.send_jobs)
    logger.info("scheduled run %s (%s) started for the slot of %s", run.pk, run.kind_label, slot.isoformat())
    return ScheduledStart(slot=slot, run=run)
