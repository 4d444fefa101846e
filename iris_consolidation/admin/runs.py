"""Runs, reviews and lineage events: read-only history, plus applying a dry run.

A run's page shows its progress (refreshing itself while the run is in progress) and
its cluster reviews; a dry run's page is marked as a preview and offers to apply its
verdicts as a real run, whole or the clusters chosen on the confirmation page (stale ones are
not offered), and lists what its application refused. Applying creates the run and enqueues its
tasks; the work (invariants and freshness re-checked, writes) happens in the queue.
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any

from django.contrib import admin, messages
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.db.models import Exists, OuterRef, QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join

from .. import inventory_display, lineage_display, run_display, selectors
from ..exceptions import ApplyRefused, CancelRefused, RetryRefused
from ..models import ClusterReview, ConsolidationJob, ConsolidationRun, LineageEvent, RunId
from ..services.hygiene import reports
from ..services.operations import dry_runs
from ..services.pipeline.forecast import Forecast
from ..services.queue import cancel, dispatch, recovery
from .base import ReadOnlyAdmin, can_change_truths, change_url, missing_object, object_page, template_list, url_name

if TYPE_CHECKING:
    from .base import FieldGroups
from .undo import ReviewUndoMixin, RunUndoMixin

#: Seconds between refreshes of an in-progress run's page.
REFRESH_SECONDS = 5
REVIEWS_PER_PAGE = 50
APPLY_QUEUED = (
    "Queued run {run} to apply {count} previewed verdict(s) of dry run {dry}; "
    "each applies as previewed, re-checked for freshness and the invariants."
)
APPLY_TITLE = "Apply the verdicts of dry run {run}"
#: Real runs by how their jobs are executed; a dry run is shown as a preview badge.
EXECUTION_LABELS: dict[str, str] = {
    ConsolidationRun.Execution.QUEUED: "Real run (workers)",
    ConsolidationRun.Execution.IN_PROCESS: "Real run (in process)",
}
CANCELLED = "Run {run} cancelled: its {count} queued job(s) will not run; nothing was applied."
CANCEL_TITLE = "Cancel run {run}?"
CANCEL_LINES = (
    "No worker has taken any of this run's {count} queued job(s). Cancelling closes them unrun: the run ends "
    "\u201ccancelled\u201d, nothing is applied, and it cannot be retried (start a new run instead).",
    "The cancel is written to the run's history with your name and the time.",
)
RETRY_TITLE = "Retry the failed clusters of run {run}?"
RETRY_LINES = (
    "This re-queues the run's {count} failed job(s). Each cluster is judged again on its members as they are "
    "now (re-read, re-validated, freshness re-checked when written); with an LLM judge that means new model calls.",
    "The retry is written to the run's history with your name and the time.",
)
RETRY_MANY_TITLE = "Retry the failed clusters of {count} run(s)?"
RETRY_MANY_LINE = "{failed} failed job(s)"
NO_WORKER_QUEUED = (
    "No worker is running (no qcluster reports its heartbeat): the queued run waits until one runs "
    "(manage.py qcluster). A waiting run can be cancelled from its page."
)
RETRIED = "Run {run}: re-queued {count} failed job(s); each cluster is judged again on its members as they are now."
NOTHING_TO_RETRY = "Run {run} has no failed job to retry."
RETRY_NOT_QUEUED = "Run {run} ran in one process ({mode}); only queued runs have jobs to retry."
OUTDATED_PREVIEWS = (
    "{outdated} of {previews} previewed cluster(s) have changed since this dry run (a later run may already "
    "have made these merges): applying finds them stale and changes nothing for them."
)


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


def no_worker_warning() -> str:
    """``NO_WORKER_QUEUED`` when the workers' heartbeat says none runs (``selectors.get_queue_overview``),
    else "" (a live worker, idle or busy, or a heartbeat that cannot be read)."""
    return NO_WORKER_QUEUED if selectors.get_queue_overview().no_worker else ""


def warn_if_no_worker(model_admin: Any, request: HttpRequest) -> None:
    """After queuing work: warn when no worker has been seen lately."""
    if text := no_worker_warning():
        model_admin.message_user(request, text, messages.WARNING)


def _run_link(run_id: RunId) -> str:
    url = reverse("admin:iris_consolidation_consolidationrun_change", args=[run_id])
    return format_html('<a href="{}">{}</a>', url, str(run_id)[:8])


@admin.register(ConsolidationRun)
class ConsolidationRunAdmin(RunUndoMixin, ReadOnlyAdmin):
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

    def get_urls(self) -> list[Any]:
        apply = path(
            "<path:object_id>/apply/",
            self.admin_site.admin_view(self.apply_view),
            name=url_name(self.opts, "apply"),
        )
        retry = path(
            "<path:object_id>/retry/",
            self.admin_site.admin_view(self.retry_view),
            name=url_name(self.opts, "retry"),
        )
        cancel_url = path(
            "<path:object_id>/cancel/",
            self.admin_site.admin_view(self.cancel_view),
            name=url_name(self.opts, "cancel"),
        )
        return [apply, retry, cancel_url, *super().get_urls()]

    def has_apply_permission(self, request: HttpRequest) -> bool:
        """Applying a dry run changes truths: the change permission on truths."""
        return can_change_truths(request)

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
                review_groups=run_display.review_groups(
                    run_display.review_cards(page.object_list), counts, filtered=outcome is not None
                ),
            )
        return super().render_change_form(request, context, add=add, change=change, form_url=form_url, obj=obj)

    # --- retrying failed clusters ------------------------------------------------------

    def has_retry_permission(self, request: HttpRequest) -> bool:
        """Retrying judges and writes again: the change permission on truths."""
        return can_change_truths(request)

    def _retry(self, request: HttpRequest, run: ConsolidationRun) -> None:
        """Re-queue ``run``'s failed jobs through ``recovery.retry_failed`` (as ``retry_consolidation``),
        which writes the retry to the run's history."""
        short = str(run.pk)[:8]
        if not run.on_workers:
            self.message_user(request, RETRY_NOT_QUEUED.format(run=short, mode=run.kind_label), messages.ERROR)
            return
        try:
            count = recovery.retry_failed(run.pk, actor=request.user.get_username())
        except RetryRefused as exc:
            self.message_user(request, str(exc), messages.ERROR)
            return
        if count:
            self.message_user(request, RETRIED.format(run=short, count=count), messages.SUCCESS)
            warn_if_no_worker(self, request)
        else:
            self.message_user(request, NOTHING_TO_RETRY.format(run=short), messages.WARNING)

    def _confirmation(self, request: HttpRequest, obj: ConsolidationRun | None, **extra: Any) -> TemplateResponse:
        """The confirmation page of a cancel or a retry (``run_action_confirmation.html``)."""
        if obj is not None:
            context = object_page(self, request, obj, **extra)
        else:
            request.current_app = self.admin_site.name
            context = {
                **self.admin_site.each_context(request),
                "opts": self.opts,
                "subtitle": None,
                "module_name": str(self.opts.verbose_name_plural).capitalize(),
                **extra,
            }
        return TemplateResponse(request, template_list(self.opts, "run_action_confirmation.html"), context)

    def _retry_refusal(self, run: ConsolidationRun, failed: int) -> str:
        """Why ``run`` cannot be retried ("" when it can), in the words ``_retry`` reports."""
        short = str(run.pk)[:8]
        if cancel.is_cancelled(run):
            return recovery.CANCELLED_NOT_RETRIED.format(run=short)
        if not run.on_workers:
            return RETRY_NOT_QUEUED.format(run=short, mode=run.kind_label)
        return "" if failed else NOTHING_TO_RETRY.format(run=short)

    @admin.action(description="Retry the failed clusters of the selected runs", permissions=["retry"])
    def retry_failed_clusters(
        self, request: HttpRequest, queryset: QuerySet[ConsolidationRun]
    ) -> TemplateResponse | None:
        """Ask first (a page listing each run and what a retry does to it), then retry on "post"."""
        runs = list(queryset.order_by("created_at"))
        if request.POST.get("post") == "yes":
            for run in runs:
                self._retry(request, run)
            return None
        failed = selectors.count_failed_jobs_by_run(runs=runs)
        rows = [
            (
                run,
                self._retry_refusal(run, failed.get(run.pk, 0)) or RETRY_MANY_LINE.format(failed=failed.get(run.pk, 0)),
            )
            for run in runs
        ]
        retryable = [run for run in runs if not self._retry_refusal(run, failed.get(run.pk, 0))]
        return self._confirmation(
            request,
            None,
            title=RETRY_MANY_TITLE.format(count=len(retryable)),
            step="Retry",
            lines=[RETRY_LINES[0].format(count=sum(failed.get(r.pk, 0) for r in retryable)), RETRY_LINES[1]],
            runs=rows,
            confirm_label="Yes, retry them" if retryable else "",
            hidden=[("action", "retry_failed_clusters"), ("post", "yes")]
            + [(ACTION_CHECKBOX_NAME, str(run.pk)) for run in runs],
        )

    def retry_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """Confirm (GET) or re-queue (POST) the run's failed clusters; needs the change permission on truths."""
        obj = self.get_object(request, unquote(object_id))
        if obj is None:
            return missing_object(self, request, object_id)
        if not (self.has_view_permission(request, obj) and self.has_retry_permission(request)):
            raise PermissionDenied
        if request.method == "POST":
            self._retry(request, obj)
            return HttpResponseRedirect(change_url(obj))
        failed = selectors.count_failed_jobs(run=obj)
        refusal = self._retry_refusal(obj, failed)
        return self._confirmation(
            request,
            obj,
            title=RETRY_TITLE.format(run=str(obj.pk)[:8]),
            step="Retry",
            lines=[refusal] if refusal else [RETRY_LINES[0].format(count=failed), RETRY_LINES[1]],
            confirm_label="" if refusal else "Yes, retry the failed clusters",
        )

    # --- cancelling a run that waits for a worker ------------------------------------

    def cancel_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """Confirm (GET) or cancel (POST) a queued run no worker has started
        (``cancel.cancel_waiting_run``); needs the change permission on truths."""
        obj = self.get_object(request, unquote(object_id))
        if obj is None:
            return missing_object(self, request, object_id)
        if not (self.has_view_permission(request, obj) and can_change_truths(request)):
            raise PermissionDenied
        if request.method == "POST":
            try:
                count = cancel.cancel_waiting_run(run_id=obj.pk, actor=request.user.get_username())
            except CancelRefused as exc:
                self.message_user(request, str(exc), messages.ERROR)
            else:
                self.message_user(request, CANCELLED.format(run=str(obj.pk)[:8], count=count), messages.SUCCESS)
            return HttpResponseRedirect(change_url(obj))
        refusal = cancel.cancel_refusal(obj)
        return self._confirmation(
            request,
            obj,
            title=CANCEL_TITLE.format(run=str(obj.pk)[:8]),
            step="Cancel",
            lines=[refusal]
            if refusal
            else [CANCEL_LINES[0].format(count=selectors.count_run_jobs(run=obj)), CANCEL_LINES[1]],
            confirm_label="" if refusal else "Yes, cancel this run",
        )

    # --- applying a dry run ---------------------------------------------------------

    def _applying(self, run: ConsolidationRun, *, previews: int) -> dict[str, Any]:
        """The run page's part about applying a dry run: whether it can be (``apply_refusal``),
        how many previews went stale, what its application did and refused (each refusal listed)."""
        application = selectors.get_application(run=run) if run.dry_run else None
        stale = self._stale(run, application, previews)
        refusal = dry_runs.apply_refusal(run=run, application=application, previews=previews, stale=len(stale))
        refusals = (
            run_display.application_refusals(selectors.list_application_refusals(application=application))
            if application
            else []
        )
        line = ""
        if application:
            started = (
                ConsolidationJob.objects.filter(run=application)
                .exclude(status=ConsolidationJob.Status.QUEUED, deliveries=0)
                .exists()
            )
            line = format_html(
                run_display.application_line(application, started=started, refused=len(refusals)),
                run=_run_link(application.pk),
            )
        return {
            "application": application,
            "application_line": line,
            "application_refusals": refusals,
            "apply_refusal": refusal,
            "outdated_warning": self._outdated_warning(len(stale), previews) if refusal is None else "",
        }

    @staticmethod
    def _stale(run: ConsolidationRun, application: ConsolidationRun | None, previews: int) -> set[int]:
        """The ids of ``run``'s previews a later change has made stale (only while it can be applied)."""
        if not (run.dry_run and run.finished_at and application is None and previews):
            return set()
        return dry_runs.stale_previews(list(selectors.list_previews(run=run)))

    @staticmethod
    def _outdated_warning(stale: int, previews: int) -> str:
        """Say, before applying, how many previews a later change has made stale."""
        return OUTDATED_PREVIEWS.format(outdated=stale, previews=previews) if stale else ""

    def _apply(
        self, request: HttpRequest, run: ConsolidationRun, review_ids: list[int] | None = None
    ) -> ConsolidationRun | None:
        try:
            application, review_ids = dry_runs.start_application(
                dry_run_id=run.pk, actor=request.user.get_username(), review_ids=review_ids, send=dispatch.send_jobs
            )
        except ApplyRefused as exc:
            self.message_user(request, str(exc), messages.ERROR)
            return None
        message = format_html(APPLY_QUEUED, run=_run_link(application.pk), count=len(review_ids), dry=_run_link(run.pk))
        self.message_user(request, message, messages.SUCCESS)
        warn_if_no_worker(self, request)
        return application

    @admin.action(description="Apply the selected dry runs' verdicts as real runs", permissions=["apply"])
    def apply_dry_runs(self, request: HttpRequest, queryset: QuerySet[ConsolidationRun]) -> None:
        for run in queryset.order_by("created_at"):
            self._apply(request, run)

    def apply_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """Confirm (GET: the previewed clusters, each with a box, stale ones not offered) or
        start (POST) applying a dry run, whole or the clusters ticked; needs the change
        permission on truths."""
        obj = self.get_object(request, unquote(object_id))
        if obj is None:
            return missing_object(self, request, object_id)
        if not (self.has_view_permission(request, obj) and self.has_apply_permission(request)):
            raise PermissionDenied
        if request.method == "POST":
            application = self._apply(request, obj, _chosen_ids(request))
            return HttpResponseRedirect(change_url(application or obj))
        previews = list(selectors.list_previews(run=obj))
        application = selectors.get_application(run=obj)
        stale = self._stale(obj, application, len(previews))
        context = object_page(
            self,
            request,
            obj,
            title=APPLY_TITLE.format(run=str(obj.pk)[:8]),
            previews=obj.merged + obj.superseded,
            choices=run_display.preview_choices(previews, stale=stale),
            apply_refusal=dry_runs.apply_refusal(
                run=obj, application=application, previews=len(previews), stale=len(stale)
            ),
            outdated_warning=self._outdated_warning(len(stale), len(previews)),
            no_worker=no_worker_warning(),
        )
        return TemplateResponse(request, template_list(self.opts, "apply_confirmation.html"), context)


