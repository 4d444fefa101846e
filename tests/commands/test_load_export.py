"""``load_truths`` and ``export_truths``: round trip, idempotence, bad files."""

from __future__ import annotations

import json
from io import StringIO
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command
from django.utils import timezone

from iris_consolidation.management.commands.export_truths import Command as Export
from iris_consolidation.management.commands.load_truths import Command as Load
from iris_consolidation.models import RetiredReason, Truth, TruthChange
from iris_consolidation.selectors import UNKNOWN_USER
from iris_consolidation.services.operations.transfer import BAD_LINE, BAD_LINES, BAD_LISTED
from tests.helpers import truth_state

pytestmark = pytest.mark.django_db

LINES = [
    {
        "user": "alice",
        "content": "Has a son named Tomas",
        "origin": "promoted",
        "created_at": "2023-05-08T13:56:00Z",
        "source": "session:1/0",
    },
    {
        "user": "alice",
        "content": "Prefers tea to coffee",
        "origin": "user",
        "created_at": "2023-05-09T10:00:00+02:00",
        "source": "session:2/0",
        "pinned": True,
        "generation": 2,
        "score": 0.75,
        "kind": "preference",
    },
    {
        "user": "bob",
        "content": "Lives in Lisbon",
        "origin": "agent",
        "created_at": "2023-06-01T08:30:00Z",
        "source": "session:7/3",
        "corroborations": 4,
    },
]


#: What export writes for the hygiene fields of a truth loaded without them.
HYGIENE_DEFAULTS = {
    "retired_reason": "", "relevance": 1.0, "access_count": 0, "last_accessed": None, "last_decayed": None,
    "validated": False, "tags": [], "evidence": [],
}


def write(tmp_path: Path, lines: list, name: str = "in.truths.jsonl") -> Path:
    path = tmp_path / name
    path.write_text(
        "\n".join(line if isinstance(line, str) else json.dumps(line) for line in lines) + "\n", encoding="utf-8"
    )
    return path


def load(path: Path) -> str:
    out = StringIO()
    call_command("load_truths", str(path), "--create-users", stdout=out)
    return out.getvalue().strip()


def export(*args: str) -> list[dict]:
    out = StringIO()
    call_command("export_truths", *args, stdout=out, stderr=StringIO())
    return [json.loads(line) for line in out.getvalue().splitlines()]


# --- round trip ------------------------------------------------------------------------


def test_load_then_export_gives_back_every_field(tmp_path):
    load(write(tmp_path, LINES))
    target = tmp_path / "out.jsonl"
    err = StringIO()

    call_command("export_truths", "--output", str(target), stdout=StringIO(), stderr=err)

    rows = [json.loads(line) for line in target.read_text(encoding="utf-8").splitlines()]
    assert err.getvalue().strip() == Export.EXPORTED.format(count=3, path=target)
    ids = list(Truth.objects.order_by("user__username", "created_at").values_list("pk", flat=True))
    # Quality is computed at export time: relevance 1.0 (x 0.45), no use, created years ago.
    assert [round(r.pop("quality"), 3) for r in rows] == [0.45, 0.45, 0.45]
    rows = [{k: v for k, v in r.items() if k not in HYGIENE_DEFAULTS or v != HYGIENE_DEFAULTS[k]} for r in rows]
    assert rows == [
        {
            "id": ids[0],
            "user": "alice",
            "content": "Has a son named Tomas",
            "origin": "promoted",
            "pinned": False,
            "generation": 0,
            "score": 0.0,
            "kind": "fact",
            "created_at": "2023-05-08T13:56:00Z",
            "retired_at": None,
            "superseded_by": None,
            "source": "session:1/0",
        },
        {
            "id": ids[1],
            "user": "alice",
            "content": "Prefers tea to coffee",
            "origin": "user",
            "pinned": True,
            "generation": 2,
            "score": 0.75,
            "kind": "preference",
            "created_at": "2023-05-09T08:00:00Z",
            "retired_at": None,
            "superseded_by": None,
            "source": "session:2/0",
        },
        {
            "id": ids[2],
            "user": "bob",
            "content": "Lives in Lisbon",
            "origin": "agent",
            "pinned": False,
            "generation": 0,
            "score": 0.0,
            "kind": "fact",
            "created_at": "2023-06-01T08:30:00Z",
            "retired_at": None,
            "superseded_by": None,
            "source": "session:7/3",
        },
    ]
    assert Truth.objects.get(source="session:7/3").corroborations == 4


