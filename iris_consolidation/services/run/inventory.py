"""The inventory report of a run: what the truths looked like before and after, and why.

``capture_before`` runs when the run starts, ``complete`` when it ends (done,
partial or failed); both write ``ConsolidationRun.inventory``:

    {"scope": "all" | {"users": [ids]},
     "before": {"live": n, "by_kind": {kind: n}, "by_origin": {origin: n}},
     "after": {... same shape ...},
     "changes": [up to 10 of the most significant: merges of the most truths first,
                 then by the highest score, each with its reason],
     "llm": {"calls": n, "tokens": n, "cost": usd, "cost_known": bool, "cache_hits": n,
              "clusters_to_model": n, "prompt_tokens": n, "cached_tokens": n, "completion_tokens": n, "deferred": n},
     "seeds": n, "checkpoint": {"old": iso | None, "new": iso | None},
     "stages": {stage: {"mode", "examined", "affected", "applied", "seconds", "examples"}}}

Counts are of live truths in the run's scope (its user filter, else its allowlist,
else every user). A dry run changes nothing: its "after" is projected from "before" and
its previewed merges and supersedes (``projected_after``; ``"projected": true``), and its
changes are previews (``"applied": false``).
"""

from __future__ import annotations

from typing import Any

from django.db.models import Count, Q

from ...llm.base import truth_names, with_truth_numbers
from ...models import ConsolidationRun, Truth
from ...run_settings import allowed_user_ids
from ..hygiene import reports

#: How many changes the report lists (the issue's "up to 10 most significant").
MAX_CHANGES = 10


def _scope(run: ConsolidationRun) -> tuple[Q, Any]:
    if run.user_filter_id is not None:
        return Q(user_id=run.user_filter_id), {"users": [run.user_filter_id]}
    allowed = [pk for pk in allowed_user_ids(run) if pk > 0]
    if allowed_user_ids(run):
        return Q(user_id__in=allowed), {"users": allowed}
    return Q(), "all"


def count_truths(scope: Q) -> dict[str, Any]:
    """Live truths in ``scope``: total, by kind and by origin (one grouped query)."""
    by_kind: dict[str, int] = {}
    by_origin: dict[str, int] = {}
    live = 0
    rows = Truth.objects.filter(scope).values("kind", "origin").annotate(n=Count("id")).order_by()
    for row in rows:
        live += row["n"]
        by_kind[row["kind"]] = by_kind.get(row["kind"], 0) + row["n"]
        by_origin[row["origin"]] = by_origin.get(row["origin"], 0) + row["n"]
    return {"live": live, "by_kind": dict(sorted(by_kind.items())), "by_origin": dict(sorted(by_origin.items()))}


def projected_after(run: ConsolidationRun, before: dict[str, Any]) -> dict[str, Any]:
    """The counts ``before`` would become if a dry run's previewed actions were applied:
    a merge retires its members and makes one consolidated truth (its kind the sources'
    most common, as ``merging`` does), or, with a protected member, retires the others into
    it; a supersede retires its old truths. Members merged twice in one cluster are counted
    once, as the truth they became. Hygiene findings (noise, prune) are not counted: applying
    a dry run applies its verdicts only. Returns the shape of ``count_truths`` with
    ``"projected": True``."""
    live = before.get("live", 0)
    by_kind, by_origin = dict(before.get("by_kind", {})), dict(before.get("by_origin", {}))
    reviews = list(run.reviews.exclude(applied_actions=[]).only("applied_actions", "snapshot"))
    ids = {pk for r in reviews for e in r.applied_actions or () for pk in (e.get("truth_ids") or {}).values()}
    kinds = dict(Truth.all_objects.filter(pk__in=ids).values_list("pk", "kind"))

    def add(kind: str, origin: str, n: int) -> None:
        by_kind[kind] = by_kind.get(kind, 0) + n
        by_origin[origin] = by_origin.get(origin, 0) + n

    for review in reviews:
        rows = {row["alias"]: row for row in review.snapshot or ()}
        # alias -> (truth, kind, origin) it stands for now: a merge moves its members to its result.
        now = {a: (a, kinds.get(r["id"], "fact"), r.get("origin", "")) for a, r in rows.items()}
        for number, entry in enumerate(review.applied_actions or ()):
            if entry["action"] == "merge":
                members = [a for a in entry.get("ids", []) if a in now]
                keeper = next((a for a in members if rows[a].get("protected")), None)
                retired = {now[a] for a in members if a != keeper}
                for _truth, kind, origin in retired:
                    add(kind, origin, -1)
                live -= len(retired)
                if keeper is None:
                    member_kinds = [now[a][1] for a in members]
                    made = (f"merge {number}", max(dict.fromkeys(member_kinds), key=member_kinds.count), "consolidated")
                    add(made[1], made[2], 1)
                    live += 1
                    for a in members:
                        now[a] = made
            else:
                for a in entry.get("old", []):
                    if a in now:
                        add(now[a][1], now[a][2], -1)
                        live -= 1
    return {
        "live": live,
        "by_kind": dict(sorted((k, n) for k, n in by_kind.items() if n)),
        "by_origin": dict(sorted((k, n) for k, n in by_origin.items() if n)),
        "projected": True,
    }


