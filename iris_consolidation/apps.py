"""App configuration."""

import sys
from typing import Any

from django.apps import AppConfig
from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connections
from django.db.models.signals import post_migrate


class IrisConsolidationConfig(AppConfig):
    """Registers the system checks and the post-migrate hook that keeps the weekly and
    recovery schedules in place; pins the auto field, so host projects never generate
    migrations for this app."""

    name = "iris_consolidation"
    label = "iris_consolidation"
    verbose_name = "Truth consolidation"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Here, not at the top: the checks read the models, which load after this module.
        from . import checks  # noqa: F401  (registers the checks)

        post_migrate.connect(_ensure_schedules, sender=self, dispatch_uid="iris_consolidation.ensure_schedules")


NO_SCHEDULE_TABLE = (
    "iris_consolidation: no weekly consolidation was scheduled: the database has no django_q_schedule table "
    "(add 'django_q' to INSTALLED_APPS and migrate again).\n"
)
SCHEDULED = (
    "iris_consolidation: every user's truths are consolidated on schedule {cron!r} ({tz}); "
    'IRIS_CONSOLIDATION_SCHEDULE_CRON = "" turns it off.\n'
)
UNSCHEDULED = "iris_consolidation: no weekly consolidation (IRIS_CONSOLIDATION_SCHEDULE_CRON is empty).\n"


def _ensure_schedules(*, using: str = "default", verbosity: int = 1, stdout: Any = None, **kwargs: Any) -> None:
    """After ``migrate``: create or update the django-q2 schedules (idempotent, by name),
    and say so in ``migrate``'s output, or why not (never a silent skip)."""
    if using != DEFAULT_DB_ALIAS:
        return
    out = stdout or sys.stdout
    if "django_q_schedule" not in connections[using].introspection.table_names():
        out.write(NO_SCHEDULE_TABLE)  # also said by check E005, unless silenced
        return
    from .services.queue import scheduling  # the models are loaded by now, unlike at import

    weekly = scheduling.ensure_schedules()[scheduling.WEEKLY]
    if verbosity >= 1:
        out.write(SCHEDULED.format(cron=getattr(weekly, "cron", ""), tz=settings.TIME_ZONE) if weekly else UNSCHEDULED)
