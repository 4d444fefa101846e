"""Runs: the run list (with the queue's state) and a run's page.

A run's page shows its progress (refreshing itself while the run is in progress) and
its cluster reviews; a dry run's page is marked as a preview and offers to apply its
verdicts, and lists what its application refused. Retrying, cancelling and applying
are in ``run_actions``; reviews and lineage events in ``reviews``.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.contrib import admin
from django.core.paginator import Paginator
from django.db.models import Exists, OuterRef, QuerySet
from django.http import HttpRequest, HttpResponse
from django.utils import timezone
from django.utils.html import format_html, format_html_join

from .. import inventory_display, review_display, run_display, selectors
from ..models import ClusterReview, ConsolidationJob, ConsolidationRun
from ..services.hygiene import reports
from ..services.pipeline.forecast import Forecast
from ..services.queue import cancel
from .base import ReadOnlyAdmin, can_change_truths
from .run_actions import RunActionsMixin
from .undo import RunUndoMixin

#: Seconds between refreshes of an in-progress run's page.
REFRESH_SECONDS = 5
REVIEWS_PER_PAGE = 50
#: Real runs by how their jobs are executed; a dry run is shown as a preview badge.
EXECUTION_LABELS: dict[str, str] = {
    ConsolidationRun.Execution.QUEUED: "Real run (workers)",
    ConsolidationRun.Execution.IN_PROCESS: "Real run (in process)",
}


class KindFilter(admin.SimpleListFilter):
    """Runs by kind, in the words of the "kind" column: a dry run, or a real run by its execution."""

    title = "kind"
    parameter_name = "kind"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [
            ("workers", "Real run (workers)"),
            ("in_process", "Real run (in process)"),
            ("dry_run", "Dry run (preview)"),
        ]

    def queryset(self, request: HttpRequest, queryset: Any) -> Any:
        if self.value() == "dry_run":
            return queryset.filter(dry_run=True)
        if self.value() in ("workers", "in_process"):
            execution = ConsolidationRun.Execution.QUEUED if self.value() == "workers" else self.value()
            return queryset.filter(dry_run=False, execution=execution)
        return queryset


def _readable_stage_report(report: dict[str, Any]) -> dict[str, Any]:
    """The stage report with the mine window's ISO strings as moments for people."""
    window = (report.get("mine") or {}).get("window")
    if window:
        report["mine"] = {
            **report["mine"],
            "window": {
                **window,
                "since": inventory_display.human_when(window["since"]) if window.get("since") else "",
                "until": inventory_display.human_when(window.get("until")),
            },
        }
    return report


