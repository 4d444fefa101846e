"""Import truths from JSONL files and export them back.

File format (one JSON object per line):
``user`` (the user's natural key, their ``USERNAME_FIELD``: a username, or an email
for a user model keyed by email; an unknown user refuses the file unless ``create_users``),
``content``, ``origin``, ``created_at``
(ISO 8601), ``source``; optional ``pinned``, ``generation``, ``score``, ``kind``,
``corroborations`` and the hygiene fields ``relevance`` (0..1), ``access_count`` (>= 0),
``last_accessed``, ``last_decayed`` (ISO 8601 or null), ``validated``, ``tags`` (list of
strings), ``evidence`` (list of session message ids). Export also writes ``retired_reason``,
``evidence`` (the session message ids a mined truth came from; a merge keeps every source's)
and the derived ``quality`` (at export time). Import validates the whole file first and
writes nothing if any line is bad, naming every bad line (and every missing field of
each) at once; it is idempotent: a (user, source) pair already present
is skipped, and a line without a source is skipped when its user already has that content at
that time.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from ... import quality
from ...exceptions import ImportFileInvalid
from ...models import Origin, Truth
from ...selectors import user_name_lookup, username_max_length
from ..pipeline import truth_events

if TYPE_CHECKING:
    from _typeshed import SupportsWrite

BAD_LINE = "{path}:{line}: {problem}. Nothing was imported; fix the line and load again."
#: Several bad lines: this line, then one ``BAD_LINE_ROW`` each (as an editor's "file:line:" reads them).
BAD_LINES = "{path}: {count} bad lines. Nothing was imported; fix them and load again:"
BAD_LINE_ROW = "{path}:{line}: {problem}"
#: Bad lines listed before "... and N more".
BAD_LISTED = 50
NOT_UTF8 = "the line is not UTF-8 text"
REQUIRED = ("user", "content", "origin", "created_at")
MAX_SMALL = 32767  # PostgreSQL smallint: Truth.generation
MAX_INT = 2147483647  # PostgreSQL integer: Truth.corroborations
IMPORTED = "Imported from {path}."
UNKNOWN_USERS = (
    "{path}: {count} unknown user(s): {names}. Nothing was imported; create them first, "
    "or load with --create-users to create each as an account without a password."
)
#: Names listed in the one-line error before "and N more" (a typo shows among the first).
UNKNOWN_LISTED = 10


@dataclass(frozen=True, kw_only=True)
class LoadResult:
    """Counts of one import."""

    read: int
    created: int
    skipped: int
    users_created: int


def _is_whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _missing(data: dict[str, Any]) -> str:
    """Every required field ``data`` lacks, in one phrase ("" when none is missing)."""
    missing = [repr(name) for name in REQUIRED if name not in data]
    if len(missing) > 1:
        return f"fields {', '.join(missing)} are missing"
    return f"field {missing[0]} is missing" if missing else ""


def _parse_line(raw: str, *, max_user_length: int | None = None) -> dict[str, Any]:
    """One line's truth; raises ``ValueError`` naming every missing field at once, or the
    first other problem of a line that has all of them."""
    try:
        data = json.loads(raw.rstrip("\r\n"))
    except json.JSONDecodeError as exc:
        raise ValueError(f"the line is not valid JSON ({exc.msg} at column {exc.colno})") from None
    if not isinstance(data, dict):
        raise ValueError("the line is not a JSON object")
    if any(isinstance(v, str) and "\x00" in v for v in data.values()):
        raise ValueError("a field contains a NUL character (\\u0000), which PostgreSQL text cannot hold")
    if missing := _missing(data):
        raise ValueError(missing)
    if not isinstance(data["user"], str) or not data["user"].strip():
        raise ValueError("'user' must be a non-empty string")
    if max_user_length is not None and len(data["user"].strip()) > max_user_length:
        raise ValueError(f"'user' is longer than {max_user_length} characters (the user model's limit)")
    if not isinstance(data["content"], str) or not data["content"].strip():
        raise ValueError("'content' must be a non-empty string")
    if data["origin"] not in Origin.values:
        raise ValueError(f"'origin' must be one of {', '.join(Origin.values)}")
    created = parse_datetime(str(data["created_at"]).replace("Z", "+00:00"))
    if created is None or created.tzinfo is None:
        raise ValueError("'created_at' must be an ISO 8601 time with a time zone")
    generation = data.get("generation", 0)
    if not _is_whole(generation) or not 0 <= generation <= MAX_SMALL:
        raise ValueError(f"'generation' must be a whole number from 0 to {MAX_SMALL}")
    corroborations = data.get("corroborations", 1)
    if not _is_whole(corroborations) or not 1 <= corroborations <= MAX_INT:
        raise ValueError("'corroborations' must be a whole number >= 1")
    score = data.get("score", 0.0)
    if not isinstance(score, (int, float)) or isinstance(score, bool):
        raise ValueError("'score' must be a number")
    if not isinstance(data.get("pinned", False), bool):
        raise ValueError("'pinned' must be true or false")
    hygiene = _parse_hygiene(data)
    return {
        "user": data["user"].strip(),
        "content": data["content"].strip(),
        "origin": data["origin"],
        "created_at": created,
        "source": str(data.get("source") or ""),
        "pinned": bool(data.get("pinned", False)),
        "generation": generation,
        "score": float(score),
        "kind": str(data.get("kind") or "fact")[:32],
        "corroborations": corroborations,
        **hygiene,
    }


def _parse_time(data: dict[str, Any], name: str) -> datetime | None:
    value = data.get(name)
    if value is None:
        return None
    parsed = parse_datetime(str(value).replace("Z", "+00:00")) if isinstance(value, str) else None
    if parsed is None or parsed.tzinfo is None:
        raise ValueError(f"{name!r} must be an ISO 8601 time with a time zone, or null")
    return parsed


def _parse_hygiene(data: dict[str, Any]) -> dict[str, Any]:
    """The optional hygiene fields: relevance, access_count, last_accessed,
    last_decayed, validated, tags, and a mined truth's evidence; absent ones take the
    model's defaults."""
    relevance = data.get("relevance", 1.0)
    if not isinstance(relevance, (int, float)) or isinstance(relevance, bool) or not 0.0 <= relevance <= 1.0:
        raise ValueError("'relevance' must be a number from 0 to 1")
    access_count = data.get("access_count", 0)
    if not _is_whole(access_count) or not 0 <= access_count <= MAX_INT:
        raise ValueError("'access_count' must be a whole number >= 0")
    validated = data.get("validated", False)
    if not isinstance(validated, bool):
        raise ValueError("'validated' must be true or false")
    tags = data.get("tags", [])
    if not isinstance(tags, list) or not all(isinstance(t, str) and t.strip() and "\x00" not in t for t in tags):
        raise ValueError("'tags' must be a list of non-empty strings")
    evidence = data.get("evidence", [])
    if not isinstance(evidence, list) or not all(isinstance(e, str) and e.strip() and "\x00" not in e
                                                 for e in evidence):
        raise ValueError("'evidence' must be a list of non-empty strings (session message ids)")
    return {
        "relevance": float(relevance),
        "access_count": access_count,
        "last_accessed": _parse_time(data, "last_accessed"),
        "last_decayed": _parse_time(data, "last_decayed"),
        "validated": validated,
        "tags": list(dict.fromkeys(t.strip() for t in tags)),
        "evidence": list(dict.fromkeys(e.strip() for e in evidence)),
    }