def _chosen_ids(request: HttpRequest) -> list[int] | None:
    """The preview ids ticked on the confirmation page (``review``), or None when the form
    chose none explicitly (a POST without ``chosen``: apply every preview). An id that is
    not a number is passed as -1, which ``dry_runs.choose_previews`` refuses as no preview."""
    if "chosen" not in request.POST:
        return None
    return [int(v) if v.strip().isdigit() else -1 for v in request.POST.getlist("review")]


@admin.register(ClusterReview)
class ClusterReviewAdmin(ReviewUndoMixin, ReadOnlyAdmin):
    """One row per judged cluster; its page shows the card and, if applied, Undo."""

    # Fits 1360 px beside the filters: what the cluster was about replaces the judge
    # (the model says it), tokens and latency (on each review's page).
    list_display = [
        "id",
        "about",
        "run_link",
        "user",
        "outcome",
        "applied",
        "undone",
        "model",
        "created_display",
    ]
    list_filter = ["outcome", "applied", "run__dry_run", "judge"]
    list_select_related = ["run", "user"]
    search_fields = ["reasoning", "proposed_content"]
    fieldsets = [
        (None, {"fields": [("run", "user"), ("outcome", "applied"), ("judge", "model", "prompt_version")]}),
        ("Figures", {"fields": [("tokens", "cost_display", "latency_ms", "attempts"), "created_at"]}),
        ("The judge's raw reply", {"classes": ["collapse"], "fields": ["raw_response"]}),
    ]

    readonly_fields = ["cost_display"]

    @admin.display(description="cost")
    def cost_display(self, obj: ClusterReview) -> str:
        """As the run's (``inventory_display.cost_text``): USD, or why there is no price."""
        return inventory_display.cost_text(cost=obj.cost, tokens=obj.tokens, unpriced=int(not obj.cost_known))

    def get_queryset(self, request: HttpRequest) -> QuerySet[ClusterReview]:
        undone = LineageEvent.objects.filter(review=OuterRef("pk"), action=LineageEvent.Action.UNDO)
        return super().get_queryset(request).select_related("run", "user").annotate(is_undone=Exists(undone))

    @admin.display(description="run", ordering="run__created_at")
    def run_link(self, obj: ClusterReview) -> str:
        return _run_link(obj.run_id)

    @admin.display(description="about")
    def about(self, obj: ClusterReview) -> str:
        """The cluster's first member as the judge saw it, and how many others."""
        snapshot = obj.snapshot or []
        if not snapshot:
            return "—"
        text = str(snapshot[0].get("content", ""))
        text = text if len(text) <= 60 else text[:59] + "…"
        more = f" (+{len(snapshot) - 1})" if len(snapshot) > 1 else ""
        return format_html('<q>{}</q><span class="iris-muted">{}</span>', text, more)

    @admin.display(description="created", ordering="created_at")
    def created_display(self, obj: ClusterReview) -> str:
        when = timezone.localtime(obj.created_at)
        return format_html('<span title="{}">{}</span>', when.isoformat(), when.strftime("%Y-%m-%d %H:%M"))

    @admin.display(description="undone", boolean=True, ordering="is_undone")
    def undone(self, obj: ClusterReview) -> bool:
        return bool(getattr(obj, "is_undone", False))

    def render_change_form(
        self,
        request: HttpRequest,
        context: dict[str, Any],
        add: bool = False,
        change: bool = False,
        form_url: str = "",
        obj: ClusterReview | None = None,
    ) -> Any:
        if obj is not None:
            card = run_display.review_card(obj, undo_events=selectors.get_review_undo_events(review=obj))
            context.update(card=card, run=obj.run, can_undo=can_change_truths(request))
        return super().render_change_form(request, context, add=add, change=change, form_url=form_url, obj=obj)


@admin.register(LineageEvent)
class LineageEventAdmin(ReadOnlyAdmin):
    """Every retirement and undo, as recorded."""

    list_display = ["id", "action", "source", "result", "review", "actor", "created_at"]
    list_filter = ["action"]
    list_select_related = ["source", "result", "review"]
    search_fields = ["reason", "actor"]
    readonly_fields = ["reason_display"]

    def get_queryset(self, request: HttpRequest) -> QuerySet[LineageEvent]:
        heavy = ("source__embedding", "result__embedding", "review__snapshot")
        return super().get_queryset(request).defer(*heavy, "review__raw_response", "review__decision")

    def get_fields(self, request: HttpRequest, obj: LineageEvent | None = None) -> FieldGroups:
        # The reason as operators read it: truth numbers, never the judge's call-local aliases.
        fields = [f for f in super().get_fields(request, obj) if f != "reason_display"]
        return ["reason_display" if f == "reason" else f for f in fields]

    @admin.display(description="reason")
    def reason_display(self, obj: LineageEvent) -> str:
        return lineage_display.numbered_reason(obj)
