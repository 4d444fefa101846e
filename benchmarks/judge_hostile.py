"""Score the golden sets with the LLM judge against each hostile mode of the stub.

Usage (from the repository root, with the project's database reachable):

    python benchmarks/judge_hostile.py [--golden FILE ...] [--mode MODE ...] [--timeout SECONDS]
                                       [--second-looks confirm|withdraw|both] [--risk-policy POLICY]
                                       [--pairs FILE --threshold F ...]

For each mode of ``tests.llm_stub.HOSTILE_MODES`` it starts the scripted
OpenAI-compatible stub on 127.0.0.1, points the LLM judge at it through litellm and
runs ``evaluation.scoring.score_golden`` (the real pre-pass, prompt, judge,
validator and merge, rolled back at the end). Prints one row per mode and file:
correct/total, harmful, model calls, seconds. With ``--pairs`` it also scores the
same/different pairs per mode and threshold (``evaluation.pair_scoring.score_pairs``):
a mode that merges whatever the clustering offers shows how much of it the
validator lets through. The hostile model answers every second look it is asked with
``--second-looks`` (default ``confirm``, the worst case: what stays harmless then, the
invariants alone hold; ``both`` prints each mode twice). Nothing is written to the database.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
SHARED_EVAL = Path(os.environ.get("IRIS_SHARED_DIR") or ROOT.parent / "shared") / "eval"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--golden",
        nargs="*",
        default=[str(SHARED_EVAL / "judge_golden.jsonl"), str(SHARED_EVAL / "public_cases.jsonl")],
    )
    parser.add_argument("--mode", nargs="*", help="Modes to run (default: all).")
    parser.add_argument(
        "--timeout", type=float, default=1.0, help="Judge timeout in seconds (the timeout mode waits 2x)."
    )
    parser.add_argument(
        "--second-looks",
        choices=["confirm", "withdraw", "both"],
        default="confirm",
        help="How second looks are answered.",
    )
    parser.add_argument("--risk-policy", choices=["verify", "refuse", "accept"], default="verify")
    parser.add_argument("--pairs", help="A pairs file to score per mode, e.g. personachat_revised.pairs.jsonl.")
    parser.add_argument("--threshold", type=float, nargs="*", default=[0.75], help="Thresholds for --pairs.")
    args = parser.parse_args()

    import django

    django.setup()
    from django.test.utils import override_settings

    from iris_consolidation.embeddings import get_embedder
    from iris_consolidation.evaluation import pair_scoring, scoring
    from iris_consolidation.llm import get_judge_client
    from tests.llm_stub import HOSTILE_MODES, StubLLMServer, hostile

    files = [Path(f) for f in args.golden if Path(f).is_file()]
    if not files and not args.pairs:
        print(f"No golden file found ({', '.join(args.golden)}).", file=sys.stderr)
        return 2
    cases = {f: scoring.load_cases(f) for f in files}
    modes = args.mode or list(HOSTILE_MODES)
    server = StubLLMServer().start()
    os.environ.setdefault("OPENAI_API_KEY", "stub-key-not-secret")
    print(f"{'mode':<17} {'second look':<12} {'file':<20} {'correct':>8} {'harmful':>8} {'calls':>6} {'seconds':>8}")
    worst = 0
    try:
        with override_settings(
            IRIS_CONSOLIDATION_JUDGE="llm",
            IRIS_CONSOLIDATION_MODEL="openai/hostile-stub",
            IRIS_CONSOLIDATION_LLM_API_BASE=server.url,
            IRIS_CONSOLIDATION_LLM_TIMEOUT=args.timeout,
            IRIS_CONSOLIDATION_RISK_POLICY=args.risk_policy,
        ):
            client, embedder = get_judge_client("llm"), get_embedder()
            answers = ["confirm", "withdraw"] if args.second_looks == "both" else [args.second_looks]
            for mode, answer in ((m, a) for m in modes for a in answers):
                server.handler = hostile(mode, hang_seconds=args.timeout * 2)
                server.second_looks = answer
                for path, file_cases in cases.items():
                    started = time.monotonic()
                    report = scoring.score_golden(file_cases, client=client, embedder=embedder)
                    worst = max(worst, report.harmful)
                    print(
                        f"{mode:<17} {answer:<12} {path.name:<20} {report.correct:>4}/{report.total:<3} "
                        f"{report.harmful:>8} {report.llm_calls:>6} {time.monotonic() - started:>8.1f}"
                    )
                    for result in report.results:
                        for harm in result.harms:
                            print(f"    {result.case.id}: {harm}")
                for threshold in args.threshold if args.pairs else []:
                    started = time.monotonic()
                    pairs = pair_scoring.score_pairs(
                        Path(args.pairs), threshold=threshold, client=client, embedder=embedder
                    )
                    figures = " ".join(
                        f"{name}={'n/a' if value is None else f'{value:.3f}'}"
                        for name, value in (("precision", pairs.precision), ("recall", pairs.recall), ("f1", pairs.f1))
                    )
                    print(
                        f"{mode:<17} {answer:<12} pairs@{threshold:<14} tp={pairs.tp} fp={pairs.fp} fn={pairs.fn} "
                        f"{figures} "
                        f"rejected={pairs.rejected} calls={pairs.llm_calls} {time.monotonic() - started:.1f}s"
                    )
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
