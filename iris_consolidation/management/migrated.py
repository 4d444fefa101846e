"""The commands' first check: a database whose migrations have not all run gets one line
naming ``migrate``, not the traceback of the first query on a missing table."""

from __future__ import annotations

from django.core.management.base import CommandError
from django.db import DEFAULT_DB_ALIAS, connections
from django.db.migrations.executor import MigrationExecutor

UNMIGRATED = (
    "The database is not migrated: {count} migration(s) of {apps} not applied. Run `python manage.py migrate` first."
)


def require_migrated(using: str = DEFAULT_DB_ALIAS) -> None:
    """Raise ``CommandError`` (``UNMIGRATED``, one line) when any migration of any installed
    app is not applied on the database ``using``; the same plan ``migrate`` would run
    (Django's ``MigrationExecutor``, a query of ``django_migrations``)."""
    executor = MigrationExecutor(connections[using])
    plan = executor.migration_plan(executor.loader.graph.leaf_nodes())
    if plan:
        apps = sorted({migration.app_label for migration, _backwards in plan})
        raise CommandError(UNMIGRATED.format(count=len(plan), apps=", ".join(apps)))