def test_load_reports_what_it_did(tmp_path):
    users_before = get_user_model().objects.count()

    output = load(write(tmp_path, LINES))

    assert output == Load.LOADED.format(created=3, skipped=0, read=3, users_created=2)
    assert get_user_model().objects.count() == users_before + 2
    assert get_user_model().objects.get(username="alice").has_usable_password() is False


def test_an_exported_file_loads_into_another_database_unchanged(tmp_path):
    load(write(tmp_path, LINES))
    exported = export()
    call_command("export_truths", "--output", str(tmp_path / "copy.jsonl"), stderr=StringIO())
    # Another database: no truths and no audit of them (the append-only audit protects
    # its truths, so it goes first, in bulk, as an empty database would have it).
    TruthChange.objects.all().delete()
    Truth.all_objects.all().delete()

    load(tmp_path / "copy.jsonl")

    strip = lambda rows: [{k: v for k, v in r.items() if k != "id"} for r in rows]  # noqa: E731
    assert strip(export()) == strip(exported)


def test_reloading_a_file_imports_nothing_twice(tmp_path):
    path = write(tmp_path, LINES)
    load(path)
    before = truth_state()

    output = load(path)

    assert output == Load.LOADED.format(created=0, skipped=3, read=3, users_created=0)
    assert truth_state() == before


def test_reloading_a_grown_file_imports_only_the_new_lines(tmp_path):
    load(write(tmp_path, LINES[:2]))
    extra = {**LINES[0], "content": "Has a daughter named Ana", "source": "session:3/1"}

    output = load(write(tmp_path, [*LINES, extra]))

    assert output == Load.LOADED.format(created=2, skipped=2, read=4, users_created=1)
    assert Truth.objects.count() == 4


def test_reloading_lines_without_a_source_imports_nothing_twice(tmp_path):
    lines = [{k: v for k, v in line.items() if k != "source"} for line in LINES]
    path = write(tmp_path, lines)
    load(path)

    output = load(path)

    assert output == Load.LOADED.format(created=0, skipped=3, read=3, users_created=0)
    assert Truth.objects.count() == 3


def test_a_retired_truth_is_not_imported_again(tmp_path):
    path = write(tmp_path, LINES[:2])
    load(path)
    first, second = Truth.objects.filter(user__username="alice").order_by("created_at")
    Truth.objects.filter(pk=first.pk).update(
        retired_at=timezone.now(), superseded_by=second, retired_reason=RetiredReason.MERGED
    )

    output = load(path)

    assert output == Load.LOADED.format(created=0, skipped=2, read=2, users_created=0)
    assert Truth.all_objects.count() == 2


def test_blank_lines_are_skipped(tmp_path):
    path = tmp_path / "gaps.jsonl"
    path.write_text(json.dumps(LINES[0]) + "\n\n   \n" + json.dumps(LINES[2]) + "\n", encoding="utf-8")

    assert load(path) == Load.LOADED.format(created=2, skipped=0, read=2, users_created=2)


# --- bad files: one line naming the line, nothing imported ------------------------------------


