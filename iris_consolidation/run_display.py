"""Turns runs into template-ready rows for the run list and the run page, and the queue's
state into lines.

The companion of ``review_display`` (a run's cluster reviews) and ``lineage_display``
(lineages): pure functions over rows already loaded, no queries, no URLs, no HTML.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from . import inventory_display
from .inventory_display import checkpoint_line, human_when, window_line
from .models import ConsolidationJob, ConsolidationRun


@dataclass(frozen=True, kw_only=True)
class RunProgress:
    """How far a run is: users planned and clusters reviewed, in counts and percent."""

    in_progress: bool
    users_done: int
    users: int
    clusters_done: int
    clusters_found: int
    percent: int
    #: Truths embedded so far (counted batch by batch) and, per user whose phase 1 goes
    #: on across deliveries, how far it got.
    embedded: int = 0
    phase1: tuple[tuple[int, str], ...] = ()


def run_progress(run: ConsolidationRun) -> RunProgress:
    """Progress of ``run``; ``percent`` weighs planning users and reviewing clusters
    alike, and is 100 once the run has finished."""
    in_progress = run.status in (ConsolidationRun.Status.PENDING, ConsolidationRun.Status.RUNNING)
    total = run.users + run.clusters_found
    done = run.users_done + run.clusters_done
    percent = 100 if not in_progress else (int(100 * done / total) if total else 0)
    phase1: tuple[tuple[int, str], ...] = ()
    if in_progress:
        phase1 = tuple(ConsolidationJob.objects.in_run(run.pk).phase1_progress())
    return RunProgress(
        embedded=run.embedded,
        phase1=phase1,
        in_progress=in_progress,
        users_done=run.users_done,
        users=run.users,
        clusters_done=run.clusters_done,
        clusters_found=run.clusters_found,
        percent=min(percent, 100),
    )


# --- the run list and the run page's summary -----------------------------

#: The run's outcome counts in the order the run list and the run page show them, each
#: once: merge and supersede actions applied (or previewed), then clusters
#: kept, rejected, stale, failed and deferred (to a later run: the retirement cap).
#: Each is (attribute of ConsolidationRun, label); a count of zero is left out of the
#: list's compact column but kept in the run page's table. Truths retired is not an
#: outcome but their sum's effect, shown beside.
OUTCOME_FIELDS: tuple[tuple[str, str], ...] = (
    ("merged", "merged"),
    ("superseded", "superseded"),
    ("kept", "kept"),
    ("rejected", "rejected"),
    ("stale", "stale"),
    ("failed", "failed"),
    ("deferred", "deferred"),
)


@dataclass(frozen=True, kw_only=True)
class Count:
    """One labelled count, e.g. ``merged 3``; ``key`` names a CSS class."""

    key: str
    label: str
    value: int


#: A dry run's labels for what it would have done (it wrote nothing).
PREVIEW_LABELS = {"merged": "would merge", "superseded": "would supersede"}


def outcome_counts(run: ConsolidationRun, *, nonzero_only: bool = False) -> list[Count]:
    """The run's outcome counts (``OUTCOME_FIELDS``), each once; a dry run's merges and
    supersedes read "would merge" / "would supersede"."""
    labels = PREVIEW_LABELS if run.dry_run else {}
    counts = [
        Count(key=name, label=labels.get(name, label), value=int(getattr(run, name, 0) or 0))
        for name, label in OUTCOME_FIELDS
    ]
    return [c for c in counts if c.value or not nonzero_only]


def retired_text(run: ConsolidationRun) -> str:
    """``"2 truths retired"``, or for a dry run ``"would retire 2 truths"``; "" for none."""
    n = int(run.retired or 0)
    if not n:
        return ""
    truths = f"{n} truth{'s' if n != 1 else ''}"
    return f"would retire {truths}" if run.dry_run else f"{truths} retired"


#: What a stage did, for the run list's outcome column: (applied, previewed) phrasings.
STAGE_PHRASES = {
    "mine": ("{n} truth{s} mined", "would mine {n} truth{s}"),
    "noise": ("{n} noise truth{s} retired", "would retire {n} noise truth{s}"),
    "prune": ("{n} truth{s} pruned", "would prune {n} truth{s}"),
    "relocate": ("{n} truth{s} moved to notes", "would move {n} truth{s} to notes"),
    "promote": ("{n} rule{s} learned", "would learn {n} rule{s}"),
}


def stage_phrases(run: ConsolidationRun) -> list[str]:
    """What the run's hygiene stages changed (or, in report mode and dry runs, would
    change), from ``inventory["stages"]``: e.g. ``["25 truths mined"]``. Prune says its
    counts with their share and its cap (``prune.share_text``) where the report has them."""
    report = (run.inventory or {}).get("stages") or {}
    phrases = []
    for stage, (done, would) in STAGE_PHRASES.items():
        item = report.get(stage) or {}
        applied = int(item.get("applied", 0) or 0)
        found = int(item.get("affected", 0) or 0)
        if stage == "prune" and item.get("text") and (found or applied):
            phrases.append(str(item["text"]))
            continue
        if applied and not run.dry_run:
            phrases.append(done.format(n=applied, s="s" if applied != 1 else ""))
        elif found and (run.dry_run or item.get("mode") != "apply"):
            phrases.append(would.format(n=found, s="s" if found != 1 else ""))
    return phrases


def kind_table(run: ConsolidationRun) -> tuple[list[str], list[tuple[str, list[int], int]]]:
    """Live truths by kind before and after: the kinds of either side (a mining run adds
    kinds the "before" side lacks), and a row per side of (label, counts, total)."""
    data = run.inventory or {}
    sides = [(label, data[key]) for key, label in (("before", "before"), ("after", "after")) if key in data]
    kinds: list[str] = []
    for _, side in sides:
        kinds.extend(k for k in side.get("by_kind", {}) if k not in kinds)
    rows = [(label, [int(side.get("by_kind", {}).get(k, 0)) for k in kinds], int(side.get("live", 0)))
            for label, side in sides]
    return kinds, rows


def application_line(application: ConsolidationRun | None, *, started: bool = True, refused: int = 0) -> str:
    """What became of a dry run's application, from the application run's status and
    ``started`` (whether a worker has taken any of its jobs): queued (nothing applied
    yet), applying, applied, or failed; "" for none. ``refused``: how many of its actions
    or clusters were refused or failed on apply (``application_refusals``), said once it
    has finished or is under way."""
    if application is None:
        return ""
    status = ConsolidationRun.Status
    if application.status == status.PENDING or (application.status == status.RUNNING and not started):
        return "Applying them is queued as run {run}: nothing is applied until a worker runs it."
    refusals = (
        f" {refused} action{'s were' if refused != 1 else ' was'} refused on apply (listed below)." if refused else ""
    )
    if application.status == status.RUNNING:
        return "They are being applied as run {run}." + refusals
    if application.status == status.FAILED:
        return "Applying them as run {run} failed; see that run." + refusals
    if application.status == status.PARTIAL:
        return "They were applied as run {run}, where some clusters failed." + refusals
    if refused:
        return "They were applied as run {run};" + refusals
    return "They were applied as run {run}; nothing was refused."


@dataclass(frozen=True, kw_only=True)
class InventoryRow:
    """Live truths of the run's scope at one moment: total, by kind, by origin."""

    label: str
    live: int
    by_kind: str
    by_origin: str


