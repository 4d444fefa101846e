"""Score the judge and the validator on same/different pairs: clustering plus the judge.

The truths of a pairs file's ``.truths.jsonl`` are loaded for scratch users (``scoring``:
names starting with ``iris-eval-``), embedded, clustered (``plan.plan_user``) and judged
through the real path of a run (``decide.decide_cluster``: pre-pass, prompt, judge,
validator, merge), inside one transaction that is rolled back at the end: nothing stays
in the database.

A pair is predicted "same" when both truths
end up in one merged truth (merge or supersede, followed through the run's lineage);
precision, recall and F1 are over the labelled pairs. The same figures for "in one
cluster" show what the clustering alone offers the judge. With ``oracle=True`` the
judge answers from the labels (``oracle.OracleJudge``), so the figures are the
ceiling of clustering plus validation; the validator's refusals are counted by
``validation.Code``.
"""

from __future__ import annotations

import json
import math
import uuid
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.db import transaction

from .. import run_settings
from ..embeddings import Embedder
from ..exceptions import InvalidInput, JudgeRateLimited
from ..llm.base import JudgeClient
from ..models import Truth
from ..services.operations import transfer
from ..services.pipeline import vectors
from ..services.run import decide, lifecycle, plan
from . import oracle as oracle_judge
from .scoring import NO_FILE, ReviewSink, ScratchRollback, parse_lines, scratch_user

NO_TRUTHS_FILE = "{path} needs its truths file beside it: {truths} is missing."
#: Clusters of one user judged in one call once judge calls are batched.
CLUSTERS_PER_BATCHED_CALL = 8


@dataclass(frozen=True, kw_only=True)
class PairsReport:
    """Same/different pairs scored at one threshold; precision etc. are None when undefined."""

    threshold: float
    judge: str
    users: int
    truths: int
    pairs: int
    same: int
    tp: int
    fp: int
    fn: int
    clustered_tp: int
    clustered_fp: int
    clusters: int
    merged: int
    superseded: int
    rejected: int
    failed: int
    llm_calls: int
    unmatched: int = 0
    notes: str = ""
    #: Judge calls had each call judged up to CLUSTERS_PER_BATCHED_CALL clusters of one user.
    batched_calls: int = 0
    #: Validator refusals by ``validation.Code``, most frequent first: ((code, count), ...).
    refusals: tuple[tuple[str, int], ...] = ()

    def per_100_truths(self, count: int) -> float:
        """``count`` per 100 truths of the file (0.0 for an empty file)."""
        return 100.0 * count / self.truths if self.truths else 0.0

    @staticmethod
    def _ratio(num: int, den: int) -> float | None:
        return num / den if den else None

    @property
    def precision(self) -> float | None:
        return self._ratio(self.tp, self.tp + self.fp)

    @property
    def recall(self) -> float | None:
        return self._ratio(self.tp, self.same)

    @property
    def f1(self) -> float | None:
        p, r = self.precision, self.recall
        return 2 * p * r / (p + r) if p and r else (0.0 if p is not None and r is not None else None)

    @property
    def clustered_precision(self) -> float | None:
        return self._ratio(self.clustered_tp, self.clustered_tp + self.clustered_fp)

    @property
    def clustered_recall(self) -> float | None:
        return self._ratio(self.clustered_tp, self.same)


class _UnionFind:
    def __init__(self) -> None:
        self.parent: dict[int, int] = {}

    def find(self, x: int) -> int:
        self.parent.setdefault(x, x)
        while self.parent[x] != x:
            self.parent[x] = self.parent[self.parent[x]]
            x = self.parent[x]
        return x

    def union(self, a: int, b: int) -> None:
        self.parent[self.find(a)] = self.find(b)


def truths_file_for(pairs_path: Path) -> Path:
    """``x.pairs.jsonl`` -> ``x.truths.jsonl`` beside it."""
    name = pairs_path.name
    stem = name[: -len(".pairs.jsonl")] if name.endswith(".pairs.jsonl") else pairs_path.stem
    return pairs_path.with_name(stem + ".truths.jsonl")


