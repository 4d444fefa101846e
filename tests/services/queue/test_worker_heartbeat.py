"""The console's worker signal is the workers' own heartbeat (django-q2's cluster
statistics, in the shared cache the ORM broker keeps them in), with a real qcluster."""

from __future__ import annotations

import time

import pytest
from django.urls import reverse
from django.utils.html import escape

from iris_consolidation import run_display, selectors
from iris_consolidation.admin import run_actions
from tests.qcluster import wait_until

# Starting and stopping a real qcluster takes 10-20 s on a shared machine.
pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def test_an_idle_live_worker_is_idle_and_a_stopped_one_is_none_seen(qcluster, admin_client):
    # Nothing runs yet: "none seen". A cluster an earlier test killed may have left its last
    # heartbeat ("Stopping", seen in a CI run right after test_qcluster_stop); it expires in
    # seconds, so wait for that rather than read the first instant.
    wait_until(lambda: selectors.get_queue_overview().no_worker, timeout=30, what="no earlier test's heartbeat")
    assert run_actions.no_worker_warning() == run_actions.NO_WORKER_QUEUED
    worker = qcluster()

    overview = wait_until(
        lambda: (o := selectors.get_queue_overview()).worker_seen and o.clusters[0].status == "Idle" and o,
        timeout=60,
        what=f"the qcluster's heartbeat, idle; worker log: {worker.log}",
    )

    # No job at all has run: the heartbeat alone says the worker is alive, and idle.
    assert overview.heartbeat and not overview.no_worker
    assert run_display.worker_text(overview).endswith("1 worker, idle")
    assert run_actions.no_worker_warning() == ""
    page = admin_client.get(reverse("admin:iris_consolidation_consolidationrun_changelist")).content.decode()
    assert "1 worker, idle" in page and escape(run_display.NO_WORKER) not in page

    worker.stop()
    started = time.monotonic()
    gone = wait_until(lambda: (o := selectors.get_queue_overview()).no_worker and o, timeout=30, what="no heartbeat")

    # The heartbeat expires within seconds (3 s in django-q2), not after minutes.
    assert time.monotonic() - started < 15
    assert run_display.worker_text(gone) == run_display.NO_WORKER
    assert run_actions.no_worker_warning() == run_actions.NO_WORKER_QUEUED
