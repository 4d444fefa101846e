"""Turns a run's window and inventory report into plain text lines (presenter).

Used by ``consolidate_truths``; the services store data, this module only formats it.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.utils import timezone
from django.utils.dateparse import parse_datetime

from .models import ConsolidationRun
from .services.pipeline.forecast import Forecast

#: Position of each stage in a pass (services/hygiene/stages.py: STAGES), for display.
STAGE_ORDER = {name: i for i, name in enumerate(("mine", "noise", "decay", "lexical", "semantic", "relocate",
                                                  "promote", "prune"))}

WINDOW_CURSOR = "Window: truths changed after each user's cursor (a first, full pass for users without one)."
WINDOW_FULL = "Window: full pass (every consolidatable truth; cursors ignored)."
WINDOW_SINCE = "Window: truths changed since {since} ({how}) until {until}."
WINDOW_HOW = {
    "last": "the last successful run's checkpoint",
    "fallback": "no checkpoint yet: IRIS_CONSOLIDATION_DAYS_FALLBACK days back",
    "duration": "--since duration",
    "iso": "--since time",
}
CHECKPOINT_WRITTEN = "Checkpoint: {old} -> {new}."
CHECKPOINT_KEPT = "Checkpoint: {old} kept ({why}); the next --since last run starts there."
NO_CHANGES = "Changes: none."


def _when(value: datetime | str | None) -> str:
    if value is None:
        return "none"
    text = value if isinstance(value, str) else value.isoformat()
    return text.replace("+00:00", "Z")


def human_when(value: datetime | str | None) -> str:
    """A moment for people: ``2026-12-01 21:45 UTC`` in the current time zone, no
    microseconds (the command line keeps ISO 8601, ``_when``)."""
    if value is None:
        return "none"
    moment = parse_datetime(value) if isinstance(value, str) else value
    if moment is None:
        return str(value)
    local = timezone.localtime(moment) if timezone.is_aware(moment) else moment
    return local.strftime("%Y-%m-%d %H:%M %Z").strip()


def window_line(run: ConsolidationRun, *, when: Any = _when) -> str:
    """One line saying which truths seed this run's clusters; ``when`` formats moments."""
    if run.window_mode == "full":
        return WINDOW_FULL
    if run.window_mode in WINDOW_HOW:
        return WINDOW_SINCE.format(
            since=when(run.window_since), how=WINDOW_HOW[run.window_mode], until=when(run.window_until)
        )
    return WINDOW_CURSOR


def _counts(label: str, data: dict[str, Any]) -> str:
    kinds = ", ".join(f"{k} {n}" for k, n in data.get("by_kind", {}).items()) or "-"
    origins = ", ".join(f"{k} {n}" for k, n in data.get("by_origin", {}).items()) or "-"
    projected = " (projected: the previewed merges and supersedes applied)" if data.get("projected") else ""
    return f"  {label}: live {data.get('live', 0)}{projected}; by kind: {kinds}; by origin: {origins}"


def checkpoint_line(run: ConsolidationRun, *, when: Any = _when) -> str:
    """Old and new checkpoint, or why the old one stays; ``when`` formats moments."""
    old = when(run.previous_checkpoint)
    if run.checkpoint is not None:
        return CHECKPOINT_WRITTEN.format(old=old, new=when(run.checkpoint))
    if run.dry_run:
        why = "dry run"
    elif run.failed:
        why = f"{run.failed} cluster(s) failed"
    else:
        why = f"run {run.get_status_display().lower()}"
    return CHECKPOINT_KEPT.format(old=old, why=why)


COST_UNKNOWN = "unknown"
NO_PRICE = "no price for this model"
FORECAST = (
    "Forecast: users={users} clusters={clusters} (verdict cache {cached}, pre-pass {prepass}, to the model "
    "{to_model}) calls={calls} at {per_call} clusters per call and ~{second_looks} second looks, "
    "prompt tokens {prompt_tokens}, completion tokens "
    "~{completion_tokens}, cost {cost}"
)


def forecast_line(forecast: Forecast) -> str:
    """One line: what the pass would ask of the judge, and its price (``forecast.py``)."""
    cost = forecast.cost()
    if not forecast.model:
        money = "$0 (rule judge: no model call)"
    elif cost is None:
        money = f"{NO_PRICE} ({forecast.model})"
    else:
        money = f"${cost:.4f} at {forecast.model} (litellm's price map, no prompt-cache discount)"
    return FORECAST.format(**{**forecast.as_dict(), "cost": money})


def _n(count: int, word: str) -> str:
    return f"{count:,} {word}{'' if count == 1 else 's'}"


