"""``manage.py eval_recall``: what phase 1 puts before the judge (evaluation/recall.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError, CommandParser

from ...embeddings import get_embedder
from ...evaluation import recall
from ...exceptions import InvalidInput
from ...run_settings import validate_threshold
from .eval_judge import figure

SHARED = Path("../shared")


class Command(BaseCommand):
    help = (
        "Pair recall of phase 1 (a dry run at the settings) on a careful reader's whole-memory reference, "
        "and the share of golden and public cases' expected actions that share a group when each case sits "
        "among other people's truths; with judge calls per 100 truths. Nothing is written."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--reference", default=str(SHARED / "eval/reference/locomo_whole_memory.jsonl"),
                            help="Whole-memory reference (default: %(default)s); 'none' to skip.")
        parser.add_argument("--truths", default=str(SHARED / "data/locomo_observations.truths.jsonl"),
                            help="The reference's truths file; every user in it counts in the calls (default: "
                            "%(default)s).")
        parser.add_argument("--cases", nargs="*", default=[str(SHARED / "eval/judge_golden.jsonl"),
                                                           str(SHARED / "eval/public_cases.jsonl")],
                            help="Golden-set files whose cases are placed among other truths (default: the golden "
                            "and public sets); none to skip.")
        parser.add_argument("--filler", default=str(SHARED / "data/msc_sessions.truths.jsonl"),
                            help="Truths file whose first-person truths surround each case (default: %(default)s).")
        parser.add_argument("--calls", nargs="*", default=[], metavar="FILE",
                            help="Truths files whose groups and judge calls per 100 truths are printed too (e.g. "
                            "the MSC and PersonaChat truths of ../shared/data).")
        parser.add_argument("--threshold", help="Similarity threshold (default: the setting).")
        parser.add_argument("--missed", type=int, default=0, help="List up to N missed pairs and actions.")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            threshold = None if options["threshold"] is None else validate_threshold(options["threshold"])
            embedder = get_embedder()
            if options["reference"] != "none":
                report = recall.reference_recall(
                    Path(options["reference"]), Path(options["truths"]), embedder=embedder, threshold=threshold
                )
                self._print_reference(report, options["missed"])
            if options["cases"]:
                cases = recall.cases_recall(
                    [Path(p) for p in options["cases"]], Path(options["filler"]), embedder=embedder,
                    threshold=threshold,
                )
                self._print_cases(cases, options["missed"])
            for path in options["calls"]:
                cost = recall.cost_of(Path(path), embedder=embedder, threshold=threshold)
                self.stdout.write(f"== calls on {path}")
                self.stdout.write("cost: " + self._cost(cost))
        except (InvalidInput, ImproperlyConfigured, ValueError) as exc:
            raise CommandError(str(exc)) from exc

    def _cost(self, cost: recall.Cost) -> str:
        return (
            f"{cost.users} users, {cost.truths} truths: {cost.groups} groups "
            f"({cost.per_100(cost.groups):.1f} per 100 truths, {cost.members / max(cost.groups, 1):.2f} members "
            f"each), judge calls {cost.calls} ({cost.per_100(cost.calls):.2f} per 100 truths)"
        )

    def _print_reference(self, r: recall.ReferenceReport, missed: int) -> None:
        write = self.stdout.write
        write("== pair recall on the whole-memory reference")
        for action in ("merge", "supersede"):
            for level in ("all", "high"):
                t = r.tallies.get((action, level), recall.Tally())
                write(f"{action:<9} {level:<4} {t.recalled}/{t.total} = {figure(t.share)}")
        if r.unmatched:
            write(f"{r.unmatched} pair(s) name a source missing from the truths file; skipped")
        write("cost: " + self._cost(r.cost))
        for pair in r.missed[:missed]:
            write(f"  missed {pair.action} ({pair.confidence}) {pair.user}: {pair.a} ~ {pair.b}")

    def _print_cases(self, r: recall.CasesReport, missed: int) -> None:
        write = self.stdout.write
        write(f"== cases among {recall.CASE_FILLER} other truths")
        total = recall.Tally()
        for action in ("merge", "supersede"):
            t = r.tallies.get(action, recall.Tally())
            total.recalled += t.recalled
            total.total += t.total
            write(f"{action:<9} {t.recalled}/{t.total} = {figure(t.share)}")
        write(f"all       {total.recalled}/{total.total} = {figure(total.share)}")
        write("cost: " + self._cost(r.cost))
        for case_id, action, aliases in r.missed[:missed]:
            write(f"  missed {case_id} {action} {', '.join(aliases)}")
