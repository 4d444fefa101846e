"""Pieces shared by the admin modules: permissions, template lists, missing objects."""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import TYPE_CHECKING, Any

from django.contrib import admin
from django.contrib.auth import get_permission_codename
from django.core.exceptions import PermissionDenied
from django.db.models import Model
from django.db.models.options import Options
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import URLPattern, reverse
from django.utils.html import format_html
from django.utils.http import urlencode
from django.utils.text import capfirst

from ..models import RunId, Truth

if TYPE_CHECKING:
    # django-stubs' names for what ``get_fields`` and ``get_list_display`` return.
    from django.contrib.admin.options import _FieldGroups as FieldGroups  # noqa: F401
    from django.contrib.admin.options import _ListDisplayT as ListDisplay  # noqa: F401

    #: Base of this package's ``ModelAdmin`` mixins: to the type checker the ``ModelAdmin``
    #: they are mixed into (so ``self.opts``, ``self.admin_site``, ``super().get_urls()``
    #: are checked); at run time ``object``, so the mixin adds nothing to the class's MRO.
    AdminMixin = admin.ModelAdmin
else:
    AdminMixin = object

#: Shown when a URL names an object that does not exist (Django's own wording).
MISSING_OBJECT = "{name} with ID “{key}” doesn’t exist. Perhaps it was deleted?"


def _truth_perm(request: HttpRequest, action: str) -> bool:
    opts = Truth._meta
    return request.user.has_perm(f"{opts.app_label}.{get_permission_codename(action, opts)}")


def can_view_truths(request: HttpRequest) -> bool:
    """Whether the user may see truth text (view or change permission on truths)."""
    return _truth_perm(request, "view") or _truth_perm(request, "change")


def can_change_truths(request: HttpRequest) -> bool:
    """Whether the user may pin, run, apply and undo (change permission on truths)."""
    return _truth_perm(request, "change")


def template_list(opts: Options[Any], name: str) -> list[str]:
    """The model's own template, then the app's: projects override either."""
    return [f"admin/{opts.app_label}/{opts.model_name}/{name}", f"admin/{opts.app_label}/{name}"]


def missing_object(model_admin: admin.ModelAdmin[Any], request: HttpRequest, object_id: str) -> HttpResponse:
    """A 404 page in the admin's own look for an id that matches no object (or none
    this admin may show).

    A 404 on our custom pages (lineage, undo, apply, history) rather
    than the change page's redirect with a message: a stale or guessed link says
    plainly that there is nothing there, and never hints whether a truth of another
    user exists. The page keeps the admin's header and navigation instead of
    the bare "Not Found" that ``Http404`` gives with ``DEBUG`` off.
    """
    opts = model_admin.opts
    context = {
        **model_admin.admin_site.each_context(request),
        "opts": opts,
        "title": "Not found",
        "subtitle": None,
        "message": MISSING_OBJECT.format(name=str(opts.verbose_name).capitalize(), key=object_id),
    }
    request.current_app = model_admin.admin_site.name
    return TemplateResponse(request, template_list(opts, "missing.html"), context, status=404)


def object_page(
    model_admin: admin.ModelAdmin[Any], request: HttpRequest, obj: Model, *, title: str, **extra: Any
) -> dict[str, Any]:
    """The context every page of one object needs (lineage, history, undo, apply), as
    Django's ``history_view`` builds it, plus ``extra``; sets ``request.current_app``."""
    request.current_app = model_admin.admin_site.name
    return {
        **model_admin.admin_site.each_context(request),
        "opts": model_admin.opts,
        "object": obj,
        "title": title,
        "subtitle": None,
        "module_name": str(capfirst(model_admin.opts.verbose_name_plural)),
        "preserved_filters": model_admin.get_preserved_filters(request),
        **extra,
    }


def url_name(opts: Options[Any], view: str) -> str:
    """URL name of one of our views, e.g. ``iris_consolidation_truth_lineage``."""
    return f"{opts.app_label}_{opts.model_name}_{view}"


def change_url(obj: Model) -> str:
    opts = obj._meta
    return reverse(f"admin:{opts.app_label}_{opts.model_name}_change", args=[obj.pk])


#: The permissions the console's pages need, in the words the 403 page uses.
VIEW_TRUTHS = "the view permission on truths (iris_consolidation.view_truth)"
CHANGE_TRUTHS = "the change permission on truths (iris_consolidation.change_truth)"
DENIED = "This page needs {permission}, which your account ({user}) does not have. Ask an administrator for it."
#: URL names (after ``<app>_<model>_``) of our pages that change truths.
TRUTH_WRITES = frozenset({"undo", "apply", "retry", "cancel", "restore"})
RECORDS = "{name} are records: they are never added, changed or deleted by hand."


def run_page_link(run_id: RunId) -> str:
    """A link to the run's admin page, labelled with the first eight characters of its id."""
    url = reverse("admin:iris_consolidation_consolidationrun_change", args=[run_id])
    return format_html('<a href="{}">{}</a>', url, str(run_id)[:8])


