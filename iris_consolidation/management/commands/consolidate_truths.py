"""``manage.py consolidate_truths``: the operator's door onto ``services.queue.launch``:
parses the options, calls ``launch.launch``, prints what it did."""

from __future__ import annotations

import sys
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from ... import inventory_display, review_display, selectors
from ...evaluation import replay
from ...exceptions import InvalidInput, LaunchFailed
from ...llm.prompts import PROMPT_VERSION
from ...models import ConsolidationRun
from ...reasoning_display import action_line, truth_names, with_truth_numbers
from ...services.pipeline import forecast
from ...services.queue import launch
from ..migrated import require_migrated


class Command(BaseCommand):
    help = (
        "Consolidate truths: queue a batch (default), or run it here with --sync or --dry-run; "
        "--apply RUN_ID applies a dry run as it was previewed."
    )

    DISPATCHED = "Dispatched batch: {run_id}"
    NO_WORKER = (
        "No worker is running (no qcluster reports its heartbeat): batch {run_id} waits until one runs. "
        "Start one with: python manage.py qcluster"
    )
    WORKERS_UNSEEN = (
        "Whether a worker runs cannot be seen from here (Q_CLUSTER[\"cache\"] is a per-process cache): batch "
        "{run_id} waits until a python manage.py qcluster runs."
    )
    NOTHING = (
        "Nothing to consolidate: no user has enough consolidatable truths "
        "(two to merge; one when the noise, decay or prune stage runs)."
    )
    DRY_RUN_BANNER = "DRY RUN: clusters are judged and recorded; no truth is changed."
    FAILED_CLUSTERS = "{failed} cluster(s) failed; their truths are unchanged. See run {run_id} in the admin."
    REPLAY_HERE = "--replay runs the pass here: add --sync or --dry-run."
    ESTIMATE_ALONE = (
        "--estimate forecasts a pass and runs none, so it takes no {options}: drop {them} (a dry run "
        "prints the same forecast after judging)."
    )
    REPLAYING = (
        "Judge: the recorded verdicts of {model} (judge prompt {version}), replayed offline through litellm from "
        "{paths} by a server on 127.0.0.1; nothing leaves this machine. To judge live, give the model's API key and "
        "IRIS_CONSOLIDATION_JUDGE=llm (make demo DEMO_JUDGE=llm; README.md, Using an LLM)."
    )
    REPLAYED = (
        "Replayed: {matched} cluster(s) answered from the recording, {missed} not in it (kept); second looks: "
        "{recorded} recorded, {unrecorded} not (withdrawn)."
    )
    OTHER_PROMPT = (
        "Note: the recording answers judge prompt {recorded}; this version sends {current}, so clusters it words "
        "or groups differently are not matched and are kept."
    )
    UNRECORDED_STAGES = (
        "Not in the recording: the model calls of the stages {stages}. This pass asks no model there; "
        "they run as they do without one (as with the rule judge)."
    )
    STOPPED = launch.STOPPED
    BAD_RUN_ID = launch.BAD_RUN_ID
    UNKNOWN_RUN = launch.UNKNOWN_RUN
    APPLY_ALONE = "--apply takes no {options}: it applies the dry run as it was previewed (add --sync to run it here)."
    APPLIED = (
        "Applied dry run {dry}: merged={merged} superseded={superseded} retired={retired} refused={refused} run={run}"
    )
    REFUSED = "  refused: {action}: {reason}"
    INTERRUPTED = launch.INTERRUPTED

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--sync", action="store_true", help="Run in this process instead of queueing.")
        parser.add_argument(
            "--dry-run", action="store_true", help="Judge and record the verdicts but change no truth (implies --sync)."
        )
        parser.add_argument(
            "--estimate",
            action="store_true",
            help="Forecast the run's judge calls, tokens and cost from phase 1 only: no judge call, "
            "nothing written, no API key needed.",
        )
        parser.add_argument(
            "--apply",
            metavar="RUN_ID",
            help="Apply this dry run's previewed actions as a real run (queued; with --sync, here): no judge call, "
            "each action re-checked for freshness and the invariants.",
        )
        parser.add_argument("--user", help="Only this user (id, or username: the user model's USERNAME_FIELD).")
        parser.add_argument("--threshold", help="Cosine similarity threshold in (0, 1] (default: the setting).")
        window = parser.add_mutually_exclusive_group()
        window.add_argument(
            "--since",
            help="Seed clusters only with truths changed since: 'last' (the last successful run's checkpoint), "
            "an ISO 8601 time, or a duration such as 7d (default: each user's cursor).",
        )
        window.add_argument(
            "--full", action="store_true", help="Seed clusters with every truth, ignoring the cursors."
        )
        parser.add_argument(
            "--only",
            metavar="STAGE[,STAGE]",
            help="Run only these stages of the pass: mine, noise, decay, lexical, semantic, relocate, promote, prune "
            "(default: every "
            "stage in its configured mode).",
        )
        parser.add_argument(
            "--replay",
            metavar="FILE",
            action="append",
            help="Judge with a real model's recorded verdicts (JSON lines, e.g. samples/demo.recorded.jsonl), replayed "
            "offline through litellm from 127.0.0.1 instead of the configured judge; a cluster not in the recording "
            "is kept. Needs --sync or --dry-run; may be given more than once.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        require_migrated()
        if options["estimate"] and (given := [f"--{o.replace('_', '-')}" for o in ("sync", "dry_run", "replay")
                                              if options[o]]):
            raise CommandError(self.ESTIMATE_ALONE.format(options=" or ".join(given),
                                                          them="it" if len(given) == 1 else "them"))
        with ExitStack() as stack:
            client = server = None
            if options["replay"]:
                client, server = self._replaying(stack, options)
            self._handle(options, client=client, server=server)

    def _replaying(self, stack: ExitStack, options: dict[str, Any]) -> tuple[Any, replay.ReplayServer]:
        """Start the replay of ``--replay``'s files for this command; says so on screen."""
        if not (options["sync"] or options["dry_run"]):
            raise CommandError(self.REPLAY_HERE)
        paths = [Path(p) for p in options["replay"]]
        try:
            client, server = stack.enter_context(replay.replaying(paths))
        except InvalidInput as exc:
            raise CommandError(str(exc)) from exc
        recorded = server.recordings
        versions = recorded.prompt_versions.get("judge", ())
        self.stdout.write(
            self.REPLAYING.format(
                model=" and ".join(recorded.models) or "an unnamed model", version=", ".join(versions) or "unknown",
                paths=", ".join(map(str, paths)),
            )
        )
        if versions and PROMPT_VERSION not in versions:
            self.stdout.write(self.OTHER_PROMPT.format(recorded=", ".join(versions), current=PROMPT_VERSION))
        if stages := replay.unrecorded_stages(recorded):
            named = " and ".join([", ".join(stages[:-1]), stages[-1]] if len(stages) > 1 else stages)
            self.stdout.write(self.UNRECORDED_STAGES.format(stages=named))
        return client, server

    def _handle(self, options: dict[str, Any], *, client: Any, server: replay.ReplayServer | None) -> None:
        verbosity = options["verbosity"]
        if options["apply"] is not None:
            self._apply(options)
            return
        progress = _Progress(self, verbosity=verbosity, dry_run=options["dry_run"])
        try:
            result = launch.launch(
                user=options["user"], threshold=options["threshold"], since=options["since"], full=options["full"],
                only=options["only"], sync=options["sync"], dry_run=options["dry_run"], estimate=options["estimate"],
                progress=progress, client=client,
            )
        except LaunchFailed as exc:
            raise CommandError(str(exc), returncode=exc.exit_code) from exc
        finally:
            progress.close()
        if server is not None:
            stats = server.stats
            recorded = sum(n for answer, n in stats.second_looks.items() if answer.startswith("recorded "))
            self.stdout.write(
                self.REPLAYED.format(
                    matched=stats.matched, missed=stats.missed, recorded=recorded,
                    unrecorded=stats.checks_total - recorded,
                )
            )
        if result.estimate is not None:
            self.stdout.write(inventory_display.forecast_line(result.estimate))
            return
        run = result.run
        assert run is not None  # only an estimate has no run
        if result.queued:
            # The id line is the whole output by default: scripts read the batch id from it.
            # The window is stored on the run (and shown in the admin); -v 2 prints it too.
            self.stdout.write(self.style.SUCCESS(self.DISPATCHED.format(run_id=run.pk)))
            self._warn_if_no_worker(run)
            if verbosity >= 2:
                self.stdout.write(inventory_display.window_line(run))
            return
        self._report(run, result.seconds, verbosity=verbosity)

    def _warn_if_no_worker(self, run: ConsolidationRun) -> None:
        """After a queued batch's id: on stderr (stdout stays the id line scripts read), how to
        start a worker when the workers' heartbeat says none runs (``NO_WORKER``), or that it
        cannot be seen (``WORKERS_UNSEEN``); nothing while a qcluster is alive."""
        overview = selectors.get_queue_overview()
        if overview.no_worker:
            self.stderr.write(self.style.WARNING(self.NO_WORKER.format(run_id=run.pk)))
        elif not overview.heartbeat:
            self.stderr.write(self.WORKERS_UNSEEN.format(run_id=run.pk))

    #: Options of a pass that ``--apply`` does not take (it replays what the dry run decided).
    PASS_OPTIONS = ("dry_run", "estimate", "user", "threshold", "since", "full", "only")

    def _apply(self, options: dict[str, Any]) -> None:
        """``--apply RUN_ID``: queue (or with ``--sync`` execute) the application of a dry run."""
        given = [name for name in self.PASS_OPTIONS if options[name] not in (None, False)]
        if given:
            flags = ", ".join("--" + name.replace("_", "-") for name in given)
            raise CommandError(self.APPLY_ALONE.format(options=flags))
        progress = _Progress(self, verbosity=options["verbosity"], dry_run=False)
        try:
            result = launch.apply_dry_run(run_id=options["apply"], sync=options["sync"], progress=progress)
        except LaunchFailed as exc:
            raise CommandError(str(exc), returncode=exc.exit_code) from exc
        finally:
            progress.close()
        run = result.run
        assert run is not None  # only an estimate has no run
        if result.queued:
            self.stdout.write(self.style.SUCCESS(self.DISPATCHED.format(run_id=run.pk)))
            self._warn_if_no_worker(run)
            return
        refusals = review_display.application_refusals(selectors.list_application_refusals(application=run))
        if options["verbosity"] >= 1:
            for row in refusals:
                self.stdout.write(self.REFUSED.format(action=row.action, reason=row.reason))
        self.stdout.write(
            self.APPLIED.format(
                dry=run.source_run_id, merged=run.merged, superseded=run.superseded, retired=run.retired,
                refused=len(refusals), run=run.pk,
            )
        )
        if run.failed:
            raise CommandError(self.FAILED_CLUSTERS.format(failed=run.failed, run_id=run.pk))

    def _report(self, run: ConsolidationRun, seconds: float, *, verbosity: int) -> None:
        """What an in-process run did; ``FAILED_CLUSTERS`` (exit status 1) if a cluster failed."""
        if run.users == 0 and verbosity >= 1:
            self.stdout.write(self.NOTHING)
        mined = (run.inventory or {}).get("stages", {}).get("mine") or {}
        if mined.get("sessions"):
            # Before the summary, which stays the last line at verbosity 0.
            self.stdout.write(inventory_display.mining_line(mined))
        for line in inventory_display.nothing_merged_lines(run):
            self.stdout.write(line)
        self.stdout.write(_summary(run, seconds))
        if run.dry_run:
            self.stdout.write(inventory_display.forecast_line(forecast.Forecast.from_dict(run.forecast)))
        if verbosity >= 1:
            for line in inventory_display.report_lines(run, verbosity=verbosity):
                self.stdout.write(line)
        if run.failed:
            raise CommandError(self.FAILED_CLUSTERS.format(failed=run.failed, run_id=run.pk))


def _summary(run: ConsolidationRun, seconds: float) -> str:
    would = "would_" if run.dry_run else ""
    return (
        f"Summary: users={run.users} truths={run.truths} embedded={run.embedded} "
        f"clusters={run.clusters_found} {would}merge{'' if would else 'd'}={run.merged} "
        f"{would}supersede{'' if would else 'd'}={run.superseded} {would}retire{'' if would else 'd'}={run.retired} "
        f"kept={run.kept} rejected={run.rejected} stale={run.stale} failed={run.failed} "
        f"{inventory_display.spend_fields(run)} tokens={run.tokens} embed_seconds={run.embed_seconds:.1f} "
        f"cluster_seconds={run.cluster_seconds:.1f} seconds={seconds:.1f} run={run.pk}"
    )


#: One refused action of a reviewed cluster: the validator's code and its words.
REFUSED_LINE = "      refused ({code}): {reason}"


def refusal_lines(review: Any) -> list[str]:
    """The lines of a ``ClusterReview``'s refusals (``review.rejections``: dicts with
    ``code`` and ``reason``), ``REFUSED_LINE`` each, truths named by number (#id) as its
    snapshot has them; a reason given twice (two actions refused alike) is printed once.
    The one place a pass's progress shows why the validator refused, dry run or not."""
    names = truth_names(review.snapshot)
    refusals = (
        (str(r.get("code") or "-"), with_truth_numbers(str(r.get("reason", "")), names))
        for r in review.rejections or ()
    )
    return [REFUSED_LINE.format(code=code, reason=reason) for code, reason in dict.fromkeys(refusals)]


class _Progress:
    """Progress display: the run's header, then on a terminal (only) a rich bar for each
    level, with counts, elapsed time and time left: the users, the truths being embedded (most
    of a large user's pass) and the current user's clusters being judged; plain ``[i/n] user
    <username>`` lines otherwise."""

    def __init__(self, command: Command, *, verbosity: int, dry_run: bool) -> None:
        self.command = command
        self.verbosity = verbosity
        self.dry_run = dry_run
        self.bar: Any = None
        self.tasks: dict[str, Any] = {}

    def _show(self, key: str, description: str, *, completed: int, total: int) -> None:
        """Set the bar ``key`` (added on first use; restarted when its total changes)."""
        task = self.tasks.get(key)
        if task is None:
            self.tasks[key] = self.bar.add_task(description, total=total, completed=completed)
        elif next(t.total for t in self.bar.tasks if t.id == task) != total:
            self.bar.reset(task, total=total, completed=completed, description=description)
        else:
            self.bar.update(task, completed=completed, description=description)

    def __call__(self, stage: str, i: int, n: int, payload: Any) -> None:
        if self.verbosity < 1:
            return
        write = self.command.stdout.write
        if stage == "start":
            self._start(payload)
        elif stage == "user":
            (name,) = selectors.named_users([payload])
            if self.bar is not None:
                self._show("users", f"users (now {name})", completed=i - 1, total=n)
            else:
                write(f"[{i}/{n}] user {name}")
        elif stage == "embed" and self.bar is not None:
            self._show("truths", "truths embedded", completed=i, total=n)
        elif stage == "clusters":
            if self.bar is not None:
                self._show("clusters", "clusters judged", completed=0, total=len(payload))
            else:
                write(f"  {len(payload)} clusters")
        elif stage == "cluster":
            review = payload
            if self.bar is not None:
                self._show("clusters", "clusters judged", completed=i, total=n)
            else:
                write(f"  [{i}/{n}] {review.get_outcome_display()}")
            self._review(review)

    def _review(self, review: Any) -> None:
        """A reviewed cluster's truths, actions and reasoning (verbosity 2, or a dry run's
        actions at 1), saying which truth survives an absorbing merge; its refusals, with their
        codes, at verbosity 1 in a dry run and a real one alike (``refusal_lines``)."""
        write = self.command.stdout.write
        names = truth_names(review.snapshot)
        if self.verbosity >= 2 or (self.dry_run and review.applied_actions):
            for row in review.snapshot:
                write(f"      #{row['id']}: {row['content']}")
            for action in review.applied_actions:
                write("      -> " + action_line(action, names, snapshot=review.snapshot, dry_run=self.dry_run))
        for line in refusal_lines(review):  # verbosity >= 1 here (``__call__``)
            write(line)
        if self.verbosity >= 3 or (self.dry_run and review.applied_actions):
            write(f"      reasoning: {with_truth_numbers(review.reasoning, names)}")

    def _start(self, run: ConsolidationRun) -> None:
        """The header of a run executed here; then the bar, on a terminal."""
        command = self.command
        if run.dry_run:
            command.stdout.write(command.style.WARNING(command.DRY_RUN_BANNER))
        command.stdout.write(inventory_display.window_line(run))
        command.stdout.write(f"Run {run.pk}: judge {run.judge}, threshold {run.threshold}")
        if sys.stdout.isatty() and command.stdout._out is sys.stdout:
            self.bar = Progress(
                TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                TextColumn("left"), TimeRemainingColumn(), transient=True,
            )
            self.bar.start()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()
