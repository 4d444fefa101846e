"""Every message this app sends to django-q2: one job's task, now or at a time.

The tasks are named by the dotted paths below (``TASKS``), which django-q2 stores
and imports in its workers: this layer never imports the doors (``tasks.py``), and
a test checks that every path names a function of ``tasks.py``. A job of a run
executed in process (``ConsolidationRun.Execution``, ``execution.run_sync``) is not
sent: the process that started the run runs it.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from django.db import transaction
from django.db.models import Count
from django_q.conf import Conf
from django_q.models import Schedule
from django_q.tasks import async_task, schedule

from ...conf import app_settings
from ...models import ConsolidationJob, ConsolidationRun, StageMode, Truth
from ...run_settings import run_modes
from ..hygiene import mining

Job = ConsolidationJob

_TASKS = "iris_consolidation.tasks"
#: The django-q2 task of each job kind and schedule: dotted paths into ``tasks.py``.
USER_TASK = f"{_TASKS}.user_job"
USERS_TASK = f"{_TASKS}.user_jobs"
CLUSTERS_TASK = f"{_TASKS}.cluster_jobs"
APPLY_TASK = f"{_TASKS}.apply_job"
SCHEDULED_CONSOLIDATION = f"{_TASKS}.scheduled_consolidation"
RECOVER_JOBS = f"{_TASKS}.recover_jobs"
TASKS = (USER_TASK, USERS_TASK, CLUSTERS_TASK, APPLY_TASK, SCHEDULED_CONSOLIDATION, RECOVER_JOBS)

Call = tuple[str, tuple[Any, ...], dict[str, Any]]


def group_name(run_id: Any) -> str:
    """The django-q2 group of a run's tasks."""
    return f"iris_consolidation:run:{run_id}"


#: Truths a user job's timeout covers: the timeout is USER_JOB_TIMEOUT per started
#: 10,000 of the user's truths, at most BROKER_RETRY_MARGIN below the broker's
#: ``retry`` (a longer task is handed out twice; 150 s with project/settings.py).
#: Measured under a load of 15 on 2 cores: clustering 20,000 truths took 40.6 s in one
#: delivery and ran past 60 s in two others (docs/benchmarks.md).
TRUTHS_PER_USER_TIMEOUT = 10_000
BROKER_RETRY_MARGIN = 30


