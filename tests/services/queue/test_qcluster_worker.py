"""A queued run executed by a real ``qcluster`` worker process on the ORM broker."""

from __future__ import annotations

import re
from io import StringIO

import pytest
from django.core.management import call_command
from django_q.models import OrmQ, Success

from iris_consolidation.models import ClusterReview, ConsolidationRun, Origin, Truth
from iris_consolidation.services.queue.dispatch import group_name
from tests.conftest import vector_at
from tests.qcluster import wait_until


@pytest.mark.django_db(transaction=True)
def test_queued_run_is_executed_by_a_real_qcluster_worker(qcluster, truth_factory, user_factory):
    users = [user_factory("alice"), user_factory("bob")]
    for user in users:
        truth_factory("Works as a nurse", user=user, embedding=vector_at(1.0))
        truth_factory("works as a nurse.", user=user, embedding=vector_at(0.99))
        truth_factory("Likes tea", user=user, embedding=vector_at(0.1, towards=2))
    worker = qcluster()
    out = StringIO()

    call_command("consolidate_truths", stdout=out)

    run_id = re.fullmatch(r"Dispatched batch: (\S+)\n", out.getvalue()).group(1)
    assert OrmQ.objects.count() == 1  # one phase 1 task for both small users, waiting for the worker
    run = wait_until(
        lambda: ConsolidationRun.objects.filter(pk=run_id, finished_at__isnull=False).first(),
        timeout=120,
        what=f"run {run_id} to finish; worker log:\n{worker.log}",
    )
    assert (run.dry_run, run.execution, run.status) == (
        False, ConsolidationRun.Execution.QUEUED, ConsolidationRun.Status.DONE
    )
    assert (run.users, run.users_done, run.clusters_found, run.clusters_done) == (2, 2, 2, 2)
    assert (run.merged, run.retired, run.failed) == (1 * 2, 2 * 2, 0)
    for user in users:
        assert sorted(Truth.objects.filter(user=user).values_list("content", flat=True)) == [
            "Likes tea",
            "Works as a nurse",
        ]
        merged = Truth.objects.get(user=user, origin=Origin.CONSOLIDATED)
        assert merged.embedding is not None
        assert Truth.all_objects.filter(user=user, superseded_by=merged).count() == 2
    assert ClusterReview.objects.filter(run_id=run_id, outcome="applied").count() == 2
    # django-q2 saves a task's Success after the task returned, so after the run finished.
    done = wait_until(
        lambda: len(found := sorted(Success.objects.filter(group=group_name(run_id)).values_list("func", flat=True)))
        == 3
        and found,
        timeout=30,
        what="the three tasks' Success rows",
    )
    assert done == ["iris_consolidation.tasks.cluster_jobs"] * 2 + ["iris_consolidation.tasks.user_jobs"]


@pytest.mark.django_db(transaction=True)
def test_small_users_share_phase_one_tasks_on_a_real_worker(qcluster, truth_factory, user_factory, settings):
    small = [user_factory(f"small{i}") for i in range(5)]
    large = user_factory("large")
    for user in [*small, large]:
        truth_factory("Works as a nurse", user=user, embedding=vector_at(1.0))
        truth_factory("works as a nurse.", user=user, embedding=vector_at(0.99))
    for i in range(2):  # over the bound below: a task of its own
        truth_factory(f"Visited place {i}", user=large, embedding=vector_at(1.0, axis=10 + i, towards=20 + i))
    batching = {"PHASE1_USERS_PER_TASK": "2", "PHASE1_BATCH_MAX_TRUTHS": "3"}
    for name, value in batching.items():
        setattr(settings, f"IRIS_CONSOLIDATION_{name}", int(value))
    worker = qcluster(**{f"IRIS_CONSOLIDATION_{name}": value for name, value in batching.items()})

    call_command("consolidate_truths", stdout=(out := StringIO()))

    run_id = re.fullmatch(r"Dispatched batch: (\S+)\n", out.getvalue()).group(1)
    run = wait_until(
        lambda: ConsolidationRun.objects.filter(pk=run_id, finished_at__isnull=False).first(),
        timeout=120,
        what=f"run {run_id} to finish; worker log:\n{worker.log}",
    )
    assert (run.status, run.users_done, run.clusters_found, run.merged, run.failed) == ("done", 6, 6, 6, 0)
    phase1 = Success.objects.filter(group=group_name(run_id), func__contains=".user_job")
    planned = wait_until(
        lambda: len(found := sorted(phase1.values_list("func", flat=True))) == 4 and found,
        timeout=30,
        what="the four phase 1 tasks' Success rows",
    )
    # ceil(5 / 2) tasks for the small users (the last carries one, so it is a user_job) + 1 for the large one.
    assert planned == ["iris_consolidation.tasks.user_job"] * 2 + ["iris_consolidation.tasks.user_jobs"] * 2
    for user in [*small, large]:
        assert Truth.objects.get(user=user, origin=Origin.CONSOLIDATED).embedding is not None
