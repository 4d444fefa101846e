"""Live settings: the admin-editable record that overrides the Django settings' defaults.

``get_effective_settings()`` reads the singleton ``LiveSettings`` row on every call
(no cache), so an edit in the admin takes effect on the next run without a restart;
an empty field falls back to the Django setting (``conf.py``). A run stores what was
in force when it was created (``ConsolidationRun.effective_settings``) and reads
its threshold, allowlist and retirement cap from there, so one run never mixes two
configurations. ``start_scheduled_pass`` is what the schedule calls: it honours
``enabled``, the interval and "scheduled passes dry-run only".
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta
from typing import Any

from django.contrib.auth import get_user_model
from django.utils import timezone

from ..conf import app_settings
from ..models import ConsolidationRun, LiveSettings

logger = logging.getLogger(__name__)

SCHEDULE_DISABLED = "Scheduled passes are disabled in the live settings; nothing was started."
SCHEDULE_NOT_DUE = "The last scheduled pass started at {last}; the next is due after {due}."
SCHEDULE_BUSY = "A scheduled run is still in progress ({run}); nothing was started."
#: Slack subtracted from the interval when deciding whether a pass is due, so that a
#: schedule firing at the same wall-clock time each week is not skipped for a few
#: seconds of jitter.
SCHEDULE_SLACK = timedelta(minutes=5)


@dataclass(frozen=True, kw_only=True)
class EffectiveSettings:
    """The values in force: the live record's where set, else the Django settings'.

    ``allowed_user_ids`` empty means every user. ``overridden`` names the fields the
    live record sets.
    """

    enabled: bool
    interval_hours: int
    scheduled_dry_run_only: bool
    allowed_user_ids: tuple[int, ...]
    max_retirements_per_run: int
    similarity_threshold: float
    overridden: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form, stored on the run."""
        data = asdict(self)
        data["allowed_user_ids"] = list(self.allowed_user_ids)
        data["overridden"] = list(self.overridden)
        return data


def _allowlist_ids(values: Any) -> tuple[int, ...]:
    """Ids of the users named (by id or username) in the ``USER_ALLOWLIST`` setting."""
    names = [str(v).strip() for v in values or () if str(v).strip()]
    if not names:
        return ()
    User = get_user_model()
    ids = {int(n) for n in names if n.isdigit()}
    ids |= set(User.objects.filter(**{f"{User.USERNAME_FIELD}__in": names}).values_list("pk", flat=True))
    if not ids:
        # An allowlist naming nobody who exists must not widen to "everyone".
        return (-1,)
    return tuple(sorted(ids))


def get_effective_settings() -> EffectiveSettings:
    """Read the live record (two queries) and merge it over the Django settings."""
    row = LiveSettings.objects.filter(pk=LiveSettings.SINGLETON_ID).first()
    values: dict[str, Any] = {
        "enabled": bool(app_settings.ENABLED),
        "interval_hours": int(app_settings.SCHEDULE_INTERVAL_HOURS),
        "scheduled_dry_run_only": bool(app_settings.SCHEDULED_DRY_RUN_ONLY),
        "allowed_user_ids": _allowlist_ids(app_settings.USER_ALLOWLIST),
        "max_retirements_per_run": int(app_settings.MAX_RETIREMENTS_PER_RUN),
        "similarity_threshold": float(app_settings.SIMILARITY_THRESHOLD),
    }
    overridden: list[str] = []
    if row is not None:
        for name in (
            "enabled",
            "interval_hours",
            "scheduled_dry_run_only",
            "max_retirements_per_run",
            "similarity_threshold",
        ):
            value = getattr(row, name)
            if value is not None:
                values[name] = value
                overridden.append(name)
        allowed = tuple(sorted(row.allowed_users.values_list("pk", flat=True)))
        if allowed:
            values["allowed_user_ids"] = allowed
            overridden.append("allowed_users")
    return EffectiveSettings(**values, overridden=tuple(overridden))


def retirement_cap(run: ConsolidationRun) -> int:
    """The run's cap on retirements: from its stored settings, else the Django setting."""
    value = (run.effective_settings or {}).get("max_retirements_per_run")
    return int(value) if value is not None else int(app_settings.MAX_RETIREMENTS_PER_RUN)


def allowed_user_ids(run: ConsolidationRun) -> tuple[int, ...]:
    """Users the run may cover (empty: everyone), from its stored settings."""
    return tuple((run.effective_settings or {}).get("allowed_user_ids") or ())


@dataclass(frozen=True, kw_only=True)
class ScheduleDecision:
    """Whether a scheduled pass starts now, and why not if it doesn't."""

    start: bool
    mode: str = "queued"
    reason: str = ""


def decide_scheduled_pass(
    *, now: datetime | None = None, effective: EffectiveSettings | None = None
) -> ScheduleDecision:
    """Decide whether the schedule should start a pass now. Reads only.

    No when disabled, when a scheduled run is still in progress, or when the last
    scheduled run started less than ``interval_hours`` ago (minus ``SCHEDULE_SLACK``).
    The mode is ``dry_run`` when scheduled passes are dry-run only, else ``queued``.
    """
    now = now or timezone.now()
    effective = effective or get_effective_settings()
    if not effective.enabled:
        return ScheduleDecision(start=False, reason=SCHEDULE_DISABLED)
    scheduled = ConsolidationRun.objects.filter(trigger=ConsolidationRun.Trigger.SCHEDULE)
    busy = scheduled.in_progress().order_by("-created_at").first()
    if busy is not None:
        return ScheduleDecision(start=False, reason=SCHEDULE_BUSY.format(run=busy.pk))
    last = scheduled.order_by("-created_at").first()
    if last is not None:
        due = last.created_at + timedelta(hours=effective.interval_hours)
        if now < due - SCHEDULE_SLACK:
            return ScheduleDecision(
                start=False, reason=SCHEDULE_NOT_DUE.format(last=last.created_at.isoformat(), due=due.isoformat())
            )
    mode = ConsolidationRun.Mode.DRY_RUN if effective.scheduled_dry_run_only else ConsolidationRun.Mode.QUEUED
    return ScheduleDecision(start=True, mode=mode)


def start_scheduled_pass(*, now: datetime | None = None) -> tuple[ConsolidationRun | None, ScheduleDecision]:
    """Create and dispatch a scheduled run if ``decide_scheduled_pass`` says so.

    The run is incremental (per-user cursor) and goes through the queue; a dry-run
    pass is queued too and writes no truth. Returns the run (or None) and the decision.
    """
    from .. import tasks
    from ..llm import get_judge_client
    from . import consolidation

    decision = decide_scheduled_pass(now=now)
    if not decision.start:
        logger.info("scheduled pass skipped: %s", decision.reason)
        return None, decision
    run = consolidation.create_run(
        trigger=ConsolidationRun.Trigger.SCHEDULE, mode=decision.mode, judge=get_judge_client().name
    )
    tasks.enqueue_run(run)
    return run, decision
