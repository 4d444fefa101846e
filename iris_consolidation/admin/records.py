"""Admin of the records the app keeps between runs: the truth change audit, cursors,
user passes, cached verdicts (all read-only) and the editable live settings singleton.

Imported by the admin package's ``__init__`` so that autodiscovery registers these.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django import forms
from django.contrib import admin
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html

from .. import reasoning_display, selectors
from ..conf import app_settings
from ..exceptions import InvalidThreshold
from ..history_display import actor_words
from ..models import ConsolidationCursor, LiveSettings, RiskPolicy, StageMode, TruthChange, UserPass, VerdictCacheEntry
from ..run_settings import get_effective_settings, validate_threshold
from ..selectors import named_users, user_search_fields
from ..services.hygiene import prune
from .base import FramedDenialMixin, ReadOnlyAdmin, can_view_truths, change_url, run_page_link

if TYPE_CHECKING:
    from .base import FieldGroups, ListDisplay

#: Audit columns and fields that quote a truth (its text, or a reason that may quote
#: it): personal data, shown only to staff who may also view truths.
TRUTH_TEXT = frozenset({"truth", "content", "reason", "reason_display", "short_reason"})


@admin.register(TruthChange)
class TruthChangeAdmin(ReadOnlyAdmin):
    """The append-only audit of creations, retirements, restorations and undos.

    Its own view permission opens it, as for any model (an auditor need not read
    truths), and so does the view permission on truths, as for every record of the
    console; what quotes a truth stays behind the truths' view permission.
    """

    # Short columns so user, reason, actor, review and run fit 1360 px.
    list_display = [
        "id",
        "created_at",
        "action",
        "truth_display",
        "user",
        "short_reason",
        "actor_display",
        "review_link",
        "run_link",
    ]
    list_filter = ["action", "created_at", "actor"]
    search_fields = ["content", "reason", *user_search_fields(), "=truth__id"]
    # The review's snapshot names the aliases of reasons recorded before truth numbers.
    list_select_related = ["truth", "user", "review"]
    date_hierarchy = "created_at"
    raw_id_fields = ["truth", "user", "review", "run"]
    readonly_fields = ["reason_display"]

    def get_queryset(self, request: HttpRequest) -> Any:
        return super().get_queryset(request).defer("review__raw_response", "review__decision")

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # Its own permission opens it too: the columns below keep truth text behind the truths' gate.
        return admin.ModelAdmin.has_view_permission(self, request, obj) or can_view_truths(request)

    def get_list_display(self, request: HttpRequest) -> ListDisplay[Any]:
        if can_view_truths(request):
            return list(self.list_display)
        return ["truth_number" if f == "truth_display" else f for f in self.list_display if f not in TRUTH_TEXT]

    def get_list_select_related(self, request: HttpRequest) -> list[str]:
        return [f for f in self.list_select_related if f != "truth" or can_view_truths(request)]

    def get_search_fields(self, request: HttpRequest) -> list[str]:
        return [f for f in self.search_fields if can_view_truths(request) or f not in ("content", "reason")]

    def get_fields(self, request: HttpRequest, obj: Any = None) -> FieldGroups:
        # The reason as operators read it: truth numbers, never the judge's call-local aliases.
        fields = [f for f in super().get_fields(request, obj) if f != "reason_display"]
        fields = ["reason_display" if f == "reason" else f for f in fields]
        if can_view_truths(request):
            return fields
        return ["truth_number" if f == "truth" else f for f in fields if f not in TRUTH_TEXT - {"truth"}]

    @admin.display(description="by", ordering="actor")
    def actor_display(self, obj: TruthChange) -> str:
        """Who made the change, in words ("the model openai/x (judge)", "the noise stage")."""
        return actor_words(obj.actor)

    @admin.display(description="reason")
    def short_reason(self, obj: TruthChange) -> str:
        reason = reasoning_display.numbered_reason(obj)
        return reason if len(reason) <= 60 else reason[:57] + "..."

    @admin.display(description="reason")
    def reason_display(self, obj: TruthChange) -> str:
        return reasoning_display.numbered_reason(obj)

    @admin.display(description="truth", ordering="truth_id")
    def truth_display(self, obj: TruthChange) -> str:
        text = obj.truth.content if len(obj.truth.content) <= 40 else obj.truth.content[:39] + "…"
        return format_html('<a href="{}">#{}</a> {}', change_url(obj.truth), obj.truth_id, text)

    @admin.display(description="review", ordering="review_id")
    def review_link(self, obj: TruthChange) -> str:
        if obj.review_id is None:
            return "—"
        return format_html(
            '<a href="{}">#{}</a>',
            reverse("admin:iris_consolidation_clusterreview_change", args=[obj.review_id]),
            obj.review_id,
        )

    @admin.display(description="run", ordering="run_id")
    def run_link(self, obj: TruthChange) -> str:
        if obj.run_id is None:
            return "—"
        return run_page_link(obj.run_id)

    @admin.display(description="truth", ordering="truth_id")
    def truth_number(self, obj: TruthChange) -> str:
        return f"#{obj.truth_id}"


class InternalAdmin(ReadOnlyAdmin):
    """Bookkeeping tables of the passes (cursors, user passes, cached verdicts): left out
    of the admin's menu, which keeps to what operators act on, and linked
    from the run list's "Internal records" instead."""

    def get_model_perms(self, request: HttpRequest) -> dict[str, bool]:
        return {}  # hidden from the index and the sidebar; the pages still answer