def forecast_sentence(forecast: Forecast) -> str:
    """The forecast in words, for the console (``forecast_line`` is the command's)."""
    d = forecast.as_dict()
    cost = forecast.cost()
    if not forecast.model:
        money = "nothing: the rule judge calls no model"
    elif cost is None:
        money = f"unknown: litellm has no price for {forecast.model}"
    else:
        money = f"about ${cost:.4f} at {forecast.model} (litellm's prices, no prompt-cache discount)"
    to_model = (
        f"{d['to_model']:,} would go to the model in {_n(d['calls'], 'call')} ({d['per_call']} clusters per call), "
        f"about {d['prompt_tokens']:,} prompt and {d['completion_tokens']:,} completion tokens"
        if d["to_model"]
        else "none would go to the model"
    )
    return (
        f"A real run would review {_n(d['clusters'], 'cluster')} of {_n(d['users'], 'user')}: "
        f"{d['cached']:,} answered from the verdict cache, {d['prepass']:,} by the pre-pass (no model call); "
        f"{to_model}. Cost: {money}."
    )


def cost_text(run: ConsolidationRun) -> str:
    """The run's judge spend in USD, or "unknown" when a call had no price in litellm's map."""
    return COST_UNKNOWN if run.unpriced else f"{run.cost:.4f}"


def clusters_per_call(run: ConsolidationRun) -> float:
    """Clusters sent to the model per model call (0.0 without calls)."""
    return run.model_clusters / run.llm_calls if run.llm_calls else 0.0


def spend_fields(run: ConsolidationRun) -> str:
    """``key=value`` figures of a run's judge economics for the summary line: calls,
    clusters per call, prompt tokens not cached / cached, completion tokens, cost (USD
    or "unknown"), clusters deferred by the budget."""
    uncached = max(0, run.prompt_tokens - run.cached_tokens)
    return (
        f"llm_calls={run.llm_calls} clusters_per_call={clusters_per_call(run):.2f} "
        f"prompt_tokens={uncached} cached_tokens={run.cached_tokens} completion_tokens={run.completion_tokens} "
        f"cost={cost_text(run)} deferred={run.deferred}"
    )


def report_lines(run: ConsolidationRun, *, verbosity: int = 1) -> list[str]:
    """The inventory report: counts before/after, main changes, LLM use, checkpoint."""
    data = run.inventory or {}
    lines = ["Inventory:"]
    if "before" in data:
        lines.append(_counts("before", data["before"]))
    if "after" in data:
        lines.append(_counts("after ", data["after"]))
    llm = data.get("llm", {})
    cost = f"${llm.get('cost', 0.0):.4f}" if llm.get("cost_known", True) else "unknown (no price for this model)"
    lines.append(
        f"  seeds {data.get('seeds', run.seeds)}; LLM calls {llm.get('calls', run.llm_calls)}, "
        f"tokens {llm.get('tokens', run.tokens)}, cost {cost}; cached verdicts {llm.get('cache_hits', run.cache_hits)}"
    )
    changes = data.get("changes") or []
    if not changes:
        lines.append(NO_CHANGES)
    else:
        lines.append(f"Most significant changes ({len(changes)}):")
        for item in changes:
            verb = item["action"] if item.get("applied") else f"would {item['action']}"
            ids = [f"#{pk}" for pk in item.get("truth_ids", [])]
            if item["action"] == "supersede" and len(ids) > 1:
                what = f"{', '.join(ids[:-1])} by {ids[-1]} (kept)"
            elif item.get("keeper_id"):
                absorbed = ", ".join(i for i in ids if i != f"#{item['keeper_id']}")
                what = f"{absorbed} into protected #{item['keeper_id']} (kept as is, no new truth)"
            else:
                what = f"{', '.join(ids)} into a new truth"
            lines.append(f"  {verb} {what}: {item.get('content', '')!r} (score {item.get('score', 0):.2f})")
            lines.append(f"      reason: {item.get('reason') or '-'}")
            if verbosity >= 2:
                for text in item.get("sources", []):
                    lines.append(f"      was: {text}")
    lines.extend(stage_lines(data.get("stages") or {}, verbosity=verbosity))
    lines.append(checkpoint_line(run))
    return lines


MINING = (
    "Mining: window {since} .. {until} ({how}); sessions {sessions}, user messages {messages}; extractor {extractor}; "
    "added {added}, skipped {skipped}{reasons}"
)