@pytest.mark.parametrize(
    ("bad", "problem"),
    [
        (
            '{"user": "carol", "content": "x", ',
            "the line is not valid JSON (Expecting property name enclosed in double quotes at column 35)",
        ),
        ("[1, 2]", "the line is not a JSON object"),
        ({**LINES[0], "origin": "rumour"}, "'origin' must be one of promoted, user, agent, consolidated"),
        ({k: v for k, v in LINES[0].items() if k != "content"}, "field 'content' is missing"),
        ({k: v for k, v in LINES[0].items() if k != "user"}, "field 'user' is missing"),
        ({k: v for k, v in LINES[0].items() if k != "created_at"}, "field 'created_at' is missing"),
        ({**LINES[0], "content": "   "}, "'content' must be a non-empty string"),
        ({**LINES[0], "user": 7}, "'user' must be a non-empty string"),
        ({**LINES[0], "created_at": "2023-05-08T13:56:00"}, "'created_at' must be an ISO 8601 time with a time zone"),
        ({**LINES[0], "created_at": "yesterday"}, "'created_at' must be an ISO 8601 time with a time zone"),
        ({**LINES[0], "generation": -1}, "'generation' must be a whole number from 0 to 32767"),
        ({**LINES[0], "generation": 1.5}, "'generation' must be a whole number from 0 to 32767"),
        ({**LINES[0], "generation": True}, "'generation' must be a whole number from 0 to 32767"),
        ({**LINES[0], "corroborations": -3}, "'corroborations' must be a whole number >= 1"),
        ({**LINES[0], "score": "high"}, "'score' must be a number"),
        ({**LINES[0], "pinned": "yes"}, "'pinned' must be true or false"),
        (
            {**LINES[0], "content": "a\u0000b"},
            "a field contains a NUL character (\\u0000), which PostgreSQL text cannot hold",
        ),
        ({**LINES[0], "user": "u" * 151}, "'user' is longer than 150 characters (the user model's limit)"),
    ],
    ids=[
        "truncated-json",
        "not-object",
        "unknown-origin",
        "no-content",
        "no-user",
        "no-created-at",
        "blank-content",
        "user-not-string",
        "naive-time",
        "not-a-time",
        "negative-generation",
        "fractional-generation",
        "boolean-generation",
        "negative-corroborations",
        "score-not-number",
        "pinned-not-bool",
        "nul-character",
        "username-too-long",
    ],
)
def test_a_bad_line_is_reported_by_number_and_nothing_is_imported(tmp_path, bad, problem):
    path = write(tmp_path, [LINES[0], LINES[1], bad, LINES[2]])
    users_before = get_user_model().objects.count()

    with pytest.raises(CommandError) as info:
        load(path)

    assert str(info.value) == BAD_LINE.format(path=path, line=3, problem=problem)
    assert "\n" not in str(info.value)
    assert info.value.returncode == 1
    assert Truth.all_objects.count() == 0
    assert get_user_model().objects.count() == users_before


def test_a_line_that_is_not_utf8_is_reported_by_number_and_nothing_is_imported(tmp_path):
    path = write(tmp_path, [LINES[0], LINES[1]])
    with path.open("ab") as handle:
        handle.write(b'{"user": "carol", "content": "caf\xe9"}\n')

    with pytest.raises(CommandError) as info:
        load(path)

    assert str(info.value) == BAD_LINE.format(path=path, line=3, problem="the line is not UTF-8 text")
    assert Truth.all_objects.count() == 0


def test_every_bad_line_and_every_missing_field_is_named_at_once_and_nothing_is_imported(tmp_path):
    no_origin_no_time = {k: v for k, v in LINES[0].items() if k not in ("origin", "created_at")}
    path = write(tmp_path, [no_origin_no_time, LINES[1], {**LINES[2], "origin": "rumour"}, {"content": "x"}])
    with path.open("ab") as handle:
        handle.write(b'{"user": "carol", "content": "caf\xe9"}\n')

    with pytest.raises(CommandError) as info:
        load(path)

    assert str(info.value).splitlines() == [
        BAD_LINES.format(path=path, count=4),
        f"{path}:1: fields 'origin', 'created_at' are missing",
        f"{path}:3: 'origin' must be one of promoted, user, agent, consolidated",
        f"{path}:4: fields 'user', 'origin', 'created_at' are missing",
        f"{path}:5: the line is not UTF-8 text",
    ]
    assert info.value.returncode == 1
    assert Truth.all_objects.count() == 0 and get_user_model().objects.count() == 0