@admin.register(ConsolidationCursor)
class ConsolidationCursorAdmin(InternalAdmin):
    list_display = ["user", "updated_at", "truth_id", "run", "moved_at"]
    list_select_related = ["user", "run"]
    search_fields = user_search_fields()


@admin.register(UserPass)
class UserPassAdmin(InternalAdmin):
    list_display = ["id", "run", "user", "seeds", "covers_cursor", "cursor_updated_at", "advanced_updated_at"]
    list_filter = ["covers_cursor"]
    list_select_related = ["run", "user"]
    search_fields = user_search_fields()


@admin.register(VerdictCacheEntry)
class VerdictCacheEntryAdmin(InternalAdmin):
    # ``stage``: blank for the judge's "keep", else the stage whose answer it is (relocate, promote).
    list_display = ["id", "user", "stage", "model", "prompt_version", "members", "hits", "created_at", "last_hit_at"]
    list_filter = ["stage", "model", "prompt_version"]
    list_select_related = ["user"]
    search_fields = [*user_search_fields(), "reasoning"]

    @admin.display(description="members")
    def members(self, obj: VerdictCacheEntry) -> int:
        return len(obj.member_hashes or ())


THRESHOLD_RANGE = "The similarity threshold is a cosine similarity: above 0 and at most 1 (for example 0.75)."
INTERVAL_RANGE = "Hours between scheduled runs must be 1 or more; leave it empty to use the default."
COST_RANGE = "The budget per run is in USD: 0 or more; leave it empty for no cap."
SHARE_RANGE = "The prune cap is a share of a user's truths from 0 to 1 (0.1 is 10%); leave it empty to use the default."
PRUNE_PREVIEW = (
    "With these settings the next pass {preview}. Tick “{confirm}” and save again to apply prune, "
    "or keep it in report mode."
)
CONFIRM_PRUNE = "I have read what the next pass would prune"
NO_RECORD_TITLE = "Live settings: none saved yet, the defaults below are in force"
UNKNOWN_USERS = "No user named {names}. Check the spelling; separate names with commas."
USE_DEFAULT = "Use the default (currently {value})"


def _yes_no(value: Any) -> str:
    return "yes" if value else "no"


class _DefaultOrYesNo(forms.NullBooleanSelect):
    """Yes / No / "Use the default (currently …)" instead of Django's "Unknown"."""

    def __init__(self, default: bool) -> None:
        super().__init__()
        self.choices = [("unknown", USE_DEFAULT.format(value=_yes_no(default))), ("true", "Yes"), ("false", "No")]


