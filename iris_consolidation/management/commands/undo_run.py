"""``manage.py undo_run <run id> --reason "..."``: bring back every truth a run retired or merged."""

from __future__ import annotations

import uuid
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from ...exceptions import UndoRefused
from ...services.operations import run_undo


class Command(BaseCommand):
    help = (
        "Undo a whole run, newest step first: its merges and supersedes (review by review) and the truths its "
        "noise, prune and relocate stages retired. Each step goes through the one-step undo, with one audit row "
        "per truth; a step a later change made unsafe is refused and listed, and the others are still undone."
    )

    BAD_ID = "{value!r} is not a run id; give the UUID printed by consolidate_truths or shown by consolidation_status."
    DONE = "Undone: {label}; live again: {ids}."
    REFUSED = "Refused: {label}: {reason}"
    SUMMARY = "Run {run}: {undone} step(s) undone, {refused} refused; {restored} truth(s) live again."
    SOME_REFUSED = "{refused} step(s) of run {run} were refused (listed above); the others are undone."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("run_id", help="Id (UUID) of the run.")
        parser.add_argument("--reason", required=True, help="Why the run is undone; kept in every audit row.")
        parser.add_argument("--actor", default="command:undo_run", help="Who undoes it, as the audit rows say.")

    def handle(self, *args: Any, **options: Any) -> None:
        value = options["run_id"].strip()
        try:
            run_id = uuid.UUID(value)
        except ValueError:
            raise CommandError(self.BAD_ID.format(value=value)) from None
        try:
            result = run_undo.undo_run(run_id=run_id, actor=options["actor"], reason=options["reason"])
        except UndoRefused as exc:
            raise CommandError(str(exc)) from None
        for outcome in result.outcomes:
            if outcome.done:
                ids = ", ".join(f"#{pk}" for pk in outcome.restored_ids) or "none"
                self.stdout.write(self.DONE.format(label=outcome.step.label(), ids=ids))
            else:
                self.stderr.write(self.REFUSED.format(label=outcome.step.label(), reason=outcome.reason))
        short = str(result.run_id)[:8]
        self.stdout.write(
            self.style.SUCCESS(
                self.SUMMARY.format(
                    run=short, undone=len(result.undone), refused=len(result.refused), restored=len(result.restored_ids)
                )
            )
        )
        if result.refused:
            raise CommandError(self.SOME_REFUSED.format(refused=len(result.refused), run=short), returncode=1)
