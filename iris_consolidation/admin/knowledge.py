"""Admin of the mining, relocation and promotion records: chat sessions with their messages,
notes with their wikilinks rendered, learned rules with the truths they came from.

Sessions, notes and auto-managed rules are read-only here and need the view
permission on truths (they quote what the person said). A staff member with the
change permission on truths may add hand-authored rules and edit those; an
auto-managed rule is never edited (append-only), and nothing here deletes.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from django import forms
from django.contrib import admin, messages
from django.http import HttpRequest, HttpResponse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from ..models import ChatSession, LearnedRule, Note, SessionMessage, Truth
from ..run_settings import get_effective_settings
from ..selectors import user_search_fields
from ..services.hygiene import promotion
from .base import (
    AdminMixin,
    FramedDenialMixin,
    ReadOnlyAdmin,
    UserLinkMixin,
    can_change_truths,
    can_view_truths,
    change_url,
)

if TYPE_CHECKING:
    from .base import FieldGroups

WIKILINK = re.compile(r"\[\[([a-z0-9-]+)\]\]")


class SessionMessageInline(admin.TabularInline):
    """The session's messages in order, read-only."""

    model = SessionMessage
    fields = readonly_fields = ("position", "external_id", "role", "speaker", "content", "at")
    extra = 0
    can_delete = False
    ordering = ["position"]

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(ChatSession)
class ChatSessionAdmin(ReadOnlyAdmin):
    """A user's chat sessions (``load_sessions`` or the host), the input of the mine stage."""

    list_display = ["external_id", "user", "started_at", "message_count", "created_at"]
    list_filter = ["started_at"]
    search_fields = ["external_id", *user_search_fields()]
    list_select_related = ["user"]
    date_hierarchy = "started_at"
    fields = readonly_fields = ("user", "external_id", "started_at", "source", "created_at")
    inlines = [SessionMessageInline]

    @admin.display(description="messages")
    def message_count(self, obj: ChatSession) -> int:
        return obj.messages.count()


def render_links(note: Note) -> SafeString:
    """The note's body with each ``[[slug]]`` turned into a link to that note of the same
    user (plain text when no such note exists); everything else escaped."""
    targets = {n.slug: n for n in Note.objects.filter(user_id=note.user_id)}
    parts: list[SafeString] = []
    last = 0
    for match in WIKILINK.finditer(note.body):
        parts.append(format_html("{}", note.body[last : match.start()]))
        target = targets.get(match.group(1))
        if target is not None:
            parts.append(format_html('<a href="{}">[[{}]]</a>', change_url(target), target.slug))
        else:
            parts.append(format_html("[[{}]]", match.group(1)))
        last = match.end()
    parts.append(format_html("{}", note.body[last:]))
    return format_html('<pre style="white-space: pre-wrap">{}</pre>', SafeString("".join(parts)))


EMPTY_REPORT = (
    "No {what} yet: the {stage} stage is in “{mode}” mode, so passes only list what it would do. "
    "Set it to “apply” in the live settings (or {setting}) to write {what}."
)
EMPTY_APPLY = "No {what} yet: the {stage} stage (“apply”) has found nothing to write in the passes so far."


class EmptyListSaysWhy(AdminMixin):
    """An empty list of what a stage writes says why: the stage's mode in force."""

    stage = ""
    what = ""

    def changelist_view(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> HttpResponse:
        if request.method == "GET" and not self.model._default_manager.exists():
            mode = str(get_effective_settings().stage_modes.get(self.stage, "off"))
            words = EMPTY_APPLY if mode == "apply" else EMPTY_REPORT
            setting = f"IRIS_CONSOLIDATION_{self.stage.upper()}"
            messages.info(request, words.format(what=self.what, stage=self.stage, mode=mode, setting=setting))
        return super().changelist_view(request, extra_context)


@admin.register(Note)
class NoteAdmin(EmptyListSaysWhy, ReadOnlyAdmin):
    """Notes written by the relocate stage; the body's wikilinks lead to the linked notes."""

    stage, what = "relocate", "notes"

    list_display = ["slug", "title", "user", "created_at"]
    search_fields = ["slug", "title", "body", *user_search_fields()]
    list_select_related = ["user"]
    fields = readonly_fields = ("user", "slug", "title", "rendered_body", "sources", "run", "created_at", "updated_at")

    @admin.display(description="body")
    def rendered_body(self, obj: Note) -> SafeString:
        return render_links(obj)

    @admin.display(description="source truths")
    def sources(self, obj: Note) -> SafeString:
        return _truth_links(Truth.all_objects.filter(notes=obj).order_by("pk"))


def _truth_links(truths: Any) -> SafeString:
    """Links to ``truths`` (retired ones included: the default manager shows live ones only)."""
    return format_html_join(
        "", '<div><a href="{}">#{}</a> {}</div>', ((change_url(t), t.pk, t.content[:120]) for t in truths)
    ) or SafeString("-")


class HandAuthoredRuleForm(forms.ModelForm):
    """A hand-authored rule: one line."""

    class Meta:
        model = LearnedRule
        fields = ["user", "text"]

    def clean_text(self) -> str:
        text = " ".join(str(self.cleaned_data.get("text") or "").split())
        if not text:
            raise forms.ValidationError("Write the rule on one line.")
        return text


@admin.register(LearnedRule)
class LearnedRuleAdmin(EmptyListSaysWhy, UserLinkMixin, FramedDenialMixin, admin.ModelAdmin):
    """Each user's learned rules: auto-managed (read-only, with the truths they came from)
    and hand-authored (added and edited here, never touched by a stage)."""

    stage, what = "promote", "learned rules"

    form = HandAuthoredRuleForm
    list_display = ["text", "user", "hand_authored", "created_at", "run"]
    list_filter = ["hand_authored", "created_at"]
    search_fields = ["text", *user_search_fields()]
    list_select_related = ["user", "run"]
    raw_id_fields = ["user"]

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return can_view_truths(request)  # as every record of the console (ReadOnlyAdmin)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return super().has_add_permission(request) and can_change_truths(request)

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        allowed = super().has_change_permission(request, obj) and can_change_truths(request)
        return allowed and (obj is None or obj.hand_authored)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def get_fields(self, request: HttpRequest, obj: Any = None) -> FieldGroups:
        if obj is None:
            return ["user", "text"]
        return ["user", "text", "hand_authored", "sources", "reason", "model", "run", "created_at"]

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        if obj is None:
            return []
        readonly = ["hand_authored", "sources", "reason", "model", "run", "created_at", "user"]
        return readonly if obj.hand_authored else [*readonly, "text"]

    @admin.display(description="source truths")
    def sources(self, obj: LearnedRule) -> SafeString:
        return _truth_links(Truth.all_objects.filter(learned_rules=obj).order_by("pk"))

    def save_model(self, request: HttpRequest, obj: LearnedRule, form: Any, change: bool) -> None:
        obj.hand_authored = True
        obj.fingerprint = promotion.fingerprint(obj.text)
        super().save_model(request, obj, form, change)


__all__ = ["ChatSessionAdmin", "LearnedRuleAdmin", "NoteAdmin"]
