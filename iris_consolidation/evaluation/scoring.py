"""Score the judge and the validator: the golden set and the same/different pairs.

Both scorings go through the real path of a run, ``decide.decide_cluster``
(pre-pass, prompt, judge, validator, merge), on scratch users whose names start with
``iris-eval-``, inside one transaction that is rolled back at the end: nothing stays
in the database. The pairs scoring also embeds and clusters (``plan.plan_user``).

Golden set scoring:
- **correct**: the applied actions equal the expected ones (optional ones may be
  present or absent; a required survivor is the merge's result), and every
  ``must_keep`` string survives in the live text;
- **harmful**: an applied action joins members that no expected action joins, names
  a truth outside the cluster, retires a protected member or the newer statement of a
  supersede, or writes a merged text that lacks a ``must_keep`` string of its sources
  or says something none of them stated.
A rejected or failed verdict changes nothing, so it counts as KEEP_SEPARATE.

Pairs scoring: a pair is predicted "same" when both truths
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
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TypeVar

from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils.dateparse import parse_datetime

from .. import run_settings, text
from ..choices import is_protected
from ..conf import app_settings
from ..embeddings import Embedder
from ..exceptions import InvalidInput, JudgeRateLimited
from ..llm.base import JudgeClient
from ..models import ClusterReview, ConsolidationRun, Origin, Truth
from ..services.operations import transfer
from ..services.pipeline import vectors
from ..services.pipeline.clustering import CandidateCluster
from ..services.queue import execution
from ..services.run import decide, lifecycle, plan
from . import oracle as oracle_judge

BAD_FILE = "{path}:{line}: {problem}. Fix the file and try again."
NO_CASES = "{path} holds no case: a score of 0/0 would say nothing; give a golden-set file."
NO_FILE = "{path}: no such file."
NO_TRUTHS_FILE = "{path} needs its truths file beside it: {truths} is missing."
RATE_LIMITED = "rate limited: {error}"
SCRATCH_PREFIX = "iris-eval-"
#: Clusters of one user judged in one call once judge calls are batched.
CLUSTERS_PER_BATCHED_CALL = 8

T = TypeVar("T")

_CASE_FIELDS = ("id", "cluster", "expected", "actions", "must_keep")
_MEMBER_FIELDS = ("id", "content", "origin", "pinned", "generation", "created_at")


@dataclass(frozen=True, kw_only=True)
class Case:
    """One golden case: the cluster (dicts as in the file) and what a careful reviewer expects."""

    id: str
    cluster: tuple[dict[str, Any], ...]
    expected: str
    actions: tuple[dict[str, Any], ...]
    must_keep: tuple[str, ...]
    notes: str = ""


def _parse_case(raw: str) -> Case:
    data = json.loads(raw)
    if not isinstance(data, dict):
        raise ValueError("the line is not a JSON object")
    for name in _CASE_FIELDS:
        if name not in data:
            raise ValueError(f"field {name!r} is missing")
    if not isinstance(data["cluster"], list) or len(data["cluster"]) < 2:
        raise ValueError("'cluster' must list two or more truths")
    for member in data["cluster"]:
        missing = [n for n in _MEMBER_FIELDS if n not in member]
        if missing:
            raise ValueError(f"a cluster member lacks {', '.join(missing)}")
        if member["origin"] not in Origin.values:
            raise ValueError(f"origin {member['origin']!r} is not one of {', '.join(Origin.values)}")
        if parse_datetime(str(member["created_at"]).replace("Z", "+00:00")) is None:
            raise ValueError(f"created_at {member['created_at']!r} is not ISO 8601")
    return Case(
        id=str(data["id"]),
        cluster=tuple(data["cluster"]),
        expected=str(data["expected"]),
        actions=tuple(data["actions"]),
        must_keep=tuple(str(s) for s in data["must_keep"]),
        notes=str(data.get("notes", "")),
    )


def parse_lines(path: Path, parse: Callable[[str], T], *, bad: str = BAD_FILE) -> list[T]:
    """``parse`` applied to each non-blank line of the JSONL file ``path``, in order.

    A line ``parse`` refuses (``ValueError``, ``TypeError``, ``KeyError``, ``AttributeError``)
    raises ``InvalidInput`` with ``bad`` (placeholders ``path``, ``line``, ``problem``)
    naming it; nothing after it is read."""
    results = []
    with path.open(encoding="utf-8") as handle:
        for number, raw in enumerate(handle, start=1):
            if not raw.strip():
                continue
            try:
                results.append(parse(raw))
            except (ValueError, TypeError, KeyError, AttributeError) as exc:
                raise InvalidInput(bad.format(path=path, line=number, problem=exc)) from None
    return results


def load_cases(path: Path) -> list[Case]:
    """Parse a golden-set file; raises ``InvalidInput`` naming the first bad line, or for
    a file with no case (blank lines only)."""
    if not path.is_file():
        raise InvalidInput(NO_FILE.format(path=path))
    cases = parse_lines(path, _parse_case)
    if not cases:
        raise InvalidInput(NO_CASES.format(path=path))
    return cases


@dataclass(frozen=True, kw_only=True)
class CaseResult:
    """The outcome of one case: applied actions over the case's aliases, the verdict."""

    case: Case
    applied: tuple[str, ...]
    correct: bool
    harms: tuple[str, ...]
    rejections: tuple[str, ...]
    error: str
    llm_calls: int

    @property
    def harmful(self) -> bool:
        return bool(self.harms)


