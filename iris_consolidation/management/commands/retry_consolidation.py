"""``manage.py retry_consolidation <run id>``: re-queue the failed clusters of a run."""

from __future__ import annotations

import uuid
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from ...exceptions import RetryRefused
from ...models import ConsolidationRun
from ...services.queue import recovery
from ..migrated import require_migrated


class Command(BaseCommand):
    help = (
        "Re-queue the failed jobs of a queued run. Each cluster is judged again on its members as they "
        "are now (re-read, re-validated, freshness re-checked when written)."
    )

    BAD_ID = "{value!r} is not a run id; give the UUID printed by consolidate_truths or shown by consolidation_status."
    UNKNOWN_RUN = "No consolidation run has the id {value}."
    NOT_QUEUED = (
        "Run {run_id} ran in one process ({mode}); only queued runs have jobs to retry. Run consolidate_truths again."
    )
    NOTHING = "Nothing to retry: run {run_id} has no failed job."
    REQUEUED = "Re-queued {count} failed job(s) of run {run_id}."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("run_id", help="Id (UUID) of the run.")

    def handle(self, *args: Any, **options: Any) -> None:
        require_migrated()
        value = options["run_id"].strip()
        try:
            run_id = uuid.UUID(value)
        except ValueError:
            raise CommandError(self.BAD_ID.format(value=value)) from None
        run = ConsolidationRun.objects.filter(pk=run_id).first()
        if run is None:
            raise CommandError(self.UNKNOWN_RUN.format(value=value))
        if not run.on_workers:
            raise CommandError(self.NOT_QUEUED.format(run_id=run.pk, mode=run.kind_label))
        try:
            count = recovery.retry_failed(run.pk, actor="retry_consolidation")
        except RetryRefused as exc:
            raise CommandError(str(exc)) from None
        if not count:
            self.stdout.write(self.NOTHING.format(run_id=run.pk))
            return
        self.stdout.write(self.style.SUCCESS(self.REQUEUED.format(count=count, run_id=run.pk)))