@admin.register(ConsolidationRun)
class ConsolidationRunAdmin(RunActionsMixin, RunUndoMixin, ReadOnlyAdmin):
    """Runs, newest first; a run's page holds its reviews."""

    # Compact enough for a 1360 px screen with the filter column: the
    # outcome counts share one column, the users and clusters another.
    list_display = [
        "short_id",
        "created_display",
        "kind_display",
        "status_display",
        "scope_display",
        "outcome_display",
        "llm_display",
        "duration_display",
    ]
    list_display_links = ["short_id"]
    list_filter = [KindFilter, "status", "trigger", "judge_kind"]
    list_select_related = ["user_filter"]
    actions = ["apply_dry_runs", "retry_failed_clusters", "undo_selected_run"]
    fieldsets = [
        (
            None,
            {
                "fields": [
                    ("trigger", "kind_display", "status_display"),
                    "progress_display",
                    ("threshold", "judge"),
                    "user_filter",
                    "source_run",
                ]
            },
        ),
        (
            "Cost and time",
            {
                "classes": ["collapse"],
                "fields": [
                    ("llm_calls_display", "tokens", "cost_display"),
                    ("embed_seconds_display", "cluster_seconds_display"),
                    ("created_at", "started_at", "finished_at", "duration_display"),
                    "notes",
                ],
            },
        ),
    ]
    readonly_fields = [
        "kind_display",
        "status_display",
        "progress_display",
        "duration_display",
        "llm_calls_display",
        "cost_display",
        "embed_seconds_display",
        "cluster_seconds_display",
    ]

    def changelist_view(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> HttpResponse:
        """The run list, headed by the queue's state: workers, jobs, throughput."""
        overview = selectors.get_queue_overview()
        request.iris_queue = overview  # type: ignore[attr-defined]  # read by get_queryset
        context = {"queue": overview, "queue_rows": run_display.queue_lines(overview), **(extra_context or {})}
        return super().changelist_view(request, context)

    def get_fieldsets(self, request: HttpRequest, obj: ConsolidationRun | None = None) -> Any:
        fieldsets = super().get_fieldsets(request, obj)
        if obj is not None and obj.source_run_id is None:
            # Only an application of a dry run has a source run.
            head = [f for f in fieldsets[0][1]["fields"] if f != "source_run"]
            fieldsets = [(None, {"fields": head}), *fieldsets[1:]]
        return fieldsets

    def get_queryset(self, request: HttpRequest) -> QuerySet[ConsolidationRun]:
        runs = super().get_queryset(request).select_related("user_filter", "source_run")
        overview = getattr(request, "iris_queue", None)
        if overview is not None and not overview.worker_seen:
            # No worker alive: a run in progress with a job queued (past the grace, if the
            # heartbeat cannot be read) waits for one.
            stuck = ConsolidationJob.objects.filter(
                run=OuterRef("pk"),
                run__execution=ConsolidationRun.Execution.QUEUED,
                status=ConsolidationJob.Status.QUEUED,
                created_at__lte=timezone.now() - timedelta(seconds=selectors.worker_grace_seconds(overview)),
            )
            runs = runs.annotate(waiting_for_worker=Exists(stuck))
        return runs

    # --- columns -------------------------------------------------------------------

    @admin.display(description="run", ordering="created_at")
    def short_id(self, obj: ConsolidationRun) -> str:
        return str(obj.pk)[:8]

    @admin.display(description="created", ordering="created_at")
    def created_display(self, obj: ConsolidationRun) -> str:
        when = timezone.localtime(obj.created_at)
        return format_html('<span title="{}">{}</span>', when.isoformat(), when.strftime("%Y-%m-%d %H:%M"))

    @admin.display(description="kind", ordering="dry_run")
    def kind_display(self, obj: ConsolidationRun) -> str:
        trigger = format_html('<br><span class="iris-muted">by {}</span>', obj.get_trigger_display().lower())
        if obj.dry_run:
            return format_html('<span class="iris-badge iris-preview">{}</span>{}', "Dry run (preview)", trigger)
        # "Queued" is how a real run executes, not a status: say what it is.
        return format_html("{}{}", EXECUTION_LABELS.get(obj.execution, obj.get_execution_display()), trigger)

    @admin.display(description="status", ordering="status")
    def status_display(self, obj: ConsolidationRun) -> str:
        if getattr(obj, "waiting_for_worker", False) and obj.status in (
            ConsolidationRun.Status.PENDING,
            ConsolidationRun.Status.RUNNING,
        ):
            return format_html('<span class="iris-badge iris-badge-stale">{}</span>', "waiting for a worker")
        return obj.get_status_display()

    @admin.display(description="LLM", ordering="tokens")
    def llm_display(self, obj: ConsolidationRun) -> str:
        text = inventory_display.run_cost_text(obj, brief=True)
        cost = {inventory_display.COST_UNKNOWN: "cost unknown", inventory_display.COST_NONE: ""}.get(text, text)
        return format_html('{} tokens<br><span class="iris-muted">{}</span>', f"{obj.tokens:,}", cost)

    @admin.display(description="users · clusters")
    def scope_display(self, obj: ConsolidationRun) -> str:
        who = str(obj.user_filter) if obj.user_filter_id else f"{obj.users} user{'s' if obj.users != 1 else ''}"
        return format_html(
            '{}<br><span class="iris-muted">{} of {} clusters</span>', who, obj.clusters_done, obj.clusters_found
        )

    @admin.display(description="outcome")
    def outcome_display(self, obj: ConsolidationRun) -> str:
        counts = run_display.outcome_counts(obj, nonzero_only=True)
        stages = "; ".join(run_display.stage_phrases(obj))
        if not counts:
            return format_html('<span class="iris-muted">{}</span>', stages or "no cluster reviewed")
        retired = "; ".join(t for t in (run_display.retired_text(obj), stages) if t)
        retired = format_html('<br><span class="iris-muted">{}</span>', retired) if retired else ""
        return format_html(
            '<span class="iris-outcome">{}</span>{}',
            format_html_join(
                " ",
                '<span class="iris-count iris-count-{}">{} <b>{}</b></span>',
                ((c.key, c.label, c.value) for c in counts),
            ),
            retired,
        )

    @admin.display(description="duration")
    def duration_display(self, obj: ConsolidationRun) -> str:
        seconds = obj.duration_seconds
        return "—" if seconds is None else f"{seconds:.1f} s"

    @admin.display(description="LLM calls")
    def llm_calls_display(self, obj: ConsolidationRun) -> int:
        return obj.llm_calls

    @admin.display(description="cost")
    def cost_display(self, obj: ConsolidationRun) -> str:
        return inventory_display.run_cost_text(obj)

    @admin.display(description="embedding time")
    def embed_seconds_display(self, obj: ConsolidationRun) -> str:
        return f"{obj.embed_seconds:.2f} s"

    @admin.display(description="clustering time")
    def cluster_seconds_display(self, obj: ConsolidationRun) -> str:
        return f"{obj.cluster_seconds:.2f} s"

    @admin.display(description="progress")
    def progress_display(self, obj: ConsolidationRun) -> str:
        p = run_display.run_progress(obj)
        return (
            f"{p.clusters_done} of {p.clusters_found} clusters reviewed, {p.users_done} of {p.users} users planned"
            + (" (in progress)" if p.in_progress else "")
        )

    # --- the run page ---------------------------------------------------------------

    def render_change_form(
        self,
        request: HttpRequest,
        context: dict[str, Any],
        add: bool = False,
        change: bool = False,
        form_url: str = "",
        obj: ConsolidationRun | None = None,
    ) -> Any:
        if obj is not None:
            outcome = request.GET.get("outcome")
            if outcome not in ClusterReview.Outcome.values:
                outcome = None
            page = Paginator(selectors.list_run_reviews(run=obj, outcome=outcome), REVIEWS_PER_PAGE).get_page(
                request.GET.get("page")
            )
            counts = selectors.count_reviews_by_outcome(run=obj)
            progress = run_display.run_progress(obj)
            waiting = progress.in_progress and selectors.is_waiting_for_worker(
                run=obj, overview=selectors.get_queue_overview()
            )
            obj.waiting_for_worker = waiting  # type: ignore[attr-defined]  # read by status_display
            failing = obj.failed or obj.status in (ConsolidationRun.Status.FAILED, ConsolidationRun.Status.PARTIAL)
            status = "waiting for a worker" if waiting else ("cancelled" if cancel.is_cancelled(obj) else "")
            if status:
                kind = "Dry run" if obj.dry_run else "Real run"
                context["subtitle"] = f"Run {str(obj.pk)[:8]} ({kind}, {status})"
            context.update(
                can_cancel=waiting and can_change_truths(request),
                # The run's notes, one event a line: the cancel and retries with who and when among them.
                history=[line.strip() for line in (obj.notes or "").splitlines() if line.strip()],
                failure_causes=selectors.list_failure_causes(run=obj) if failing else [],
                run=obj,
                summary=run_display.run_summary(obj),
                outcome_table=run_display.outcome_counts(obj),
                progress=progress,
                waiting_for_worker=(run_display.WAITING_FOR_WORKER if waiting else ""),
                refresh_seconds=REFRESH_SECONDS,
                review_page=page,
                outcome=outcome,
                outcome_counts=[(value, label, counts.get(value, 0)) for value, label in ClusterReview.Outcome.choices],
                review_total=sum(counts.values()),
                **self._applying(obj, previews=counts.get(ClusterReview.Outcome.PREVIEW, 0)),
                retired_text=run_display.retired_text(obj)
                or ("would retire no truth" if obj.dry_run else "no truth retired"),
                can_apply=self.has_apply_permission(request),
                can_retry=self.has_retry_permission(request) and obj.on_workers,
                failed_jobs=selectors.count_failed_jobs(run=obj),
                can_undo=can_change_truths(request),
                forecast_line=(
                    inventory_display.forecast_sentence(Forecast.from_dict(obj.forecast)) if obj.forecast else ""
                ),
                stage_report=_readable_stage_report(reports.summarise(obj)),
                kinds=(kinds := run_display.kind_table(obj))[0],
                kind_rows=kinds[1],
                review_groups=review_display.review_groups(
                    review_display.review_cards(page.object_list), counts, filtered=outcome is not None
                ),
            )
        return super().render_change_form(request, context, add=add, change=change, form_url=form_url, obj=obj)
