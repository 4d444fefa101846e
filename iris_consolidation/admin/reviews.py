"""Cluster reviews and lineage events: read-only history (a review's page shows its card and,
if it was applied, Undo)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.contrib import admin
from django.db.models import Exists, OuterRef, QuerySet
from django.http import HttpRequest
from django.utils import timezone
from django.utils.html import format_html

from .. import inventory_display, reasoning_display, review_display, selectors
from ..models import ClusterReview, LineageEvent
from .base import (
    ReadOnlyAdmin,
    can_change_truths,
    run_page_link,
)

if TYPE_CHECKING:
    from .base import FieldGroups
from .undo import ReviewUndoMixin


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
        return run_page_link(obj.run_id)

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
            card = review_display.review_card(obj, undo_events=selectors.get_review_undo_events(review=obj))
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
        return reasoning_display.numbered_reason(obj)
