"""What an operator does to a run from the run admin: retry its failed clusters, cancel it
while it waits for a worker, apply a dry run's verdicts.

Each asks first on a confirmation page (the clusters to apply chosen there; stale ones are
not offered) and acts on POST through one service (``recovery.retry_failed``,
``cancel.cancel_waiting_run``, ``dry_runs.start_application``); a refusal is a message. All
need the change permission on truths. Applying creates the run and enqueues its tasks; the
work (invariants and freshness re-checked, writes) happens in the queue.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import path
from django.utils.html import format_html

from .. import review_display, run_display, selectors
from ..exceptions import ApplyRefused, CancelRefused, RetryRefused
from ..models import ConsolidationJob, ConsolidationRun
from ..services.operations import dry_runs
from ..services.queue import cancel, dispatch, recovery
from .base import (
    AdminMixin,
    can_change_truths,
    change_url,
    missing_object,
    object_page,
    run_page_link,
    template_list,
    url_name,
)

APPLY_QUEUED = (
    "Queued run {run} to apply {count} previewed verdict(s) of dry run {dry}; "
    "each applies as previewed, re-checked for freshness and the invariants."
)
APPLY_TITLE = "Apply the verdicts of dry run {run}"
CANCELLED = "Run {run} cancelled: its {count} queued job(s) will not run; nothing was applied."
CANCEL_TITLE = "Cancel run {run}?"
CANCEL_LINES = (
    "No worker has taken any of this run's {count} queued job(s). Cancelling closes them unrun: the run ends "
    "\u201ccancelled\u201d, nothing is applied, and it cannot be retried (start a new run instead).",
    "The cancel is written to the run's history with your name and the time.",
)
RETRY_TITLE = "Retry the failed clusters of run {run}?"
RETRY_LINES = (
    "This re-queues the run's {count} failed job(s). Each cluster is judged again on its members as they are "
    "now (re-read, re-validated, freshness re-checked when written); with an LLM judge that means new model calls.",
    "The retry is written to the run's history with your name and the time.",
)
RETRY_MANY_TITLE = "Retry the failed clusters of {count} run(s)?"
RETRY_MANY_LINE = "{failed} failed job(s)"
NO_WORKER_QUEUED = (
    "No worker is running (no qcluster reports its heartbeat): the queued run waits until one runs "
    "(manage.py qcluster). A waiting run can be cancelled from its page."
)
RETRIED = "Run {run}: re-queued {count} failed job(s); each cluster is judged again on its members as they are now."
NOTHING_TO_RETRY = "Run {run} has no failed job to retry."
RETRY_NOT_QUEUED = "Run {run} ran in one process ({mode}); only queued runs have jobs to retry."
OUTDATED_PREVIEWS = (
    "{outdated} of {previews} previewed cluster(s) have changed since this dry run (a later run may already "
    "have made these merges): applying finds them stale and changes nothing for them."
)


def no_worker_warning() -> str:
    """``NO_WORKER_QUEUED`` when the workers' heartbeat says none runs (``selectors.get_queue_overview``),
    else "" (a live worker, idle or busy, or a heartbeat that cannot be read)."""
    return NO_WORKER_QUEUED if selectors.get_queue_overview().no_worker else ""


def warn_if_no_worker(model_admin: Any, request: HttpRequest) -> None:
    """After queuing work: warn when no worker has been seen lately."""
    if text := no_worker_warning():
        model_admin.message_user(request, text, messages.WARNING)


class RunActionsMixin(AdminMixin):
    """Retry, cancel and apply on the run admin: their URLs, actions, confirmation pages,
    and the run page's part about applying a dry run (``_applying``)."""

    def get_urls(self) -> list[Any]:
        apply = path(
            "<path:object_id>/apply/",
            self.admin_site.admin_view(self.apply_view),
            name=url_name(self.opts, "apply"),
        )
        retry = path(
            "<path:object_id>/retry/",
            self.admin_site.admin_view(self.retry_view),
            name=url_name(self.opts, "retry"),
        )
        cancel_url = path(
            "<path:object_id>/cancel/",
            self.admin_site.admin_view(self.cancel_view),
            name=url_name(self.opts, "cancel"),
        )
        return [apply, retry, cancel_url, *super().get_urls()]

    def has_apply_permission(self, request: HttpRequest) -> bool:
        """Applying a dry run changes truths: the change permission on truths."""
        return can_change_truths(request)

    # --- retrying failed clusters ------------------------------------------------------

    def has_retry_permission(self, request: HttpRequest) -> bool:
        """Retrying judges and writes again: the change permission on truths."""
        return can_change_truths(request)

    def _retry(self, request: HttpRequest, run: ConsolidationRun) -> None:
        """Re-queue ``run``'s failed jobs through ``recovery.retry_failed`` (as ``retry_consolidation``),
        which writes the retry to the run's history."""
        short = str(run.pk)[:8]
        if not run.on_workers:
            self.message_user(request, RETRY_NOT_QUEUED.format(run=short, mode=run.kind_label), messages.ERROR)
            return
        try:
            count = recovery.retry_failed(run.pk, actor=request.user.get_username())
        except RetryRefused as exc:
            self.message_user(request, str(exc), messages.ERROR)
            return
        if count:
            self.message_user(request, RETRIED.format(run=short, count=count), messages.SUCCESS)
            warn_if_no_worker(self, request)
        else:
            self.message_user(request, NOTHING_TO_RETRY.format(run=short), messages.WARNING)

    def _confirmation(self, request: HttpRequest, obj: ConsolidationRun | None, **extra: Any) -> TemplateResponse:
        """The confirmation page of a cancel or a retry (``run_action_confirmation.html``)."""
        if obj is not None:
            context = object_page(self, request, obj, **extra)
        else:
            request.current_app = self.admin_site.name
            context = {
                **self.admin_site.each_context(request),
                "opts": self.opts,
                "subtitle": None,
                "module_name": str(self.opts.verbose_name_plural).capitalize(),
                **extra,
            }
        return TemplateResponse(request, template_list(self.opts, "run_action_confirmation.html"), context)

    def _retry_refusal(self, run: ConsolidationRun, failed: int) -> str:
        """Why ``run`` cannot be retried ("" when it can), in the words ``_retry`` reports."""
        short = str(run.pk)[:8]
        if cancel.is_cancelled(run):
            return recovery.CANCELLED_NOT_RETRIED.format(run=short)
        if not run.on_workers:
            return RETRY_NOT_QUEUED.format(run=short, mode=run.kind_label)
        return "" if failed else NOTHING_TO_RETRY.format(run=short)

    @admin.action(description="Retry the failed clusters of the selected runs", permissions=["retry"])
    def retry_failed_clusters(
        self, request: HttpRequest, queryset: QuerySet[ConsolidationRun]
    ) -> TemplateResponse | None:
        """Ask first (a page listing each run and what a retry does to it), then retry on "post"."""
        runs = list(queryset.order_by("created_at"))
        if request.POST.get("post") == "yes":
            for run in runs:
                self._retry(request, run)
            return None
        failed = selectors.count_failed_jobs_by_run(runs=runs)
        rows = [
            (
                run,
                self._retry_refusal(run, failed.get(run.pk, 0)) or RETRY_MANY_LINE.format(failed=failed.get(run.pk, 0)),
            )
            for run in runs
        ]
        retryable = [run for run in runs if not self._retry_refusal(run, failed.get(run.pk, 0))]
        return self._confirmation(
            request,
            None,
            title=RETRY_MANY_TITLE.format(count=len(retryable)),
            step="Retry",
            lines=[RETRY_LINES[0].format(count=sum(failed.get(r.pk, 0) for r in retryable)), RETRY_LINES[1]],
            runs=rows,
            confirm_label="Yes, retry them" if retryable else "",
            hidden=[("action", "retry_failed_clusters"), ("post", "yes")]
            + [(ACTION_CHECKBOX_NAME, str(run.pk)) for run in runs],
        )

    def retry_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """Confirm (GET) or re-queue (POST) the run's failed clusters; needs the change permission on truths."""
        obj = self.get_object(request, unquote(object_id))
        if obj is None:
            return missing_object(self, request, object_id)
        if not (self.has_view_permission(request, obj) and self.has_retry_permission(request)):
            raise PermissionDenied
        if request.method == "POST":
            self._retry(request, obj)
            return HttpResponseRedirect(change_url(obj))
        failed = selectors.count_failed_jobs(run=obj)
        refusal = self._retry_refusal(obj, failed)
        return self._confirmation(
            request,
            obj,
            title=RETRY_TITLE.format(run=str(obj.pk)[:8]),
            step="Retry",
            lines=[refusal] if refusal else [RETRY_LINES[0].format(count=failed), RETRY_LINES[1]],
            confirm_label="" if refusal else "Yes, retry the failed clusters",
        )

    # --- cancelling a run that waits for a worker ------------------------------------

    def cancel_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """Confirm (GET) or cancel (POST) a queued run no worker has started
        (``cancel.cancel_waiting_run``); needs the change permission on truths."""
        obj = self.get_object(request, unquote(object_id))
        if obj is None:
            return missing_object(self, request, object_id)
        if not (self.has_view_permission(request, obj) and can_change_truths(request)):
            raise PermissionDenied
        if request.method == "POST":
            try:
                count = cancel.cancel_waiting_run(run_id=obj.pk, actor=request.user.get_username())
            except CancelRefused as exc:
                self.message_user(request, str(exc), messages.ERROR)
            else:
                self.message_user(request, CANCELLED.format(run=str(obj.pk)[:8], count=count), messages.SUCCESS)
            return HttpResponseRedirect(change_url(obj))
        refusal = cancel.cancel_refusal(obj)
        return self._confirmation(
            request,
            obj,
            title=CANCEL_TITLE.format(run=str(obj.pk)[:8]),
            step="Cancel",
            lines=[refusal]
            if refusal
            else [CANCEL_LINES[0].format(count=selectors.count_run_jobs(run=obj)), CANCEL_LINES[1]],
            confirm_label="" if refusal else "Yes, cancel this run",
        )

    # --- applying a dry run ---------------------------------------------------------

    def _applying(self, run: ConsolidationRun, *, previews: int) -> dict[str, Any]:
        """The run page's part about applying a dry run: whether it can be (``apply_refusal``),
        how many previews went stale, what its application did and refused (each refusal listed)."""
        application = selectors.get_application(run=run) if run.dry_run else None
        stale = self._stale(run, application, previews)
        refusal = dry_runs.apply_refusal(run=run, application=application, previews=previews, stale=len(stale))
        refusals = (
            review_display.application_refusals(selectors.list_application_refusals(application=application))
            if application
            else []
        )
        line = ""
        if application:
            started = (
                ConsolidationJob.objects.filter(run=application)
                .exclude(status=ConsolidationJob.Status.QUEUED, deliveries=0)
                .exists()
            )
            line = format_html(
                run_display.application_line(application, started=started, refused=len(refusals)),
                run=run_page_link(application.pk),
            )
        return {
            "application": application,
            "application_line": line,
            "application_refusals": refusals,
            "apply_refusal": refusal,
            "outdated_warning": self._outdated_warning(len(stale), previews) if refusal is None else "",
        }

    @staticmethod
    def _stale(run: ConsolidationRun, application: ConsolidationRun | None, previews: int) -> set[int]:
        """The ids of ``run``'s previews a later change has made stale (only while it can be applied)."""
        if not (run.dry_run and run.finished_at and application is None and previews):
            return set()
        return dry_runs.stale_previews(list(selectors.list_previews(run=run)))

    @staticmethod
    def _outdated_warning(stale: int, previews: int) -> str:
        """Say, before applying, how many previews a later change has made stale."""
        return OUTDATED_PREVIEWS.format(outdated=stale, previews=previews) if stale else ""

    def _apply(
        self, request: HttpRequest, run: ConsolidationRun, review_ids: list[int] | None = None
    ) -> ConsolidationRun | None:
        try:
            application, review_ids = dry_runs.start_application(
                dry_run_id=run.pk, actor=request.user.get_username(), review_ids=review_ids, send=dispatch.send_jobs
            )
        except ApplyRefused as exc:
            self.message_user(request, str(exc), messages.ERROR)
            return None
        message = format_html(
            APPLY_QUEUED, run=run_page_link(application.pk), count=len(review_ids), dry=run_page_link(run.pk)
        )
        self.message_user(request, message, messages.SUCCESS)
        warn_if_no_worker(self, request)
        return application

    @admin.action(description="Apply the selected dry runs' verdicts as real runs", permissions=["apply"])
    def apply_dry_runs(self, request: HttpRequest, queryset: QuerySet[ConsolidationRun]) -> None:
        for run in queryset.order_by("created_at"):
            self._apply(request, run)

    def apply_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """Confirm (GET: the previewed clusters, each with a box, stale ones not offered) or
        start (POST) applying a dry run, whole or the clusters ticked; needs the change
        permission on truths."""
        obj = self.get_object(request, unquote(object_id))
        if obj is None:
            return missing_object(self, request, object_id)
        if not (self.has_view_permission(request, obj) and self.has_apply_permission(request)):
            raise PermissionDenied
        if request.method == "POST":
            application = self._apply(request, obj, _chosen_ids(request))
            return HttpResponseRedirect(change_url(application or obj))
        previews = list(selectors.list_previews(run=obj))
        application = selectors.get_application(run=obj)
        stale = self._stale(obj, application, len(previews))
        context = object_page(
            self,
            request,
            obj,
            title=APPLY_TITLE.format(run=str(obj.pk)[:8]),
            previews=obj.merged + obj.superseded,
            choices=review_display.preview_choices(previews, stale=stale),
            apply_refusal=dry_runs.apply_refusal(
                run=obj, application=application, previews=len(previews), stale=len(stale)
            ),
            outdated_warning=self._outdated_warning(len(stale), len(previews)),
            no_worker=no_worker_warning(),
        )
        return TemplateResponse(request, template_list(self.opts, "apply_confirmation.html"), context)


def _chosen_ids(request: HttpRequest) -> list[int] | None:
    """The preview ids ticked on the confirmation page (``review``), or None when the form
    chose none explicitly (a POST without ``chosen``: apply every preview). An id that is
    not a number is passed as -1, which ``dry_runs.choose_previews`` refuses as no preview."""
    if "chosen" not in request.POST:
        return None
    return [int(v) if v.strip().isdigit() else -1 for v in request.POST.getlist("review")]
