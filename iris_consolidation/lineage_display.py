"""Turns a recorded lineage into template-ready rows (the presenter).

``rows_for(graph)`` makes the lineage page: a tree of ``TruthBox`` (each truth, the
steps that made it, their sources as the judge saw them), the same tree laid out as
an SVG picture (``lineage_picture.Picture``), and the forward steps (what the truth became).
Run and review pages are formatted by ``run_display`` and ``review_display``, a truth's
history by ``history_display``. Pure functions over rows already loaded: no queries, no
URLs (templates build those), no HTML.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from .lineage_picture import Picture, picture_for, walk
from .models import ConsolidationRun, LineageEvent, RetiredReason, RunId, Truth
from .reasoning_display import (
    ReasoningPart,
    UndoNote,
    grouped,
    judge_label,
    reasoning_parts,
    truth_names,
    undo_note,
    with_truth_numbers,
)
from .selectors import LineageGraph

#: Nodes deeper than this start collapsed on the lineage page (the picture shows all).
OPEN_DEPTH = 2


def _generation_class(generation: int) -> str:
    return f"iris-gen-{min(generation, 6)}"


def _short_run(run_id: RunId) -> str:
    return str(run_id)[:8]


@dataclass(kw_only=True)
class TruthBox:
    """One truth in the tree. ``text`` is the content as the judge saw it when the
    truth was consumed (from the review snapshot); ``current_text`` is set only if the
    truth's content differs now."""

    id: int
    text: str
    current_text: str
    generation: int
    generation_class: str
    origin: str
    created_at: datetime
    pinned: bool
    live: bool
    status: str
    superseded_by_id: int | None
    depth: int
    is_root: bool = False
    seen_before: bool = False
    open: bool = True
    steps: list[StepBox] = field(default_factory=list)
    restored_by: list[UndoNote] = field(default_factory=list)
    undone: list[UndoNote] = field(default_factory=list)

    @property
    def is_leaf(self) -> bool:
        return not self.steps

    @property
    def sources(self) -> list[TruthBox]:
        return [source for step in self.steps for source in step.sources]


@dataclass(kw_only=True)
class StepBox:
    """One consolidation step into a truth: one review's merge or supersede."""

    action: str
    label: str
    reason: str
    reasoning: str
    judge: str
    model: str
    prompt_version: str
    review_id: int | None
    run_id: RunId | None
    run_label: str
    run_kind: str
    actor: str
    created_at: datetime
    undone: UndoNote | None
    sources: list[TruthBox] = field(default_factory=list)
    reasoning_parts: tuple[ReasoningPart, ...] = ()


@dataclass(frozen=True, kw_only=True)
class ForwardStep:
    """One step out of a truth: what it was retired into, and why."""

    action_label: str
    source_id: int
    result_id: int
    result_text: str
    result_generation: int
    result_live: bool
    reason: str
    reasoning: str
    model: str
    prompt_version: str
    review_id: int | None
    run_id: RunId | None
    run_label: str
    created_at: datetime
    undone: UndoNote | None
    reasoning_parts: tuple[ReasoningPart, ...] = ()


@dataclass(frozen=True, kw_only=True)
class LineageDisplay:
    """Everything the lineage page shows; see ``rows_for``."""

    root: TruthBox
    picture: Picture | None
    forward: tuple[ForwardStep, ...]
    originals: int
    steps: int
    depth: int
    runs: int
    models: tuple[str, ...]
    prompt_versions: tuple[str, ...]


def _status(truth: Truth) -> str:
    if truth.retired_at is None:
        return "live"
    if truth.retired_reason == RetiredReason.UNDONE:
        return "retired: consolidation undone"
    if truth.retired_reason in (RetiredReason.NOISE, RetiredReason.PRUNED):
        # No truth replaced it: the reason (and, in the history, the stage's audit row) says why.
        return f"retired: {truth.get_retired_reason_display().lower()}"
    label = "merged into" if truth.retired_reason == RetiredReason.MERGED else "superseded by"
    return f"retired: {label} #{truth.superseded_by_id}" if truth.superseded_by_id else "retired"


def _snapshot_text(event: LineageEvent) -> str | None:
    if event.review is None:
        return None
    for row in event.review.snapshot:
        if int(row["id"]) == event.source_id:
            return str(row["content"])
    return None