def parse_truths(lines: Iterable[str | None], *, path: str = "<input>") -> list[dict[str, Any]]:
    """Parse and validate every line; raises ``ImportFileInvalid`` naming every bad line of
    the file at once (``BAD_LINE`` for one, ``BAD_LINES`` then one ``BAD_LINE_ROW`` each,
    at most ``BAD_LISTED``, for several). A None line is one that is not UTF-8 text.

    ``user`` may be as long as the user model's ``USERNAME_FIELD`` allows.
    """
    rows = []
    bad: list[tuple[int, str]] = []
    max_user_length = username_max_length()
    for number, raw in enumerate(lines, start=1):
        if raw is None:
            bad.append((number, NOT_UTF8))
            continue
        if not raw.strip():
            continue
        try:
            rows.append(_parse_line(raw, max_user_length=max_user_length))
        except (ValueError, TypeError) as exc:
            bad.append((number, str(exc)))
    if len(bad) == 1:
        raise ImportFileInvalid(BAD_LINE.format(path=path, line=bad[0][0], problem=bad[0][1]))
    if bad:
        listed = [BAD_LINE_ROW.format(path=path, line=n, problem=problem) for n, problem in bad[:BAD_LISTED]]
        more = [f"... and {len(bad) - BAD_LISTED} more"] if len(bad) > BAD_LISTED else []
        raise ImportFileInvalid("\n".join([BAD_LINES.format(path=path, count=len(bad)), *listed, *more]))
    return rows


def _identity(user_id: int, source: str, content: str, created_at: datetime) -> tuple[Any, ...]:
    """What makes a line "already imported": its user and source, or, for a line
    without a source, its user, content and time."""
    return (user_id, source) if source else (user_id, "", content, created_at)


def _text_lines(handle: Any) -> Iterator[str | None]:
    """The file's lines as text; None for a line that is not UTF-8 (``parse_truths`` reports it)."""
    for raw in handle:
        try:
            yield raw.decode("utf-8")
        except UnicodeDecodeError:
            yield None


