"""The system checks a host project meets (iris_consolidation/checks.py) and migrate's word
on the weekly schedule (apps._ensure_schedules)."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from django.test import modify_settings, override_settings

from iris_consolidation import checks, embeddings
from iris_consolidation.apps import NO_SCHEDULE_TABLE, UNSCHEDULED, _ensure_schedules

Q_CLUSTER = {"name": "iris", "orm": "default", "timeout": 150, "retry": 180}


def ids(messages: list[Any]) -> list[str]:
    return [m.id for m in messages]


def test_this_project_meets_every_check() -> None:
    assert checks.check_host_project() == []


@pytest.mark.parametrize(
    ("app", "code"), [("django_q", "iris_consolidation.E005"), ("django.contrib.postgres", "iris_consolidation.E006")]
)
def test_an_app_missing_from_installed_apps_is_named(app: str, code: str) -> None:
    with modify_settings(INSTALLED_APPS={"remove": [app]}):
        messages = checks.check_host_project()
    assert ids(messages) == [code]
    assert f"'{app}' is not in INSTALLED_APPS" in messages[0].msg


@pytest.mark.parametrize(
    ("conf", "expected"),
    [
        (None, ["iris_consolidation.E007"]),
        ({"name": "x", "timeout": 150, "retry": 180}, ["iris_consolidation.W002"]),
        ({**Q_CLUSTER, "timeout": 60}, ["iris_consolidation.E008"]),
        ({**Q_CLUSTER, "retry": 150}, ["iris_consolidation.E009"]),  # not above timeout + django-q2's 3 s
        ({"name": "x", "orm": "default", "timeout": 150}, ["iris_consolidation.E009"]),  # django-q2's 60 s default
        ({"name": "x", "orm": "default"}, ["iris_consolidation.E009"]),  # no timeout: the tasks' own 120 s
        ({"name": "x", "orm": "default", "retry": 124}, []),
        ({"name": "x", "redis": "redis://127.0.0.1:6379/0", "timeout": 150}, []),  # Redis never redelivers
        (Q_CLUSTER, []),
    ],
)
def test_q_cluster_is_checked_against_the_tasks_timeouts(conf: Any, expected: list[str]) -> None:
    with override_settings(Q_CLUSTER=conf):
        assert ids(checks.check_host_project()) == expected


def test_q_cluster_messages_say_what_to_set() -> None:
    with override_settings(Q_CLUSTER={**Q_CLUSTER, "timeout": 60, "retry": 100}):
        timeout, retry = checks.check_host_project()
    assert timeout.msg.startswith("Q_CLUSTER timeout is 60 s, below the 120 s")
    assert "set it to at least 150" in timeout.msg
    assert retry.msg.startswith("Q_CLUSTER retry is 100 s, not above the 123 s a task may run")


def test_longer_task_timeouts_raise_what_q_cluster_needs() -> None:
    with override_settings(Q_CLUSTER=Q_CLUSTER, IRIS_CONSOLIDATION_CLUSTER_JOB_TIMEOUT=300):
        assert ids(checks.check_host_project()) == ["iris_consolidation.E008", "iris_consolidation.E009"]


def test_the_local_embedder_not_installed_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(embeddings, "LOCAL_MODULES", (*embeddings.LOCAL_MODULES, "iris_no_such_module"))
    (message,) = checks.check_host_project()
    assert message.id == "iris_consolidation.E010"
    assert "(missing: iris_no_such_module)" in message.msg and "its [local] extra" in message.msg
    with override_settings(IRIS_CONSOLIDATION_EMBEDDING_MODEL="openai/text-embedding-3-small"):
        assert checks.check_host_project() == []


def test_the_vector_extension_is_available_here(db: None) -> None:
    assert checks.check_vector_extension() == []


def test_migrate_says_it_scheduled_the_weekly_run(db: None) -> None:
    from django_q.models import Schedule

    out = io.StringIO()
    _ensure_schedules(using="default", verbosity=1, stdout=out)
    assert out.getvalue() == (
        "iris_consolidation: every user's truths are consolidated on schedule '0 5 * * 0' (UTC); "
        'IRIS_CONSOLIDATION_SCHEDULE_CRON = "" turns it off.\n'
    )
    with override_settings(IRIS_CONSOLIDATION_SCHEDULE_CRON=""):
        out = io.StringIO()
        _ensure_schedules(using="default", verbosity=1, stdout=out)
    assert out.getvalue() == UNSCHEDULED
    assert not Schedule.objects.filter(cron="0 5 * * 0").exists()
    quiet = io.StringIO()
    _ensure_schedules(using="default", verbosity=0, stdout=quiet)
    assert quiet.getvalue() == "" and Schedule.objects.filter(cron="0 5 * * 0").count() == 1


def test_migrate_says_why_it_scheduled_nothing(db: None, django_db_blocker: Any) -> None:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("ALTER TABLE django_q_schedule RENAME TO django_q_schedule_away")
    try:
        out = io.StringIO()
        _ensure_schedules(using="default", verbosity=0, stdout=out)
    finally:
        with connection.cursor() as cursor:
            cursor.execute("ALTER TABLE django_q_schedule_away RENAME TO django_q_schedule")
    assert out.getvalue() == NO_SCHEDULE_TABLE


def test_judge_economics_settings_pass_by_default() -> None:
    assert checks.check_judge_economics() == []


@pytest.mark.parametrize(
    ("name", "value", "code"),
    [
        ("IRIS_CONSOLIDATION_CLUSTERS_PER_CALL", 0, "iris_consolidation.E015"),
        ("IRIS_CONSOLIDATION_CLUSTERS_PER_CALL", "8", "iris_consolidation.E015"),
        ("IRIS_CONSOLIDATION_MAX_COST_PER_RUN", -1.0, "iris_consolidation.E016"),
        ("IRIS_CONSOLIDATION_MAX_COST_PER_RUN", "ten", "iris_consolidation.E016"),
    ],
)
def test_a_bad_batch_size_or_budget_is_named(name: str, value: Any, code: str) -> None:
    with override_settings(**{name: value}):
        messages = checks.check_judge_economics()
    assert ids(messages) == [code] and name in messages[0].msg


def test_phase1_settings_pass_by_default() -> None:
    assert checks.check_phase1() == []


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("IRIS_CONSOLIDATION_PHASE1_MEMORY_MB", 0),
        ("IRIS_CONSOLIDATION_PHASE1_MEMORY_MB", "256"),
        ("IRIS_CONSOLIDATION_PHASE1_APPROXIMATE_FROM", 0),
        ("IRIS_CONSOLIDATION_PHASE1_APPROXIMATE_FROM", 2.5),
        ("IRIS_CONSOLIDATION_PHASE1_NEIGHBOURS", 3),  # below MAX_CLUSTER_SIZE - 1 (4)
        ("IRIS_CONSOLIDATION_PHASE1_NEIGHBOURS", -1),
    ],
)
def test_a_bad_phase1_setting_is_named(name: str, value: Any) -> None:
    with override_settings(**{name: value}):
        messages = checks.check_phase1()
    assert ids(messages) == ["iris_consolidation.E017"] and name in messages[0].msg


def test_phase1_settings_are_read_from_the_environment() -> None:
    # project/settings.py maps each documented IRIS_CONSOLIDATION_* variable; these were
    # in the documented table but not mapped, so the variables were silently ignored.
    env = {
        **os.environ,
        "IRIS_CONSOLIDATION_PHASE1_APPROXIMATE_FROM": "7",
        "IRIS_CONSOLIDATION_PHASE1_MEMORY_MB": "1.5",
        "IRIS_CONSOLIDATION_PHASE1_NEIGHBOURS": "9",
        "DJANGO_SETTINGS_MODULE": "project.settings",
    }
    code = ("import django; django.setup(); from iris_consolidation.conf import app_settings as a; "
            "print(a.PHASE1_APPROXIMATE_FROM, a.PHASE1_MEMORY_MB, a.PHASE1_NEIGHBOURS)")
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True,
        cwd=Path(__file__).resolve().parents[1],
    )
    assert out.stdout.split() == ["7", "1.5", "9"]


@pytest.mark.parametrize(
    ("engine", "refused"),
    [("django.db.backends.sqlite3", True), ("project.embedded_db", False), ("django.db.backends.postgresql", False)],
)
def test_e003_reads_the_backends_vendor_so_a_postgresql_wrapper_passes(engine: str, refused: bool) -> None:
    """A fresh interpreter (the connections are made from the settings once): a wrapper of
    Django's PostgreSQL backend under another module name is PostgreSQL; SQLite is refused."""
    code = (
        "import django; from django.conf import settings; "
        f"settings.configure(DATABASES={{'default': {{'ENGINE': {engine!r}, 'NAME': 'x'}}}}, "
        "INSTALLED_APPS=['django.contrib.auth', 'django.contrib.contenttypes', 'iris_consolidation']); "
        "django.setup(); from iris_consolidation import checks; "
        "print([e.id for e in checks.check_settings()])"
    )
    root = Path(__file__).resolve().parent.parent
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    done = subprocess.run([sys.executable, "-c", code], cwd=root, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert ("iris_consolidation.E003" in done.stdout) is refused, done.stdout
