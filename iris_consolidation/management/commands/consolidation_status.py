"""``manage.py consolidation_status``: the last run, the next due, what is in flight."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.core.management.base import BaseCommand
from django.utils import timezone

from ... import run_display, selectors
from ..migrated import require_migrated


def _when(moment: datetime | None) -> str:
    return timezone.localtime(moment).strftime("%Y-%m-%d %H:%M %Z") if moment else "-"


class Command(BaseCommand):
    help = "Show the last consolidation run, the next scheduled one, the runs in flight and runs per status."

    LAST_RUN = (
        "Last run: {run_id} ({trigger}, {status}) created {created}, finished {finished}; "
        "clusters {done}/{found}, merged {merged}, superseded {superseded}, failed {failed}"
    )
    NO_RUN = "Last run: none yet."
    NEXT_DUE = "Next due: {when} (cron '{cron}' in {tz})"
    OVERDUE = " - overdue: it starts within a minute of a qcluster running"
    NOT_SCHEDULED = "Next due: not scheduled (IRIS_CONSOLIDATION_SCHEDULE_CRON is empty, or migrate has not run)."
    IN_FLIGHT = "In flight: {count}"
    FLIGHT_ROW = "  {run_id} ({trigger}, {status}) started {started}: jobs " + " ".join(
        f"{s}={{{s}}}" for s in ("queued", "running", "waiting", "done", "failed")
    )
    FLIGHT_EMBEDDED = "    phase 1: {users_done} of {users} users planned, {embedded} truths embedded"
    FLIGHT_PHASE1 = "    user {user}: {note}"
    BY_STATUS = "Runs by status: {counts}"
    LOCK_HELD = "Schedule lock: held by run {run_id} until {until}"
    LOCK_FREE = "Schedule lock: free"
    WAITING_FOR_WORKER = "waiting for a worker"
    QUEUE_ROW = "{label}: {text}"

    def handle(self, *args: Any, **options: Any) -> None:
        require_migrated()
        status = selectors.get_consolidation_status()
        write = self.stdout.write
        run = status.last_run
        if run is None:
            write(self.NO_RUN)
        else:
            write(
                self.LAST_RUN.format(
                    run_id=run.pk,
                    trigger=run.trigger,
                    status=run.status,
                    created=_when(run.created_at),
                    finished=_when(run.finished_at),
                    done=run.clusters_done,
                    found=run.clusters_found,
                    merged=run.merged,
                    superseded=run.superseded,
                    failed=run.failed,
                )
            )
        if status.next_due is None:
            write(self.NOT_SCHEDULED)
        else:
            tz = timezone.get_current_timezone_name()
            overdue = self.OVERDUE if status.next_due < timezone.now() else ""
            write(self.NEXT_DUE.format(when=_when(status.next_due), cron=status.cron, tz=tz) + overdue)
        write(self.IN_FLIGHT.format(count=len(status.in_flight)))
        for progress in status.in_flight:
            write(
                self.FLIGHT_ROW.format(
                    run_id=progress.run.pk,
                    trigger=progress.run.trigger,
                    status=(
                        self.WAITING_FOR_WORKER
                        if progress.run.pk in status.waiting_for_worker
                        else progress.run.status
                    ),
                    started=_when(progress.run.started_at),
                    **progress.jobs,
                )
            )
            run_ = progress.run
            write(self.FLIGHT_EMBEDDED.format(users_done=run_.users_done, users=run_.users, embedded=run_.embedded))
            names = selectors.named_users([user_id for user_id, _ in progress.phase1])
            for name, (_user_id, note) in zip(names, progress.phase1, strict=True):
                write(self.FLIGHT_PHASE1.format(user=name, note=note))
        for label, text in run_display.queue_lines(status.queue):
            write(self.QUEUE_ROW.format(label=label, text=text))
        write(self.BY_STATUS.format(counts=" ".join(f"{k}={v}" for k, v in status.runs_by_status.items())))
        if status.lock_run_id:
            write(self.LOCK_HELD.format(run_id=status.lock_run_id, until=_when(status.lock_expires_at)))
        else:
            write(self.LOCK_FREE)
