"""A command on a database whose migrations have not run: one line naming ``migrate``, exit
status 1, nothing written (a database of the test's own on the suite's server, left empty)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings

from tests.conftest import database_url

ROOT = Path(__file__).resolve().parents[2]
DB_NAME = "iris_h41_unmigrated"


def _admin_sql(db: dict[str, Any], statement: str) -> None:
    import psycopg

    params = {"dbname": "postgres", "user": db.get("USER") or None, "host": db.get("HOST") or None}
    params |= {k: db[K] for k, K in (("password", "PASSWORD"), ("port", "PORT")) if db.get(K)}
    with psycopg.connect(**{k: v for k, v in params.items() if v}, autocommit=True) as conn:
        conn.execute(statement)


@pytest.fixture
def empty_database(db: Any) -> Any:
    server = {**settings.DATABASES["default"], "OPTIONS": {}}
    _admin_sql(server, f"DROP DATABASE IF EXISTS {DB_NAME} WITH (FORCE)")
    _admin_sql(server, f"CREATE DATABASE {DB_NAME}")
    yield database_url({**server, "NAME": DB_NAME})
    _admin_sql(server, f"DROP DATABASE IF EXISTS {DB_NAME} WITH (FORCE)")


@pytest.mark.parametrize(
    "command",
    [
        ["consolidate_truths", "--sync"],
        ["load_truths", "--create-users", "samples/demo.truths.jsonl"],
        ["consolidation_status"],
        ["export_truths"],
    ],
)
def test_a_command_on_an_unmigrated_database_names_migrate_in_one_line(empty_database, command):
    env = {k: v for k, v in os.environ.items() if not k.startswith("IRIS_CONSOLIDATION_")}
    env["DATABASE_URL"] = empty_database

    done = subprocess.run(
        [sys.executable, "manage.py", *command], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )

    assert done.returncode == 1
    (line,) = done.stderr.strip().splitlines()
    assert re.fullmatch(
        r"CommandError: The database is not migrated: \d+ migration\(s\) of admin, auth, contenttypes, django_q, "
        r"iris_consolidation, sessions not applied\. Run `python manage.py migrate` first\.",
        line,
    ), line
    assert done.stdout == ""
