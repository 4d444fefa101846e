"""The lineage view: why a truth exists, what it replaced, and what it became.

A mixin for the ``Truth`` admin, built like Django's ``history_view``: our route
comes before the admin's catch-all, the object is loaded through the admin's
queryset, the permission is the view-or-change permission (decision D3), the data
comes from ``selectors.get_lineage`` and ``lineage_display.rows_for``, and the page is
a ``TemplateResponse`` over a fallback list of templates. GET only; it writes nothing.
"""

from __future__ import annotations

from typing import Any

from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import URLPattern, path

from .. import lineage_display, selectors
from .base import AdminMixin, can_change_truths, missing_object, object_page, template_list, url_name

#: Query parameter that opens every box of the tree (``?expand=all``).
EXPAND_PARAM = "expand"
TITLE = "Lineage of truth #{pk}"


class LineageViewMixin(AdminMixin):
    """Adds ``<id>/lineage/`` (URL name ``<app>_<model>_lineage``) to a ``ModelAdmin`` of truths."""

    #: Template of the page; None means ``admin/<app>/<model>/lineage.html`` then ``admin/<app>/lineage.html``.
    lineage_template: str | list[str] | None = None

    def get_urls(self) -> list[URLPattern]:
        urls = [
            path(
                "<path:object_id>/lineage/",
                self.admin_site.admin_view(self.lineage_view),
                name=url_name(self.opts, "lineage"),
            )
        ]
        return urls + super().get_urls()

    def lineage_view(
        self, request: HttpRequest, object_id: str, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        """The lineage page of one truth; needs the view or change permission."""
        obj = self.get_object(request, unquote(object_id))
        if obj is None:
            return missing_object(self, request, object_id)
        if not self.has_view_or_change_permission(request, obj):
            raise PermissionDenied
        expanded = request.GET.get(EXPAND_PARAM) == "all"
        graph = selectors.get_lineage(truth=obj)
        display = lineage_display.rows_for(graph, open_depth=10**6 if expanded else lineage_display.OPEN_DEPTH)
        context = object_page(
            self,
            request,
            obj,
            title=TITLE.format(pk=obj.pk),
            lineage=display,
            expanded=expanded,
            can_undo=can_change_truths(request),
            made_at=selectors.get_made_at(truth=obj),
            **(extra_context or {}),
        )
        return TemplateResponse(request, self.lineage_template or template_list(self.opts, "lineage.html"), context)
