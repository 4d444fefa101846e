"""Ask a judge about a cluster: build the request, call the injected client.

The client comes from the caller (``llm.get_judge_client()``); the call happens
outside any transaction. Nothing here writes: the review is recorded by ``merging``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from ..conf import app_settings
from ..llm.base import JudgeClient, JudgeRequest, MemberView, Verdict
from ..models import CONSOLIDATABLE_ORIGINS, Truth


def is_protected(truth: Truth, *, max_generation: int) -> bool:
    """Whether consolidation must never retire or reword ``truth`` (DESIGN.md, Protection)."""
    return truth.pinned or truth.origin not in CONSOLIDATABLE_ORIGINS or truth.generation >= max_generation


def build_request(truths: Sequence[Truth], *, max_generation: int | None = None) -> tuple[JudgeRequest, dict[str, Truth]]:
    """A ``JudgeRequest`` over ``truths`` (sorted oldest first, aliased t1, t2, ...),
    and the alias -> truth map. Aliases are valid for this call only."""
    max_generation = max_generation or app_settings.MAX_GENERATION
    ordered = sorted(truths, key=lambda t: (t.created_at, t.pk))
    by_alias = {f"t{i}": t for i, t in enumerate(ordered, start=1)}
    members = tuple(
        MemberView(
            alias=alias,
            content=t.content,
            created_at=t.created_at,
            generation=t.generation,
            protected=is_protected(t, max_generation=max_generation),
            origin=t.origin,
            pinned=t.pinned,
        )
        for alias, t in by_alias.items()
    )
    return JudgeRequest(members=members), by_alias


def cluster_key(truths: Sequence[Truth]) -> str:
    """sha256 over the members' ids and contents: the same cluster in the same state
    gives the same key, so a task delivered twice finds its own review."""
    digest = hashlib.sha256()
    for t in sorted(truths, key=lambda t: t.pk):
        digest.update(f"{t.pk}\x1f{t.content}\x1e".encode())
    return digest.hexdigest()


def judge_cluster(*, request: JudgeRequest, client: JudgeClient) -> Verdict:
    """The client's verdict on ``request``.

    Raises what the client raises: ``JudgeUnavailable`` (``JudgeRateLimited``) or
    ``JudgeResponseInvalid``. Makes the client's model calls; writes nothing.
    """
    return client.judge(request)
