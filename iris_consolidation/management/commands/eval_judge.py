"""``manage.py eval_judge``: score the judge and the validator (evaluation/scoring.py, pair_scoring.py, replay.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError, CommandParser

from ...conf import app_settings
from ...embeddings import get_embedder
from ...evaluation import pair_scoring, replay, scoring
from ...exceptions import InvalidInput
from ...llm import get_judge_client


def figure(value: float | None) -> str:
    """A ratio as printed by the evaluation commands: three decimals, or "n/a" when undefined."""
    return "n/a" if value is None else f"{value:.3f}"


_figure = figure


class Command(BaseCommand):
    help = (
        "Score the judge and validator on a golden set (--golden FILE) or on same/different "
        "pairs (--pairs FILE, with its .truths.jsonl beside it). Nothing is written."
    )

    ORACLE_NEEDS_PAIRS = "--oracle judges from the labels of a pairs file: give --pairs FILE."
    HARMFUL = "{harmful} case(s) were harmful: the validator let a damaging verdict through."
    ALSO_NEEDS_RECORDED = "--also adds recordings to --recorded ones: give --recorded FILE."

    def add_arguments(self, parser: CommandParser) -> None:
        source = parser.add_mutually_exclusive_group(required=True)
        source.add_argument("--golden", help="A golden-set JSONL file, e.g. ../shared/eval/judge_golden.jsonl.")
        source.add_argument("--pairs", help="A pairs JSONL file, e.g. ../shared/data/personachat_revised.pairs.jsonl.")
        source.add_argument(
            "--recorded",
            nargs="+",
            metavar="FILE",
            help="Recorded replies of a real model (e.g. ../shared/eval/recorded/*.jsonl), replayed through litellm "
            "into the real pipeline on each file's data set.",
        )
        parser.add_argument(
            "--second-looks",
            choices=["both", *replay.SECOND_LOOK_ANSWERS],
            default="both",
            help="With --recorded: how second looks with no recording are answered (default: both bounds).",
        )
        parser.add_argument("--data", help="With one --recorded file: its data file (default: by its set).")
        parser.add_argument(
            "--also",
            nargs="+",
            default=[],
            metavar="FILE",
            help="With --recorded: more recordings replayed with each file (e.g. new replies for the groups it "
            "misses: a recording, or a NAME.replies.jsonl read with the NAME.requests.jsonl beside it); "
            "the --recorded file's reply wins for a cluster both record.",
        )
        parser.add_argument(
            "--unanswered",
            metavar="OUT",
            help="With one --recorded file: write the calls its recordings did not answer (new groups, second "
            "looks) to OUT (NAME.requests.jsonl), for a model to answer into NAME.replies.jsonl. An empty "
            "--recorded file with --data records every call.",
        )
        parser.add_argument("--judge", choices=sorted(app_settings.JUDGE_CLIENTS), help="Judge (default: the setting).")
        parser.add_argument("--threshold", help="Similarity threshold for --pairs (default: the setting).")
        parser.add_argument(
            "--oracle",
            action="store_true",
            help="With --pairs: judge from the file's labels (no model), to measure clustering + validation alone.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if options["oracle"] and not options["pairs"]:
            raise CommandError(self.ORACLE_NEEDS_PAIRS)
        if options["also"] and not options["recorded"]:
            raise CommandError(self.ALSO_NEEDS_RECORDED)
        if options["recorded"]:
            return self._recorded(options)
        try:
            client = None if options["oracle"] else get_judge_client(options["judge"])
            embedder = get_embedder()
            if options["golden"]:
                assert client is not None  # --oracle needs --pairs (checked above)
                judge_name = client.name
                cases = scoring.load_cases(Path(options["golden"]))
                report = scoring.score_golden(cases, client=client, embedder=embedder)
            else:
                threshold = (
                    options["threshold"] if options["threshold"] is not None else app_settings.SIMILARITY_THRESHOLD
                )
                pairs = pair_scoring.score_pairs(
                    Path(options["pairs"]),
                    threshold=threshold,
                    client=client,
                    embedder=embedder,
                    oracle=options["oracle"],
                )
        except (InvalidInput, ImproperlyConfigured) as exc:
            raise CommandError(str(exc)) from exc
        if options["golden"]:
            self._print_golden(report, judge_name)
            if report.harmful:
                raise CommandError(self.HARMFUL.format(harmful=report.harmful))
        else:
            self._print_pairs(pairs)

    def _print_golden(self, report: scoring.GoldenReport, judge: str) -> None:
        write = self.stdout.write
        write(f"judge {judge}: {report.total} cases, {report.llm_calls} model calls")
        for r in report.results:
            verdict = "correct" if r.correct else "wrong"
            line = f"{r.case.id:<4} {r.case.expected:<13} {verdict:<7} {'HARMFUL ' if r.harmful else ''}"
            line += "applied: " + ("; ".join(r.applied) or "nothing")
            write(line)
            for harm in r.harms:
                write(f"     harm: {harm}")
            if not r.correct and self.verbosity_level >= 1:
                for reason in r.rejections[:2]:
                    write(f"     rejected: {reason}")
                if r.error:
                    write(f"     error: {r.error[:200]}")
        for expected, (good, total) in sorted(report.by_expected.items()):
            write(f"{expected}: {good}/{total}")
        write(f"correct={report.correct}/{report.total} harmful={report.harmful}")

    def _print_pairs(self, r: pair_scoring.PairsReport) -> None:
        write = self.stdout.write
        write(
            f"judge {r.judge}, threshold {r.threshold}: {r.users} users, {r.truths} truths, {r.clusters} clusters, "
            f"{r.merged} merges, {r.superseded} supersedes, {r.rejected} rejected, {r.failed} failed, "
            f"{r.llm_calls} model calls"
        )
        write(
            f"judge calls: {r.llm_calls} ({r.per_100_truths(r.llm_calls):.1f} per 100 truths), "
            f"batched by {pair_scoring.CLUSTERS_PER_BATCHED_CALL} clusters per user: {r.batched_calls} "
            f"({r.per_100_truths(r.batched_calls):.1f} per 100 truths)"
        )
        write("refusals by code: " + (", ".join(f"{code}={n}" for code, n in r.refusals) or "none"))
        write(
            f"clustered together: tp={r.clustered_tp} fp={r.clustered_fp} "
            f"precision={_figure(r.clustered_precision)} recall={_figure(r.clustered_recall)}"
        )
        if r.unmatched:
            write(f"{r.unmatched} pair(s) name a text missing from the truths file; skipped")
        write(
            f"pairs={r.pairs} same={r.same} tp={r.tp} fp={r.fp} fn={r.fn} "
            f"precision={_figure(r.precision)} recall={_figure(r.recall)} f1={_figure(r.f1)}"
        )

    DATA_NEEDS_ONE = "--data and --unanswered go with one recording: give one --recorded file with them."

    def _recorded(self, options: dict[str, Any]) -> None:
        paths = [Path(p) for p in options["recorded"]]
        if (options["data"] or options["unanswered"]) and len(paths) > 1:
            raise CommandError(self.DATA_NEEDS_ONE)
        answers = list(replay.SECOND_LOOK_ANSWERS) if options["second_looks"] == "both" else [options["second_looks"]]
        data = Path(options["data"]) if options["data"] else None
        also = [Path(p) for p in options["also"]]
        harmful = 0
        try:
            embedder = get_embedder()
            for path in paths:
                for answer in answers:
                    report = replay.evaluate(path, embedder=embedder, second_looks=answer, data=data, also=also)
                    self._print_recorded(report)
                    if options["unanswered"] and answer == answers[0]:
                        out = Path(options["unanswered"])
                        written = replay.write_requests(out, report.unanswered)
                        self.stdout.write(f"{written} unanswered call(s) -> {out}")
                    harmful += report.golden.harmful if report.golden is not None else 0
        except (InvalidInput, ImproperlyConfigured) as exc:
            raise CommandError(str(exc)) from exc
        if harmful:
            raise CommandError(self.HARMFUL.format(harmful=harmful))

    def _print_recorded(self, r: replay.RecordedReport) -> None:
        write, s, c = self.stdout.write, r.stats, r.counts
        also = f" with {', '.join(str(p) for p in r.also)}" if r.also else ""
        write(f"== {r.path}{also} (set {r.set_name or '?'}), second looks without a recording: {r.second_looks}")
        write(
            f"calls: judge {s.judge_calls}, second look {s.second_look_calls}; clusters matched {s.matched}, "
            f"missed {s.missed}"
        )
        share = f"{100 * r.second_look_share:.1f}%" if r.second_look_share is not None else "n/a"
        proposed = ", ".join(f"{kind} {n}" for kind, n in sorted(s.proposed.items())) or "none"
        write(
            f"model actions: proposed {s.proposed_total} ({proposed}), applied {c.applied} "
            f"(confirmed at the second look {c.confirmed}), refused {c.refused}, "
            f"sent to the second look {r.sent_to_second_look} ({share}); pre-pass merges {c.applied_prepass}"
        )
        write("refused by code: " + (", ".join(f"{code}={n}" for code, n in c.refusals) or "none"))
        acted = c.clusters_acted_on
        refused_share = f"{100 * c.clusters_refused / acted:.1f}%" if acted else "n/a"
        write(f"clusters the model acted on: {acted}, with a refusal: {c.clusters_refused} ({refused_share})")
        if r.golden is not None:
            write(f"correct={r.golden.correct}/{r.golden.total} harmful={r.golden.harmful}")
            for result in r.golden.results:
                if not result.correct or result.harmful:
                    applied = "; ".join(result.applied) or "nothing"
                    write(f"  {result.case.id} {result.case.expected}: applied {applied}")
                    for harm in result.harms:
                        write(f"     harm: {harm}")
                    for reason in result.rejections[:2]:
                        write(f"     rejected: {reason}")
        if r.pairs is not None:
            p = r.pairs
            write(
                f"pairs={p.pairs} same={p.same} tp={p.tp} fp={p.fp} fn={p.fn} "
                f"precision={_figure(p.precision)} recall={_figure(p.recall)} f1={_figure(p.f1)}"
            )

    def execute(self, *args: Any, **options: Any) -> Any:
        self.verbosity_level = options.get("verbosity", 1)
        return super().execute(*args, **options)
