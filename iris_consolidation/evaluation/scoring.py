"""Score the judge and the validator on the golden set, and the helpers every scoring shares.

The scoring goes through the real path of a run, ``decide.decide_cluster``
(pre-pass, prompt, judge, validator, merge), on scratch users whose names start with
``iris-eval-`` (``scratch_user``), inside one transaction that is rolled back at the end
(``ScratchRollback``): nothing stays in the database. The same/different pairs are scored
in ``pair_scoring``; ``score_truths`` runs a pass over a truths file with no labels.

Golden set scoring:
- **correct**: the applied actions equal the expected ones (optional ones may be
  present or absent; a required survivor is the merge's result), and every
  ``must_keep`` string survives in the live text;
- **harmful**: an applied action joins members that no expected action joins, names
  a truth outside the cluster, retires a protected member or the newer statement of a
  supersede, or writes a merged text that lacks a ``must_keep`` string of its sources
  or says something none of them stated.
A rejected or failed verdict changes nothing, so it counts as KEEP_SEPARATE.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TypeVar

from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils.dateparse import parse_datetime

from .. import text
from ..choices import is_protected
from ..conf import app_settings
from ..embeddings import Embedder
from ..exceptions import InvalidInput, JudgeRateLimited
from ..llm.base import JudgeClient
from ..models import ClusterReview, ConsolidationRun, Origin, Truth
from ..services.operations import transfer
from ..services.pipeline.clustering import CandidateCluster
from ..services.queue import execution
from ..services.run import decide, lifecycle

BAD_FILE = "{path}:{line}: {problem}. Fix the file and try again."
NO_CASES = "{path} holds no case: a score of 0/0 would say nothing; give a golden-set file."
NO_FILE = "{path}: no such file."
RATE_LIMITED = "rate limited: {error}"
SCRATCH_PREFIX = "iris-eval-"

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


_Merge = tuple[frozenset[str], int, str]  # the aliases joined, the result's id, its text
_Supersede = tuple[frozenset[str], frozenset[str]]  # the old aliases, the new one


def _applied(
    case: Case, by_alias: dict[str, Truth], reviews: list[ClusterReview], harms: list[str]
) -> tuple[list[_Merge], list[_Supersede]]:
    """The merges and supersedes the ``reviews`` applied, over the case's aliases (a merge
    that takes in an earlier one's result stands for both); the harms an action shows by
    itself (a truth outside the cluster, a merged text that lost or invented something, the
    newer statement retired) are appended to ``harms``."""
    members = {m["id"]: m for m in case.cluster}
    groups: dict[int, frozenset[str]] = {t.pk: frozenset([alias]) for alias, t in by_alias.items()}
    contents = {t.pk: t.content for t in by_alias.values()}
    merges: list[_Merge] = []
    supersedes: list[_Supersede] = []
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
    return merges, supersedes


def _outcome_harms(case: Case, by_alias: dict[str, Truth], applied: list[tuple[Any, ...]], harms: list[str]) -> str:
    """Append to ``harms`` what the applied actions did together (members joined that are
    expected apart, a protected member retired, a ``must_keep`` string in no live truth);
    returns the user's live text, lower-cased, one truth a line."""
    members = {m["id"]: m for m in case.cluster}
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
    return live_text


def _score_case(case: Case, by_alias: dict[str, Truth], reviews: list[ClusterReview]) -> CaseResult:
    harms: list[str] = []
    merges, supersedes = _applied(case, by_alias, reviews, harms)
    applied: list[tuple[Any, ...]] = [("merge", m[0]) for m in merges] + [("supersede", o, n) for o, n in supersedes]
    live_text = _outcome_harms(case, by_alias, applied, harms)

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
