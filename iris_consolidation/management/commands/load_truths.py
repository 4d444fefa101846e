"""``manage.py load_truths FILE.jsonl``: import truths (see services/operations/transfer.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from ...exceptions import ImportFileInvalid
from ...services.operations import transfer
from ..migrated import require_migrated


class Command(BaseCommand):
    help = (
        "Import truths from a JSONL file; re-loading a file imports nothing twice. Every user must exist "
        "unless --create-users is given."
    )

    LOADED = "Loaded {created} truths ({skipped} already present) from {read} lines; {users_created} new users."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("path", help="A .truths.jsonl file: one JSON object per line.")
        parser.add_argument(
            "--create-users",
            action="store_true",
            help="Create each unknown user (by the user model's USERNAME_FIELD) as an account without a password.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        require_migrated()
        try:
            result = transfer.load_truths(Path(options["path"]), create_users=options["create_users"])
        except ImportFileInvalid as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(
            self.style.SUCCESS(
                self.LOADED.format(
                    created=result.created, skipped=result.skipped, read=result.read, users_created=result.users_created
                )
            )
        )