def _parse_pair(raw: str) -> dict[str, str]:
    row = json.loads(raw)
    if row.get("label") not in ("same", "different"):
        raise ValueError("'label' must be 'same' or 'different'")
    return {k: str(row[k]) for k in ("user", "a", "b", "label")}


def _load_pairs(path: Path) -> list[dict[str, str]]:
    return parse_lines(path, _parse_pair)


def score_pairs(
    pairs_path: Path,
    *,
    threshold: float,
    client: JudgeClient | None = None,
    embedder: Embedder,
    oracle: bool = False,
    on_reviews: ReviewSink | None = None,
) -> PairsReport:
    """Load the pairs' truths for scratch users, run clustering and the judge per user
    at ``threshold``, and score the pairs (see the module docstring).

    ``oracle=True`` judges with ``oracle.OracleJudge`` built from the labels (no
    model; ``client`` is ignored). Raises ``InvalidInput`` for a missing or bad file,
    or a bad threshold. Makes the judge's model calls; writes nothing that outlives the call.
    """
    return score_pairs_at(
        pairs_path, thresholds=[threshold], client=client, embedder=embedder, oracle=oracle, on_reviews=on_reviews
    )[0]


def _group_pairs(
    review_rows: Iterable[tuple[list[int], list[dict[str, Any]]]],
) -> tuple[_UnionFind, _UnionFind]:
    merged, clustered = _UnionFind(), _UnionFind()
    for member_ids, applied in review_rows:
        for pk in member_ids[1:]:
            clustered.union(member_ids[0], pk)
        for entry in applied:
            for pk in entry["truth_ids"].values():
                merged.union(int(pk), int(entry["result_id"]))
    return merged, clustered


def batched_calls(clusters_per_user: Iterable[int], *, per_call: int = CLUSTERS_PER_BATCHED_CALL) -> int:
    """Judge calls if each call judged up to ``per_call`` clusters of one user (batched
    calls): the sum of ``ceil(clusters / per_call)`` over users. ``[9, 3, 0]`` -> 3."""
    return sum(math.ceil(n / per_call) for n in clusters_per_user)


def _read_files(pairs_path: Path) -> tuple[list[dict[str, str]], list[dict[str, Any]]]:
    """The pairs of ``pairs_path`` and the truths of the truths file beside it
    (``truths_file_for``); raises ``InvalidInput`` for a missing or bad file."""
    if not pairs_path.is_file():
        raise InvalidInput(NO_FILE.format(path=pairs_path))
    truths_path = truths_file_for(pairs_path)
    if not truths_path.is_file():
        raise InvalidInput(NO_TRUTHS_FILE.format(path=pairs_path, truths=truths_path))
    pairs = _load_pairs(pairs_path)
    with truths_path.open(encoding="utf-8") as handle:
        rows = transfer.parse_truths(handle, path=str(truths_path))
    return pairs, rows


def score_pairs_at(
    pairs_path: Path,
    *,
    thresholds: Sequence[float],
    client: JudgeClient | None = None,
    embedder: Embedder,
    oracle: bool = False,
    on_reviews: ReviewSink | None = None,
) -> list[PairsReport]:
    """``score_pairs`` at each of ``thresholds``, one report each, in that order.

    The truths are loaded and embedded once; each threshold's pass runs in a savepoint
    that is rolled back before the next, so every pass starts from the same truths.
    Raises ``InvalidInput`` (bad file or threshold; nothing runs) or ``ValueError`` if
    neither ``client`` nor ``oracle`` is given. Writes nothing that outlives the call.
    """
    thresholds = [run_settings.validate_threshold(t) for t in thresholds]
    if client is None and not oracle:
        raise ValueError("score_pairs needs a judge client or oracle=True")
    pairs, rows = _read_files(pairs_path)
    oracles = oracle_judge.oracles_by_user(pairs) if oracle else {}
    judge_name = oracle_judge.NAME if oracle or client is None else client.name
    tag = uuid.uuid4().hex[:8]
    reports: list[PairsReport] = []
    try:
        with transaction.atomic():
            users = {name: scratch_user(tag, name) for name in sorted({r["user"] for r in rows})}
            Truth.objects.bulk_create([Truth(**{**r, "user": users[r["user"]]}) for r in rows], batch_size=1000)
            ids: dict[tuple[str, str], int] = {}
            for name, user in users.items():
                vectors.embed_missing(user_id=user.pk, embedder=embedder)
                for pk, content in Truth.objects.filter(user=user).order_by("id").values_list("id", "content"):
                    ids.setdefault((name, content), pk)
            for threshold in thresholds:
                try:
                    with transaction.atomic():
                        reports.append(
                            _score_pass(
                                threshold=threshold,
                                users=users,
                                ids=ids,
                                pairs=pairs,
                                truths=len(rows),
                                judge_name=judge_name,
                                client_for=lambda name: oracles.get(name, _NO_LABELS) if oracle else client,
                                embedder=embedder,
                                on_reviews=on_reviews,
                            )
                        )
                        raise ScratchRollback
                except ScratchRollback:
                    pass
            raise ScratchRollback
    except ScratchRollback:
        pass
    return reports