def mining_line(item: dict[str, Any]) -> str:
    """One line of the mine stage's report: window, sessions analysed, added and skipped
    (with the count of each reason); "would add" counts in report mode and dry runs."""
    window = item.get("window") or {}
    reasons = item.get("skipped_by_reason") or {}
    shown = " (" + ", ".join(f"{why}: {n}" for why, n in sorted(reasons.items())) + ")" if reasons else ""
    added = item["applied"] if item.get("mode") == "apply" else f"{item['affected']} (would add)"
    return MINING.format(
        since=_when(window.get("since")), until=_when(window.get("until")), how=window.get("how", "-"),
        sessions=item.get("sessions", 0), messages=item.get("messages", 0), extractor=item.get("extractor") or "-",
        added=added, skipped=item["examined"] - item["affected"], reasons=shown,
    )


def stage_lines(report: dict[str, Any], *, verbosity: int = 1) -> list[str]:
    """One line per stage (mode, counts, seconds); at ``verbosity`` >= 2 the first examples
    of what noise and prune retired or would retire (noise: with the tier that flagged
    each, the model's reason, and the suspects the rule judge left for a model)."""
    if not report:
        return []
    lines = ["Stages:"]
    # In pass order (a JSON column does not keep the keys' order).
    for stage, item in sorted(report.items(), key=lambda kv: STAGE_ORDER.get(kv[0], len(STAGE_ORDER))):
        lines.append(
            f"  {stage}: {item['mode']}; examined {item['examined']}, found {item['affected']}, "
            f"applied {item['applied']}; {item['seconds']:.2f} s"
        )
        if item.get("model_kept") or item.get("model_errors"):
            lines.append(
                f"      the model kept {item.get('model_kept', 0)} of the detector's candidates"
                f" ({item.get('model_errors', 0)} undecided: its call failed, kept)"
            )
        if item.get("suspects"):
            lines.append(
                f"      {item['suspects']} suspect(s) left for a model (the rule judge retires the sure tier only)"
            )
        if stage == "mine" and item.get("window"):
            lines.append("      " + mining_line(item))
        if stage == "promote" and item.get("skipped"):
            lines.append(f"      {item['skipped']}")
        if stage in ("mine", "relocate", "promote") and item.get("errors"):
            lines.append(f"      model errors: {len(item['errors'])} (first: {item['errors'][0]})")
        if verbosity >= 2 and stage in ("mine", "relocate", "promote"):
            for f in item.get("examples") or ():
                text = f.get("rule") or f.get("title") or f.get("content")
                lines.append(f"      {f.get('outcome') or 'relocate'}: {text!r} ({f.get('reason') or '-'})")
            for f in item.get("skipped_examples") or ():
                lines.append(f"      skipped: {f.get('content')!r} ({f.get('why')})")
        if verbosity >= 2 and stage in ("noise", "prune"):
            for f in item.get("examples") or ():
                why = f.get("category") or f"relevance {f.get('relevance', 0):.4f}, quality {f.get('quality', 0):.4f}"
                if f.get("tier"):
                    why += f", {f['tier']}"
                if f.get("model_reason"):
                    why += f"; model: {f['model_reason']}"
                lines.append(f"      #{f['truth_id']} {f['content']!r} ({why})")
            for f in item.get("suspect_examples") or ():
                lines.append(f"      suspect: #{f['truth_id']} {f['content']!r} ({f['category']}, kept by the rules)")
    return lines


NOTHING_MERGED = (
    "Nothing merged: of {reviewed} cluster{s} reviewed, the judge kept {kept}{refused}{other}."
)
RULE_JUDGE_WHY = (
    "The rule judge merges only restatements it can prove (the same words up to case, punctuation and "
    "name order); real paraphrases need a model."
)
SEE_MERGES = (
    "To see merges, lineage and undo: make demo in a clone of the repository (a real model's recorded verdicts "
    "on its invented sample, replayed offline: consolidate_truths --replay samples/demo.recorded.jsonl), or a "
    "model (IRIS_CONSOLIDATION_JUDGE=llm, see README \"Using an LLM\")."
)


def nothing_merged_lines(run: ConsolidationRun) -> list[str]:
    """Why a run that reviewed clusters changed none, and how to see merges; [] when the
    run merged or superseded something, reviewed nothing, or is a dry run."""
    if run.dry_run or run.merged or run.superseded or not run.clusters_done:
        return []
    refused = f", the validator refused {run.rejected}" if run.rejected else ""
    rest = [f"{n} {label}" for n, label in ((run.stale, "stale"), (run.failed, "failed"), (run.deferred, "deferred"))
            if n]
    lines = [
        NOTHING_MERGED.format(
            reviewed=run.clusters_done, s="s" if run.clusters_done != 1 else "", kept=run.kept, refused=refused,
            other=("; " + ", ".join(rest)) if rest else "",
        )
    ]
    if run.judge_kind == ConsolidationRun.JudgeKind.RULES:
        lines.append(RULE_JUDGE_WHY)
    lines.append(SEE_MERGES)
    return lines
