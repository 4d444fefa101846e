"""Admin of the incremental-pass records: the truth change audit, cursors, user passes,
cached verdicts (all read-only) and the editable live settings singleton.

Imported by the admin package's ``__init__`` so that autodiscovery registers these.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import reverse

from ..models import ConsolidationCursor, LiveSettings, TruthChange, UserPass, VerdictCacheEntry
from ..selectors import named_users, user_search_fields
from ..services.operations.live_settings import get_effective_settings
from .base import ReadOnlyAdmin, can_view_truths

#: Audit columns and fields that quote a truth (its text, or a reason that may quote
#: it): personal data, shown only to staff who may also view truths.
TRUTH_TEXT = frozenset({"truth", "content", "reason", "short_reason"})


@admin.register(TruthChange)
class TruthChangeAdmin(ReadOnlyAdmin):
    """The append-only audit of creations, retirements, restorations and undos.

    Its own view permission opens it, as for any model (an auditor need not read
    truths); what quotes a truth stays behind the truths' view permission.
    """

    list_display = ["id", "created_at", "action", "truth", "user", "short_reason", "actor", "review", "run"]
    list_filter = ["action", "created_at", "actor"]
    search_fields = ["content", "reason", *user_search_fields(), "=truth__id"]
    list_select_related = ["truth", "user", "review", "run"]
    date_hierarchy = "created_at"
    raw_id_fields = ["truth", "user", "review", "run"]

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # Skip ReadOnlyAdmin's truth gate: the columns below honour it instead.
        return admin.ModelAdmin.has_view_permission(self, request, obj)

    def get_list_display(self, request: HttpRequest) -> list[str]:
        if can_view_truths(request):
            return list(self.list_display)
        return ["truth_number" if f == "truth" else f for f in self.list_display if f not in TRUTH_TEXT - {"truth"}]

    def get_list_select_related(self, request: HttpRequest) -> list[str]:
        return [f for f in self.list_select_related if f != "truth" or can_view_truths(request)]

    def get_search_fields(self, request: HttpRequest) -> list[str]:
        return [f for f in self.search_fields if can_view_truths(request) or f not in ("content", "reason")]

    def get_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        fields = list(super().get_fields(request, obj))
        if can_view_truths(request):
            return fields
        return ["truth_number" if f == "truth" else f for f in fields if f not in TRUTH_TEXT - {"truth"}]

    @admin.display(description="reason")
    def short_reason(self, obj: TruthChange) -> str:
        return obj.reason if len(obj.reason) <= 80 else obj.reason[:77] + "..."

    @admin.display(description="truth", ordering="truth_id")
    def truth_number(self, obj: TruthChange) -> str:
        return f"#{obj.truth_id}"


@admin.register(ConsolidationCursor)
class ConsolidationCursorAdmin(ReadOnlyAdmin):
    list_display = ["user", "updated_at", "truth_id", "run", "moved_at"]
    list_select_related = ["user", "run"]
    search_fields = user_search_fields()


@admin.register(UserPass)
class UserPassAdmin(ReadOnlyAdmin):
    list_display = ["id", "run", "user", "seeds", "covers_cursor", "cursor_updated_at", "advanced_updated_at"]
    list_filter = ["covers_cursor"]
    list_select_related = ["run", "user"]
    search_fields = user_search_fields()


@admin.register(VerdictCacheEntry)
class VerdictCacheEntryAdmin(ReadOnlyAdmin):
    list_display = ["id", "user", "model", "prompt_version", "members", "hits", "created_at", "last_hit_at"]
    list_filter = ["model", "prompt_version"]
    list_select_related = ["user"]
    search_fields = [*user_search_fields(), "reasoning"]

    @admin.display(description="members")
    def members(self, obj: VerdictCacheEntry) -> int:
        return len(obj.member_hashes or ())


@admin.register(LiveSettings)
class LiveSettingsAdmin(admin.ModelAdmin):
    """The one settings record; its list page leads straight to it (or to "add" before it exists)."""

    fields = [
        "enabled",
        "interval_hours",
        "scheduled_dry_run_only",
        "allowed_users",
        "max_retirements_per_run",
        "similarity_threshold",
        "in_force",
        "updated_at",
    ]
    readonly_fields = ["in_force", "updated_at"]
    raw_id_fields = ["allowed_users"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return super().has_add_permission(request) and not LiveSettings.objects.exists()

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def changelist_view(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> HttpResponse:
        if not self.has_view_or_change_permission(request):
            return super().changelist_view(request, extra_context)  # the admin's own 403
        row = LiveSettings.objects.filter(pk=LiveSettings.SINGLETON_ID).first()
        opts = self.model._meta
        if row is not None:
            return HttpResponseRedirect(reverse(f"admin:{opts.app_label}_{opts.model_name}_change", args=[row.pk]))
        if self.has_add_permission(request):
            return HttpResponseRedirect(reverse(f"admin:{opts.app_label}_{opts.model_name}_add"))
        return super().changelist_view(request, extra_context)

    @admin.display(description="in force for the next run")
    def in_force(self, obj: LiveSettings) -> str:
        effective = get_effective_settings()
        users = ", ".join(named_users(effective.allowed_user_ids)) or "every user"
        return (
            f"enabled={effective.enabled}; "
            f"interval={f'{effective.interval_hours} h' if effective.interval_hours else 'every schedule slot'}; "
            f"scheduled dry-run only={effective.scheduled_dry_run_only}; users={users}; "
            f"cap={effective.max_retirements_per_run} retirements/run; threshold={effective.similarity_threshold}"
        )
