"""Recall of phase 1: how much of what a careful reader would consolidate a pass ever
puts before the judge, and at what cost in judge calls.

Two measures, both on scratch users inside one transaction that is rolled back (nothing
stays in the database), both through the real phase 1 of a dry run
(``plan.plan_user``: every stage and candidate arm at the run's settings):

- **Pair recall on a whole-memory reference** (``reference_recall``): the reference
  (``eval/reference/locomo_whole_memory.jsonl``: one action per line, truths named by
  their ``source``) is split into pairs, a merge's first source with each other source,
  a supersede's each old source with its new one. A pair is recalled when one group
  phase 1 hands the judge holds both truths. Merges and supersedes apart, for all
  actions and for the ``high``-confidence ones.
- **Cases among other truths** (``cases_recall``): each case of a golden-set file
  (the expected actions of ``judge_golden.jsonl``, ``public_cases.jsonl``) placed among
  ``filler`` first-person truths of other people (MSC speakers), its own user: the share
  of required expected actions whose truths all share one group.

Cost: judge calls per 100 truths, each user's groups sent ``CLUSTERS_PER_CALL`` to a call
(``pair_scoring.batched_calls``), over every user loaded (all of a truths file's users, not
only the reference's). Texts are embedded once, before the users are written, so the
figures take seconds.
"""

from __future__ import annotations

import json
import uuid
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from django.db import transaction

from ..conf import app_settings
from ..embeddings import Embedder
from ..exceptions import InvalidInput
from ..models import Truth
from ..services.operations import transfer
from ..services.pipeline.clustering import CandidateCluster
from ..services.run import lifecycle, plan
from .scoring import NO_FILE, ScratchRollback, load_cases, parse_lines, scratch_user

#: Truths embedded per call of the embedder while a measure is prepared.
EMBED_BATCH = 256
#: Other truths a case is placed among (the issue's "100 first-person truths").
CASE_FILLER = 100
#: What makes an MSC truth first person: its first word.
FIRST_PERSON = ("i", "i'm", "i've", "i'd", "i'll", "my", "me", "we", "our")


@dataclass(frozen=True, kw_only=True)
class RefPair:
    """One pair of a reference action: two truth sources of one user."""

    user: str
    a: str
    b: str
    action: str
    confidence: str


@dataclass(kw_only=True)
class Tally:
    """Recalled and total pairs (or actions) of one kind."""

    recalled: int = 0
    total: int = 0

    @property
    def share(self) -> float | None:
        return self.recalled / self.total if self.total else None

    def add(self, recalled: bool) -> None:
        self.total += 1
        self.recalled += int(recalled)


@dataclass(kw_only=True)
class Cost:
    """Groups and judge calls of a dry run's phase 1 over ``truths`` truths of ``users`` users."""

    users: int = 0
    truths: int = 0
    groups: int = 0
    calls: int = 0
    members: int = 0

    def per_100(self, value: int) -> float:
        return 100.0 * value / self.truths if self.truths else 0.0


@dataclass(kw_only=True)
class ReferenceReport:
    """Pair recall by ``(action, confidence)`` ("all" or "high") and the pass's cost."""

    tallies: dict[tuple[str, str], Tally] = field(default_factory=lambda: defaultdict(Tally))
    cost: Cost = field(default_factory=Cost)
    missed: list[RefPair] = field(default_factory=list)
    unmatched: int = 0


@dataclass(kw_only=True)
class CasesReport:
    """Required expected actions whose truths share one group, by action, and the cost."""

    tallies: dict[str, Tally] = field(default_factory=lambda: defaultdict(Tally))
    cost: Cost = field(default_factory=Cost)
    missed: list[tuple[str, str, tuple[str, ...]]] = field(default_factory=list)


