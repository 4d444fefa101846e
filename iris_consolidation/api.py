"""The public API for host projects: read a user's memory, start a pass, report use.

    from iris_consolidation import api

    api.add_truth(user, "Has two cats, Miso and Tofu")  # a distilled memory; audited
    truths = api.live_truths(user, query="What pets does Ben have?", limit=5)  # for the prompt
    api.record_access([truth.pk for truth in truths])  # the assistant used these truths now
    api.mark_validated([truth.pk])                     # the person confirmed this one
    run = api.consolidate(user=user, sync=True)        # one pass now, here; run.status "done"

``live_truths`` reads (retired truths never); ``consolidate`` starts a pass exactly as
``manage.py consolidate_truths`` does (``services.queue.launch``). ``record_access`` and
``mark_validated`` feed the quality score and decay (``services/hygiene/``): a truth in use
keeps its relevance, an unused one decays and, below the floor, is pruned (soft, undoable).
See docs/pipeline.md ("Quality and use") for a signal receiver example.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

import numpy as np
from django.db import transaction

from . import selectors
from .choices import Origin
from .conf import app_settings
from .embeddings import get_embedder
from .exceptions import InvalidInput
from .models import ConsolidationRun, Truth
from .querysets import set_hnsw_search
from .services.hygiene import usage
from .services.operations import curation
from .services.queue import launch

BAD_LIMIT = "limit must be a positive whole number, or None for every live truth (got {value!r})."
BAD_QUERY = "query must be a non-empty text, or None for newest first (got {value!r})."
BAD_CONTENT = "content must be a non-empty text (got {value!r})."
BAD_ORIGIN = "origin must be one of {choices} (got {value!r})."
WRITTEN_BY_HOST = "Written by the host project (iris_consolidation.api.add_truth)."


def live_truths(user: Any, *, query: str | None = None, limit: int | None = None) -> list[Truth]:
    """The live truths of ``user`` (a user instance, a primary key, or the value of its
    ``USERNAME_FIELD``), for an assistant's prompt. Retired truths are never returned.

    Without ``query``: newest first (``created_at``, then id), every live truth including
    those no run has embedded yet; ``limit`` keeps the first ``limit``.
    With ``query``: the ``limit`` (default: all) truths most similar to the query, most
    similar first, each with ``distance`` set (cosine distance, 0..2: 1 - cosine
    similarity). The query is embedded with the configured embedder
    (``IRIS_CONSOLIDATION_EMBEDDING_MODEL``) and compared with the stored embeddings through
    pgvector (with ``limit``, through its HNSW index: approximate, ``HNSW_EF_SEARCH``); a
    truth with no embedding of that model yet (written since the last run) is embedded for
    this call only (nothing is stored), so it is ranked too.

    Raises ``InvalidInput`` for an unknown user (``UnknownUser``), a ``limit`` below 1 or not
    a whole number, or an empty ``query``; ``EmbeddingError`` if the embedder fails.
    Reads only.
    """
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise InvalidInput(BAD_LIMIT.format(value=limit))
    if query is not None and (not isinstance(query, str) or not query.strip()):
        raise InvalidInput(BAD_QUERY.format(value=query))
    truths = Truth.objects.filter(user_id=_user_pk(user))
    if query is None:
        newest = truths.order_by("-created_at", "-id")
        return list(newest[:limit] if limit is not None else newest)
    embedder = get_embedder()
    vector = np.asarray(embedder.embed([query])[0], dtype=np.float32)
    stored = truths.filter(embedding_model=embedder.model_name).with_embedding()
    if limit is None:  # every truth: exact distances, no index (nothing to cut short)
        ranked = list(stored.with_cosine_distance(vector.tolist()))
    else:
        with transaction.atomic():
            # The HNSW index serves the nearest; the iterative scan keeps reading it past other
            # users' rows (the user filter) until ``limit`` of this user's are found.
            set_hnsw_search(ef_search=max(int(app_settings.HNSW_EF_SEARCH), limit))
            ranked = list(stored.nearest(vector.tolist(), limit=limit))
    unembedded = list(truths.missing_embedding(model_name=embedder.model_name).order_by("created_at", "id"))
    if unembedded:
        vectors = np.asarray(embedder.embed([t.content for t in unembedded]), dtype=np.float32)
        for truth, distance in zip(unembedded, 1.0 - vectors @ vector, strict=True):
            truth.distance = float(distance)  # the stored vectors are unit length, as these are
        ranked.extend(unembedded)
    # Equal distances: the newer truth first, as without a query.
    ranked.sort(key=lambda t: (round(t.distance, 6), -t.created_at.timestamp(), -t.pk))
    return ranked[:limit] if limit is not None else ranked


def consolidate(
    *, user: Any = None, dry_run: bool = False, sync: bool = False, threshold: float | str | None = None
) -> ConsolidationRun:
    """Start a consolidation pass exactly as ``manage.py consolidate_truths`` does, and
    return its run (``ConsolidationRun``).

    ``user``: a user instance, primary key or ``USERNAME_FIELD`` value (None: every user).
    By default the run's jobs are queued for the django-q2 workers (``qcluster``) and the
    run is returned at once, ``status`` "running" (read it again later); ``sync=True`` runs
    it in this process and returns it finished ("done", "partial" or "failed");
    ``dry_run=True`` (in this process too) judges and records the verdicts but changes no
    truth. ``threshold`` overrides the cosine
    similarity threshold (0, 1] for this run. The judge, embedder and stages are the
    configured ones.

    Raises ``UnknownUser`` for an unknown ``user`` and ``LaunchFailed`` (its ``code``:
    ``not_started`` for bad input or configuration, nothing written; ``embedding`` or
    ``interrupted`` for a run stopped here, marked failed).
    """
    if user is not None:
        user = str(_user_pk(user))
    started = launch.launch(
        user=user, threshold=None if threshold is None else str(threshold), sync=sync, dry_run=dry_run
    )
    assert started.run is not None  # only an estimate has no run, and this launch asks for none
    return started.run


def add_truth(
    user: Any,
    content: str,
    *,
    origin: str = Origin.PROMOTED,
    kind: str = "fact",
    pinned: bool = False,
    source: str = "",
    created_at: datetime | None = None,
    actor: str = "api",
) -> Truth:
    """Write one new live truth of ``user`` (instance, primary key or ``USERNAME_FIELD``
    value) and audit its creation: a ``TruthChange`` "created" by ``actor`` and the
    ``truth_changed`` signal after commit (``services.operations.curation.add_truth``).

    ``origin``: "promoted" (distilled memories, the default), "user" (the person stated it)
    or "agent" (the assistant wrote it); only "promoted" and "consolidated" truths are ever
    merged, reworded or retired. ``created_at`` is when the fact was stated (default now).
    The truth has no embedding yet: the next pass embeds it (``live_truths`` with a query
    embeds it for that call). One transaction.

    Raises ``InvalidInput`` for empty ``content`` or an unknown ``origin``, ``UnknownUser``
    for an unknown user; nothing is written then.
    """
    if not isinstance(content, str) or not content.strip():
        raise InvalidInput(BAD_CONTENT.format(value=content))
    if origin not in Origin.values:
        raise InvalidInput(BAD_ORIGIN.format(choices=", ".join(Origin.values), value=origin))
    truth = Truth(
        user_id=_user_pk(user), content=content.strip(), origin=origin, kind=kind, pinned=pinned, source=source
    )
    if created_at is not None:
        truth.created_at = created_at
    return curation.add_truth(truth=truth, actor=actor, reason=WRITTEN_BY_HOST)


def record_access(truth_ids: Iterable[int], at: datetime | None = None) -> int:
    """Count one use of each truth at ``at`` (default now); see ``services.hygiene.usage``."""
    return usage.record_access(truth_ids, at=at)


def mark_validated(truth_ids: Iterable[int]) -> int:
    """Mark truths as confirmed by the host; see ``services.hygiene.usage``."""
    return usage.mark_validated(truth_ids)


def _user_pk(user: Any) -> Any:
    """The primary key of ``user``: an instance's own, else looked up by primary key or
    natural key (``selectors.get_user``; raises ``UnknownUser``)."""
    if hasattr(user, "_meta") and getattr(user, "pk", None) is not None:
        return user.pk
    return selectors.get_user(value=user).pk


__all__ = ["add_truth", "consolidate", "live_truths", "mark_validated", "record_access"]
