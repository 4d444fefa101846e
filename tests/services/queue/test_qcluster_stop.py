"""How a real ``qcluster`` (django-q2 1.11, the project's settings) stops on SIGTERM, the
case docs/operations.md ("Stopping a worker") describes: a task that outlives its timeout
while the cluster stops leaves its worker dead and unreaped (a defunct child) and the
cluster waiting for ever on its pusher, blocked on the full task queue; the documented stop
(SIGTERM, then SIGKILL of the process group after the grace) ends it. If this test fails
because the cluster stopped by itself, django-q2 fixed its stop: update the docs."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest
from django_q.tasks import async_task

from iris_consolidation import selectors
from tests.qcluster import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def _states(pgid: int) -> dict[int, str]:
    out = subprocess.run(["ps", "-o", "pid=,stat=", "-g", str(pgid)], capture_output=True, text=True).stdout
    return {int(pid): stat for pid, stat in (line.split() for line in out.splitlines())}


def test_a_task_past_its_timeout_while_stopping_hangs_the_cluster_until_the_group_is_killed(qcluster):
    worker = qcluster()  # one worker, queue_limit 1 (Q_WORKERS=1)
    wait_until(lambda: selectors.get_queue_overview().worker_seen, timeout=60, what=f"a heartbeat; {worker.log}")
    for i in range(3):  # one running, one in the task queue, one in the pusher's hand
        async_task("time.sleep", 60, timeout=3, task_name=f"sleeper-{i}")
    wait_until(lambda: "processing sleeper-0" in worker.log.read_text(), timeout=30, what="the first task")

    os.kill(worker.pid, signal.SIGTERM)
    zombie = wait_until(
        lambda: any(s.startswith("Z") for s in _states(worker.pid).values()), timeout=30, what="a defunct worker"
    )
    time.sleep(10)  # far past the 3 s timeout: nothing left to wait for but the blocked pusher

    assert zombie and worker.process.poll() is None, worker.log.read_text()[-2000:]
    os.killpg(worker.pid, signal.SIGKILL)  # the end of the documented grace
    worker.process.wait(timeout=10)
    assert wait_until(lambda: not _states(worker.pid), timeout=10, what="the group gone")
    # Its last heartbeat ("Stopping") expires too, so the next test sees no worker.
    assert wait_until(lambda: selectors.get_queue_overview().no_worker, timeout=30, what="no heartbeat left")
