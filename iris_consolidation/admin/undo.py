"""Undo pages: "Undo this consolidation" on a truth or on a review.

GET shows what will change and asks for a reason; POST calls ``services.operations.undo`` and
reports with a message. Both need the change permission on truths. A refusal (nothing
to undo, already undone, consolidated further) is a message and a redirect, never
an error page; when a later step is in the way, the message links to its undo page.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import messages
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html

from ..exceptions import ConsolidatedFurther, UndoRefused
from ..models import ClusterReview, RetiredReason, Truth
from ..selectors import UndoStep
from ..services.hygiene import retire
from ..services.operations import undo
from .base import can_change_truths, change_url, missing_object, object_page, template_list, url_name

UNDONE = "Undone: {restored} truth(s) are live again ({ids}); {fate}."
FATE_RETIRED = "truth #{truth} is retired as “consolidation undone”"
FATE_KEPT = "truth #{truth} stays live (it existed before that step)"
UNDO_LATER_FIRST = "Undo truth #{truth} first"
TITLE_TRUTH = "Undo the consolidation that made truth #{pk}"
TITLE_REVIEW = "Undo the consolidation of review #{pk}"
TITLE_RESTORE = "Restore truth #{pk}, retired by the {stage} stage"


class UndoForm(forms.Form):
    reason = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 3, "cols": 80}),
        max_length=2000,
        help_text="Why this step was wrong. Kept in the lineage with your name.",
    )


def _truth_admin_url(view: str, pk: int) -> str:
    opts = Truth._meta
    return reverse(f"admin:{url_name(opts, view)}", args=[pk])


def _refusal(request: HttpRequest, exc: UndoRefused) -> None:
    if isinstance(exc, ConsolidatedFurther):
        messages.error(
            request,
            format_html(
                '{} <a href="{}">{}</a>.',
                str(exc),
                _truth_admin_url("undo", exc.later_truth_id),
                UNDO_LATER_FIRST.format(truth=exc.later_truth_id),
            ),
        )
    else:
        messages.error(request, str(exc))


RESTORED = "Restored: truth #{truth} is live again (the {stage} stage's retirement is undone)."


def _done(request: HttpRequest, results: list[undo.UndoResult]) -> None:
    for result in results:
        if result.action == "restore":
            messages.success(request, RESTORED.format(truth=result.truth_id, stage=result.stage or "noise or prune"))
            continue
        fate = (FATE_RETIRED if result.truth_retired else FATE_KEPT).format(truth=result.truth_id)
        ids = ", ".join(f"#{pk}" for pk in result.restored_ids)
        messages.success(request, UNDONE.format(restored=len(result.restored_ids), ids=ids, fate=fate))


class _UndoPage:
    """Shared GET/POST handling of an undo page."""

    undo_template: str | list[str] | None = None

    def _undo_urls(self) -> list[Any]:
        admin: Any = self
        return [
            path(
                "<path:object_id>/undo/",
                admin.admin_site.admin_view(self.undo_view),
                name=url_name(admin.opts, "undo"),
            )
        ]

    def _plan(self, obj: Any) -> list[UndoStep]:
        raise NotImplementedError

    def _perform(self, obj: Any, *, actor: str, reason: str) -> list[undo.UndoResult]:
        raise NotImplementedError

    def _title(self, obj: Any) -> str:
        raise NotImplementedError

    def undo_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """Confirm (GET) or perform (POST) the undo; needs the change permission on truths."""
        admin: Any = self
        obj = admin.get_object(request, unquote(object_id))
        if obj is None:
            return missing_object(admin, request, object_id)
        if not (admin.has_view_or_change_permission(request, obj) and can_change_truths(request)):
            raise PermissionDenied
        try:
            steps = self._plan(obj)
        except UndoRefused as exc:
            _refusal(request, exc)
            return HttpResponseRedirect(change_url(obj))
        form = UndoForm(request.POST or None)
        if request.method == "POST" and form.is_valid():
            try:
                results = self._perform(obj, actor=request.user.get_username(), reason=form.cleaned_data["reason"])
            except UndoRefused as exc:
                _refusal(request, exc)
                return HttpResponseRedirect(change_url(obj))
            _done(request, results)
            return HttpResponseRedirect(_truth_admin_url("lineage", results[0].truth_id))
        context = object_page(
            admin, request, obj, title=self._title(obj), steps=steps, form=form, truth_opts=Truth._meta
        )
        return TemplateResponse(
            request, self.undo_template or template_list(admin.opts, "undo_confirmation.html"), context
        )


class TruthUndoMixin(_UndoPage):
    """``<id>/undo/`` on the truth admin: undo the latest step into that truth."""

    def get_urls(self) -> list[Any]:
        return self._undo_urls() + super().get_urls()  # type: ignore[misc]

    def _plan(self, obj: Truth) -> list[UndoStep]:
        return [undo.plan_undo(truth=obj)]

    def _perform(self, obj: Truth, *, actor: str, reason: str) -> list[undo.UndoResult]:
        return [undo.undo_consolidation(truth_id=obj.pk, actor=actor, reason=reason)]

    def _title(self, obj: Truth) -> str:
        if retire.is_hygiene_retirement(obj):  # no consolidation made it: a stage retired it
            stage = "prune" if obj.retired_reason == RetiredReason.PRUNED else "noise"
            return TITLE_RESTORE.format(pk=obj.pk, stage=stage)
        return TITLE_TRUTH.format(pk=obj.pk)


class ReviewUndoMixin(_UndoPage):
    """``<id>/undo/`` on the review admin: undo everything that review applied."""

    def get_urls(self) -> list[Any]:
        return self._undo_urls() + super().get_urls()  # type: ignore[misc]

    def _plan(self, obj: ClusterReview) -> list[UndoStep]:
        return undo.plan_review_undo(review=obj)

    def _perform(self, obj: ClusterReview, *, actor: str, reason: str) -> list[undo.UndoResult]:
        return undo.undo_review(review_id=obj.pk, actor=actor, reason=reason)

    def _title(self, obj: ClusterReview) -> str:
        return TITLE_REVIEW.format(pk=obj.pk)
