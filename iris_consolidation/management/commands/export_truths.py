"""``manage.py export_truths``: truths as JSONL."""

from __future__ import annotations

import os
import sys
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from ... import selectors
from ...exceptions import UnknownUser
from ...services.operations import transfer
from ..migrated import require_migrated


class Command(BaseCommand):
    help = "Export truths as JSONL, one truth a line (live ones only unless --include-retired)."

    EXPORTED = "Exported {count} truths to {path}."
    CANNOT_WRITE = "Cannot write {path}: {error}. Pick a writable --output path."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--user", help="Only this user (id, or username: the user model's USERNAME_FIELD).")
        parser.add_argument("--include-retired", action="store_true", help="Also export retired truths.")
        parser.add_argument("--output", help="Write to this file instead of standard output.")

    def handle(self, *args: Any, **options: Any) -> None:
        require_migrated()
        user_id = None
        if options["user"]:
            try:
                user_id = selectors.get_user(value=options["user"]).pk
            except UnknownUser as exc:
                raise CommandError(str(exc)) from exc
        rows = transfer.iter_export_rows(user_id=user_id, include_retired=options["include_retired"])
        if options["output"]:
            try:
                out = open(options["output"], "w", encoding="utf-8")
            except OSError as exc:
                raise CommandError(self.CANNOT_WRITE.format(path=options["output"], error=exc.strerror)) from exc
            with out:
                count = transfer.write_jsonl(rows, out)
            self.stderr.write(self.EXPORTED.format(count=count, path=options["output"]))
        else:
            try:
                transfer.write_jsonl(rows, self.stdout)
            except BrokenPipeError:
                # The reader went away (`export_truths | head`): stop quietly, as Unix tools do,
                # and keep Python from complaining again when it flushes stdout at exit.
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