@dataclass(frozen=True, kw_only=True)
class GoldenReport:
    """Per-case results and totals; ``by_expected`` maps a category to (correct, total)."""

    results: tuple[CaseResult, ...]

    @property
    def correct(self) -> int:
        return sum(r.correct for r in self.results)

    @property
    def harmful(self) -> int:
        return sum(r.harmful for r in self.results)

    @property
    def total(self) -> int:
        return len(self.results)

    @property
    def llm_calls(self) -> int:
        return sum(r.llm_calls for r in self.results)

    @property
    def by_expected(self) -> dict[str, tuple[int, int]]:
        table: dict[str, tuple[int, int]] = {}
        for r in self.results:
            good, total = table.get(r.case.expected, (0, 0))
            table[r.case.expected] = (good + r.correct, total + 1)
        return table


class ScratchRollback(Exception):
    """Raised inside the scratch transaction to undo everything."""


def scratch_user(tag: str, name: str) -> Any:
    """A new user named ``iris-eval-<tag>-<name>`` (cut to 150 characters), no password;
    call it inside a transaction that ends in ``ScratchRollback``."""
    User = get_user_model()
    user = User(**{User.USERNAME_FIELD: f"{SCRATCH_PREFIX}{tag}-{name}"[:150]})
    user.set_unusable_password()
    user.save()
    return user


def _is_protected(member: dict[str, Any]) -> bool:
    """``choices.is_protected`` over a snapshot row."""
    return is_protected(
        pinned=member["pinned"],
        origin=member["origin"],
        generation=member["generation"],
        max_generation=app_settings.MAX_GENERATION,
    )


def _key(action: dict[str, Any]) -> tuple[Any, ...]:
    if action["action"] == "merge":
        return ("merge", frozenset(action["ids"]))
    return ("supersede", frozenset(action["old"]), frozenset([action["new"]]))


def _describe(key: tuple[Any, ...]) -> str:
    if key[0] == "merge":
        return "merge " + "+".join(sorted(key[1]))
    return "supersede " + "+".join(sorted(key[1])) + "->" + "+".join(sorted(key[2]))