def timeout_of(kind: str, *, user_id: int | None = None) -> int:
    """django-q2 timeout in seconds of a job of ``kind`` (USER_/CLUSTER_JOB_TIMEOUT).

    A user job's timeout grows with the user's size (``user_id`` given): see
    ``TRUTHS_PER_USER_TIMEOUT``. Embedding never needs it: it continues in a new
    delivery (``workers.work_user_job``).
    """
    if kind != Job.Kind.USER:
        return int(app_settings.CLUSTER_JOB_TIMEOUT)
    base = int(app_settings.USER_JOB_TIMEOUT)
    if user_id is None:
        return base
    truths = Truth.objects.for_user(user_id).count()
    derived = base * max(1, -(-truths // TRUTHS_PER_USER_TIMEOUT))
    if Conf.RETRY:
        derived = min(derived, int(Conf.RETRY) - BROKER_RETRY_MARGIN)
    return max(base, derived)


def batches(clusters: Sequence[Any], size: int | None = None) -> list[list[Any]]:
    """``clusters`` (one user's, in order; clusters or their jobs) in batches of ``size``
    (default ``CLUSTERS_PER_CALL``): what one phase 2 task, and one model call, carries."""
    size = max(1, int(size or app_settings.CLUSTERS_PER_CALL))
    return [list(clusters[i : i + size]) for i in range(0, len(clusters), size)]


def user_batches(jobs: Sequence[Job]) -> list[list[Job]]:
    """The phase 1 jobs ``jobs`` (one run's, in order) grouped into the tasks that plan them.

    A user of at most ``PHASE1_BATCH_MAX_TRUTHS`` live truths shares a task with the next
    small users, up to ``PHASE1_USERS_PER_TASK`` of them and ``TRUTHS_PER_USER_TIMEOUT``
    truths in all (what one ``USER_JOB_TIMEOUT`` covers, as for one user of that size);
    a larger user gets a task of its own, and so does a user whose sessions a model mines
    (``_mined_with_a_model``: a call per session, seconds each, is one user's task's worth).
    Queries: two or three (the users' live truth counts, the run, the users to mine), none
    when batching is off (either setting at 1 user or 0 truths).
    """
    per_task = int(app_settings.PHASE1_USERS_PER_TASK)
    bound = int(app_settings.PHASE1_BATCH_MAX_TRUTHS)
    if per_task <= 1 or bound <= 0 or len(jobs) <= 1:
        return [[job] for job in jobs]
    rows = Truth.objects.filter(user_id__in={job.user_id for job in jobs}).values("user_id").annotate(n=Count("id"))
    sizes = {row["user_id"]: row["n"] for row in rows.order_by()}
    mining = _mined_with_a_model(jobs)
    groups: list[list[Job]] = []
    batch: list[Job] = []
    truths = 0
    for job in jobs:
        size = sizes.get(job.user_id, 0)
        if size > bound or job.user_id in mining:
            groups.append([job])
            continue
        if batch and (len(batch) >= per_task or truths + size > TRUTHS_PER_USER_TIMEOUT):
            groups.append(batch)
            batch, truths = [], 0
        batch.append(job)
        truths += size
    if batch:
        groups.append(batch)
    return groups


def _mined_with_a_model(jobs: Sequence[Job]) -> set[int]:
    """The users of ``jobs`` (one run's phase 1) whose sessions the mine stage sends to a
    model: the run's judge is the LLM judge, mining is on, and they have messages in its
    window (``mining.user_ids_to_mine``); empty otherwise."""
    run = ConsolidationRun.objects.filter(pk=jobs[0].run_id).first()
    if run is None or run.judge_kind != ConsolidationRun.JudgeKind.LLM or run_modes(run)["mine"] == StageMode.OFF:
        return set()
    return set(mining.user_ids_to_mine(run)) & {job.user_id for job in jobs}


def task_call(job: Job) -> Call:
    """``(task path, args, q_options)`` of the django-q2 task that runs ``job``."""
    run = str(job.run_id)
    if job.kind == Job.Kind.USER:
        func, args = USER_TASK, (run, job.user_id)
        name = f"iris:plan:{run[:8]}:user{job.user_id}"
    elif job.kind == Job.Kind.APPLY:
        func, args = APPLY_TASK, (run, job.preview_id)
        name = f"iris:apply:{run[:8]}:review{job.preview_id}"
    else:
        return batch_call([job])
    timeout = timeout_of(job.kind, user_id=job.user_id)
    return func, args, {"task_name": name, "group": group_name(job.run_id), "timeout": timeout}


def batch_call(batch: list[Job]) -> Call:
    """``(task path, args, q_options)`` of the phase 2 task that judges ``batch``: up to
    ``CLUSTERS_PER_CALL`` cluster jobs of one user, judged in one model call. A job sent
    again on its own (recovery, retry) is a batch of one."""
    first = batch[0]
    run = str(first.run_id)
    args = (run, [job.pk for job in batch])
    name = f"iris:clusters:{run[:8]}:{first.member_ids[0]}+{len(batch) - 1}"
    return CLUSTERS_TASK, args, {
        "task_name": name, "group": group_name(first.run_id), "timeout": timeout_of(Job.Kind.CLUSTER)
    }


def user_batch_call(batch: list[Job]) -> Call:
    """``(task path, args, q_options)`` of the phase 1 task that plans the small users of
    ``batch`` (``user_batches``) together (``run/plan.build_user_plans``), with one user's timeout."""
    first = batch[0]
    run = str(first.run_id)
    name = f"iris:plan:{run[:8]}:user{first.user_id}+{len(batch) - 1}"
    return USERS_TASK, (run, [job.pk for job in batch]), {
        "task_name": name, "group": group_name(first.run_id), "timeout": timeout_of(Job.Kind.USER)
    }


def in_process(run_id: Any) -> bool:
    """Whether run ``run_id`` is executed by the process that started it."""
    execution = ConsolidationRun.objects.filter(pk=run_id).values_list("execution", flat=True).first()
    return execution == ConsolidationRun.Execution.IN_PROCESS


def send(job: Job) -> None:
    """Send ``job``'s task to the broker once the current transaction commits (not for a
    run executed in process)."""
    if not in_process(job.run_id):
        _send(task_call(job))


def send_jobs(jobs: Sequence[Job]) -> None:
    """Send a run's first jobs (``lifecycle.start_run``'s ``send``) on commit: phase 1
    jobs by ``send_user_jobs``, an application's apply jobs a task each; nothing for a run
    executed in process."""
    send_user_jobs([job for job in jobs if job.kind == Job.Kind.USER])
    for job in jobs:
        if job.kind == Job.Kind.APPLY:
            send(job)


def send_user_jobs(jobs: Sequence[Job]) -> None:
    """Send the tasks of the phase 1 jobs ``jobs`` (one run's) on commit: small users
    together (``user_batches``), one task per batch; nothing for a run executed in process."""
    if not jobs or in_process(jobs[0].run_id):
        return
    for batch in user_batches(jobs):
        _send(user_batch_call(batch) if len(batch) > 1 else task_call(batch[0]))


def send_batch(batch: list[Job]) -> None:
    """Send one task for the cluster jobs ``batch`` (one user's) on commit (``batch_call``)."""
    if batch and not in_process(batch[0].run_id):
        _send(batch_call(batch))


def _send(call: Call) -> None:
    func, args, options = call
    transaction.on_commit(lambda: async_task(func, *args, q_options=dict(options)))


def send_batch_at(batch: list[Job], when: datetime) -> None:
    """Have django-q2's scheduler send one task for ``batch`` at ``when`` (a one-off
    ``Schedule``, written in the current transaction; the scheduler looks about every
    30 s). Not for a run executed in process: its process waits for ``not_before`` itself."""
    if batch and not in_process(batch[0].run_id):
        _schedule(batch_call(batch), when, name=f"iris_consolidation:jobs{batch[0].pk}+{len(batch) - 1}")


def _schedule(call: Call, when: datetime, *, name: str) -> None:
    func, args, options = call
    schedule(
        func,
        *args,
        q_options=options,
        name=f"{name}:{when:%Y%m%dT%H%M%S.%f}",
        schedule_type=Schedule.ONCE,
        next_run=when,
    )