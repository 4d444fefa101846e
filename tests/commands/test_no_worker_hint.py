"""A queued batch and no worker: ``consolidate_truths`` says how to start one after the batch
id, and ``consolidation_status`` says the run waits for one; a live qcluster (real django-q2,
its heartbeat in the database cache) silences the hint."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import call_command
from django_q.conf import Conf

from iris_consolidation import run_display, selectors
from iris_consolidation.management.commands.consolidate_truths import Command
from iris_consolidation.management.commands.consolidation_status import Command as Status
from iris_consolidation.models import ConsolidationRun
from tests.qcluster import wait_until


def _call(*args: str) -> tuple[str, str]:
    out, err = StringIO(), StringIO()
    call_command(*args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


@pytest.fixture
def two_teas(truth_factory, user_factory):
    user = user_factory("alice")
    truth_factory("Likes green tea", user=user)
    truth_factory("Likes green tea.", user=user)
    return user


@pytest.mark.django_db
def test_a_queued_batch_with_no_worker_says_how_to_start_one(two_teas, monkeypatch):
    monkeypatch.setattr(Conf, "SYNC", False)  # the ORM broker keeps the tasks: nothing runs them

    out, err = _call("consolidate_truths")
    status, _ = _call("consolidation_status")

    run = ConsolidationRun.objects.get()
    assert out.strip() == Command.DISPATCHED.format(run_id=run.pk)  # the id line stays the whole stdout
    assert err.strip() == Command.NO_WORKER.format(run_id=run.pk)
    assert "python manage.py qcluster" in err and run.status == "running"
    assert f"Workers: {run_display.NO_WORKER}" in status.splitlines()
    assert f"  {run.pk} (command, {Status.WAITING_FOR_WORKER}) started " in status


@pytest.mark.django_db
def test_a_worker_that_cannot_be_seen_is_said_to_be_unknown(two_teas, monkeypatch):
    monkeypatch.setattr(Conf, "SYNC", False)
    monkeypatch.setattr(selectors.queue, "heartbeat_visible", lambda: False)  # a per-process cache

    _, err = _call("consolidate_truths")

    run = ConsolidationRun.objects.get()
    assert err.strip() == Command.WORKERS_UNSEEN.format(run_id=run.pk)


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_with_a_live_worker_the_batch_runs_and_no_hint_is_printed(two_teas, qcluster):
    worker = qcluster()
    wait_until(lambda: selectors.get_queue_overview().worker_seen, timeout=60, what=f"a heartbeat; log {worker.log}")

    out, err = _call("consolidate_truths")

    run = ConsolidationRun.objects.get()
    assert (out.strip(), err) == (Command.DISPATCHED.format(run_id=run.pk), "")
    done = wait_until(
        lambda: (r := ConsolidationRun.objects.get(pk=run.pk)).status == "done" and r, timeout=90, what="the run done"
    )
    assert done.merged == 1