class _Builder:
    """Walks a ``LineageGraph`` once into boxes and the picture."""

    def __init__(self, graph: LineageGraph, *, open_depth: int) -> None:
        self.graph = graph
        self.open_depth = open_depth
        self.incoming: dict[int, list[LineageEvent]] = {}
        for event in graph.ancestry:
            self.incoming.setdefault(event.result_id, []).append(event)
        # (undone truth, restored truth, review) -> the undo event reversing that edge
        self.undo_of: dict[tuple[int, int, int | None], LineageEvent] = {}
        self.restored: dict[int, list[LineageEvent]] = {}
        self.undone: dict[int, list[LineageEvent]] = {}
        for event in graph.undos:
            self.undo_of[(event.source_id, event.result_id, event.review_id)] = event
            self.restored.setdefault(event.result_id, []).append(event)
            self.undone.setdefault(event.source_id, []).append(event)
        self.seen: set[int] = set()
        self.step_count = 0
        self.max_depth = 0

    def box(self, truth: Truth, *, depth: int, text: str | None = None) -> TruthBox:
        self.max_depth = max(self.max_depth, depth)
        judged = text if text is not None else truth.content
        box = TruthBox(
            id=truth.pk,
            text=judged,
            current_text=truth.content if truth.content != judged else "",
            generation=truth.generation,
            generation_class=_generation_class(truth.generation),
            origin=truth.get_origin_display(),
            created_at=truth.created_at,
            pinned=truth.pinned,
            live=truth.retired_at is None,
            status=_status(truth),
            superseded_by_id=truth.superseded_by_id,
            depth=depth,
            is_root=depth == 0,
            open=depth < self.open_depth,
            restored_by=grouped(
                n for e in self.restored.get(truth.pk, []) if (n := undo_note(e, other_id=e.source_id))
            ),
            undone=grouped(n for e in self.undone.get(truth.pk, []) if (n := undo_note(e, other_id=e.result_id))),
        )
        if truth.pk in self.seen:
            # Only possible after an undo re-opened a cycle; draw it once.
            box.seen_before = True
            return box
        self.seen.add(truth.pk)
        groups: dict[int | None, list[LineageEvent]] = {}
        for event in self.incoming.get(truth.pk, []):
            groups.setdefault(event.review_id, []).append(event)
        for events in groups.values():
            box.steps.append(self.step(truth, events, depth=depth))
        return box

    def step(self, truth: Truth, events: list[LineageEvent], *, depth: int) -> StepBox:
        self.step_count += 1
        first = events[0]
        review = first.review
        run: ConsolidationRun | None = review.run if review is not None else None
        count = len(events)
        if first.action == LineageEvent.Action.MERGE:
            kept = review is not None and truth.pk in {int(row["id"]) for row in review.snapshot}
            # A merge either makes a new truth, or keeps a protected member and retires the rest into it.
            label = f"Kept, absorbing {count} truth{'s' if count > 1 else ''}" if kept else f"Merge of {count} truths"
        else:
            label = f"Supersedes {count} older truth{'s' if count > 1 else ''}"
        undo = self.undo_of.get((truth.pk, first.source_id, first.review_id))
        names = truth_names(review.snapshot if review else None)
        step = StepBox(
            reasoning_parts=_parts(review, names),
            action=first.action,
            label=label,
            reason=with_truth_numbers(first.reason, names),
            reasoning=review.reasoning if review else "",
            judge=review.judge if review else first.actor,
            model=review.model if review else "",
            prompt_version=review.prompt_version if review else "",
            review_id=review.pk if review else None,
            run_id=run.pk if run else None,
            run_label=_short_run(run.pk) if run else "",
            run_kind=run.kind_label if run else "",
            actor=first.actor,
            created_at=first.created_at,
            undone=undo_note(undo, other_id=first.source_id),
        )
        ordered = sorted(events, key=lambda e: (e.source.created_at, e.source_id))
        step.sources = [self.box(e.source, depth=depth + 1, text=_snapshot_text(e)) for e in ordered]
        return step

    def forward(self) -> tuple[ForwardStep, ...]:
        steps = []
        for event in self.graph.forward:
            review = event.review
            undo = self.undo_of.get((event.result_id, event.source_id, event.review_id))
            steps.append(
                ForwardStep(
                    reasoning_parts=_parts(review, truth_names(review.snapshot if review else None)),
                    action_label="Merged into" if event.action == LineageEvent.Action.MERGE else "Superseded by",
                    source_id=event.source_id,
                    result_id=event.result_id,
                    result_text=event.result.content,
                    result_generation=event.result.generation,
                    result_live=event.result.retired_at is None,
                    reason=with_truth_numbers(event.reason, truth_names(review.snapshot if review else None)),
                    reasoning=review.reasoning if review else "",
                    model=review.model if review else "",
                    prompt_version=review.prompt_version if review else "",
                    review_id=review.pk if review else None,
                    run_id=review.run_id if review else None,
                    run_label=_short_run(review.run_id) if review else "",
                    created_at=event.created_at,
                    undone=undo_note(undo, other_id=event.source_id),
                )
            )
        return tuple(steps)


def _parts(review: Any, names: Mapping[str, str]) -> tuple[ReasoningPart, ...]:
    if review is None:
        return ()
    label = judge_label(judge=review.judge, model=review.model)
    return reasoning_parts(review.reasoning, names=names, judge_label=label)


def rows_for(graph: LineageGraph, *, open_depth: int = OPEN_DEPTH) -> LineageDisplay:
    """The lineage page's data for ``graph`` (see the module docstring).

    ``open_depth``: boxes at this depth or deeper start collapsed (the picture and
    the "expand all" link show everything).
    """
    builder = _Builder(graph, open_depth=open_depth)
    root = builder.box(graph.root, depth=0)
    boxes = list(walk(root))
    reviews = [e.review for e in graph.ancestry if e.review is not None]
    return LineageDisplay(
        root=root,
        picture=picture_for(root),
        forward=builder.forward(),
        originals=len({b.id for b in boxes if b.is_leaf and not b.seen_before}) if not root.is_leaf else 0,
        steps=builder.step_count,
        depth=builder.max_depth,
        runs=len({r.run_id for r in reviews}),
        models=tuple(sorted({r.model for r in reviews if r.model})),
        prompt_versions=tuple(sorted({r.prompt_version for r in reviews if r.prompt_version})),
    )
