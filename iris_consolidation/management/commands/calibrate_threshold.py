"""``manage.py calibrate_threshold``: the threshold curve (evaluation/calibration.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from ...embeddings import get_embedder
from ...evaluation import calibration, pair_scoring
from ...exceptions import EmbeddingError, InvalidInput
from ...run_settings import validate_threshold
from .eval_judge import figure as _figure


class Command(BaseCommand):
    help = (
        "For thresholds 0.40..0.90: clusters, judge calls per 100 truths, and with --pairs the recall, "
        "precision and validator refusals of the oracle judge (the file's labels); with --truths the "
        "clusters only. Nothing is written."
    )

    PAIRS_HEADER = (
        "threshold clusters calls/100 batched/100 recall precision clustered_recall refused  refusals by code"
    )
    TRUTHS_HEADER = "threshold clusters clusters/100 batched/100"

    def add_arguments(self, parser: CommandParser) -> None:
        source = parser.add_mutually_exclusive_group(required=True)
        source.add_argument("--pairs", help="A labelled pairs JSONL file with its .truths.jsonl beside it.")
        source.add_argument("--truths", help="A truths JSONL file (load_truths format): cluster counts only.")
        parser.add_argument(
            "--thresholds",
            help="Comma-separated thresholds (default: 0.40,0.45,...,0.90).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            thresholds = self._thresholds(options["thresholds"])
            embedder = get_embedder()
            if options["pairs"]:
                reports = calibration.calibrate_pairs(
                    Path(options["pairs"]), embedder=embedder, thresholds=thresholds
                )
            else:
                counts = calibration.count_clusters(Path(options["truths"]), embedder=embedder, thresholds=thresholds)
        except (InvalidInput, EmbeddingError) as exc:
            raise CommandError(str(exc)) from exc
        write = self.stdout.write
        write(f"embedding model: {embedder.model_name}; batched = up to {pair_scoring.CLUSTERS_PER_BATCHED_CALL} "
              "clusters of one user per judge call")
        if options["pairs"]:
            first = reports[0]
            write(f"{first.users} users, {first.truths} truths, {first.pairs} pairs ({first.same} same); judge: oracle")
            write(self.PAIRS_HEADER)
            for r in reports:
                codes = ", ".join(f"{code}={n}" for code, n in r.refusals) or "-"
                write(
                    f"{r.threshold:<9.2f} {r.clusters:>8} {r.per_100_truths(r.llm_calls):>9.1f} "
                    f"{r.per_100_truths(r.batched_calls):>11.1f} {_figure(r.recall):>6} {_figure(r.precision):>9} "
                    f"{_figure(r.clustered_recall):>16} {r.rejected:>7}  {codes}"
                )
        else:
            write(f"{counts[0].truths if counts else 0} truths")
            write(self.TRUTHS_HEADER)
            for c in counts:
                write(f"{c.threshold:<9.2f} {c.clusters:>8} {c.clusters_per_100:>12.1f} {c.batched_per_100:>11.1f}")

    @staticmethod
    def _thresholds(raw: str | None) -> tuple[float, ...]:
        if not raw:
            return calibration.DEFAULT_THRESHOLDS
        values = tuple(part.strip() for part in raw.split(",") if part.strip())
        if not values:
            raise InvalidInput(f"--thresholds {raw!r} lists no threshold.")
        return tuple(validate_threshold(v) for v in values)
