"""Undo pages: "Undo this consolidation" on a truth or on a review, and "Undo this run".

GET shows what will change and asks for a reason; POST calls ``services.operations.undo`` and
reports with a message. Both need the change permission on truths. A refusal (nothing
to undo, already undone, consolidated further) is a message and a redirect, never
an error page; when a later step is in the way, the message links to its undo page.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html

from ..exceptions import ConsolidatedFurther, UndoRefused
from ..models import ClusterReview, Truth
from ..selectors import UndoStep
from ..services.operations import run_undo, undo
from .base import AdminMixin, can_change_truths, change_url, missing_object, object_page, template_list, url_name

UNDONE = "Undone: {restored} truth(s) are live again ({ids}); {fate}."
FATE_RETIRED = "truth #{truth} is retired as “consolidation undone”"
FATE_KEPT = "truth #{truth} stays live (it existed before that step)"
UNDO_LATER_FIRST = "Undo truth #{truth} first"
TITLE_TRUTH = undo.Reversal.TITLES[undo.Reversal.CONSOLIDATION]
TITLE_REVIEW = "Undo the consolidation of review #{pk}"


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
        if result.action == undo.Reversal.RESTORE:
            messages.success(request, RESTORED.format(truth=result.truth_id, stage=result.stage or "noise or prune"))
            continue
        fate = (FATE_RETIRED if result.truth_retired else FATE_KEPT).format(truth=result.truth_id)
        ids = ", ".join(f"#{pk}" for pk in result.restored_ids)
        messages.success(request, UNDONE.format(restored=len(result.restored_ids), ids=ids, fate=fate))


class _UndoPage(AdminMixin):
    """Shared GET/POST handling of an undo page."""

    undo_template: str | list[str] | None = None

    def _undo_urls(self) -> list[URLPattern]:
        return [
            path(
                "<path:object_id>/undo/",
                self.admin_site.admin_view(self.undo_view),
                name=url_name(self.opts, "undo"),
            )
        ]

    def _plan(self, obj: Any) -> tuple[str, list[UndoStep]]:
        """The page's title and the steps the undo would reverse; raises ``UndoRefused``."""
        raise NotImplementedError

    def _perform(self, obj: Any, *, actor: str, reason: str) -> list[undo.UndoResult]:
        raise NotImplementedError

    def undo_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """Confirm (GET) or perform (POST) the undo; needs the change permission on truths."""
        obj = self.get_object(request, unquote(object_id))
        if obj is None:
            return missing_object(self, request, object_id)
        if not (self.has_view_or_change_permission(request, obj) and can_change_truths(request)):
            raise PermissionDenied
        try:
            title, steps = self._plan(obj)
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
            self, request, obj, title=title, steps=steps, form=form, truth_opts=Truth._meta
        )
        return TemplateResponse(
            request, self.undo_template or template_list(self.opts, "undo_confirmation.html"), context
        )


class TruthUndoMixin(_UndoPage):
    """``<id>/undo/`` on the truth admin: undo the latest step into that truth."""

    def get_urls(self) -> list[URLPattern]:
        return self._undo_urls() + super().get_urls()

    def _plan(self, obj: Truth) -> tuple[str, list[UndoStep]]:
        reversal = undo.reversal_of(obj)  # what undoing means, chosen once for page and undo
        return reversal.title, [reversal.step]

    def _perform(self, obj: Truth, *, actor: str, reason: str) -> list[undo.UndoResult]:
        return [undo.undo_consolidation(truth_id=obj.pk, actor=actor, reason=reason)]


class ReviewUndoMixin(_UndoPage):
    """``<id>/undo/`` on the review admin: undo everything that review applied."""

    def get_urls(self) -> list[URLPattern]:
        return self._undo_urls() + super().get_urls()

    def _plan(self, obj: ClusterReview) -> tuple[str, list[UndoStep]]:
        return TITLE_REVIEW.format(pk=obj.pk), undo.plan_review_undo(review=obj)

    def _perform(self, obj: ClusterReview, *, actor: str, reason: str) -> list[undo.UndoResult]:
        return undo.undo_review(review_id=obj.pk, actor=actor, reason=reason)


TITLE_RUN = "Undo run {run}: bring back every truth it retired or merged"
RUN_UNDONE = "Run {run} undone: {undone} step(s), {restored} truth(s) live again."
RUN_REFUSED = "Refused: {label}: {reason}"
CHOOSE_ONE_RUN = "Choose one run to undo: each undo has its own confirmation page."


class RunUndoMixin(AdminMixin):
    """``<id>/undo/`` on the run admin, and an action leading there: undo every step of the
    run, newest first (``services.operations.run_undo``). GET lists the steps, those a later
    change made unsafe marked, and asks for a reason; POST undoes them and lists the refused
    ones in a message. Needs the change permission on truths, as every undo page."""

    def get_urls(self) -> list[URLPattern]:
        page = path("<path:object_id>/undo/", self.admin_site.admin_view(self.run_undo_view),
                    name=url_name(self.opts, "undo"))
        return [page, *super().get_urls()]

    def has_undo_permission(self, request: HttpRequest) -> bool:
        """Undoing a run changes truths: the change permission on truths."""
        return can_change_truths(request)

    @admin.action(description="Undo the selected run (asks for confirmation)", permissions=["undo"])
    def undo_selected_run(self, request: HttpRequest, queryset: Any) -> HttpResponse | None:
        """Lead to the selected run's undo page (one run at a time)."""
        runs = list(queryset[:2])
        if len(runs) != 1:
            self.message_user(request, CHOOSE_ONE_RUN, messages.ERROR)
            return None
        return HttpResponseRedirect(reverse(f"admin:{url_name(self.opts, 'undo')}", args=[runs[0].pk]))

    def run_undo_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """Confirm (GET) or perform (POST) the undo of a whole run."""
        run = self.get_object(request, unquote(object_id))
        if run is None:
            return missing_object(self, request, object_id)
        if not (self.has_view_permission(request, run) and self.has_undo_permission(request)):
            raise PermissionDenied
        try:
            planned = run_undo.plan_run_undo(run=run)
        except UndoRefused as exc:
            messages.error(request, str(exc))
            return HttpResponseRedirect(change_url(run))
        form = UndoForm(request.POST or None)
        if request.method == "POST" and form.is_valid():
            try:
                result = run_undo.undo_run(run_id=run.pk, actor=request.user.get_username(),
                                           reason=form.cleaned_data["reason"])
            except UndoRefused as exc:
                messages.error(request, str(exc))
                return HttpResponseRedirect(change_url(run))
            messages.success(request, RUN_UNDONE.format(run=str(run.pk)[:8], undone=len(result.undone),
                                                        restored=len(result.restored_ids)))
            for outcome in result.refused:
                messages.error(request, RUN_REFUSED.format(label=outcome.step.label(), reason=outcome.reason))
            return HttpResponseRedirect(change_url(run))
        context = object_page(self, request, run, title=TITLE_RUN.format(run=str(run.pk)[:8]), planned=planned,
                              refused=sum(1 for p in planned if not p.done), form=form, truth_opts=Truth._meta)
        return TemplateResponse(request, template_list(self.opts, "run_undo_confirmation.html"), context)