class LiveSettingsForm(forms.ModelForm):
    """The live settings in plain words: each empty field says which default it falls
    back to, errors say what to enter, users are named by username."""

    allowed_usernames = forms.CharField(
        label="Allowed users",
        required=False,
        widget=forms.TextInput(attrs={"size": 60}),
        help_text="Usernames separated by commas: only these users are consolidated. "
        "Empty: use the default ({default}).",
    )

    confirm_prune = forms.BooleanField(
        label=CONFIRM_PRUNE,
        required=False,
        help_text="Asked when prune is switched to apply: the page first shows what the next pass would prune.",
    )

    class Meta:
        model = LiveSettings
        exclude = ["allowed_users"]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        defaults = {
            "enabled": app_settings.ENABLED,
            "scheduled_dry_run_only": app_settings.SCHEDULED_DRY_RUN_ONLY,
            "interval_hours": app_settings.SCHEDULE_INTERVAL_HOURS or "every schedule slot",
            "max_retirements_per_run": app_settings.MAX_RETIREMENTS_PER_RUN,
            "max_prune_share": app_settings.MAX_PRUNE_SHARE,
            "similarity_threshold": app_settings.SIMILARITY_THRESHOLD,
            "max_cost_per_run": (
                "no cap" if app_settings.MAX_COST_PER_RUN is None else f"{app_settings.MAX_COST_PER_RUN:g} USD"
            ),
        }
        for name, default in defaults.items():
            field = self.fields.get(name)
            if field is None:
                continue
            plain = field.help_text.split(" Empty:")[0]
            if isinstance(field, forms.NullBooleanField):
                field.widget = _DefaultOrYesNo(bool(default))
                field.help_text = plain
            else:
                field.widget.attrs["placeholder"] = f"default: {default}"
                field.help_text = f"{plain} Empty: {USE_DEFAULT.format(value=default).lower()}."
        risk = self.fields.get("risk_policy")
        if isinstance(risk, forms.ChoiceField):
            default = str(app_settings.RISK_POLICY)
            risk.choices = [("", USE_DEFAULT.format(value=default)), *RiskPolicy.choices]
            risk.help_text = risk.help_text.split(" Empty:")[0]
        for name, field in self.fields.items():
            if name.endswith("_mode") and hasattr(field, "choices"):
                # The stage's mode in force when the field is empty, not the setting's name.
                default = str(getattr(app_settings, name.removesuffix("_mode").upper()))
                field.choices = [("", USE_DEFAULT.format(value=default)), *[c for c in field.choices if c[0]]]
                field.help_text = f"{field.help_text.split(' Empty:')[0]} Empty: use the default ({default})."
        allowlist = ", ".join(str(v) for v in app_settings.USER_ALLOWLIST or ()) or "every user"
        users = self.fields["allowed_usernames"]
        users.help_text = users.help_text.format(default=allowlist)
        if self.instance.pk is not None:
            users.initial = ", ".join(selectors.list_allowed_usernames(settings=self.instance))

    def clean_similarity_threshold(self) -> float | None:
        value = self.cleaned_data.get("similarity_threshold")
        if value is not None:
            try:
                validate_threshold(value)
            except InvalidThreshold:
                raise forms.ValidationError(THRESHOLD_RANGE) from None
        return value

    def clean_max_cost_per_run(self) -> Any:
        value = self.cleaned_data.get("max_cost_per_run")
        if value is not None and value < 0:
            raise forms.ValidationError(COST_RANGE)  # before the table's constraint says it in its own words
        return value

    def clean_max_prune_share(self) -> float | None:
        value = self.cleaned_data.get("max_prune_share")
        if value is not None and not 0 <= value <= 1:
            raise forms.ValidationError(SHARE_RANGE)
        return value

    def clean(self) -> dict[str, Any]:
        """Prune switched to apply is saved only once the page has shown what the next
        pass would prune with the settings being saved (``prune.preview``, reads only)."""
        super().clean()
        data = self.cleaned_data
        if self.errors or data.get("confirm_prune"):
            return data
        new_mode = data.get("prune_mode") or str(app_settings.PRUNE)
        if new_mode != StageMode.APPLY or self._prune_applied_before():
            return data
        share = data.get("max_prune_share")
        users = data.get("allowed_usernames") or []
        user_ids = [u.pk for u in users] or selectors.list_user_ids_to_consolidate(
            user_id=None, max_generation=app_settings.MAX_GENERATION, min_truths=1)
        preview = prune.preview(
            user_ids=user_ids, now=timezone.now(),
            share=float(app_settings.MAX_PRUNE_SHARE if share is None else share),
            decay_on=(data.get("decay_mode") or str(app_settings.DECAY)) != StageMode.OFF,
        )
        raise forms.ValidationError(PRUNE_PREVIEW.format(preview=preview.text(), confirm=CONFIRM_PRUNE))

    def _prune_applied_before(self) -> bool:
        """Whether prune was already in apply mode with the record as saved (no new risk)."""
        return get_effective_settings().stage_modes.get("prune") == StageMode.APPLY

    def clean_interval_hours(self) -> int | None:
        value = self.cleaned_data.get("interval_hours")
        if value is not None and value < 1:
            raise forms.ValidationError(INTERVAL_RANGE)
        return value

    def clean_allowed_usernames(self) -> list[Any]:
        names = [n.strip() for n in self.cleaned_data.get("allowed_usernames", "").replace("\n", ",").split(",")]
        names = [n for n in names if n]
        users, unknown = selectors.get_users_by_username(names=names)
        if unknown:
            raise forms.ValidationError(UNKNOWN_USERS.format(names=", ".join(f"“{n}”" for n in unknown)))
        return users


