"""The truth admin: list, filters, search, actions, change page with Lineage and Undo.

Actions enqueue and report; they never compute in the request. Truths are never
deleted here (retirement is the only removal, and it is consolidation's job).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.contrib import admin, messages
from django.contrib.admin.utils import unquote
from django.core.exceptions import ImproperlyConfigured, PermissionDenied
from django.db.models import BooleanField, ExpressionWrapper, Q, QuerySet
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.http import urlencode

from .. import history_display, selectors, tasks
from ..conf import app_settings
from ..exceptions import InvalidInput
from ..llm import get_judge_client
from ..models import EMBEDDING_DIMENSIONS, ConsolidationRun, Truth
from ..services.hygiene import retire
from ..services.operations import curation
from .base import (
    FramedDenialMixin,
    UserLinkMixin,
    can_change_truths,
    missing_object,
    object_page,
    template_list,
    url_name,
)
from .lineage import LineageViewMixin
from .run_actions import warn_if_no_worker
from .undo import TruthUndoMixin

if TYPE_CHECKING:
    from .base import ListDisplay

PINNED = "Pinned {count} truth(s); retired truths are left as they were."
UNPINNED = "Unpinned {count} truth(s); retired truths are left as they were."
QUEUED = "Queued {what} for {users} user(s): {links}. Their pages show progress."
QUEUE_FAILED = "Nothing was queued: {error}"
HISTORY_TITLE = "History of truth #{pk}"
WHAT = {True: "a dry run", False: "a consolidation run"}


def _when(value: Any) -> str:
    return timezone.localtime(value).strftime("%Y-%m-%d %H:%M:%S %Z")


CONSOLIDATED_TEXT = (
    "This truth was made by consolidation: its text is the judge's merge of its sources, recorded in its "
    "lineage, so it is not edited by hand. To change it, undo the consolidation (its sources are live again) "
    "and edit a source."
)
NO_SUCH_USER = "No user named “{name}” has truths; the box suggests usernames as you type."
NO_SUCH_USER_BUT = "No user is named exactly “{name}”; showing the truths of users whose name contains it: {names}."


class LiveFilter(admin.SimpleListFilter):
    """Live truths by default; retired ones, or all, on request."""

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


class UserFilter(admin.SimpleListFilter):
    """One user's truths, picked by typing a username: a search box with suggestions
    (``truth/users/?term=``) rather than a link per user, which does not scale."""

    title = "user"
    parameter_name = "user"
    template = "admin/iris_consolidation/truth/user_filter.html"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return []  # the choices come from the autocomplete endpoint as the operator types

    def has_output(self) -> bool:
        return True

    def choices(self, changelist: Any) -> Any:
        # One "choice": what the template's form needs to keep the other filters.
        others = changelist.params
        yield {
            "selected": self.value() is not None,
            "value": self.value() or "",
            "clear_query_string": changelist.get_query_string(remove=[self.parameter_name]),
            "hidden": [
                (name, item)
                for name, values in others.items()
                if name not in (self.parameter_name, "p")
                for item in (values if isinstance(values, list) else [values])
            ],
            "autocomplete_url": reverse(f"admin:{url_name(Truth._meta, 'users')}"),
        }

    def queryset(self, request: HttpRequest, queryset: Any) -> Any:
        value = self.value()
        if not value:
            return queryset
        name = value.strip()
        names = selectors.list_usernames_with_truths(term=name)
        if name not in names:
            # A partial or misspelt name: say so, and show the users whose name contains it.
            if names:
                messages.info(request, NO_SUCH_USER_BUT.format(name=name, names=", ".join(names)))
                return queryset.filter(**{f"{selectors.user_name_lookup()}__in": names})
            messages.warning(request, NO_SUCH_USER.format(name=name))
        return queryset.filter(**{selectors.user_name_lookup(): name})


class BandFilter(admin.SimpleListFilter):
    """A 0..1 value of truths in quarters (``field``, a column or an annotation)."""

    field = "score"
    RANGES = {"0": (None, 0.25), "1": (0.25, 0.5), "2": (0.5, 0.75), "3": (0.75, None)}

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("0", "below 0.25"), ("1", "0.25 to 0.5"), ("2", "0.5 to 0.75"), ("3", "0.75 and above")]

    def queryset(self, request: HttpRequest, queryset: Any) -> Any:
        band = self.RANGES.get(self.value() or "")
        if band is None:
            return queryset
        queryset = self.prepare(queryset)
        low, high = band
        if low is not None:
            queryset = queryset.filter(**{f"{self.field}__gte": low})
        if high is not None:
            queryset = queryset.filter(**{f"{self.field}__lt": high})
        return queryset

    def prepare(self, queryset: Any) -> Any:
        """The queryset with ``field`` on it (a column needs nothing)."""
        return queryset


class ScoreFilter(BandFilter):
    """Distillation score in quarters."""

    title = "score"
    parameter_name = "score"


class RelevanceFilter(BandFilter):
    """Relevance (lowered by decay, raised by merges) in quarters: the hygiene findings per truth."""

    title = "relevance"
    parameter_name = "relevance"
    field = "relevance"


class QualityFilter(BandFilter):
    """Composite quality now (``quality.py``, computed in SQL by ``with_quality``) in quarters."""

    title = "quality"
    parameter_name = "quality"
    field = "quality_now"

    def prepare(self, queryset: Any) -> Any:
        return queryset.with_quality(now=timezone.now(), half_life_days=float(app_settings.HALF_LIFE_DAYS))


@admin.register(Truth)
class TruthAdmin(UserLinkMixin, FramedDenialMixin, LineageViewMixin, TruthUndoMixin, admin.ModelAdmin):
    """Truths of every user; live ones by default. Embeddings are shown as presence only."""

    # Fits 1360 px beside the filters: origin and "pinned" ride along with
    # the text, so generation, score, live and lineage stay on screen.
    # Score and quality are left out of the list: without a host's reports (uses,
    # validations) they are the same on every row (0.0 and 0.45) and say nothing there;
    # the score filter and each truth's page keep them.
    list_display = [
        "id",
        "content_display",
        "user_display",
        "kind",
        "generation",
        "is_live_display",
        "stated_on",
        "lineage_link",
    ]
    #: Added to the list of retired truths: why each was retired and what replaced it.
    RETIRED_COLUMNS = ["retired_reason", "replaced_by"]
    list_display_links = ["id", "content_display"]
    list_filter = [
        LiveFilter,
        UserFilter,
        "origin",
        "pinned",
        "generation",
        ScoreFilter,
        RelevanceFilter,
        QualityFilter,
        "kind",
        "created_at",
    ]
    search_fields = ["content", *selectors.user_search_fields()]
    list_select_related = ["user"]
    list_per_page = 100
    actions = ["pin_selected", "unpin_selected", "queue_dry_run", "queue_real_run"]
    raw_id_fields = ["user"]
    fieldsets = [
        (None, {"fields": ["user", "content", "kind", "pinned", "score", "source"]}),
        ("Consolidation", {"fields": ["origin", "generation", "corroborations", "embedding_status"]}),
        (
            "Hygiene",
            {"fields": [("relevance", "quality_display"), ("access_count", "last_accessed"), "last_decayed",
                        "validated", "tags"]},
        ),
        ("Retirement", {"fields": ["retired_at", "retired_reason", "superseded_by"]}),
        ("Times", {"fields": ["stated_at", "made_at", "updated_at"]}),
    ]
    #: Bookkeeping of the hygiene stages and the host's reports (record_access,
    #: mark_validated): shown, never edited by hand.
    HYGIENE_FIELDS = [
        "relevance", "quality_display", "access_count", "last_accessed", "last_decayed", "validated", "tags"
    ]
    HISTORY_FIELDS = [
        *HYGIENE_FIELDS,
        "origin",
        "generation",
        "corroborations",
        "embedding_status",
        "retired_at",
        "retired_reason",
        "superseded_by",
        "stated_at",
        "made_at",
        "updated_at",
    ]

    def get_urls(self) -> list[Any]:
        users = path("users/", self.admin_site.admin_view(self.users_view), name=url_name(self.opts, "users"))
        return [users, *super().get_urls()]

    def users_view(self, request: HttpRequest) -> HttpResponse:
        """JSON ``{"results": [username, ...]}``: the user filter's suggestions for ``?term=``.

        Only users who have truths; needs the view permission on truths (usernames
        are personal data too).
        """
        if not self.has_view_or_change_permission(request):
            raise PermissionDenied
        return JsonResponse({"results": selectors.list_usernames_with_truths(term=request.GET.get("term", ""))})

    def history_view(self, request: HttpRequest, object_id: str, extra_context: dict[str, Any] | None = None) -> Any:
        """The History button: the truth's audit rows, lineage steps and admin edits as
        one timeline (django-simple-history's single timeline is the model)."""
        obj = self.get_object(request, unquote(object_id))
        if obj is None:
            return missing_object(self, request, object_id)
        if not self.has_view_or_change_permission(request, obj):
            raise PermissionDenied
        rows = history_display.history_rows(selectors.get_truth_history(truth=obj))
        context = object_page(
            self, request, obj, title=HISTORY_TITLE.format(pk=obj.pk), rows=rows, **(extra_context or {})
        )
        return TemplateResponse(request, template_list(self.opts, "truth_history.html"), context)

    def get_queryset(self, request: HttpRequest) -> QuerySet[Truth]:
        # Every truth, retired ones included (LiveFilter shows live ones by default);
        # the vector itself is never loaded, only whether it is present.
        return (
            Truth.all_objects.select_related("user", "superseded_by")
            .defer("embedding", "superseded_by__embedding")
            .annotate(embedding_present=ExpressionWrapper(Q(embedding__isnull=False), output_field=BooleanField()))
        )

    def get_readonly_fields(self, request: HttpRequest, obj: Truth | None = None) -> list[str]:
        if obj is None:
            return []  # the add page shows only what an operator writes (ADD_FIELDSETS)
        if obj.retired_at is not None:
            # A retired truth is history: shown, never edited.
            return ["user", "content", "kind", "pinned", "score", "source", *self.HISTORY_FIELDS]
        if obj.generation > 0:
            # A consolidated truth's text is the judge's, recorded in its lineage: not edited by hand.
            return ["user", "content", "content_note", *self.HISTORY_FIELDS]
        return ["user", *self.HISTORY_FIELDS]

    #: The add page: what an operator writes; the rest is the pipeline's bookkeeping, shown once saved.
    ADD_FIELDSETS = [(None, {"fields": ["user", "content", "kind", "pinned", "score", "source"]})]

    def get_fieldsets(self, request: HttpRequest, obj: Truth | None = None) -> Any:
        if obj is None:
            return self.ADD_FIELDSETS
        fieldsets = super().get_fieldsets(request, obj)
        if obj.generation == 0 or obj.retired_at is not None:
            return fieldsets
        (name, options), *rest = fieldsets
        fields = list(options["fields"])
        fields.insert(fields.index("content") + 1, "content_note")
        return [(name, {**options, "fields": fields}), *rest]

    @admin.display(description="why the text is read-only")
    def content_note(self, obj: Truth) -> str:
        return CONSOLIDATED_TEXT

    def has_delete_permission(self, request: HttpRequest, obj: Truth | None = None) -> bool:
        return False  # nothing is ever deleted: consolidation retires

    def save_model(self, request: HttpRequest, obj: Truth, form: Any, change: bool) -> None:
        if not change:
            # A truth written by hand is audited like any other creation.
            curation.add_truth(truth=obj, actor=request.user.get_username())
            return
        if "content" in form.changed_data:
            # The old vector describes the old text; the next run embeds the new one.
            obj.embedding = None
            obj.embedding_model = ""
        super().save_model(request, obj, form, change)

    def render_change_form(
        self,
        request: HttpRequest,
        context: dict[str, Any],
        add: bool = False,
        change: bool = False,
        form_url: str = "",
        obj: Truth | None = None,
    ) -> Any:
        if obj is not None:
            # A truth the noise or prune stage retired is restored by the same undo page.
            context["restore_available"] = retire.is_hygiene_retirement(obj) and can_change_truths(request)
            context["undo_available"] = context["restore_available"] or (
                obj.retired_at is None and can_change_truths(request) and bool(selectors.list_undo_steps(truth=obj))
            )
        return super().render_change_form(request, context, add=add, change=change, form_url=form_url, obj=obj)

    # --- columns -------------------------------------------------------------------

    @admin.display(description="content", ordering="content")
    def content_display(self, obj: Truth) -> str:
        text = obj.content if len(obj.content) <= 90 else obj.content[:89] + "…"
        pinned = format_html(' <span class="iris-badge">{}</span>', "pinned") if obj.pinned else ""
        return format_html(
            '{}{}<br><span class="iris-muted iris-origin">{}</span>', text, pinned, obj.get_origin_display().lower()
        )

    @admin.display(description="user", ordering=selectors.user_name_lookup())
    def user_display(self, obj: Truth) -> str:
        url = reverse("admin:iris_consolidation_truth_changelist") + "?" + urlencode({"user": obj.user.get_username()})
        return format_html('<a href="{}" title="Only this user\'s truths">{}</a>', url, obj.user.get_username())

    @admin.display(description="last stated", ordering="created_at")
    def stated_at(self, obj: Truth) -> str:
        """When the user last stated it: for a consolidated truth, its newest source's
        date, which supersede compares (``Truth.created_at``)."""
        return format_html(
            '{} <span class="iris-muted">{}</span>',
            _when(obj.created_at),
            "when the user last stated it (for a merge: its newest source); supersede compares this date",
        )

    @admin.display(description="last stated", ordering="created_at")
    def stated_on(self, obj: Truth) -> str:
        """``stated_at`` as a date, short enough for the list; the full time on hover."""
        when = timezone.localtime(obj.created_at)
        return format_html('<span title="{}">{}</span>', when.strftime("%Y-%m-%d %H:%M"), when.strftime("%Y-%m-%d"))

    @admin.display(description="made")
    def made_at(self, obj: Truth) -> Any:
        """When this row was made: its creation in the audit, or the merge that made it."""
        made = selectors.get_made_at(truth=obj)
        if made is None:
            return "—"
        return format_html('{} <span class="iris-muted">{}</span>', _when(made), "when this record was made")

    @admin.display(description="quality")
    def quality_display(self, obj: Truth) -> str:
        """Composite quality now (relevance, uses, recency, validated), from the row's own fields."""
        if obj.pk is None:
            return "-"
        return f"{obj.quality:.2f}"

    def get_list_display(self, request: HttpRequest) -> ListDisplay[Any]:
        columns = list(super().get_list_display(request))
        if request.GET.get(LiveFilter.parameter_name) in ("retired", "all"):
            at = columns.index("is_live_display") + 1
            columns[at:at] = self.RETIRED_COLUMNS
        return columns

    @admin.display(description="replaced by", ordering="superseded_by_id")
    def replaced_by(self, obj: Truth) -> str:
        """The truth that replaced a retired one (a merge or a supersede), linked; "—" otherwise."""
        target = obj.superseded_by if obj.superseded_by_id is not None else None
        if target is None:
            return "—"
        text = target.content if len(target.content) <= 50 else target.content[:49] + "…"
        url = reverse(f"admin:{url_name(self.opts, 'change')}", args=[target.pk])
        return format_html('<a href="{}">#{}</a> {}', url, target.pk, text)

    @admin.display(description="live", boolean=True, ordering="retired_at")
    def is_live_display(self, obj: Truth) -> bool:
        return obj.retired_at is None

    @admin.display(description="lineage")
    def lineage_link(self, obj: Truth) -> str:
        url = reverse(f"admin:{url_name(self.opts, 'lineage')}", args=[obj.pk])
        return format_html('<a href="{}">Lineage</a>', url)

    @admin.display(description="embedding")
    def embedding_status(self, obj: Truth) -> str:
        present = getattr(obj, "embedding_present", None)
        if present is None:  # an object not loaded through get_queryset
            present = obj.embedding is not None
        if not present:
            return "absent (made by the next run)"
        return f"present, {EMBEDDING_DIMENSIONS} dimensions ({obj.embedding_model or 'unknown model'})"

    # --- actions -------------------------------------------------------------------

    @admin.action(description="Pin selected truths (never consolidated)", permissions=["change"])
    def pin_selected(self, request: HttpRequest, queryset: QuerySet[Truth]) -> None:
        count = curation.set_pinned(truth_ids=queryset.values_list("pk", flat=True), pinned=True)
        self.message_user(request, PINNED.format(count=count), messages.SUCCESS)

    @admin.action(description="Unpin selected truths", permissions=["change"])
    def unpin_selected(self, request: HttpRequest, queryset: QuerySet[Truth]) -> None:
        count = curation.set_pinned(truth_ids=queryset.values_list("pk", flat=True), pinned=False)
        self.message_user(request, UNPINNED.format(count=count), messages.SUCCESS)

    @admin.action(description="Queue a dry run (preview) for the users of the selected truths", permissions=["change"])
    def queue_dry_run(self, request: HttpRequest, queryset: QuerySet[Truth]) -> None:
        self._queue(request, queryset, dry_run=True)

    @admin.action(description="Queue a consolidation run for the users of the selected truths", permissions=["change"])
    def queue_real_run(self, request: HttpRequest, queryset: QuerySet[Truth]) -> None:
        self._queue(request, queryset, dry_run=False)

    def _queue(self, request: HttpRequest, queryset: QuerySet[Truth], *, dry_run: bool) -> None:
        user_ids = list(queryset.order_by().values_list("user_id", flat=True).distinct())
        try:
            runs = tasks.enqueue_users(
                user_ids, dry_run=dry_run, trigger=ConsolidationRun.Trigger.ADMIN, judge=get_judge_client().name
            )
        except (InvalidInput, ImproperlyConfigured) as exc:
            self.message_user(request, QUEUE_FAILED.format(error=exc), messages.ERROR)
            return
        links = format_html_join(
            ", ",
            '<a href="{}">run {}</a>',
            ((reverse("admin:iris_consolidation_consolidationrun_change", args=[r.pk]), str(r.pk)[:8]) for r in runs),
        )
        message = format_html(QUEUED, what=WHAT[dry_run], users=len(runs), links=links)
        self.message_user(request, message, messages.SUCCESS)
        warn_if_no_worker(self, request)
