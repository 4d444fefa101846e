"""Turns a run's window and inventory report into plain text lines (presenter).

Used by ``consolidate_truths``; the services store data, this module only formats it.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.utils import timezone
from django.utils.dateparse import parse_datetime

from .choices import REPLAY_MODEL
from .models import ConsolidationRun
from .services.pipeline.forecast import STAGES, Forecast

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
COST_NONE = "none"
NO_PRICE = "no price for this model"
NO_TOKENS = "no tokens used"
SOME_UNPRICED = "some calls had no price for this model, so the cost is higher"
FORECAST = (
    "Forecast: users={users} clusters={clusters} (verdict cache {cached}, pre-pass {prepass}, to the model "
    "{to_model}{mined}) calls={calls} at {per_call} clusters per call and ~{second_looks} second looks, "
    "prompt tokens {prompt_tokens}, completion tokens "
    "~{completion_tokens}{stages}; model_calls={model_calls} prompt tokens {all_prompt} completion tokens "
    "~{all_completion}, cost {cost}"
)
#: The change pairs mining is expected to add, among the clusters to the model (``StageRecorder.expect``).
MINED_PAIRS = ", ~{pairs} of them mined change pairs"
#: One stage's part of the forecast line.
FORECAST_STAGE = "{name} calls={calls} tokens {prompt}+~{completion}"
#: A dry run makes its stages' calls (report mode asks the model too): they are counted, not forecast.
STAGES_NOT_FORECAST = "; stages: made by the dry run, not forecast (see stage_calls)"


def forecast_line(forecast: Forecast) -> str:
    """One line: what the pass would ask of the judge and of each stage around it, every
    call's sum (``model_calls``) and its price (``forecast.py``)."""
    cost = forecast.cost()
    if not forecast.model:
        money = "$0 (rule judge: no model call)"
    elif cost is None:
        money = f"{NO_PRICE} ({forecast.model})"
    else:
        money = f"${cost:.4f} at {forecast.model} (litellm's price map, no prompt-cache discount)"
    if forecast.stages_forecast:
        parts = []
        for name in STAGES:
            calls, prompt, completion = forecast.stage(name)
            parts.append(FORECAST_STAGE.format(name=name, calls=calls, prompt=prompt, completion=completion))
        stages = "; stages: " + ", ".join(parts)
    else:
        stages = STAGES_NOT_FORECAST if forecast.model else ""
    prompt, completion = forecast.total_tokens()
    mined = MINED_PAIRS.format(pairs=forecast.mined_pairs) if forecast.mined_pairs else ""
    return FORECAST.format(**{**forecast.as_dict(), "cost": money, "stages": stages, "mined": mined,
                              "model_calls": forecast.model_calls(), "all_prompt": prompt,
                              "all_completion": completion})


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


def cost_text(*, cost: float, tokens: int, unpriced: int, brief: bool = False) -> str:
    """A run's or a review's model cost in words: the one rule of the admin and the commands.

    ``cost``: USD from litellm's price map; ``tokens``: tokens used; ``unpriced``: how many
    reviews had a call with no price in that map (a review: 1 or 0). litellm prices only the
    models in its map, so a call it cannot price adds tokens and no cost:

    - every call priced: ``"$0.0012"``;
    - some calls unpriced, the others priced: ``"$0.0012+ (some calls had no price ...)"``, a
      lower bound;
    - tokens but no cost (no call priced, or priced at 0): ``"unknown (no price for this model)"``;
    - no tokens: ``"none (no tokens used)"``, never ``"$0.0000"``.

    ``brief``: only the words before the parenthesis, which hold no space (``key=value`` lines).
    """
    if cost > 0:
        head, why = (f"${cost:.4f}+", SOME_UNPRICED) if unpriced else (f"${cost:.4f}", "")
    elif tokens or unpriced:
        head, why = COST_UNKNOWN, NO_PRICE
    else:
        head, why = COST_NONE, NO_TOKENS
    return head if brief or not why else f"{head} ({why})"


def run_cost_text(run: ConsolidationRun, *, brief: bool = False) -> str:
    """``cost_text`` of a run's recorded spend (its ``cost``, ``tokens`` and ``unpriced``)."""
    return cost_text(cost=run.cost, tokens=run.tokens, unpriced=run.unpriced, brief=brief)


def judge_calls(run: ConsolidationRun) -> int:
    """The judge's model calls (second looks included): the run's calls less those of the
    stages around it (mining, noise, relocation, promotion; ``stage_calls``)."""
    return max(0, run.llm_calls - run.stage_calls)


def clusters_per_call(run: ConsolidationRun) -> float:
    """Clusters sent to the model per judge call (0.0 without one): the judge's batching,
    whatever the stages around it asked."""
    calls = judge_calls(run)
    return run.model_clusters / calls if calls else 0.0