@admin.register(LiveSettings)
class LiveSettingsAdmin(FramedDenialMixin, admin.ModelAdmin):
    """The one settings record; its list page leads straight to it (or to "add" before it exists)."""

    form = LiveSettingsForm
    fields = [
        "enabled",
        "interval_hours",
        "scheduled_dry_run_only",
        "allowed_usernames",
        "max_retirements_per_run",
        "max_prune_share",
        "similarity_threshold",
        "max_cost_per_run",
        "risk_policy",
        ("mine_mode", "noise_mode", "decay_mode", "lexical_mode"),
        ("semantic_mode", "relocate_mode", "promote_mode", "prune_mode"),
        "confirm_prune",
        "in_force",
        "updated_at",
    ]
    readonly_fields = ["in_force", "updated_at"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return super().has_add_permission(request) and not LiveSettings.objects.exists()

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def save_related(self, request: HttpRequest, form: Any, formsets: Any, change: bool) -> None:
        super().save_related(request, form, formsets, change)
        form.instance.allowed_users.set(form.cleaned_data["allowed_usernames"])

    def render_change_form(
        self,
        request: HttpRequest,
        context: dict[str, Any],
        add: bool = False,
        change: bool = False,
        form_url: str = "",
        obj: LiveSettings | None = None,
    ) -> Any:
        # One record: "Save and add another" and "Save as new" make no sense.
        context.update(show_save_and_add_another=False, show_save_as_new=False)
        if add:
            context["title"] = NO_RECORD_TITLE  # not "Add live settings": there is nothing to add to
        return super().render_change_form(request, context, add=add, change=change, form_url=form_url, obj=obj)

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
            f"enabled: {_yes_no(effective.enabled)}; "
            f"interval: {f'{effective.interval_hours} h' if effective.interval_hours else 'every schedule slot'}; "
            f"scheduled passes dry-run only: {_yes_no(effective.scheduled_dry_run_only)}; users: {users}; "
            f"at most {effective.max_retirements_per_run} retirements per run; "
            f"prune at most {effective.max_prune_share:.0%} of a user's truths per pass; "
            f"similarity threshold: {effective.similarity_threshold}; "
            "budget per run: "
            f"{'none' if effective.max_cost_per_run is None else f'{effective.max_cost_per_run:g} USD'}; "
            f"risk policy: {effective.risk_policy}; "
            f"stages: {', '.join(f'{s} {m}' for s, m in effective.stage_modes.items())}"
        )