def _read_truths(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        raise InvalidInput(NO_FILE.format(path=path))
    with path.open(encoding="utf-8") as handle:
        return transfer.parse_truths(handle, path=str(path))


def load_reference(path: Path) -> list[RefPair]:
    """The pairs of a whole-memory reference file (see the module docstring). Raises
    ``InvalidInput`` for a missing file or a line without ``user``, ``action`` or sources."""
    if not path.is_file():
        raise InvalidInput(NO_FILE.format(path=path))

    def parse(raw: str) -> list[RefPair]:
        entry = json.loads(raw)
        user, action, confidence = entry["user"], entry["action"], entry.get("confidence", "high")
        if action == "merge":
            first, *rest = entry["sources"]
            return [RefPair(user=user, a=first, b=other, action=action, confidence=confidence) for other in rest]
        if action == "supersede":
            return [RefPair(user=user, a=old, b=entry["new"], action=action, confidence=confidence)
                    for old in entry["old"]]
        raise ValueError(f"unknown action {action!r}")

    return [pair for pairs in parse_lines(path, parse) for pair in pairs]


def _embed(texts: Sequence[str], embedder: Embedder) -> dict[str, np.ndarray]:
    distinct = sorted(set(texts))
    vectors: dict[str, np.ndarray] = {}
    for start in range(0, len(distinct), EMBED_BATCH):
        chunk = distinct[start : start + EMBED_BATCH]
        for text, vector in zip(chunk, embedder.embed(chunk), strict=True):
            vectors[text] = np.asarray(vector, dtype=np.float32)
    return vectors


def _dry_run_groups(
    users: dict[str, list[dict[str, Any]]], *, embedder: Embedder, threshold: float | None
) -> tuple[dict[str, dict[str, int]], dict[str, list[CandidateCluster]], Cost]:
    """Write ``users`` (name -> truth rows) as scratch users with their vectors, run phase 1
    of one dry run over each, and return each user's ``{source or content: truth id}``,
    its groups, and the cost. Rolls everything back."""
    vectors = _embed([row["content"] for rows in users.values() for row in rows], embedder)
    tag = uuid.uuid4().hex[:8]
    ids: dict[str, dict[str, int]] = {}
    groups: dict[str, list[CandidateCluster]] = {}
    cost = Cost(users=len(users), truths=sum(len(rows) for rows in users.values()))
    per_call = int(app_settings.CLUSTERS_PER_CALL)
    try:
        with transaction.atomic():
            run = lifecycle.create_run(trigger="command", dry_run=True, execution="in_process",
                                           threshold=threshold, judge="rules")
            lifecycle.start_run(run)
            for name, rows in users.items():
                user = scratch_user(tag, name)
                made = Truth.objects.bulk_create(
                    [Truth(**{**row, "user": user, "embedding": vectors[row["content"]],
                              "embedding_model": embedder.model_name}) for row in rows],
                    batch_size=1000,
                )
                ids[name] = {row.get("source") or row["content"]: truth.pk
                             for row, truth in zip(rows, made, strict=True)}
                clusters = plan.plan_user(run_id=run.pk, user_id=user.pk, embedder=embedder)
                groups[name] = clusters
                cost.groups += len(clusters)
                cost.members += sum(len(c.member_ids) for c in clusters)
                cost.calls += -(-len(clusters) // per_call)
            raise ScratchRollback
    except ScratchRollback:
        pass
    return ids, groups, cost


def _together(clusters: Iterable[CandidateCluster]) -> dict[int, set[int]]:
    """Truth id -> the positions of the groups holding it."""
    held: dict[int, set[int]] = defaultdict(set)
    for position, cluster in enumerate(clusters):
        for pk in cluster.member_ids:
            held[pk].add(position)
    return held


def reference_recall(
    reference: Path, truths: Path, *, embedder: Embedder, threshold: float | None = None
) -> ReferenceReport:
    """Pair recall of a default dry run on the reference's users, and judge calls per
    100 truths over every user of ``truths`` (see the module docstring). Raises
    ``InvalidInput`` for a missing or bad file. Writes nothing that outlives the call."""
    pairs = load_reference(reference)
    ids, groups, cost = _dry_run_groups(_by_user(truths), embedder=embedder, threshold=threshold)
    report = ReferenceReport(cost=cost)
    held = {name: _together(clusters) for name, clusters in groups.items()}
    for pair in pairs:
        a, b = ids.get(pair.user, {}).get(pair.a), ids.get(pair.user, {}).get(pair.b)
        if a is None or b is None:
            report.unmatched += 1
            continue
        recalled = bool(held[pair.user].get(a, set()) & held[pair.user].get(b, set()))
        report.tallies[(pair.action, "all")].add(recalled)
        if pair.confidence == "high":
            report.tallies[(pair.action, "high")].add(recalled)
        if not recalled:
            report.missed.append(pair)
    return report


def cost_of(truths: Path, *, embedder: Embedder, threshold: float | None = None) -> Cost:
    """The cost alone (groups, judge calls) of a default dry run's phase 1 over every user of
    the truths file ``truths`` (MSC, PersonaChat: sets with no whole-memory reference).
    Raises ``InvalidInput`` for a missing or bad file. Writes nothing that outlives the call."""
    return _dry_run_groups(_by_user(truths), embedder=embedder, threshold=threshold)[2]


def _by_user(truths: Path) -> dict[str, list[dict[str, Any]]]:
    """The rows of a truths file by user, in file order."""
    by_user: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in _read_truths(truths):
        by_user[row["user"]].append(row)
    return dict(by_user)


def first_person_pool(path: Path) -> list[dict[str, Any]]:
    """The first-person truths of a truths file (MSC's: "I ...", "My ..."), in file order."""
    pool = []
    for row in _read_truths(path):
        words = row["content"].strip().lower().split()
        if words and words[0] in FIRST_PERSON:
            pool.append(row)
    return pool


def cases_recall(
    case_files: Sequence[Path], filler: Path, *, embedder: Embedder, threshold: float | None = None,
    per_case: int = CASE_FILLER,
) -> CasesReport:
    """For each case of ``case_files``, its members among ``per_case`` first-person truths
    of ``filler`` (case number i takes the pool's truths from ``i * per_case`` on, round
    the pool), each case its own user; the share of required expected actions whose
    truths share one group. Raises ``InvalidInput`` for a missing or bad file."""
    pool = first_person_pool(filler)
    if len(pool) < per_case:
        raise InvalidInput(f"{filler}: {len(pool)} first-person truths, fewer than the {per_case} a case needs.")
    cases = [case for path in case_files for case in load_cases(path)]
    users: dict[str, list[dict[str, Any]]] = {}
    for number, case in enumerate(cases):
        start = number * per_case
        others = [pool[(start + k) % len(pool)] for k in range(per_case)]
        rows = [{"content": o["content"], "origin": o["origin"], "created_at": o["created_at"],
                 "source": f"filler:{k}"} for k, o in enumerate(others)]
        for member in case.cluster:
            rows.append({
                "content": member["content"], "origin": member["origin"], "pinned": bool(member.get("pinned")),
                "generation": int(member.get("generation", 0)), "created_at": member["created_at"],
                "source": f"case:{member['id']}",
            })
        users[case.id] = rows
    parsed = {name: [_parsed_row(r) for r in rows] for name, rows in users.items()}
    ids, groups, cost = _dry_run_groups(parsed, embedder=embedder, threshold=threshold)
    report = CasesReport(cost=cost)
    for case in cases:
        held = _together(groups[case.id])
        for action in case.actions:
            if action.get("optional"):
                continue
            aliases = tuple(action["ids"]) if action["action"] == "merge" else (*action["old"], action["new"])
            members = [ids[case.id][f"case:{alias}"] for alias in aliases]
            shared = set.intersection(*(held.get(pk, set()) for pk in members))
            report.tallies[action["action"]].add(bool(shared))
            if not shared:
                report.missed.append((case.id, action["action"], aliases))
    return report


def _parsed_row(row: dict[str, Any]) -> dict[str, Any]:
    """A case or filler row as ``transfer.parse_truths`` gives one (dates parsed)."""
    line = json.dumps({"user": "x", **{k: v for k, v in row.items() if k != "created_at"},
                       "created_at": row["created_at"] if isinstance(row["created_at"], str)
                       else row["created_at"].isoformat()})
    parsed = transfer.parse_truths([line])[0]
    parsed.pop("user")
    for key in ("pinned", "generation"):
        if key in row:
            parsed[key] = row[key]
    return parsed