def test_a_file_of_many_bad_lines_lists_the_first_fifty(tmp_path):
    path = write(tmp_path, [{"content": f"fact {i}"} for i in range(BAD_LISTED + 3)])

    with pytest.raises(CommandError) as info:
        load(path)

    lines = str(info.value).splitlines()
    assert lines[0] == BAD_LINES.format(path=path, count=BAD_LISTED + 3)
    assert lines[BAD_LISTED] == f"{path}:{BAD_LISTED}: fields 'user', 'origin', 'created_at' are missing"
    assert lines[-1] == "... and 3 more" and len(lines) == BAD_LISTED + 2


def test_line_numbers_count_blank_lines(tmp_path):
    path = tmp_path / "gaps.jsonl"
    path.write_text(json.dumps(LINES[0]) + "\n\n" + "{oops}\n", encoding="utf-8")

    with pytest.raises(CommandError, match=r":3: the line is not valid JSON"):
        load(path)


def test_a_bad_line_in_a_reload_leaves_earlier_imports_alone(tmp_path):
    load(write(tmp_path, LINES))
    before = truth_state()

    with pytest.raises(CommandError):
        load(
            write(tmp_path, [{**LINES[0], "content": "Has a daughter"}, {**LINES[1], "origin": "x"}], name="more.jsonl")
        )

    assert truth_state() == before


def test_a_missing_file_is_a_one_line_error(tmp_path):
    path = tmp_path / "absent.jsonl"

    with pytest.raises(CommandError) as info:
        load(path)

    assert str(info.value) == f"{path}: no such file."


# --- export options ------------------------------------------------------------------------


@pytest.fixture
def merged(tmp_path):
    """alice's two truths, the first retired into the second."""
    load(write(tmp_path, LINES))
    first, second = Truth.objects.filter(user__username="alice").order_by("created_at")
    Truth.objects.filter(pk=first.pk).update(
        retired_at=timezone.now(), superseded_by=second, retired_reason=RetiredReason.MERGED
    )
    return first, second


def test_export_leaves_out_retired_truths_by_default(merged):
    first, _ = merged

    rows = export()

    assert [r["content"] for r in rows] == ["Prefers tea to coffee", "Lives in Lisbon"]
    assert first.pk not in {r["id"] for r in rows}


def test_export_include_retired_shows_what_replaced_them(merged):
    first, second = merged

    rows = {r["id"]: r for r in export("--include-retired")}

    assert len(rows) == 3
    assert rows[first.pk]["superseded_by"] == second.pk
    assert rows[first.pk]["retired_at"].endswith("Z")
    assert rows[second.pk]["retired_at"] is None


@pytest.mark.parametrize("by", ["username", "id"])
def test_export_user_option_limits_to_that_user(tmp_path, by):
    load(write(tmp_path, LINES))
    bob = get_user_model().objects.get(username="bob")

    rows = export("--user", "bob" if by == "username" else str(bob.pk))

    assert [(r["user"], r["content"]) for r in rows] == [("bob", "Lives in Lisbon")]


def test_export_unknown_user_is_a_one_line_error(tmp_path):
    with pytest.raises(CommandError) as info:
        export("--user", "nobody")

    assert str(info.value) == UNKNOWN_USER.format(value="nobody")


def test_export_to_an_unwritable_path_is_a_one_line_error(tmp_path):
    target = tmp_path / "no" / "such" / "dir.jsonl"

    with pytest.raises(CommandError) as info:
        export("--output", str(target))

    assert str(info.value) == Export.CANNOT_WRITE.format(path=target, error="No such file or directory")


# --- hygiene fields ------------------------------------------------------------

HYGIENE_LINE = {
    "user": "carol", "content": "Plays the cello", "origin": "promoted", "created_at": "2023-05-08T13:56:00Z",
    "source": "s:1", "relevance": 0.4, "access_count": 7, "last_accessed": "2023-06-01T10:00:00Z",
    "last_decayed": "2023-06-02T00:00:00+00:00", "validated": True, "tags": ["music", "hobby", "music"],
    "evidence": ["s1:2", "s1:4", "s1:2"],
}