def missing_permission(model_admin: admin.ModelAdmin[Any], request: HttpRequest, view: str) -> str:
    """The permission ``request.user`` lacks for page ``view`` (``changelist``,
    ``change``, ``undo``...) of ``model_admin``, in words.

    Reading any page of the console needs ``VIEW_TRUTHS`` (they quote truths); changing
    truths (undo, apply, retry, cancel, editing a truth) needs ``CHANGE_TRUTHS``; other
    models need their own permission."""
    opts = model_admin.opts
    writes = view in ("add", "change", "delete") and (view != "change" or request.method == "POST")
    if not can_view_truths(request):
        return VIEW_TRUTHS
    if (view in TRUTH_WRITES or (opts.model is Truth and writes)) and not can_change_truths(request):
        return CHANGE_TRUTHS
    action = view if writes else "view"
    codename = get_permission_codename(action, opts)
    return f"the {action} permission on {opts.verbose_name_plural} ({opts.app_label}.{codename})"


def permission_denied(model_admin: admin.ModelAdmin[Any], request: HttpRequest, view: str) -> HttpResponse:
    """A 403 page in the admin's frame that names the permission the user lacks
    (Django's own is a bare "403 Forbidden" outside the admin)."""
    request.current_app = model_admin.admin_site.name
    context = {
        **model_admin.admin_site.each_context(request),
        "opts": model_admin.opts,
        "title": "Permission needed",
        "subtitle": None,
        "message": (
            RECORDS.format(name=str(capfirst(model_admin.opts.verbose_name_plural)))
            if isinstance(model_admin, ReadOnlyAdmin) and view in ("add", "delete")
            else DENIED.format(
                permission=missing_permission(model_admin, request, view), user=request.user.get_username()
            )
        ),
    }
    return TemplateResponse(request, template_list(model_admin.opts, "denied.html"), context, status=403)


class FramedDenialMixin(AdminMixin):
    """Every page of this ``ModelAdmin`` answers a refusal with ``permission_denied``
    (the admin's frame, the missing permission named) instead of a bare 403."""

    def get_urls(self) -> list[URLPattern]:
        patterns = super().get_urls()
        prefix = f"{self.opts.app_label}_{self.opts.model_name}_"
        for pattern in patterns:
            if isinstance(pattern, URLPattern):
                view = (pattern.name or "").removeprefix(prefix)
                pattern.callback = self._framed(pattern.callback, view)
        return patterns

    def _framed(self, view: Callable[..., HttpResponse], name: str) -> Callable[..., HttpResponse]:
        @wraps(view)
        def framed(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            try:
                return view(request, *args, **kwargs)
            except PermissionDenied:
                if not request.user.is_active or not request.user.is_staff:
                    raise
                return permission_denied(self, request, name)

        return framed


#: Foreign keys to users, shown by ``UserLinkMixin`` as links to the user's truths.
USER_FIELDS = {"user": "user_name", "user_filter": "user_filter_name"}


def _user_link(user: Any, *, missing: str = "—") -> str:
    if user is None:
        return missing
    url = reverse(f"admin:{Truth._meta.app_label}_truth_changelist") + "?" + urlencode({"user": user.get_username()})
    return format_html('<a href="{}" title="This user\'s truths">{}</a>', url, user.get_username())


class UserLinkMixin(AdminMixin):
    """Read-only users (``user``, ``user_filter``) link to the user's truths, a page every
    reader of the console may open, instead of the user's admin page (Django links a
    read-only foreign key without asking whether the reader may open it), for staff who
    may not open users' pages."""

    def _links_users(self, request: HttpRequest) -> bool:
        return not (request.user.has_perm("auth.view_user") or request.user.has_perm("auth.change_user"))

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        fields = super().get_readonly_fields(request, obj)
        if not self._links_users(request):
            return fields
        return [USER_FIELDS.get(f, f) if isinstance(f, str) else f for f in fields]

    def get_fieldsets(self, request: HttpRequest, obj: Any = None) -> Any:
        fieldsets = super().get_fieldsets(request, obj)
        if not self._links_users(request):
            return fieldsets
        all_readonly = not self.has_change_permission(request, obj)
        readonly = set(self.get_readonly_fields(request, obj))

        def swap(fields: Any) -> Any:
            return [
                tuple(swap(f)) if isinstance(f, (list, tuple))
                else (USER_FIELDS[f] if f in USER_FIELDS and (all_readonly or USER_FIELDS[f] in readonly) else f)
                for f in fields
            ]

        return [(name, {**options, "fields": swap(options["fields"])}) for name, options in fieldsets]

    @admin.display(description="user")
    def user_name(self, obj: Any) -> str:
        """The record's user, linked to their truths."""
        return _user_link(getattr(obj, "user", None))

    @admin.display(description="user filter")
    def user_filter_name(self, obj: Any) -> str:
        """A run's one user (``user_filter``), linked to their truths; "every user" without one."""
        return _user_link(getattr(obj, "user_filter", None), missing="every user")


class ReadOnlyAdmin(UserLinkMixin, FramedDenialMixin, admin.ModelAdmin):
    """History records: shown to staff who may see truths, never added, edited or deleted.

    The view permission on truths opens them (they quote truths, which are personal
    data): one permission reads the whole console, as README's "The admin" says."""

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return can_view_truths(request)

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