def _score_case(case: Case, by_alias: dict[str, Truth], reviews: list[ClusterReview]) -> CaseResult:
    members = {m["id"]: m for m in case.cluster}
    groups: dict[int, frozenset[str]] = {t.pk: frozenset([alias]) for alias, t in by_alias.items()}
    contents = {t.pk: t.content for t in by_alias.values()}
    harms: list[str] = []
    merges: list[tuple[frozenset[str], int, str]] = []
    supersedes: list[tuple[frozenset[str], frozenset[str]]] = []
    for entry in (e for r in reviews for e in r.applied_actions):
        named = [groups.get(int(pk), frozenset([f"#{pk}"])) for pk in entry["truth_ids"].values()]
        outside = sorted(a for g in named for a in g if a.startswith("#"))
        if outside:
            harms.append(f"names truths outside the cluster ({', '.join(outside)})")
        result = int(entry["result_id"])
        if entry["action"] == "merge":
            joined = frozenset().union(*named)
            sources = [contents.get(int(pk), "") for pk in entry["truth_ids"].values()]
            content = entry["content"].strip()
            for s in case.must_keep:
                if any(s.lower() in src.lower() for src in sources) and s.lower() not in content.lower():
                    harms.append(f"merged text {content!r} lacks {s!r}")
            unstated = text.unstated_stems(content, sources)
            if unstated:
                harms.append(f"merged text {content!r} says {', '.join(sorted(unstated))}, stated by no source")
            groups[result] = joined
            contents.setdefault(result, content)
            merges = [m for m in merges if not m[0] <= joined]
            merges.append((joined, result, content))
        else:
            old = frozenset().union(*named[:-1])
            new = named[-1]
            supersedes.append((old, new))
            for o in old:
                for n in new:
                    if o in members and n in members and members[o]["created_at"] > members[n]["created_at"]:
                        harms.append(f"retires the newer {o} in favour of the older {n}")
    applied = [("merge", m[0]) for m in merges] + [("supersede", o, n) for o, n in supersedes]

    together = [set(a["ids"]) if a["action"] == "merge" else {*a["old"], a["new"]} for a in case.actions]
    for key in applied:
        joined = frozenset().union(*key[1:])
        apart = sorted(f"{x}+{y}" for x in joined for y in joined if x < y and not any({x, y} <= t for t in together))
        if apart:
            harms.append(f"{_describe(key)} joins {', '.join(apart)}, expected apart")
    for alias, truth in by_alias.items():
        truth.refresh_from_db()
        if truth.retired_at is not None and _is_protected(members[alias]):
            harms.append(f"retires protected {alias}")
    live = [t.content for t in Truth.objects.filter(user_id=next(iter(by_alias.values())).user_id)]
    live_text = "\n".join(live).lower()
    original = "\n".join(m["content"] for m in case.cluster).lower()
    lost = [s for s in case.must_keep if s.lower() in original and s.lower() not in live_text]
    harms.extend(f"{s!r} is no longer in any live truth" for s in lost)

    required = {_key(a) for a in case.actions if not a.get("optional")}
    allowed = {_key(a) for a in case.actions}
    done = set(applied)
    survivors_ok = all(
        any(m[0] == frozenset(a["ids"]) and m[1] == by_alias[a["survivor"]].pk for m in merges)
        for a in case.actions
        if a.get("survivor") and _key(a) in done
    )
    kept = all(s.lower() in live_text for s in case.must_keep)
    correct = required <= done <= allowed and survivors_ok and kept and not harms
    return CaseResult(
        case=case,
        applied=tuple(_describe(k) for k in applied),
        correct=correct,
        harms=tuple(dict.fromkeys(harms)),
        rejections=tuple(r["reason"] for review in reviews for r in review.rejections),
        error="; ".join(r.error for r in reviews if r.error),
        llm_calls=0,
    )


#: Called with a pass's reviews before the scratch transaction is rolled back.
ReviewSink = Callable[[list[ClusterReview]], None]