def capture_before(run: ConsolidationRun) -> None:
    """Store the "before" counts on ``run`` (saves ``inventory``)."""
    scope, label = _scope(run)
    run.inventory = {"scope": label, "before": count_truths(scope)}
    ConsolidationRun.objects.filter(pk=run.pk).update(inventory=run.inventory)


def significant_changes(run: ConsolidationRun, *, limit: int = MAX_CHANGES) -> list[dict[str, Any]]:
    """The run's ``limit`` most significant actions, applied (or previewed in a dry run).

    Ranked by truths involved (a merge of five before a merge of two), then by the
    highest distillation score among them. Each item carries the judge's reason and
    ``sources``: the texts the change retired (a merge's members; a supersede's old
    truths, never its survivor).
    """
    items: list[dict[str, Any]] = []
    reviews = run.reviews.exclude(applied_actions=[]).only("id", "applied", "applied_actions", "snapshot")
    for review in reviews:
        rows = {row["alias"]: row for row in review.snapshot or ()}
        for entry in review.applied_actions or ():
            ids = entry.get("truth_ids") or {}
            aliases = (
                list(entry.get("ids") or [])
                if entry["action"] == "merge"
                else [*entry.get("old", []), entry.get("new")]
            )
            members = [rows[a] for a in aliases if a in rows]
            # What the change retired: every member of a merge, the old ones of a supersede
            # (its survivor is the result, not something it "was").
            retired = members if entry["action"] == "merge" else [rows[a] for a in entry.get("old", []) if a in rows]
            score = max((float(m.get("score") or 0.0) for m in members), default=0.0)
            keeper = None
            if entry["action"] == "merge":
                text = entry.get("content", "")
                keeper = next((ids.get(a) for a in aliases if rows.get(a, {}).get("protected")), None)
            else:
                text = rows.get(entry.get("new"), {}).get("content", "")
            items.append(
                {
                    "action": entry["action"],
                    "review_id": review.pk,
                    "truth_ids": [ids[a] for a in aliases if a in ids],
                    "result_id": entry.get("result_id"),
                    # The protected member that absorbs the others (a merge that makes no new truth).
                    "keeper_id": keeper,
                    "size": len(aliases),
                    "score": round(score, 6),
                    "content": text,
                    "sources": [m.get("content", "") for m in retired],
                    # Truth numbers for the call's aliases: operators read this (run page, command).
                    "reason": with_truth_numbers(entry.get("reason", ""), truth_names(review.snapshot)),
                    "applied": bool(review.applied),
                }
            )
    items.sort(key=lambda i: (-i["size"], -i["score"], i["review_id"]))
    return items[:limit]


def complete(run: ConsolidationRun) -> dict[str, Any]:
    """Fill in "after", the changes, LLM use, seeds and checkpoints; sets ``run.inventory``.

    Does not save: the caller saves ``inventory`` (``finish_run_if_complete`` does it
    in the same locked transaction as the status).
    """
    scope, label = _scope(run)
    data = dict(run.inventory or {})
    data.setdefault("scope", label)
    if run.dry_run:
        data["after"] = projected_after(run, data.get("before") or count_truths(scope))
    else:
        data["after"] = count_truths(scope)
    data["changes"] = significant_changes(run)
    data["llm"] = {
        "calls": run.llm_calls,
        "tokens": run.tokens,
        "cost": round(run.cost, 9),
        # litellm prices only models in its cost map; a call it cannot price makes the run's cost unknown.
        "cost_known": not run.unpriced,
        "cache_hits": run.cache_hits,
        "clusters_to_model": run.model_clusters,
        "prompt_tokens": run.prompt_tokens,
        "cached_tokens": run.cached_tokens,
        "completion_tokens": run.completion_tokens,
        "deferred": run.deferred,
    }
    data["seeds"] = run.seeds
    data["stages"] = reports.summarise(run)
    data["checkpoint"] = {
        "old": run.previous_checkpoint.isoformat() if run.previous_checkpoint else None,
        "new": run.checkpoint.isoformat() if run.checkpoint else None,
    }
    run.inventory = data
    return data