@dataclass(frozen=True, kw_only=True)
class SettingRow:
    """One effective setting the run was created with; ``overridden`` when the live
    settings record set it rather than the Django settings."""

    name: str
    value: str
    overridden: bool


@dataclass(frozen=True, kw_only=True)
class ChangeRow:
    """One of the run's most significant changes, with the judge's reason."""

    action: str
    truth_ids: tuple[int, ...]
    result_id: int | None
    content: str
    reason: str
    review_id: int | None


@dataclass(frozen=True, kw_only=True)
class RunSummary:
    """The run page's header: what the run looked at, what it stored, what it changed."""

    window: str
    checkpoint: str
    seeds: int
    cache_hits: int
    cost: str
    inventory: tuple[InventoryRow, ...]
    settings: tuple[SettingRow, ...]
    changes: tuple[ChangeRow, ...]


_SETTING_LABELS = {
    "enabled": "scheduled passes enabled",
    "interval_hours": "hours between scheduled runs",
    "scheduled_dry_run_only": "scheduled passes dry-run only",
    "allowed_user_ids": "users (ids)",
    "max_retirements_per_run": "most retirements per run",
    "similarity_threshold": "similarity threshold",
}


def _setting_value(name: str, value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if name == "allowed_user_ids":
        return ", ".join(f"#{v}" for v in value) if value else "every user"
    if name == "interval_hours" and not value:
        return "every schedule slot"
    return str(value)


def _joined(counts: dict[str, int]) -> str:
    return ", ".join(f"{k} {n}" for k, n in counts.items()) or "—"


def run_summary(run: ConsolidationRun) -> RunSummary:
    """The summary header of ``run`` from the fields it stored (window, checkpoint,
    ``inventory``, ``effective_settings``); pure, no queries."""
    data = run.inventory or {}
    inventory = tuple(
        InventoryRow(
            label=label,
            live=int(data[key].get("live", 0)),
            by_kind=_joined(data[key].get("by_kind", {})),
            by_origin=_joined(data[key].get("by_origin", {})),
        )
        for key, label in (("before", "before"), ("after", "after"))
        if key in data
    )
    effective = run.effective_settings or {}
    overridden = set(effective.get("overridden", ()))
    settings = tuple(
        SettingRow(name=label, value=_setting_value(name, effective[name]), overridden=name in overridden)
        for name, label in _SETTING_LABELS.items()
        if name in effective
    )
    changes = tuple(
        ChangeRow(
            action=str(item.get("action", "")) if item.get("applied") else f"would {item.get('action', '')}",
            truth_ids=tuple(int(pk) for pk in item.get("truth_ids", [])),
            result_id=item.get("result_id"),
            content=str(item.get("content", "")),
            reason=str(item.get("reason", "")),
            review_id=item.get("review_id"),
        )
        for item in data.get("changes") or []
    )
    return RunSummary(
        window=window_line(run, when=human_when).removeprefix("Window: "),
        checkpoint=checkpoint_line(run, when=human_when).removeprefix("Checkpoint: ").replace(" -> ", " → "),
        seeds=int(data.get("seeds", run.seeds)),
        cache_hits=run.cache_hits,
        cost=inventory_display.run_cost_text(run),
        inventory=inventory,
        settings=settings,
        changes=changes,
    )


# --- the queue: workers and jobs ---------------------------------------------

NO_WORKER = "none seen: no qcluster reports its heartbeat, so queued runs wait until one runs (manage.py qcluster)."
HEARTBEAT_HIDDEN = (
    "unknown: django-q2 keeps the workers' heartbeat in a per-process cache here (Q_CLUSTER[\"cache\"] is local "
    "memory), so no worker can be seen; give it a shared cache (the database cache, as the project's settings do)."
)
WAITING_FOR_WORKER = (
    "No worker is running (no qcluster reports its heartbeat), and this run's jobs are queued. "
    "Start one with manage.py qcluster; this page stops refreshing until then."
)


def worker_text(overview: Any) -> str:
    """The "Workers" row from the workers' heartbeat: each live qcluster with its state
    (idle, working, ...), else "none seen", or "unknown" when the heartbeat cannot be read."""
    if overview.clusters:
        return "; ".join(
            f"qcluster {c.cluster_id[:8]} on {c.host}: {c.workers} worker{'s' if c.workers != 1 else ''}, "
            f"{c.status.lower()}"
            for c in overview.clusters
        )
    return NO_WORKER if overview.heartbeat else HEARTBEAT_HIDDEN


def queue_lines(overview: Any, *, now: datetime | None = None) -> list[tuple[str, str]]:
    """The queue's state as (label, text) rows: workers (their heartbeat), jobs, throughput; pure."""
    workers = worker_text(overview)
    jobs = overview.jobs
    return [
        ("Workers", workers),
        (
            "Jobs",
            f"{jobs['queued']} queued, {jobs['running']} running, {jobs['waiting']} waiting (rate limited), "
            f"{jobs['failed']} failed",
        ),
        (
            "Throughput",
            f"{overview.done_last_hour} job{'s' if overview.done_last_hour != 1 else ''} done in the last hour",
        ),
    ]
