"""What the noise detector's two tiers find, per category: on rho's own examples (the tests'
table), on real truths, and on the user turns of real chat sessions; and what the wide tier costs.

Usage (from the repository root, with the project's venv):

    python benchmarks/noise_tiers.py [--truths PATH ...] [--sessions PATH ...] [--examples 20] [--json OUT]

Default data: ../shared/data/locomo_observations.truths.jsonl and msc_sessions.truths.jsonl,
and the user turns of ../shared/data/locomo_sessions.jsonl (never copied into the repo). Pure:
no database, no model. For each source, per category: what the sure tier flags (the rule
judge retires it), what the suspect tier flags (the rule judge keeps it; with an LLM judge it
goes to the model with the sure ones), and the first ``--examples`` suspects, printed for a
reading (not stored). A scripted model that answers "noise" for every candidate would retire
every one of them: the "candidates" column is that upper bound. Also counted, with examples:
the texts a guard kept although a tier's pattern matched them (what the guards protect). Seconds: the detector with both
tiers against the detector before them (guards and the sure tier alone, no pre-check), the
same texts in the same run, interleaved, the best of three.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT.parent / "shared" / "data"
DEFAULT_TRUTHS = [DATA / "locomo_observations.truths.jsonl", DATA / "msc_sessions.truths.jsonl"]
DEFAULT_SESSIONS = [DATA / "locomo_sessions.jsonl"]
#: Timed passes of each detector over the same texts (the best is kept).
REPEATS = 3


def _truths(path: Path) -> list[str]:
    with path.open(encoding="utf-8") as fh:
        return [json.loads(line)["content"] for line in fh if line.strip()]


def _user_turns(path: Path) -> list[str]:
    texts: list[str] = []
    with path.open(encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                texts.extend(m["content"] for m in json.loads(line)["messages"] if m.get("role") == "user")
    return texts


def _sure_only(rules: Any) -> Any:
    """The reference: the detector as it was before the suspect tier (guards, then the sure
    tier, each pattern searched as written, without ``noise_rules``' pre-check)."""
    compiled = [re.compile(p) for patterns in rules.SURE.values() for p in patterns]
    guards = [re.compile(g) for g in rules.GUARDS]

    def detect(content: str) -> bool:
        text = " ".join(content.lower().split())
        return not any(g.search(text) for g in guards) and any(p.search(text) for p in compiled)

    return detect


def _unguarded(rules: Any) -> Any:
    """What the two tiers would flag without the guards: ``(category, tier, words)`` or None."""
    compiled = [(c, tier, re.compile(p)) for tier, table in ((rules.TIER_SURE, rules.SURE), (rules.TIER_SUSPECT,
                rules.SUSPECT)) for c, patterns in table.items() for p in patterns]

    def flag(content: str) -> tuple[str, str, str] | None:
        text = " ".join(content.lower().split())
        for category, tier, pattern in compiled:
            found = pattern.search(text)
            if found:
                return category, tier, found.group(0)
        return None

    return flag


def measure(name: str, texts: list[str], *, examples: int) -> dict[str, Any]:
    from iris_consolidation.services.hygiene import noise_rules as rules

    reference = _sure_only(rules)
    reference_s = both_s = float("inf")
    for _ in range(REPEATS):  # interleaved, the best of each: the machine is shared
        started = time.perf_counter()
        sum(1 for t in texts if reference(t))
        reference_s = min(reference_s, time.perf_counter() - started)
        started = time.perf_counter()
        matches = [(t, rules.detect(t)) for t in texts]
        both_s = min(both_s, time.perf_counter() - started)
    counts: Counter[tuple[str, str]] = Counter((m.category, m.tier) for _, m in matches if m is not None)
    suspects = [(t, m) for t, m in matches if m is not None and m.tier == rules.TIER_SUSPECT]
    unguarded = _unguarded(rules)
    guarded = [(t, f) for t, m in matches if m is None and (f := unguarded(t)) is not None]
    sure = sum(n for (_, tier), n in counts.items() if tier == rules.TIER_SURE)
    return {
        "source": name, "texts": len(texts), "sure": sure, "suspects": len(suspects),
        "candidates": sure + len(suspects),
        "per_category": {c: {t: counts.get((c, t), 0) for t in rules.TIERS} for c in rules.DESCRIPTIONS},
        "seconds_both_tiers": round(both_s, 4), "seconds_sure_only": round(reference_s, 4),
        "guarded": len(guarded),
        "guarded_examples": [{"category": f[0], "tier": f[1], "matched": f[2], "content": t}
                             for t, f in guarded[:examples]],
        "suspect_examples": [{"category": m.category, "matched": m.matched, "content": t}
                             for t, m in suspects[:examples]],
    }


def _print(result: dict[str, Any]) -> None:
    ratio = result["seconds_both_tiers"] / result["seconds_sure_only"] if result["seconds_sure_only"] else 0.0
    print(f"\n== {result['source']}: {result['texts']} texts; sure {result['sure']}, suspects {result['suspects']}, "
          f"candidates for a model {result['candidates']}; "
          f"detector {result['seconds_both_tiers']:.3f} s with both tiers against {result['seconds_sure_only']:.3f} s "
          f"for the detector before (sure tier alone) ({ratio:.2f}x)")
    for category, tiers in result["per_category"].items():
        print(f"   {category:12} sure {tiers['sure']:5}  suspect {tiers['suspect']:5}")
    for i, e in enumerate(result["suspect_examples"], 1):
        print(f"   suspect {i:2} [{e['category']}: {e['matched']!r}] {e['content'][:160]}")
    print(f"   kept by a guard although a tier's pattern matches: {result['guarded']}")
    for i, e in enumerate(result["guarded_examples"], 1):
        print(f"   guarded {i:2} [{e['category']}, {e['tier']}: {e['matched']!r}] {e['content'][:160]}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--truths", nargs="*", type=Path, default=DEFAULT_TRUTHS)
    parser.add_argument("--sessions", nargs="*", type=Path, default=DEFAULT_SESSIONS)
    parser.add_argument("--examples", type=int, default=20)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    from tests.services.hygiene.test_noise import LOOK_ALIKES, RHO, WORDINGS

    table = [*RHO.values(), *(t for _, _, t in WORDINGS), *LOOK_ALIKES]
    results = [measure("rho's examples, two wordings a category, look-alikes", table, examples=args.examples)]
    for path in args.truths:
        results.append(measure(path.name, _truths(path), examples=args.examples))
    for path in args.sessions:
        results.append(measure(f"{path.name} (user turns)", _user_turns(path), examples=args.examples))
    for result in results:
        _print(result)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2, ensure_ascii=False), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