def _decoded_lines(handle: Any, *, path: str) -> Iterator[str]:
    """The file's lines as text; a line that is not UTF-8 raises ``ImportFileInvalid`` (for
    files read line by line to their first problem: ``sessions``)."""
    for number, line in enumerate(_text_lines(handle), start=1):
        if line is None:
            raise ImportFileInvalid(BAD_LINE.format(path=path, line=number, problem=NOT_UTF8))
        yield line


def load_truths(path: Path, *, create_users: bool = False) -> LoadResult:
    """Import the truths of ``path`` in one transaction; see the module docstring.

    A ``user`` with no account is created (without a usable password: a person to remember
    things about, not a login) only when ``create_users``; otherwise the file is refused,
    naming the unknown users, so one typo does not make a phantom user.
    Raises ``ImportFileInvalid`` (nothing imported) for a missing file, a bad line or an
    unknown user.
    """
    if not path.is_file():
        raise ImportFileInvalid(f"{path}: no such file.")
    with path.open("rb") as handle:
        rows = parse_truths(_text_lines(handle), path=str(path))
    User = get_user_model()
    with transaction.atomic():
        names = sorted({r["user"] for r in rows})
        users = {
            u.get_username(): u for u in User._default_manager.filter(**{f"{User.USERNAME_FIELD}__in": names})
        }
        missing = [n for n in names if n not in users]
        if missing and not create_users:
            listed = ", ".join(missing[:UNKNOWN_LISTED])
            if len(missing) > UNKNOWN_LISTED:
                listed += f" and {len(missing) - UNKNOWN_LISTED} more"
            raise ImportFileInvalid(UNKNOWN_USERS.format(path=path, count=len(missing), names=listed))
        for name in missing:
            user = User(**{User.USERNAME_FIELD: name})
            user.set_unusable_password()  # a person to remember things about, not a login
            user.save()
            users[name] = user
        seen = {
            _identity(user_id, source, content, created_at)
            for user_id, source, content, created_at in Truth.all_objects.filter(user__in=users.values()).values_list(
                "user_id", "source", "content", "created_at"
            )
        }
        new = []
        for r in rows:
            user = users[r.pop("user")]
            key = _identity(user.pk, r["source"], r["content"], r["created_at"])
            if key in seen:
                continue
            seen.add(key)
            new.append(Truth(user=user, **r))
        Truth.all_objects.bulk_create(new, batch_size=1000)
        reason = IMPORTED.format(path=path.name)
        truth_events.record_changes(
            [truth_events.Change(truth=t, action=truth_events.CREATED, reason=reason) for t in new], actor="import"
        )
    return LoadResult(read=len(rows), created=len(new), skipped=len(rows) - len(new), users_created=len(missing))


def _iso(value: datetime | None) -> str | None:
    return value.isoformat().replace("+00:00", "Z") if value else None


def iter_export_rows(*, user_id: int | None, include_retired: bool) -> Iterator[dict[str, Any]]:
    """Export rows, one dict per truth, oldest first (see ``export_truths --help``)."""
    qs = Truth.all_objects.all() if include_retired else Truth.objects.all()
    if user_id is not None:
        qs = qs.filter(user_id=user_id)
    now = timezone.now()
    user_name = user_name_lookup()
    fields = ("id", user_name, "content", "origin", "pinned", "generation", "score", "kind",
              "created_at", "retired_at", "retired_reason", "superseded_by_id", "source",
              "relevance", "access_count", "last_accessed", "last_decayed", "validated", "tags", "evidence")
    for row in qs.order_by("user_id", "created_at", "id").values(*fields).iterator(chunk_size=2000):
        row_quality = quality.quality(
            relevance=row["relevance"], access_count=row["access_count"],
            last_used=row["last_accessed"] or row["created_at"], validated=row["validated"], now=now,
        )
        yield {
            "id": row["id"],
            "user": row[user_name],
            "content": row["content"],
            "origin": row["origin"],
            "pinned": row["pinned"],
            "generation": row["generation"],
            "score": row["score"],
            "kind": row["kind"],
            "created_at": _iso(row["created_at"]),
            "retired_at": _iso(row["retired_at"]),
            "retired_reason": row["retired_reason"],
            "superseded_by": row["superseded_by_id"],
            "source": row["source"],
            "relevance": row["relevance"],
            "access_count": row["access_count"],
            "last_accessed": _iso(row["last_accessed"]),
            "last_decayed": _iso(row["last_decayed"]),
            "validated": row["validated"],
            "tags": row["tags"] or [],
            "evidence": row["evidence"] or [],
            "quality": round(row_quality, 6),
        }


def write_jsonl(rows: Iterable[dict[str, Any]], out: SupportsWrite[str]) -> int:
    """Write ``rows`` as JSON lines to ``out`` (a text stream, or a command's ``stdout``); returns the count."""
    count = 0
    for row in rows:
        out.write(json.dumps(row, ensure_ascii=False) + "\n")
        count += 1
    return count
