"""Names of a run's jobs: one key per phase 1 user, phase 2 cluster and applied verdict.

A key is unique per run (``ConsolidationJob`` constraint ``job_once_per_run_and_key``),
so a task delivered twice finds the job it made the first time. Pure: no query.
"""

from __future__ import annotations

import hashlib
import os
import socket
from collections.abc import Iterable

from ...models import ConsolidationJob
from ..pipeline.clustering import CandidateCluster


def user_job_key(user_id: int) -> str:
    """Key of a run's phase 1 job for one user."""
    return f"user:{user_id}"


def cluster_job_key(member_ids: Iterable[int]) -> str:
    """Key of a run's phase 2 job for one cluster: a hash of its member ids (any order)."""
    digest = hashlib.sha256(",".join(str(i) for i in sorted(member_ids)).encode()).hexdigest()
    return f"cluster:{digest[:40]}"


def apply_job_key(preview_id: int) -> str:
    """Key of an application's job for one previewed review of the dry run."""
    return f"apply:{preview_id}"


def candidate(job: ConsolidationJob) -> CandidateCluster:
    """The cluster a phase 2 job judges."""
    return CandidateCluster(user_id=job.user_id, member_ids=tuple(job.member_ids), similarities=tuple(job.similarities))


def worker_name() -> str:
    """``host:pid`` of this process, stored on the jobs it claims."""
    return f"{socket.gethostname()}:{os.getpid()}"
