"""System checks for the app's settings and environment.

A host project that misses something the app needs learns it in one line from
``manage.py check`` (and before ``migrate`` runs): E005 ``django_q`` or E006
``django.contrib.postgres`` not in ``INSTALLED_APPS``, E007 no ``Q_CLUSTER``, W002 a
``Q_CLUSTER`` naming no broker, E008/E009 its timeout or retry below what the app's
tasks need, E010 the local embedder selected but not installed, W001 no ``vector``
extension on the database server. README.md, "Use it in your own project", lists the fixes.
"""

from __future__ import annotations

from typing import Any

from croniter import croniter
from django.apps import apps
from django.conf import settings
from django.core.checks import Error, Tags, Warning, register
from django.db import connection
from django.utils.module_loading import import_string

from .choices import RiskPolicy
from .conf import app_settings
from .embeddings import not_installed
from .exceptions import InvalidThreshold
from .run_settings import BAD_THRESHOLD, validate_threshold


@register()
def check_settings(app_configs: Any = None, **kwargs: Any) -> list[Any]:
    """E001 threshold out of range, E002 unknown judge, E003 database not PostgreSQL,
    E018 unknown risk policy."""
    errors: list[Any] = []
    threshold = app_settings.SIMILARITY_THRESHOLD
    try:
        if not isinstance(threshold, (int, float)):  # a setting is a number, not text
            raise InvalidThreshold(BAD_THRESHOLD.format(value=threshold))
        validate_threshold(threshold)
    except InvalidThreshold as exc:
        errors.append(Error(f"IRIS_CONSOLIDATION_SIMILARITY_THRESHOLD: {exc}", id="iris_consolidation.E001"))
    paths = app_settings.JUDGE_CLIENTS
    if app_settings.JUDGE not in paths:
        errors.append(
            Error(
                f"IRIS_CONSOLIDATION_JUDGE is {app_settings.JUDGE!r}; use one of {', '.join(sorted(paths))}.",
                id="iris_consolidation.E002",
            )
        )
    else:
        try:
            import_string(paths[app_settings.JUDGE])
        except ImportError as exc:
            errors.append(Error(f"The judge client cannot be imported: {exc}.", id="iris_consolidation.E002"))
    if app_settings.RISK_POLICY not in RiskPolicy.values:
        errors.append(
            Error(
                f"IRIS_CONSOLIDATION_RISK_POLICY is {app_settings.RISK_POLICY!r}; "
                f"use one of {', '.join(RiskPolicy.values)}.",
                id="iris_consolidation.E018",
            )
        )
    engine = settings.DATABASES["default"]["ENGINE"]
    # The backend's vendor, not its module's name: a wrapper of Django's PostgreSQL backend
    # (this repository's embedded one, copied into a host for a try-out) is PostgreSQL too.
    if "postgresql" not in engine and connection.vendor != "postgresql":
        errors.append(
            Error(
                f"The default database uses {engine}; iris_consolidation needs PostgreSQL with pgvector.",
                id="iris_consolidation.E003",
            )
        )
    return errors


@register(Tags.database)
def check_vector_extension(app_configs: Any = None, **kwargs: Any) -> list[Any]:
    """W001: the ``vector`` extension is not available on the database server."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1 FROM pg_available_extensions WHERE name = 'vector'")
        if cursor.fetchone() is None:
            return [
                Warning(
                    "The PostgreSQL server has no 'vector' extension; install pgvector on it.",
                    id="iris_consolidation.W001",
                )
            ]
    return []


@register()
def check_schedule(app_configs: Any = None, **kwargs: Any) -> list[Any]:
    """E004 the weekly schedule's cron expression does not parse."""
    cron = app_settings.SCHEDULE_CRON
    if cron and not croniter.is_valid(cron):
        return [
            Error(
                f"IRIS_CONSOLIDATION_SCHEDULE_CRON is {cron!r}; use a cron expression such as "
                "'0 5 * * 0', or '' for no schedule.",
                id="iris_consolidation.E004",
            )
        ]
    return []


#: django-q2's Q_CLUSTER keys that choose a broker (django_q.brokers.get_broker); with
#: none of them django-q2 sends tasks to Redis on localhost.
BROKER_KEYS = ("broker_class", "iron_mq", "sqs", "orm", "mongo", "redis")
#: Seconds django-q2's guard lets a task run past its timeout before it kills the worker
#: (django_q/worker.py adds 3 to the timer).
GUARD_BUFFER = 3
#: django-q2's default ``retry`` (django_q/conf.py).
DEFAULT_RETRY = 60
Q_CLUSTER_EXAMPLE = 'e.g. Q_CLUSTER = {"name": "iris", "orm": "default", "timeout": 150, "retry": 180}'


def task_timeout() -> int:
    """Longest timeout of the app's queued tasks, in seconds (USER_/CLUSTER_JOB_TIMEOUT)."""
    return max(int(app_settings.USER_JOB_TIMEOUT), int(app_settings.CLUSTER_JOB_TIMEOUT))


@register()
def check_host_project(app_configs: Any = None, **kwargs: Any) -> list[Any]:
    """E005/E006 apps missing from INSTALLED_APPS, E007 no Q_CLUSTER, W002 no broker,
    E008 Q_CLUSTER timeout below the tasks' timeout, E009 retry not above it, E010 the
    local embedder selected but its packages not installed."""
    errors: list[Any] = []
    if not apps.is_installed("django_q"):
        errors.append(
            Error(
                "'django_q' is not in INSTALLED_APPS: migrate creates no schedule table (so no weekly run) "
                "and queued runs have no queue; add 'django_q'.",
                id="iris_consolidation.E005",
            )
        )
    if not apps.is_installed("django.contrib.postgres"):
        errors.append(
            Error(
                "'django.contrib.postgres' is not in INSTALLED_APPS; the truth table's HNSW index needs it.",
                id="iris_consolidation.E006",
            )
        )
    errors.extend(_check_q_cluster(getattr(settings, "Q_CLUSTER", None)))
    message = not_installed(app_settings.EMBEDDING_MODEL)
    if message:
        errors.append(Error(message, id="iris_consolidation.E010"))
    return errors


