"""Import chat sessions from JSONL files (``manage.py load_sessions``).

File format (one JSON object per line, as the LoCoMo sessions are shipped):
``session`` (the session's id, unique per user), ``user`` (the user's natural key,
their ``USERNAME_FIELD``; created if missing), ``started_at`` (ISO 8601 with a time
zone), ``messages`` (a non-empty list of objects: ``role`` ``"user"`` or ``"other"``,
``content`` (non-empty text), ``at`` (ISO 8601 with a time zone); optional ``speaker``
and ``id``, the message's id in the source); optional ``source`` (provenance).

The whole file is validated first: a bad line is reported with its number in one line
and nothing is imported. Loading a file again imports nothing twice: a session whose
(user, ``session``) is already stored is skipped whole. One transaction.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils.dateparse import parse_datetime

from ...exceptions import ImportFileInvalid
from ...models import ChatSession, MessageRole, SessionMessage
from ...selectors import username_max_length
from .transfer import BAD_LINE, _decoded_lines

REQUIRED = ("session", "user", "started_at", "messages")
#: ``ChatSession.external_id`` and ``SessionMessage.external_id`` / ``speaker`` lengths.
MAX_ID = 200


@dataclass(frozen=True, kw_only=True)
class SessionLoadResult:
    """Counts of one import: lines read, sessions created / already present, messages
    created, users created."""

    read: int
    created: int
    skipped: int
    messages: int
    users_created: int


def _time(value: Any, name: str) -> datetime:
    parsed = parse_datetime(value.replace("Z", "+00:00")) if isinstance(value, str) else None
    if parsed is None or parsed.tzinfo is None:
        raise ValueError(f"{name} must be an ISO 8601 time with a time zone")
    return parsed


def _text(value: Any, name: str, *, required: bool, limit: int | None = None) -> str:
    if value is None and not required:
        return ""
    if not isinstance(value, str) or (required and not value.strip()):
        raise ValueError(f"{name} must be a {'non-empty ' if required else ''}string")
    if "\x00" in value:
        raise ValueError(f"{name} contains a NUL character (\\u0000), which PostgreSQL text cannot hold")
    if limit is not None and len(value.strip()) > limit:
        raise ValueError(f"{name} is longer than {limit} characters")
    return value.strip()


def _parse_line(raw: str, *, max_user_length: int | None) -> dict[str, Any]:
    try:
        data = json.loads(raw.rstrip("\r\n"))
    except json.JSONDecodeError as exc:
        raise ValueError(f"the line is not valid JSON ({exc.msg} at column {exc.colno})") from None
    if not isinstance(data, dict):
        raise ValueError("the line is not a JSON object")
    for name in REQUIRED:
        if name not in data:
            raise ValueError(f"field {name!r} is missing")
    user = _text(data["user"], "'user'", required=True, limit=max_user_length)
    session = _text(data["session"], "'session'", required=True, limit=MAX_ID)
    messages = data["messages"]
    if not isinstance(messages, list) or not messages:
        raise ValueError("'messages' must be a non-empty list")
    parsed = []
    for index, message in enumerate(messages):
        where = f"messages[{index}]"
        if not isinstance(message, dict):
            raise ValueError(f"{where} is not a JSON object")
        role = message.get("role")
        if role not in MessageRole.values:
            raise ValueError(f"{where}.role must be one of {', '.join(MessageRole.values)}")
        if "content" not in message or "at" not in message:
            raise ValueError(f"{where} needs 'content' and 'at'")
        parsed.append(
            {
                "position": index,
                "role": role,
                "content": _text(message["content"], f"{where}.content", required=True),
                "at": _time(message["at"], f"{where}.at"),
                "speaker": _text(message.get("speaker"), f"{where}.speaker", required=False, limit=MAX_ID),
                "external_id": _text(
                    None if message.get("id") is None else str(message["id"]), f"{where}.id", required=False,
                    limit=MAX_ID,
                ),
            }
        )
    return {
        "user": user,
        "external_id": session,
        "started_at": _time(data["started_at"], "'started_at'"),
        "source": _text(data.get("source"), "'source'", required=False),
        "messages": parsed,
    }


def parse_sessions(lines: Iterable[str], *, path: str = "<input>") -> list[dict[str, Any]]:
    """Parse and validate every line; raises ``ImportFileInvalid`` naming the first bad one
    (also for a session given twice for one user in the file)."""
    rows = []
    seen: dict[tuple[str, str], int] = {}
    max_user_length = username_max_length()
    for number, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        try:
            row = _parse_line(raw, max_user_length=max_user_length)
            key = (row["user"], row["external_id"])
            if key in seen:
                raise ValueError(f"session {row['external_id']!r} of {row['user']!r} is already on line {seen[key]}")
            seen[key] = number
        except (ValueError, TypeError) as exc:
            raise ImportFileInvalid(BAD_LINE.format(path=path, line=number, problem=exc)) from None
        rows.append(row)
    return rows


def load_sessions(path: Path) -> SessionLoadResult:
    """Import the sessions of ``path`` in one transaction; see the module docstring.

    Raises ``ImportFileInvalid`` (nothing imported) for a missing file or a bad line.
    """
    if not path.is_file():
        raise ImportFileInvalid(f"{path}: no such file.")
    with path.open("rb") as handle:
        rows = parse_sessions(_decoded_lines(handle, path=str(path)), path=str(path))
    User = get_user_model()
    with transaction.atomic():
        names = sorted({r["user"] for r in rows})
        users = {u.get_username(): u for u in User._default_manager.filter(**{f"{User.USERNAME_FIELD}__in": names})}
        missing = [n for n in names if n not in users]
        for name in missing:
            user = User(**{User.USERNAME_FIELD: name})
            user.set_unusable_password()  # a person whose sessions are mined, not a login
            user.save()
            users[name] = user
        present = set(
            ChatSession.objects.filter(user__in=users.values()).values_list("user_id", "external_id")
        )
        created: list[ChatSession] = []
        pending: list[list[dict[str, Any]]] = []
        for r in rows:
            user = users[r["user"]]
            if (user.pk, r["external_id"]) in present:
                continue
            created.append(
                ChatSession(user=user, external_id=r["external_id"], started_at=r["started_at"], source=r["source"])
            )
            pending.append(r["messages"])
        ChatSession.objects.bulk_create(created, batch_size=1000)
        messages = [
            SessionMessage(session=session, **message)
            for session, items in zip(created, pending, strict=True)
            for message in items
        ]
        SessionMessage.objects.bulk_create(messages, batch_size=2000)
    return SessionLoadResult(
        read=len(rows), created=len(created), skipped=len(rows) - len(created), messages=len(messages),
        users_created=len(missing),
    )
