"""Pieces shared by the admin modules: permissions, template lists, missing objects."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.contrib.auth import get_permission_codename
from django.db.models import Model
from django.db.models.options import Options
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.text import capfirst

from ..models import Truth

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
        "message": MISSING_OBJECT.format(name=opts.verbose_name.capitalize(), key=object_id),
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


class ReadOnlyAdmin(admin.ModelAdmin):
    """History records: shown to staff who may see truths, never added, edited or deleted."""

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # Runs and reviews quote truths, which are personal data.
        return super().has_view_permission(request, obj) and can_view_truths(request)

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