def spend_fields(run: ConsolidationRun) -> str:
    """``key=value`` figures of a run's model economics for the summary line: calls (all, then
    the judge's and the stages'), clusters per judge call, prompt tokens not cached / cached,
    completion tokens, cost (``cost_text``, brief), clusters deferred by the budget."""
    uncached = max(0, run.prompt_tokens - run.cached_tokens)
    return (
        f"llm_calls={run.llm_calls} judge_calls={judge_calls(run)} stage_calls={run.stage_calls} "
        f"clusters_per_call={clusters_per_call(run):.2f} "
        f"prompt_tokens={uncached} cached_tokens={run.cached_tokens} completion_tokens={run.completion_tokens} "
        f"cost={run_cost_text(run, brief=True)} deferred={run.deferred}"
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
    cost = cost_text(
        cost=float(llm.get("cost", 0.0)), tokens=int(llm.get("tokens", run.tokens)),
        unpriced=0 if llm.get("cost_known", True) else 1,
    )
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
    "added {added}, skipped {skipped}{reasons}{deferred}"
)


def mining_line(item: dict[str, Any]) -> str:
    """One line of the mine stage's report: window, sessions analysed, added and skipped
    (with the count of each reason), sessions the run's budget deferred; "would add" counts
    in report mode and dry runs."""
    window = item.get("window") or {}
    reasons = item.get("skipped_by_reason") or {}
    shown = " (" + ", ".join(f"{why}: {n}" for why, n in sorted(reasons.items())) + ")" if reasons else ""
    added = item["applied"] if item.get("mode") == "apply" else f"{item['affected']} (would add)"
    return MINING.format(
        since=_when(window.get("since")), until=_when(window.get("until")), how=window.get("how", "-"),
        sessions=item.get("sessions", 0), messages=item.get("messages", 0), extractor=item.get("extractor") or "-",
        added=added, skipped=item["examined"] - item["affected"], reasons=shown,
        deferred=f"; deferred {_n(item['deferred'], 'session')} (budget)" if item.get("deferred") else "",
    )


#: Why a stage's work was deferred (``services/hygiene/budget.py``: each stage's ceiling).
BUDGET_DEFERRED = "the run's budget, IRIS_CONSOLIDATION_MAX_COST_PER_RUN, reached the stage's ceiling"


def asked_line(item: dict[str, Any]) -> str:
    """What relocation or promotion asked the model (``stages._part2_report``'s counts): so
    that a user never asked reads differently from one whose truths were all left as they were."""
    if item.get("extractor") == "rules":
        return "the model was not asked: no LLM judge, the rule decided"
    remembered = item.get("remembered", 0)
    memory = f"; {_n(remembered, 'truth')} answered from memory (not asked again)" if remembered else ""
    if not item.get("calls"):
        why = "every candidate's answer is remembered" if remembered else "no candidate"
        return f"the model was not asked: {why}{memory}"
    return (
        f"the model was asked about {_n(item.get('asked', 0), 'truth')} in {_n(item['calls'], 'call')} "
        f"({item.get('users_asked', 0)} of {_n(item.get('users', 0), 'user')}){memory}"
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
        if stage == "prune" and item.get("text"):
            capped = item.get("users_capped", 0)
            held = f" ({capped} user{'s' if capped != 1 else ''} held back by the cap)" if capped else ""
            lines.append(f"      {item['text']}{held}")
        if stage == "mine" and item.get("window"):
            lines.append("      " + mining_line(item))
        if stage == "promote" and item.get("skipped"):
            lines.append(f"      {item['skipped']}")
        elif stage in ("relocate", "promote") and "asked" in item:
            lines.append("      " + asked_line(item))
        if item.get("deferred"):
            what = "session" if stage == "mine" else "truth"
            lines.append(f"      deferred: {_n(item['deferred'], what)} left for a later pass ({BUDGET_DEFERRED})")
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


REPLAYED_WHY = (
    "Recorded verdicts answer only the clusters their recording holds: these truths were consolidated before "
    "(make demo run again) or are not the ones recorded. A model judges anything new "
    "(IRIS_CONSOLIDATION_JUDGE=llm, see README \"Using an LLM\")."
)


def nothing_merged_lines(run: ConsolidationRun) -> list[str]:
    """Why a run that reviewed clusters changed none, and how to see merges; [] when the
    run merged or superseded something, reviewed nothing, or is a dry run. A run judged
    by recorded replies (``make demo`` again) is told why instead of sent to the demo."""
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
    if run.judge_model == REPLAY_MODEL:
        return [*lines, REPLAYED_WHY]
    if run.judge_kind == ConsolidationRun.JudgeKind.RULES:
        lines.append(RULE_JUDGE_WHY)
    lines.append(SEE_MERGES)
    return lines