def test_hygiene_fields_load_and_export_with_quality_and_retired_reason(tmp_path):
    load(write(tmp_path, [HYGIENE_LINE]))
    Truth.objects.filter(source="s:1").update(retired_at=timezone.now(), retired_reason=RetiredReason.PRUNED)
    (row,) = export("--include-retired")
    assert {k: row[k] for k in ("relevance", "access_count", "last_accessed", "last_decayed", "validated", "tags",
                                 "retired_reason", "evidence")} == {
        "relevance": 0.4, "access_count": 7, "last_accessed": "2023-06-01T10:00:00Z",
        "last_decayed": "2023-06-02T00:00:00Z", "validated": True, "tags": ["music", "hobby"],
        "retired_reason": "pruned", "evidence": ["s1:2", "s1:4"],
    }
    # 0.45 x 0.4 + 0.30 x log(8)/log(101) + 0.15 x (years ago: ~0) + 0.10 x 1
    assert row["quality"] == pytest.approx(0.18 + 0.3 * 0.45056 + 0.10, abs=1e-3)


@pytest.mark.parametrize(
    "field,value,problem",
    [
        ("relevance", 1.5, "'relevance' must be a number from 0 to 1"),
        ("relevance", -0.1, "'relevance' must be a number from 0 to 1"),
        ("relevance", "high", "'relevance' must be a number from 0 to 1"),
        ("access_count", -1, "'access_count' must be a whole number >= 0"),
        ("access_count", 2.5, "'access_count' must be a whole number >= 0"),
        ("last_accessed", "yesterday", "'last_accessed' must be an ISO 8601 time with a time zone, or null"),
        ("last_decayed", "2023-06-02T00:00:00", "'last_decayed' must be an ISO 8601 time with a time zone, or null"),
        ("validated", "yes", "'validated' must be true or false"),
        ("tags", "music,hobby", "'tags' must be a list of non-empty strings"),
        ("tags", ["music", 3], "'tags' must be a list of non-empty strings"),
        ("tags", [""], "'tags' must be a list of non-empty strings"),
        ("evidence", "s1:2", "'evidence' must be a list of non-empty strings (session message ids)"),
        ("evidence", [7], "'evidence' must be a list of non-empty strings (session message ids)"),
    ],
)
def test_bad_hygiene_field_names_the_line_and_imports_nothing(tmp_path, field, value, problem):
    good = dict(HYGIENE_LINE, source="s:0")
    path = write(tmp_path, [good, dict(HYGIENE_LINE, **{field: value})])
    before = truth_state()
    with pytest.raises(CommandError) as info:
        load(path)
    assert str(info.value) == BAD_LINE.format(path=path, line=2, problem=problem)
    assert truth_state() == before


# --- unknown users ----------------------------------------------------------------------


def test_unknown_users_refuse_the_file_in_one_line_naming_them_and_nothing_is_written(tmp_path):
    get_user_model().objects.create(username="alice")
    path = write(tmp_path, [*LINES, {**LINES[0], "user": "alcie", "source": "typo:1"}])
    users_before = get_user_model().objects.count()

    with pytest.raises(CommandError) as info:
        call_command("load_truths", str(path), stdout=StringIO())

    message = str(info.value)
    assert message == (
        f"{path}: 2 unknown user(s): alcie, bob. Nothing was imported; create them first, "
        "or load with --create-users to create each as an account without a password."
    )
    assert "\n" not in message
    assert get_user_model().objects.count() == users_before
    assert Truth.all_objects.count() == 0


def test_many_unknown_users_are_listed_up_to_ten(tmp_path):
    lines = [{**LINES[0], "user": f"user{i:02d}", "source": f"s:{i}"} for i in range(12)]
    with pytest.raises(CommandError, match=r"12 unknown user\(s\): user00, .*, user09 and 2 more\. Nothing"):
        call_command("load_truths", str(write(tmp_path, lines)), stdout=StringIO())


def test_known_users_load_without_the_flag(tmp_path):
    for name in ("alice", "bob"):
        get_user_model().objects.create(username=name)
    out = StringIO()

    call_command("load_truths", str(write(tmp_path, LINES)), stdout=out)

    assert out.getvalue().strip() == Load.LOADED.format(created=3, skipped=0, read=3, users_created=0)
    assert Truth.objects.count() == 3
