"""One ``manage.py qcluster`` process group and one polling helper, for every test that
runs real workers (``tests/conftest.py``'s ``qcluster``, ``tests/services/queue/faults/conftest.py``'s
``qclusters``)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent


def wait_until(predicate: Callable[[], Any], *, timeout: float, interval: float = 0.25, what: str = "") -> Any:
    """Poll ``predicate`` until it returns something truthy; fail the test after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:.0f} s waiting for {what or predicate}")
        time.sleep(interval)


class QCluster:
    """One ``manage.py qcluster`` process group."""

    def __init__(self, env: dict[str, str], log: Path) -> None:
        self.log = log
        self._file = log.open("ab")
        self.process = subprocess.Popen(
            [sys.executable, "manage.py", "qcluster"],
            cwd=ROOT,
            env=env,
            stdout=self._file,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    @property
    def pid(self) -> int:
        return self.process.pid

    def pids(self) -> set[int]:
        """Pids of every process of this cluster (the group: sentinel, workers, ...)."""
        out = subprocess.run(["ps", "-o", "pid=", "-g", str(self.pid)], capture_output=True, text=True).stdout
        return {int(p) for p in out.split()}

    def kill(self) -> None:
        """SIGKILL the whole cluster at once, like a machine that died."""
        if self.process.poll() is None:
            os.killpg(self.pid, signal.SIGKILL)
            self.process.wait(timeout=10)

    def stop(self) -> None:
        """Stop as an operator would (SIGTERM to the main process), or kill after 15 s."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.kill()
        try:  # leftovers of the group (a worker stuck in a call)
            os.killpg(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self._file.close()