def score_golden(
    cases: Iterable[Case], *, client: JudgeClient, embedder: Embedder, on_reviews: ReviewSink | None = None
) -> GoldenReport:
    """Run every case through the orchestrator and score it (see the module docstring).

    ``on_reviews`` receives every review of the pass before it is rolled back. Makes the
    judge's model calls; writes nothing that outlives the call.
    """
    results: list[CaseResult] = []
    tag = uuid.uuid4().hex[:8]
    try:
        with transaction.atomic():
            run = lifecycle.create_run(trigger="command", execution="in_process", judge=client.name)
            for case in cases:
                user = scratch_user(tag, case.id)
                by_alias = {
                    m["id"]: Truth.objects.create(
                        user=user,
                        content=m["content"],
                        origin=m["origin"],
                        pinned=bool(m["pinned"]),
                        generation=int(m["generation"]),
                        score=float(m.get("score", 0.0)),
                        created_at=parse_datetime(str(m["created_at"]).replace("Z", "+00:00")),
                        source=f"eval:{case.id}:{m['id']}",
                    )
                    for m in case.cluster
                }
                ids = tuple(t.pk for t in by_alias.values())
                cluster = CandidateCluster(user_id=user.pk, member_ids=ids, similarities=(1.0,) * len(ids))
                error = ""
                calls_before = ConsolidationRun.objects.get(pk=run.pk).llm_calls
                try:
                    decide.decide_cluster(run_id=run.pk, cluster=cluster, client=client, embedder=embedder)
                except JudgeRateLimited as exc:
                    error = RATE_LIMITED.format(error=exc)
                reviews = list(run.reviews.filter(user=user).order_by("id"))
                result = _score_case(case, by_alias, reviews)
                calls = ConsolidationRun.objects.get(pk=run.pk).llm_calls - calls_before
                results.append(replace(result, error=result.error or error, llm_calls=calls))
            if on_reviews is not None:
                on_reviews(list(run.reviews.order_by("id")))
            raise ScratchRollback
    except ScratchRollback:
        pass
    return GoldenReport(results=tuple(results))


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
    if not pairs_path.is_file():
        raise InvalidInput(NO_FILE.format(path=pairs_path))
    truths_path = truths_file_for(pairs_path)
    if not truths_path.is_file():
        raise InvalidInput(NO_TRUTHS_FILE.format(path=pairs_path, truths=truths_path))
    pairs = _load_pairs(pairs_path)
    with truths_path.open(encoding="utf-8") as handle:
        rows = transfer.parse_truths(handle, path=str(truths_path))
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


def score_truths(
    truths_path: Path, *, client: JudgeClient, embedder: Embedder, on_reviews: ReviewSink | None = None
) -> int:
    """One pass of the real pipeline over a truths file with no labels: load its truths
    for scratch users and run a pass over them as ``--sync`` does (``execution.run_sync``:
    phase 1, each user's clusters judged in batches of ``CLUSTERS_PER_CALL``, the run
    closed).

    Returns the number of clusters judged; ``on_reviews`` receives the reviews. Raises
    ``InvalidInput`` for a missing or bad file. Writes nothing that outlives the call.
    """
    if not truths_path.is_file():
        raise InvalidInput(NO_FILE.format(path=truths_path))
    with truths_path.open(encoding="utf-8") as handle:
        rows = transfer.parse_truths(handle, path=str(truths_path))
    tag = uuid.uuid4().hex[:8]
    judged = 0
    try:
        with transaction.atomic():
            users = {name: scratch_user(tag, name) for name in sorted({r["user"] for r in rows})}
            Truth.objects.bulk_create([Truth(**{**r, "user": users[r["user"]]}) for r in rows], batch_size=1000)
            run = lifecycle.create_run(trigger="command", judge=client.name)
            # The scratch users only: never another user's truths.
            scratch = [u.pk for u in users.values()]
            run.effective_settings = {**(run.effective_settings or {}), "allowed_user_ids": scratch}
            run.save(update_fields=["effective_settings"])
            run = execution.run_sync(run=run, client=client, embedder=embedder)
            judged = run.reviews.exclude(failure=ClusterReview.Failure.RATE_LIMITED).count()
            if on_reviews is not None:
                on_reviews(list(run.reviews.order_by("id")))
            raise ScratchRollback
    except ScratchRollback:
        pass
    return judged
