"""Tables of the app: truths, consolidation runs, cluster reviews and lineage events.

Models hold data and tiny derived values only; workflows live in ``services/``. One module
per part, each model re-exported here, so callers write ``from iris_consolidation.models
import Truth`` whatever module defines it:

- ``truths``: ``Truth`` and ``EMBEDDING_DIMENSIONS``;
- ``runs``: ``ConsolidationRun`` (and ``RunId``), ``ClusterReview``, ``StageResult``;
- ``history``: ``LineageEvent`` and ``TruthChange``, append-only;
- ``incremental``: ``ConsolidationCursor``, ``UserPass``, ``VerdictCacheEntry``;
- ``jobs``: ``ConsolidationJob``, ``RateLimitWindow``, ``ScheduleLock``;
- ``live_settings``: ``LiveSettings``;
- ``knowledge``: ``ChatSession``, ``SessionMessage``, ``Note``, ``LearnedRule``.

The stored choices are re-exported too (callers import them from here or from ``choices``).
"""

from __future__ import annotations

from ..choices import (
    CONSOLIDATABLE_ORIGINS,
    ChangeAction,
    JobKind,
    JobStatus,
    JudgeKind,
    LineageAction,
    MessageRole,
    Origin,
    RetiredReason,
    ReviewFailure,
    ReviewOutcome,
    RiskPolicy,
    RunExecution,
    RunStatus,
    RunTrigger,
    StageMode,
    is_protected,
)
from .history import LineageEvent, TruthChange
from .incremental import ConsolidationCursor, UserPass, VerdictCacheEntry
from .jobs import ConsolidationJob, RateLimitWindow, ScheduleLock
from .knowledge import ChatSession, LearnedRule, Note, SessionMessage
from .live_settings import LiveSettings
from .runs import ClusterReview, ConsolidationRun, RunId, StageResult
from .truths import EMBEDDING_DIMENSIONS, Truth

__all__ = [
    "CONSOLIDATABLE_ORIGINS",
    "EMBEDDING_DIMENSIONS",
    "ChangeAction",
    "ChatSession",
    "ClusterReview",
    "ConsolidationCursor",
    "ConsolidationJob",
    "ConsolidationRun",
    "JobKind",
    "JobStatus",
    "JudgeKind",
    "LearnedRule",
    "LineageAction",
    "LineageEvent",
    "LiveSettings",
    "MessageRole",
    "Note",
    "Origin",
    "RateLimitWindow",
    "RetiredReason",
    "ReviewFailure",
    "ReviewOutcome",
    "RiskPolicy",
    "RunExecution",
    "RunId",
    "RunStatus",
    "RunTrigger",
    "ScheduleLock",
    "SessionMessage",
    "StageMode",
    "StageResult",
    "Truth",
    "TruthChange",
    "UserPass",
    "VerdictCacheEntry",
    "is_protected",
]
