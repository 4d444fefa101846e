"""Runs, reviews and lineage events: read-only history, plus applying a dry run.

A run's page shows its progress (refreshing itself while the run is in progress) and
its cluster reviews; a dry run's page is marked as a preview and offers to apply its
verdicts as a real run. Applying creates the run and enqueues its tasks; the work
(re-validation, freshness checks, writes) happens in the queue.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.db.models import Exists, OuterRef, QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html
from django.utils.text import capfirst

from .. import run_display, selectors
from ..exceptions import ApplyRefused
from ..models import ClusterReview, ConsolidationRun, LineageEvent
from ..services.operations import dry_runs
from .base import ReadOnlyAdmin, can_change_truths, change_url, missing_object, template_list, url_name
from .undo import ReviewUndoMixin

#: Seconds between refreshes of an in-progress run's page.
REFRESH_SECONDS = 5
REVIEWS_PER_PAGE = 50
APPLY_QUEUED = (
    "Queued run {run} to apply {count} previewed verdict(s) of dry run {dry}; "
    "each is re-validated and re-checked for freshness."
)
APPLY_TITLE = "Apply the verdicts of dry run {run}"


def _run_link(run_id: Any) -> str:
    url = reverse("admin:iris_consolidation_consolidationrun_change", args=[run_id])
    return format_html('<a href="{}">{}</a>', url, str(run_id)[:8])


@admin.register(ConsolidationRun)
class ConsolidationRunAdmin(ReadOnlyAdmin):
    """Runs, newest first; a run's page holds its reviews."""

    list_display = [
        "short_id",
        "created_at",
        "trigger",
        "mode_display",
        "status",
        "threshold",
        "user_filter",
        "users",
        "clusters_display",
        "merged",
        "superseded",
        "retired",
        "kept",
        "rejected",
        "failed",
        "tokens",
        "duration_display",
    ]
    list_display_links = ["short_id"]
    list_filter = ["mode", "status", "trigger"]
    list_select_related = ["user_filter"]
    actions = ["apply_dry_runs"]
    fieldsets = [
        (
            None,
            {
                "fields": [
                    ("trigger", "mode", "status"),
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
        "progress_display",
        "duration_display",
        "llm_calls_display",
        "cost_display",
        "embed_seconds_display",
        "cluster_seconds_display",
    ]

    def get_fieldsets(self, request: HttpRequest, obj: ConsolidationRun | None = None) -> Any:
        fieldsets = super().get_fieldsets(request, obj)
        if obj is not None and obj.source_run_id is None:
            # Only an application of a dry run has a source run.
            head = [f for f in fieldsets[0][1]["fields"] if f != "source_run"]
            fieldsets = [(None, {"fields": head}), *fieldsets[1:]]
        return fieldsets

    def get_queryset(self, request: HttpRequest) -> QuerySet[ConsolidationRun]:
        return super().get_queryset(request).select_related("user_filter", "source_run")

    def get_urls(self) -> list[Any]:
        apply = path(
            "<path:object_id>/apply/",
            self.admin_site.admin_view(self.apply_view),
            name=url_name(self.opts, "apply"),
        )
        return [apply, *super().get_urls()]

    def has_apply_permission(self, request: HttpRequest) -> bool:
        """Applying a dry run changes truths: the change permission on truths."""
        return can_change_truths(request)

    # --- columns -------------------------------------------------------------------

    @admin.display(description="run", ordering="created_at")
    def short_id(self, obj: ConsolidationRun) -> str:
        return str(obj.pk)[:8]

    @admin.display(description="mode", ordering="mode")
    def mode_display(self, obj: ConsolidationRun) -> str:
        if obj.is_dry_run:
            return format_html('<span class="iris-badge iris-preview">{}</span>', "Dry run (preview)")
        return obj.get_mode_display()

    @admin.display(description="clusters done")
    def clusters_display(self, obj: ConsolidationRun) -> str:
        return f"{obj.clusters_done} / {obj.clusters_found}"

    @admin.display(description="duration")
    def duration_display(self, obj: ConsolidationRun) -> str:
        seconds = obj.duration_seconds
        return "—" if seconds is None else f"{seconds:.1f} s"

    @admin.display(description="LLM calls")
    def llm_calls_display(self, obj: ConsolidationRun) -> int:
        return obj.llm_calls

    @admin.display(description="cost (USD)")
    def cost_display(self, obj: ConsolidationRun) -> str:
        return f"{obj.cost:.4f}"

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
            application = selectors.get_application(run=obj) if obj.is_dry_run else None
            context.update(
                run=obj,
                progress=run_display.run_progress(obj),
                refresh_seconds=REFRESH_SECONDS,
                review_page=page,
                review_cards=run_display.review_cards(page.object_list),
                outcome=outcome,
                outcome_counts=[(value, label, counts.get(value, 0)) for value, label in ClusterReview.Outcome.choices],
                review_total=sum(counts.values()),
                application=application,
                apply_refusal=dry_runs.apply_refusal(
                    run=obj, application=application, previews=counts.get(ClusterReview.Outcome.PREVIEW, 0)
                ),
                can_apply=self.has_apply_permission(request),
                can_undo=can_change_truths(request),
            )
        return super().render_change_form(request, context, add=add, change=change, form_url=form_url, obj=obj)

    # --- applying a dry run ---------------------------------------------------------

    def _apply(self, request: HttpRequest, run: ConsolidationRun) -> ConsolidationRun | None:
        try:
            application, review_ids = dry_runs.start_application(dry_run_id=run.pk, actor=request.user.get_username())
        except ApplyRefused as exc:
            self.message_user(request, str(exc), messages.ERROR)
            return None
        message = format_html(APPLY_QUEUED, run=_run_link(application.pk), count=len(review_ids), dry=_run_link(run.pk))
        self.message_user(request, message, messages.SUCCESS)
        return application

    @admin.action(description="Apply the selected dry runs' verdicts as real runs", permissions=["apply"])
    def apply_dry_runs(self, request: HttpRequest, queryset: QuerySet[ConsolidationRun]) -> None:
        for run in queryset.order_by("created_at"):
            self._apply(request, run)

    def apply_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """Confirm (GET) or start (POST) applying a dry run; needs the change permission on truths."""
        obj = self.get_object(request, unquote(object_id))
        if obj is None:
            return missing_object(self, request, object_id)
        if not (self.has_view_permission(request, obj) and self.has_apply_permission(request)):
            raise PermissionDenied
        if request.method == "POST":
            application = self._apply(request, obj)
            return HttpResponseRedirect(change_url(application or obj))
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "object": obj,
            "title": APPLY_TITLE.format(run=str(obj.pk)[:8]),
            "subtitle": None,
            "module_name": str(capfirst(self.opts.verbose_name_plural)),
            "previews": obj.merged + obj.superseded,
        }
        request.current_app = self.admin_site.name
        return TemplateResponse(request, template_list(self.opts, "apply_confirmation.html"), context)


@admin.register(ClusterReview)
class ClusterReviewAdmin(ReviewUndoMixin, ReadOnlyAdmin):
    """One row per judged cluster; its page shows the card and, if applied, Undo."""

    list_display = [
        "id",
        "run_link",
        "user",
        "outcome",
        "applied",
        "undone",
        "judge",
        "model",
        "tokens",
        "latency_ms",
        "created_at",
    ]
    list_filter = ["outcome", "applied", "run__mode", "judge"]
    list_select_related = ["run", "user"]
    search_fields = ["reasoning", "proposed_content"]
    fieldsets = [
        (None, {"fields": [("run", "user"), ("outcome", "applied"), ("judge", "model", "prompt_version")]}),
        ("Figures", {"fields": [("tokens", "cost", "latency_ms", "attempts"), "created_at"]}),
        ("The judge's raw reply", {"classes": ["collapse"], "fields": ["raw_response"]}),
    ]

    def get_queryset(self, request: HttpRequest) -> QuerySet[ClusterReview]:
        undone = LineageEvent.objects.filter(review=OuterRef("pk"), action=LineageEvent.Action.UNDO)
        return super().get_queryset(request).select_related("run", "user").annotate(is_undone=Exists(undone))

    @admin.display(description="run", ordering="run__created_at")
    def run_link(self, obj: ClusterReview) -> str:
        return _run_link(obj.run_id)

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

    def get_queryset(self, request: HttpRequest) -> QuerySet[LineageEvent]:
        return (
            super()
            .get_queryset(request)
            .defer("source__embedding", "result__embedding", "review__raw_response", "review__snapshot")
        )
