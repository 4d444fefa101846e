"""Every message this app sends to django-q2: one job's task, now or at a time.

The task is named by its function object (``tasks.py``), never by a dotted string
typed by hand. A job of a run executed in process (``ConsolidationRun.Execution``,
``execution.run_sync``) is not sent: the process that started the run runs it.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from django.db import transaction

from ...conf import app_settings
from ...models import ConsolidationJob, ConsolidationRun

Job = ConsolidationJob

#: Names of the django-q2 schedules this app owns (``scheduling.ensure_schedules``).
WEEKLY_SCHEDULE = "iris_consolidation:weekly"
RECOVERY_SCHEDULE = "iris_consolidation:recover"


def group_name(run_id: Any) -> str:
    """The django-q2 group of a run's tasks."""
    return f"iris_consolidation:run:{run_id}"


def timeout_of(kind: str) -> int:
    """django-q2 timeout in seconds of a job of ``kind`` (USER_/CLUSTER_JOB_TIMEOUT)."""
    if kind == Job.Kind.USER:
        return int(app_settings.USER_JOB_TIMEOUT)
    return int(app_settings.CLUSTER_JOB_TIMEOUT)


def task_path(func: Callable[..., Any]) -> str:
    """The dotted path django-q2 stores for ``func`` (for ``Schedule.func``)."""
    return f"{func.__module__}.{func.__qualname__}"


def task_call(job: Job) -> tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any]]:
    """``(task function, args, q_options)`` of the django-q2 task that runs ``job``."""
    from ... import tasks  # tasks -> jobs -> dispatch: the doors are imported last

    run = str(job.run_id)
    func: Callable[..., Any]
    if job.kind == Job.Kind.USER:
        func, args = tasks.plan_user, (run, job.user_id)
        name = f"iris:plan:{run[:8]}:user{job.user_id}"
    elif job.kind == Job.Kind.APPLY:
        func, args = tasks.apply_review, (run, job.preview_id)
        name = f"iris:apply:{run[:8]}:review{job.preview_id}"
    else:
        func = tasks.consolidate_cluster
        cluster = {"user_id": job.user_id, "member_ids": list(job.member_ids), "similarities": list(job.similarities)}
        args = (run, cluster)
        name = f"iris:cluster:{run[:8]}:{job.member_ids[0]}"
    return func, args, {"task_name": name, "group": group_name(job.run_id), "timeout": timeout_of(job.kind)}


def in_process(run_id: Any) -> bool:
    """Whether run ``run_id`` is executed by the process that started it."""
    execution = ConsolidationRun.objects.filter(pk=run_id).values_list("execution", flat=True).first()
    return execution == ConsolidationRun.Execution.IN_PROCESS


def send(job: Job) -> None:
    """Send ``job``'s task to the broker once the current transaction commits (not for a
    run executed in process)."""
    from django_q.tasks import async_task

    if in_process(job.run_id):
        return
    func, args, options = task_call(job)
    transaction.on_commit(lambda: async_task(func, *args, q_options=dict(options)))


def send_at(job: Job, when: datetime) -> None:
    """Have django-q2's scheduler send ``job``'s task at ``when`` (a one-off ``Schedule``,
    written in the current transaction; the scheduler looks about every 30 s). Not for
    a run executed in process: its process waits for ``job.not_before`` itself."""
    from django_q.models import Schedule
    from django_q.tasks import schedule

    if in_process(job.run_id):
        return
    func, args, options = task_call(job)
    schedule(
        task_path(func),
        *args,
        q_options=options,
        name=f"iris_consolidation:job{job.pk}:{when:%Y%m%dT%H%M%S.%f}",
        schedule_type=Schedule.ONCE,
        next_run=when,
    )
