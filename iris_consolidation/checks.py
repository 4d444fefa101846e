"""System checks for the app's settings and environment."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.checks import Error, Tags, Warning, register
from django.db import connection
from django.utils.module_loading import import_string

from .conf import app_settings


@register()
def check_settings(app_configs: Any = None, **kwargs: Any) -> list[Any]:
    """E001 threshold out of range, E002 unknown judge, E003 database not PostgreSQL."""
    errors: list[Any] = []
    threshold = app_settings.SIMILARITY_THRESHOLD
    if not isinstance(threshold, (int, float)) or not 0 < threshold <= 1:
        errors.append(
            Error(
                f"IRIS_CONSOLIDATION_SIMILARITY_THRESHOLD is {threshold!r}; it must be a number in (0, 1].",
                id="iris_consolidation.E001",
            )
        )
    paths = app_settings.JUDGE_CLIENTS
    if app_settings.JUDGE not in paths:
        errors.append(
            Error(
                f"IRIS_CONSOLIDATION_JUDGE is {app_settings.JUDGE!r}; use one of {', '.join(sorted(paths))}.",
                id="iris_consolidation.E002",
            )
        )
    else:
        try:
            import_string(paths[app_settings.JUDGE])
        except ImportError as exc:
            errors.append(Error(f"The judge client cannot be imported: {exc}.", id="iris_consolidation.E002"))
    engine = settings.DATABASES["default"]["ENGINE"]
    if "postgresql" not in engine and not engine.startswith("project.embedded_db"):
        errors.append(
            Error(
                f"The default database uses {engine}; iris_consolidation needs PostgreSQL with pgvector.",
                id="iris_consolidation.E003",
            )
        )
    return errors


@register(Tags.database)
def check_vector_extension(app_configs: Any = None, **kwargs: Any) -> list[Any]:
    """W001: the ``vector`` extension is not available on the database server."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1 FROM pg_available_extensions WHERE name = 'vector'")
        if cursor.fetchone() is None:
            return [
                Warning(
                    "The PostgreSQL server has no 'vector' extension; install pgvector on it.",
                    id="iris_consolidation.W001",
                )
            ]
    return []


@register()
def check_schedule(app_configs: Any = None, **kwargs: Any) -> list[Any]:
    """E004 the weekly schedule's cron expression does not parse."""
    from croniter import croniter

    cron = app_settings.SCHEDULE_CRON
    if cron and not croniter.is_valid(cron):
        return [
            Error(
                f"IRIS_CONSOLIDATION_SCHEDULE_CRON is {cron!r}; use a cron expression such as "
                "'0 5 * * 0', or '' for no schedule.",
                id="iris_consolidation.E004",
            )
        ]
    return []