def _check_q_cluster(conf: Any) -> list[Any]:
    if not isinstance(conf, dict):
        return [
            Error(
                "Q_CLUSTER is not set: django-q2 would send queued runs to Redis on localhost, where no worker "
                f"may listen; {Q_CLUSTER_EXAMPLE}.",
                id="iris_consolidation.E007",
            )
        ]
    errors: list[Any] = []
    if not any(conf.get(key) for key in BROKER_KEYS):
        errors.append(
            Warning(
                "Q_CLUSTER names no broker, so django-q2 uses Redis on localhost; say which "
                '("orm": "default" runs the queue in this database, or "redis": URL).',
                id="iris_consolidation.W002",
            )
        )
    needed = task_timeout()
    timeout = conf.get("timeout")
    if timeout is not None and timeout < needed:
        errors.append(
            Error(
                f"Q_CLUSTER timeout is {timeout} s, below the {needed} s that iris_consolidation's tasks may run "
                "(IRIS_CONSOLIDATION_USER_JOB_TIMEOUT / CLUSTER_JOB_TIMEOUT); set it to at least "
                f"{needed + 30}.",
                id="iris_consolidation.E008",
            )
        )
    redelivers = not conf.get("redis") or any(conf.get(key) for key in BROKER_KEYS if key != "redis")
    retry = conf.get("retry", DEFAULT_RETRY)
    longest = max(needed, timeout or 0) + GUARD_BUFFER
    if redelivers and retry <= longest:
        errors.append(
            Error(
                f"Q_CLUSTER retry is {retry} s, not above the {longest} s a task may run; the broker would hand "
                f"a running task out again. Set retry above timeout, e.g. {longest + 30}.",
                id="iris_consolidation.E009",
            )
        )
    return errors


@register()
def check_judge_economics(app_configs: Any = None, **kwargs: Any) -> list[Any]:
    """E015 CLUSTERS_PER_CALL is not a whole number >= 1, E016 MAX_COST_PER_RUN is not
    empty or a number >= 0 (USD)."""
    errors: list[Any] = []
    per_call = app_settings.CLUSTERS_PER_CALL
    if isinstance(per_call, bool) or not isinstance(per_call, int) or per_call < 1:
        errors.append(
            Error(
                f"IRIS_CONSOLIDATION_CLUSTERS_PER_CALL is {per_call!r}; it must be a whole number of 1 or more "
                "(8 by default).",
                id="iris_consolidation.E015",
            )
        )
    cap = app_settings.MAX_COST_PER_RUN
    if cap is not None and (isinstance(cap, bool) or not isinstance(cap, (int, float)) or cap < 0):
        errors.append(
            Error(
                f"IRIS_CONSOLIDATION_MAX_COST_PER_RUN is {cap!r}; it must be empty (no cap) or a number of USD >= 0.",
                id="iris_consolidation.E016",
            )
        )
    return errors


@register()
def check_phase1(app_configs: Any = None, **kwargs: Any) -> list[Any]:
    """E017 a phase 1 setting out of range: ``PHASE1_MEMORY_MB`` not a number > 0 (MB),
    ``PHASE1_APPROXIMATE_FROM`` not a whole number >= 1 (seeds), ``PHASE1_NEIGHBOURS`` not
    a whole number >= ``MAX_CLUSTER_SIZE`` - 1 (fewer would cap every cluster below its
    size), ``PHASE1_USERS_PER_TASK`` not a whole number >= 1 or ``PHASE1_BATCH_MAX_TRUTHS``
    not one >= 0."""
    errors: list[Any] = []
    memory = app_settings.PHASE1_MEMORY_MB
    if isinstance(memory, bool) or not isinstance(memory, (int, float)) or memory <= 0:
        errors.append(
            f"IRIS_CONSOLIDATION_PHASE1_MEMORY_MB is {memory!r}; it must be a number of MB > 0 (256 by default)."
        )
    switch = app_settings.PHASE1_APPROXIMATE_FROM
    if isinstance(switch, bool) or not isinstance(switch, int) or switch < 1:
        errors.append(
            f"IRIS_CONSOLIDATION_PHASE1_APPROXIMATE_FROM is {switch!r}; it must be a whole number of seeds >= 1 "
            "(50000 by default)."
        )
    neighbours = app_settings.PHASE1_NEIGHBOURS
    least = max(1, int(app_settings.MAX_CLUSTER_SIZE) - 1) if isinstance(app_settings.MAX_CLUSTER_SIZE, int) else 1
    if isinstance(neighbours, bool) or not isinstance(neighbours, int) or neighbours < least:
        errors.append(
            f"IRIS_CONSOLIDATION_PHASE1_NEIGHBOURS is {neighbours!r}; it must be a whole number >= {least} "
            "(MAX_CLUSTER_SIZE - 1; 64 by default)."
        )
    for name, least in (("PHASE1_USERS_PER_TASK", 1), ("PHASE1_BATCH_MAX_TRUTHS", 0)):
        value = getattr(app_settings, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            errors.append(f"IRIS_CONSOLIDATION_{name} is {value!r}; it must be a whole number >= {least}.")
    return [Error(message, id="iris_consolidation.E017") for message in errors]
