"""``load_sessions``: the sessions format, validation first with line numbers, idempotent re-load.

The files here are written by the tests (LoCoMo's own file is non-commercial and is
never copied into the repository); ``test_shared_locomo_sessions_load`` reads it from the
team's shared folder when it is there.
"""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command

from iris_consolidation.management.commands.load_sessions import Command
from iris_consolidation.models import ChatSession, SessionMessage

pytestmark = pytest.mark.django_db


def session(name="s1", user="ana", **extra):
    row = {
        "session": name,
        "user": user,
        "started_at": "2023-05-08T13:56:00Z",
        "messages": [
            {
                "role": "user",
                "speaker": "Ana",
                "content": "I live in Porto.",
                "at": "2023-05-08T13:56:00Z",
                "id": "D1:1",
            },
            {"role": "other", "speaker": "Bo", "content": "Nice!", "at": "2023-05-08T13:56:30Z", "id": "D1:2"},
        ],
        "source": "test:file/1",
    }
    row.update(extra)
    return row


def write(path, rows):
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows), encoding="utf-8")
    return path


def load(path):
    out = StringIO()
    call_command("load_sessions", str(path), stdout=out)
    return out.getvalue().strip()


def test_load_then_reload_imports_each_session_once(tmp_path):
    path = write(tmp_path / "s.jsonl", [session(), session("s2"), session("s1", user="bo")])
    assert load(path) == Command.LOADED.format(created=3, messages=6, skipped=0, read=3, users_created=2)
    assert load(path) == Command.LOADED.format(created=0, messages=0, skipped=3, read=3, users_created=0)
    stored = ChatSession.objects.get(user__username="ana", external_id="s1")
    assert stored.source == "test:file/1"
    assert list(stored.messages.values_list("position", "external_id", "role", "speaker", "content")) == [
        (0, "D1:1", "user", "Ana", "I live in Porto."), (1, "D1:2", "other", "Bo", "Nice!"),
    ]
    assert SessionMessage.objects.count() == 6


@pytest.mark.parametrize(
    ("bad", "problem"),
    [
        ("{not json", "the line is not valid JSON"),
        (session(messages=[]), "'messages' must be a non-empty list"),
        (session(started_at="2023-05-08 13:56"), "'started_at' must be an ISO 8601 time with a time zone"),
        (session(messages=[{"role": "bot", "content": "x", "at": "2023-05-08T13:56:00Z"}]),
         "messages[0].role must be one of user, other"),
        (session(messages=[{"role": "user", "content": " ", "at": "2023-05-08T13:56:00Z"}]),
         "messages[0].content must be a non-empty string"),
        (session(messages=[{"role": "user", "content": "a\u0000b", "at": "2023-05-08T13:56:00Z"}]),
         "messages[0].content contains a NUL character"),
        ({"user": "ana", "started_at": "2023-05-08T13:56:00Z", "messages": []}, "field 'session' is missing"),
        (session(), "session 's1' of 'ana' is already on line 1"),
    ],
)
def test_a_bad_line_is_named_in_one_line_and_nothing_is_imported(tmp_path, bad, problem):
    path = write(tmp_path / "bad.jsonl", [session(), bad])
    with pytest.raises(CommandError) as info:
        load(path)
    message = str(info.value)
    assert message.startswith(f"{path}:2: {problem}") and "\n" not in message
    assert message.endswith("Nothing was imported; fix the line and load again.")
    assert (ChatSession.objects.count(), SessionMessage.objects.count()) == (0, 0)
    assert not get_user_model().objects.filter(username="ana").exists()


def test_a_missing_file_is_one_line(tmp_path):
    with pytest.raises(CommandError) as info:
        load(tmp_path / "nope.jsonl")
    assert str(info.value) == f"{tmp_path / 'nope.jsonl'}: no such file."


def test_shared_locomo_sessions_load(shared_dir):
    path = shared_dir / "data" / "locomo_sessions.jsonl"
    if not path.is_file():
        pytest.skip("the team's shared LoCoMo sessions are not beside this clone")
    assert load(path) == Command.LOADED.format(created=428, messages=9052, skipped=0, read=428, users_created=16)
    assert SessionMessage.objects.filter(role="user").count() == 4526