_NO_LABELS = oracle_judge.OracleJudge(())


def _count_pairs(
    pairs: list[dict[str, str]], ids: dict[tuple[str, str], int], *, merged: _UnionFind, clustered: _UnionFind
) -> dict[str, int]:
    """The labelled pairs counted against the merged groups (``tp``, ``fp``, ``fn``) and
    the clusters (``ctp``, ``cfp``); ``unmatched``: pairs naming a text not loaded."""
    counts = {"tp": 0, "fp": 0, "fn": 0, "ctp": 0, "cfp": 0, "unmatched": 0}
    for pair in pairs:
        a, b = ids.get((pair["user"], pair["a"])), ids.get((pair["user"], pair["b"]))
        if a is None or b is None:
            counts["unmatched"] += 1
            continue
        same = pair["label"] == "same"
        if merged.find(a) == merged.find(b):
            counts["tp" if same else "fp"] += 1
        elif same:
            counts["fn"] += 1
        if clustered.find(a) == clustered.find(b):
            counts["ctp" if same else "cfp"] += 1
    return counts


def _score_pass(
    *,
    threshold: float,
    users: dict[str, Any],
    ids: dict[tuple[str, str], int],
    pairs: list[dict[str, str]],
    truths: int,
    judge_name: str,
    client_for: Any,
    embedder: Embedder,
    on_reviews: ReviewSink | None = None,
) -> PairsReport:
    run = lifecycle.create_run(trigger="command", execution="in_process", threshold=threshold, judge=judge_name)
    lifecycle.start_run(run)
    per_user: list[int] = []
    for name, user in users.items():
        client = client_for(name)
        clusters = plan.plan_user(run_id=run.pk, user_id=user.pk, embedder=embedder)
        per_user.append(len(clusters))
        for cluster in clusters:
            try:
                decide.decide_cluster(run_id=run.pk, cluster=cluster, client=client, embedder=embedder)
            except JudgeRateLimited:
                pass  # counted below as a cluster without a review
    run.refresh_from_db()
    reviews = list(run.reviews.all())
    if on_reviews is not None:
        on_reviews(reviews)
    # The snapshot names every member, retired ones too (``review.members`` would hide them).
    merged, clustered = _group_pairs(([int(m["id"]) for m in r.snapshot], r.applied_actions) for r in reviews)
    refusals = Counter(str(r.get("code", "")) for review in reviews for r in review.rejections or ())
    counts = _count_pairs(pairs, ids, merged=merged, clustered=clustered)
    return PairsReport(
        threshold=threshold,
        judge=judge_name,
        users=len(users),
        truths=truths,
        pairs=len(pairs) - counts["unmatched"],
        same=sum(1 for p in pairs if p["label"] == "same"),
        tp=counts["tp"],
        fp=counts["fp"],
        fn=counts["fn"],
        clustered_tp=counts["ctp"],
        clustered_fp=counts["cfp"],
        clusters=run.clusters_found,
        merged=run.merged,
        superseded=run.superseded,
        rejected=run.rejected,
        failed=run.failed + (run.clusters_found - run.clusters_done),
        llm_calls=run.llm_calls,
        batched_calls=batched_calls(per_user),
        refusals=tuple(sorted(refusals.items(), key=lambda kv: (-kv[1], kv[0]))),
        unmatched=counts["unmatched"],
        notes=run.notes,
    )
