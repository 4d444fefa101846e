"""``launch``: an operator's run, its errors as codes (the command maps them to exit statuses)."""

from __future__ import annotations

import pytest

from iris_consolidation.exceptions import LaunchFailed
from iris_consolidation.models import ConsolidationRun
from iris_consolidation.selectors import UNKNOWN_USER
from iris_consolidation.services.queue import launch, workers
from tests.conftest import vector_at

pytestmark = pytest.mark.django_db


def test_an_unknown_user_is_not_started_and_writes_nothing():
    with pytest.raises(LaunchFailed) as info:
        launch.launch(user="nobody", sync=True)

    assert (info.value.code, info.value.exit_code) == (LaunchFailed.NOT_STARTED, 1)
    assert str(info.value) == UNKNOWN_USER.format(value="nobody")
    assert ConsolidationRun.objects.count() == 0


def test_an_interrupted_run_is_marked_failed_with_exit_status_130(truth_factory, monkeypatch):
    a = truth_factory("Works as a nurse", embedding=vector_at(1.0))
    truth_factory("works as a nurse.", user=a.user, embedding=vector_at(0.99))

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(workers, "work_cluster_jobs", interrupted)

    with pytest.raises(LaunchFailed) as info:
        launch.launch(sync=True)

    run = ConsolidationRun.objects.get()
    assert (info.value.code, info.value.exit_code) == (LaunchFailed.INTERRUPTED, 130)
    assert (run.status, run.notes) == ("failed", launch.INTERRUPTED.format(run_id=run.pk))


def test_a_queued_run_is_started_not_executed(truth_factory, django_capture_on_commit_callbacks):
    a = truth_factory("Works as a nurse", embedding=vector_at(1.0))
    truth_factory("works as a nurse.", user=a.user, embedding=vector_at(0.99))
    seen = []

    with django_capture_on_commit_callbacks(execute=False):
        result = launch.launch(progress=lambda *event: seen.append(event[0]))

    assert (result.queued, result.run.execution, result.run.dry_run, seen) == (True, "queued", False, [])
