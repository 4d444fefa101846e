"""App configuration."""

from typing import Any

from django.apps import AppConfig
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
        from . import checks  # noqa: F401  (registers the checks)

        post_migrate.connect(_ensure_schedules, sender=self, dispatch_uid="iris_consolidation.ensure_schedules")


def _ensure_schedules(*, using: str = "default", **kwargs: Any) -> None:
    """After ``migrate``: create or update the django-q2 schedules (idempotent, by name)."""
    from django.db import DEFAULT_DB_ALIAS, connections

    if using != DEFAULT_DB_ALIAS or "django_q_schedule" not in connections[using].introspection.table_names():
        return
    from .services.queue import scheduling

    scheduling.ensure_schedules()
