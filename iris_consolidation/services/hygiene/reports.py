"""The report of a run's stages: per stage, its counts, a few findings and its own entries
(``stages.REGISTRY``: ``Stage.examples``, ``Stage.report``)."""

from __future__ import annotations

from typing import Any

from django.db.models import Count, Q, Sum

from ...models import ConsolidationRun, StageMode, StageResult
from ...run_settings import prune_share, run_modes
from . import prune
from .stages import REGISTRY


def summarise(run: ConsolidationRun, *, examples: int = 5) -> dict[str, Any]:
    """Per stage: mode, examined, affected, applied, refused, seconds and a few findings (for
    the report); prune adds its cap (``cap``: the share), the users it held back
    (``users_capped``) and its counts in words with their share (``text``, ``prune.share_text``)."""
    modes = run_modes(run)
    rows = StageResult.objects.filter(run=run)
    totals = {
        r["stage"]: r
        for r in rows.values("stage").annotate(
            examined=Sum("examined"), affected=Sum("affected"), applied=Sum("applied"), seconds=Sum("seconds"),
            # Named apart from the field: an aggregate named "refused" would shadow it in the filter.
            refused_total=Sum("refused"), capped=Count("id", filter=Q(refused__gt=0)),
        ).order_by()
    }
    # One query for the findings of every stage that lists examples or reports more.
    listed: dict[str, list[StageResult]] = {}
    reading = [s.name for s in REGISTRY if s.examples or s.report is not None]
    for result in rows.filter(stage__in=reading).only("stage", "findings").order_by("user_id", "id"):
        listed.setdefault(result.stage, []).append(result)
    report: dict[str, Any] = {}
    for stage in REGISTRY:
        total = totals.get(stage.name)
        item: dict[str, Any] = {
            "mode": modes[stage.name],
            "examined": int(total["examined"]) if total else 0,
            "affected": int(total["affected"]) if total else 0,
            "applied": int(total["applied"]) if total else 0,
            "refused": int(total["refused_total"] or 0) if total else 0,
            "seconds": round(float(total["seconds"]), 3) if total else 0.0,
        }
        if stage.name == "prune":
            share = prune_share(run)
            applying = item["mode"] == StageMode.APPLY
            item.update(cap=share, users_capped=int(total["capped"]) if total else 0, text=prune.share_text(
                found=item["affected"], live=item["examined"], share=share, refused=item["refused"],
                pruned=item["applied"] if applying else None))
        results = listed.get(stage.name, [])
        if stage.examples:
            shown: list[dict[str, Any]] = []
            for result in results:
                if len(shown) >= examples:
                    break
                picked = [f for f in result.findings if stage.shows(f)] if stage.shows else result.findings
                shown.extend(picked[: examples - len(shown)])
            item["examples"] = shown
        if stage.report is not None:
            item.update(stage.report(results, examples=examples))
        report[stage.name] = item
    return report
