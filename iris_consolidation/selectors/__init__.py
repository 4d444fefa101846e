"""Reads that span models: users to consolidate, lineage, undo steps, run reviews, the queue.

Selectors return querysets, ids or small frozen dataclasses; they never write. One module
per subject, every selector re-exported here, so callers write ``selectors.get_lineage(...)``:

- ``users``: the user model through its own API, users to consolidate, the user picker;
- ``lineage``: a truth's lineage, undo steps and history;
- ``runs``: a run's reviews, its dry run's previews and application, its failures;
- ``queue``: workers, jobs and what ``consolidation_status`` shows.
"""

from __future__ import annotations

from .lineage import (
    LINEAGE_MAX_DEPTH,
    LineageGraph,
    TruthHistory,
    UndoStep,
    get_lineage,
    get_made_at,
    get_truth_history,
    has_consolidation_history,
    list_undo_steps,
)
from .queue import (
    STOPPED,
    WORKER_GRACE_SECONDS,
    ConsolidationStatus,
    QueueOverview,
    RunProgress,
    WorkerCluster,
    get_consolidation_status,
    get_queue_overview,
    get_run_progress,
    heartbeat_visible,
    is_waiting_for_worker,
    worker_grace_seconds,
)
from .runs import (
    REVIEW_ORDER,
    count_failed_jobs,
    count_failed_jobs_by_run,
    count_reviews_by_outcome,
    count_run_jobs,
    get_application,
    get_review_undo_events,
    list_application_refusals,
    list_failure_causes,
    list_previews,
    list_run_reviews,
)
from .users import (
    UNKNOWN_USER,
    USER_SUGGESTIONS,
    get_user,
    get_users_by_username,
    list_allowed_usernames,
    list_user_ids_to_consolidate,
    list_usernames_with_truths,
    named_users,
    user_name_lookup,
    user_search_fields,
    username_max_length,
)

__all__ = [
    "LINEAGE_MAX_DEPTH",
    "REVIEW_ORDER",
    "STOPPED",
    "UNKNOWN_USER",
    "USER_SUGGESTIONS",
    "WORKER_GRACE_SECONDS",
    "ConsolidationStatus",
    "LineageGraph",
    "QueueOverview",
    "RunProgress",
    "TruthHistory",
    "UndoStep",
    "WorkerCluster",
    "count_failed_jobs",
    "count_failed_jobs_by_run",
    "count_reviews_by_outcome",
    "count_run_jobs",
    "get_application",
    "get_consolidation_status",
    "get_lineage",
    "get_made_at",
    "get_queue_overview",
    "get_review_undo_events",
    "get_run_progress",
    "get_truth_history",
    "get_user",
    "get_users_by_username",
    "has_consolidation_history",
    "heartbeat_visible",
    "is_waiting_for_worker",
    "list_allowed_usernames",
    "list_application_refusals",
    "list_failure_causes",
    "list_previews",
    "list_run_reviews",
    "list_undo_steps",
    "list_user_ids_to_consolidate",
    "list_usernames_with_truths",
    "named_users",
    "user_name_lookup",
    "user_search_fields",
    "username_max_length",
    "worker_grace_seconds",
]
