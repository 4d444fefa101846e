"""``manage.py load_sessions FILE.jsonl``: import chat sessions (see services/operations/sessions.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from ...exceptions import ImportFileInvalid
from ...services.operations import sessions
from ..migrated import require_migrated


class Command(BaseCommand):
    help = "Import chat sessions from a JSONL file (creating users by name); re-loading a file imports nothing twice."

    LOADED = (
        "Loaded {created} sessions with {messages} messages ({skipped} sessions already present) from {read} lines; "
        "{users_created} new users."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("path", help="A sessions .jsonl file: one session of one user per line.")

    def handle(self, *args: Any, **options: Any) -> None:
        require_migrated()
        try:
            result = sessions.load_sessions(Path(options["path"]))
        except ImportFileInvalid as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(
            self.style.SUCCESS(
                self.LOADED.format(
                    created=result.created, messages=result.messages, skipped=result.skipped, read=result.read,
                    users_created=result.users_created,
                )
            )
        )
