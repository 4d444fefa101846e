"""Cost of a pass's model calls, measured on recorded calls: tokens of every call at litellm's
local prices, per pass, per 1,000 truths, and for a user who adds 20 truths a week.

    LITELLM_LOCAL_MODEL_COST_MAP=True .venv/bin/python benchmarks/judge_cost.py \\
        --truths 63 samples/demo.recorded.jsonl [--truths N FILE ...]

Each FILE holds the calls of one pass (the format of ``evaluation.replay``: ``messages`` as
sent, ``reply`` as the model wrote it). Prompt tokens are ``litellm.token_counter`` of the
messages, completion tokens of the reply, for each priced model (``MODELS``); the cost is
``litellm.cost_per_token`` without prompt-cache discounts. "Per 1,000 truths" scales the
pass's cost by its data's truth count (linear: the calls grow with the clusters, which grow
with the truths at the data's own density). The weekly figure is one incremental pass over 20
new truths: the clusters they seed at the data's density (``--clusters`` to the model per
truth, at most one per new truth), in judge calls of ``CLUSTERS_PER_CALL`` at the measured
tokens per call and per cluster, and the second looks at the measured share.
Nothing is written; no network (the price map and tokenizers are litellm's local ones).
"""

from __future__ import annotations

import argparse
import json
import math
import os
from collections import defaultdict
from pathlib import Path

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import litellm  # noqa: E402  (after the local price map is chosen)

#: Two or three common models of litellm's price map (USD per token, local map).
MODELS = ("anthropic/claude-sonnet-4-5", "openai/gpt-4.1-mini", "openai/gpt-4o-mini")
CLUSTERS_PER_CALL = 8  # IRIS_CONSOLIDATION_CLUSTERS_PER_CALL's default
WEEKLY_NEW_TRUTHS = 20


def _text(messages: list[dict]) -> list[dict]:
    """Messages with text content (a cacheable system prompt is a list of parts)."""
    out = []
    for m in messages:
        content = m.get("content", "")
        if isinstance(content, list):
            content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
        out.append({"role": m["role"], "content": content})
    return out


def _clusters(messages: list[dict]) -> int:
    """Clusters (or second-look checks) in a call's last message."""
    last = _text(messages)[-1]["content"]
    for tag, key in (("truths", "clusters"), ("checks", "checks")):
        start, end = last.find(f"<{tag}>"), last.rfind(f"</{tag}>")
        if start >= 0 and end > start:
            return len(json.loads(last[start + len(tag) + 2 : end]).get(key, []))
    return 0


def measure(path: Path, truths: int, clusters_to_model: int | None) -> None:
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    calls: dict[str, list[dict]] = defaultdict(list)
    for row in rows:
        calls[row.get("contract", "judge")].append(row)
    judged = sum(_clusters(r["messages"]) for r in calls["judge"])
    clusters_to_model = clusters_to_model or judged
    print(
        f"\n{path} ({truths} truths; calls: "
        + ", ".join(f"{k} {len(v)}" for k, v in calls.items())
        + f"; clusters to the model {judged})"
    )
    print(
        "| model | prompt tokens | completion tokens | USD a pass | USD per 1,000 truths | USD a week (20 new truths) |"
    )
    print("|---|---:|---:|---:|---:|---:|")
    for model in MODELS:
        prompt = completion = 0
        per_contract: dict[str, list[tuple[int, int, int]]] = defaultdict(list)
        for contract, group in calls.items():
            for r in group:
                p = litellm.token_counter(model=model, messages=_text(r["messages"]))
                c = litellm.token_counter(model=model, text=str(r["reply"]), count_response_tokens=True)
                prompt, completion = prompt + p, completion + c
                per_contract[contract].append((p, c, _clusters(r["messages"])))
        p_usd, c_usd = litellm.cost_per_token(model=model, prompt_tokens=prompt, completion_tokens=completion)
        cost = p_usd + c_usd
        week = _weekly(model, per_contract, truths=truths, clusters_to_model=clusters_to_model)
        print(f"| {model} | {prompt:,} | {completion:,} | {cost:.4f} | {cost * 1000 / truths:.3f} | {week:.4f} |")


def _weekly(model: str, per_contract: dict, *, truths: int, clusters_to_model: int) -> float:
    """USD of one weekly incremental pass over ``WEEKLY_NEW_TRUTHS`` new truths (see the module
    docstring): judge calls fixed part + per-cluster part, second looks at the measured share."""
    judge = per_contract.get("judge", [])
    if not judge:
        return 0.0
    clusters = min(WEEKLY_NEW_TRUTHS, math.ceil(WEEKLY_NEW_TRUTHS * clusters_to_model / truths))
    n_calls = math.ceil(clusters / CLUSTERS_PER_CALL)
    total_clusters = sum(k for _, _, k in judge) or 1
    prompt_per_cluster = (sum(p for p, _, _ in judge) - len(judge) * _fixed(model)) / total_clusters
    completion_per_cluster = sum(c for _, c, _ in judge) / total_clusters
    prompt = n_calls * _fixed(model) + clusters * prompt_per_cluster
    completion = clusters * completion_per_cluster
    looks = per_contract.get("second_look", [])
    if looks:  # the same share of clusters sent to a second look, at the measured tokens a call
        share = len(looks) / len(judge)
        prompt += n_calls * share * sum(p for p, _, _ in looks) / len(looks)
        completion += n_calls * share * sum(c for _, c, _ in looks) / len(looks)
    p_usd, c_usd = litellm.cost_per_token(model=model, prompt_tokens=round(prompt), completion_tokens=round(completion))
    return p_usd + c_usd


def _fixed(model: str) -> int:
    """Tokens every judge call pays whatever its clusters: the system prompt and the framing."""
    from iris_consolidation.llm.prompts import SYSTEM_PROMPT

    return litellm.token_counter(model=model, messages=[{"role": "system", "content": SYSTEM_PROMPT}])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="+", type=Path)
    parser.add_argument("--truths", type=int, action="append", required=True, help="truths of each file's data")
    parser.add_argument("--clusters", type=int, action="append", help="clusters to the model in each file's pass")
    args = parser.parse_args()
    if len(args.truths) != len(args.files):
        parser.error("give one --truths per file")
    clusters = args.clusters or [None] * len(args.files)
    for path, truths, n in zip(args.files, args.truths, clusters, strict=True):
        measure(path, truths, n)


if __name__ == "__main__":
    main()
