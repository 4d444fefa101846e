"""Admin registrations: truths, runs, cluster reviews and lineage events.

Reviews and lineage events are append-only history: read-only here.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from .models import ClusterReview, ConsolidationRun, LineageEvent, Truth


class ReadOnlyAdmin(admin.ModelAdmin):
    """History records: viewable by staff with the view permission, never edited."""

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class LiveFilter(admin.SimpleListFilter):
    """Live truths by default; "retired" and "all" on request."""

    title = "status"
    parameter_name = "status"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("live", "Live"), ("retired", "Retired"), ("all", "All")]

    def choices(self, changelist: Any) -> Any:
        value = self.value() or "live"
        for lookup, title in self.lookup_choices:
            yield {
                "selected": value == lookup,
                "query_string": changelist.get_query_string({self.parameter_name: lookup}),
                "display": title,
            }

    def queryset(self, request: HttpRequest, queryset: Any) -> Any:
        value = self.value() or "live"
        if value == "live":
            return queryset.live()
        if value == "retired":
            return queryset.retired()
        return queryset


@admin.register(Truth)
class TruthAdmin(admin.ModelAdmin):
    list_display = ["id", "user", "content", "origin", "pinned", "generation", "score", "is_live_display", "created_at"]
    list_filter = [LiveFilter, "origin", "pinned", "generation", "kind"]
    search_fields = ["content", "user__username"]
    list_select_related = ["user"]
    readonly_fields = ["embedding_status", "superseded_by", "retired_at", "retired_reason", "created_at", "updated_at"]
    exclude = ["embedding"]
    raw_id_fields = ["user"]

    def get_queryset(self, request: HttpRequest) -> Any:
        return Truth.all_objects.select_related("user")

    @admin.display(description="live", boolean=True)
    def is_live_display(self, obj: Truth) -> bool:
        return obj.retired_at is None

    @admin.display(description="embedding")
    def embedding_status(self, obj: Truth) -> str:
        if obj.embedding is None:
            return "absent"
        return f"{len(obj.embedding)} dimensions ({obj.embedding_model or 'unknown model'})"


@admin.register(ConsolidationRun)
class ConsolidationRunAdmin(ReadOnlyAdmin):
    list_display = [
        "id", "created_at", "trigger", "mode", "status", "threshold", "users", "clusters_found",
        "merged", "superseded", "kept", "failed", "llm_calls",
    ]
    list_filter = ["mode", "status", "trigger"]


@admin.register(ClusterReview)
class ClusterReviewAdmin(ReadOnlyAdmin):
    list_display = ["id", "run", "user", "outcome", "applied", "judge", "created_at"]
    list_filter = ["outcome", "applied", "judge"]
    list_select_related = ["run", "user"]
    search_fields = ["reasoning", "proposed_content"]
    exclude = ["members"]


@admin.register(LineageEvent)
class LineageEventAdmin(ReadOnlyAdmin):
    list_display = ["id", "action", "source", "result", "review", "actor", "created_at"]
    list_filter = ["action"]
    list_select_related = ["source", "result", "review"]


# Incremental passes (issue 6): audit, cursors, cache, live settings.
from . import incremental_admin  # noqa: E402,F401
