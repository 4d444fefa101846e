"""Turns recorded lineage and reviews into template-ready rows (the presenter).

``rows_for(graph)`` makes the lineage page: a tree of ``TruthBox`` (each truth, the
steps that made it, their sources as the judge saw them), the same tree laid out as
an SVG picture (``Picture``), and the forward steps (what the truth became). Run and
review pages are formatted by ``run_display``. Pure functions over rows already
loaded: no queries, no URLs (templates build those), no HTML.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from .choices import JudgeKind, judge_identity
from .llm.base import ALIAS, truth_names, with_truth_numbers  # noqa: F401  (the presenters' names for them)
from .models import ConsolidationRun, LineageEvent, RetiredReason, RunId, Truth
from .selectors import LineageGraph
from .services.pipeline.judging import PREPASS_REASONING

# --- the judge's words in the operator's: truth numbers for aliases ---------------------

#: How the pre-pass's part of a review's reasoning begins (``judging.PREPASS_REASONING``).
PREPASS_PREFIX = PREPASS_REASONING.split("{", 1)[0]
PREPASS_LABEL = PREPASS_PREFIX.rstrip(": ")


@dataclass(frozen=True, kw_only=True)
class ReasoningPart:
    """One labelled part of a review's reasoning: the pre-pass's, or the judge's."""

    label: str
    text: str


def reasoning_parts(reasoning: str, *, names: Mapping[str, str], judge_label: str) -> tuple[ReasoningPart, ...]:
    """A review's reasoning split into the pre-pass's lines (labelled "Pre-pass (no
    model call)") and the judge's (labelled ``judge_label``), aliases as truth numbers.

    ``judging`` joins the pre-pass's note and the model's reasoning with a newline; shown
    whole under one label, a model's merge read as the pre-pass's."""
    parts: list[ReasoningPart] = []
    for line in (reasoning or "").splitlines():
        if not line.strip():
            continue
        if line.startswith(PREPASS_PREFIX):
            label, text = PREPASS_LABEL, line.removeprefix(PREPASS_PREFIX)
        else:
            label, text = judge_label, line
        text = with_truth_numbers(text.strip(), names)
        if parts and parts[-1].label == label:
            parts[-1] = ReasoningPart(label=label, text=f"{parts[-1].text} {text}")
        else:
            parts.append(ReasoningPart(label=label, text=text))
    return tuple(parts)


def judge_label(*, judge: str, model: str) -> str:
    """"Model's reasoning (openai/x)" for a model judge, "Rule judge's reasoning" for the
    rule judge, "Judge's reasoning" when unknown."""
    if model and judge != "rules":
        return f"Model's reasoning ({model})"
    if judge == "rules":
        return "Rule judge's reasoning"
    return "Judge's reasoning"

#: Nodes deeper than this start collapsed on the lineage page (the picture shows all).
OPEN_DEPTH = 2

# Picture geometry, in CSS pixels. A row per leaf keeps every original readable:
# 32 originals make a picture about 800 px high.
ROW = 24
COLUMN = 96
MARGIN = 16
RADIUS = 7
CHAR_WIDTH = 6.4  # average width of an 11 px sans-serif character
ROOT_CHAR_WIDTH = 7.6  # the root's label is 12 px bold
LEAF_LABEL_CHARS = 44
ROOT_LABEL_CHARS = (26, 64)  # fewest and most characters of the truth's own label
TARGET_WIDTH = 960  # the admin's content column at common screen sizes; wider pictures scale down


def _clip(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def _generation_class(generation: int) -> str:
    return f"iris-gen-{min(generation, 6)}"


def _short_run(run_id: RunId) -> str:
    return str(run_id)[:8]


@dataclass(frozen=True, kw_only=True)
class UndoNote:
    """An undo as recorded: who, when, why, and the truth on the other side."""

    actor: str
    reason: str
    created_at: datetime
    other_id: int
    #: Every truth on the other side when one undo restored several (``grouped``).
    other_ids: tuple[int, ...] = ()


def grouped(notes: Iterable[UndoNote]) -> list[UndoNote]:
    """One note per undo (same actor, reason and time), listing all its truths: an undo
    that restored three truths is one sentence, not three."""
    merged: dict[tuple[str, str, datetime], UndoNote] = {}
    for note in notes:
        key = (note.actor, note.reason, note.created_at.replace(microsecond=0))
        first = merged.get(key)
        ids = (*(first.other_ids if first else ()), note.other_id)
        merged[key] = UndoNote(
            actor=note.actor, reason=note.reason, created_at=(first or note).created_at,
            other_id=(first or note).other_id, other_ids=tuple(dict.fromkeys(ids)),
        )
    return list(merged.values())


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
class PictureNode:
    id: int
    x: float
    y: float
    css_class: str
    title: str
    label: str
    label_x: float
    label_y: float
    label_anchor: str
    is_root: bool


@dataclass(frozen=True, kw_only=True)
class PictureEdge:
    path: str
    css_class: str


@dataclass(frozen=True, kw_only=True)
class Picture:
    """The ancestry as an SVG: originals on the left, the truth on the right."""

    width: int
    height: int
    nodes: tuple[PictureNode, ...]
    edges: tuple[PictureEdge, ...]
    radius: int = RADIUS


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


def undo_note(event: LineageEvent | None, *, other_id: int) -> UndoNote | None:
    """The ``UndoNote`` of an undo event (None for None)."""
    if event is None:
        return None
    return UndoNote(actor=event.actor, reason=event.reason, created_at=event.created_at, other_id=other_id)


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


def _walk(box: TruthBox) -> Iterable[TruthBox]:
    yield box
    for source in box.sources:
        yield from _walk(source)


def picture_for(root: TruthBox) -> Picture | None:
    """Lay the tree out as a left-to-right dendrogram: one row per leaf (in tree
    order), each parent centred on its sources, one column per step of depth.
    Returns None for a truth with no ancestry (nothing to draw)."""
    if root.is_leaf:
        return None
    boxes = list(_walk(root))
    max_depth = max(b.depth for b in boxes)
    leaf_chars = min(LEAF_LABEL_CHARS, max(len(_leaf_label(b)) for b in boxes if b.is_leaf))
    left = MARGIN + leaf_chars * CHAR_WIDTH + RADIUS + 8
    room = (TARGET_WIDTH - left - max_depth * COLUMN - RADIUS - 10 - MARGIN) / ROOT_CHAR_WIDTH
    root_label = _root_label(root, chars=int(min(max(room, ROOT_LABEL_CHARS[0]), ROOT_LABEL_CHARS[1])))
    width = left + max_depth * COLUMN + RADIUS + 10 + len(root_label) * ROOT_CHAR_WIDTH + MARGIN
    positions: dict[int, tuple[float, float]] = {}
    rows = 0

    def place(box: TruthBox) -> tuple[float, float]:
        nonlocal rows
        x = left + (max_depth - box.depth) * COLUMN
        if box.is_leaf or box.seen_before:
            y: float = MARGIN + 14 + rows * ROW
            rows += 1
        else:
            ys = [place(source)[1] for source in box.sources]
            y = (ys[0] + ys[-1]) / 2
        positions[id(box)] = (x, y)
        return x, y

    place(root)
    nodes: list[PictureNode] = []
    edges: list[PictureEdge] = []
    for box in boxes:
        x, y = positions[id(box)]
        state = "live" if box.live else "retired"
        if box.is_root:
            label, lx, ly, anchor = root_label, x + RADIUS + 8, y + 4, "start"
        elif box.is_leaf or box.seen_before:
            label, lx, ly, anchor = _leaf_label(box), x - RADIUS - 6, y + 4, "end"
        else:
            label, lx, ly, anchor = f"#{box.id} g{box.generation}", x, y - RADIUS - 5, "middle"
        nodes.append(
            PictureNode(
                id=box.id,
                x=x,
                y=y,
                css_class=f"{box.generation_class} iris-{state}",
                title=f"#{box.id} (generation {box.generation}, {box.status}): {box.text}",
                label=label,
                label_x=lx,
                label_y=ly,
                label_anchor=anchor,
                is_root=box.is_root,
            )
        )
        for step in box.steps:
            kind = "iris-edge-undone" if step.undone else f"iris-edge-{step.action}"
            for source in step.sources:
                sx, sy = positions[id(source)]
                middle = (sx + x) / 2
                edges.append(PictureEdge(path=f"M{sx:.1f} {sy:.1f}H{middle:.1f}V{y:.1f}H{x:.1f}", css_class=kind))
    height = MARGIN * 2 + 14 + rows * ROW
    return Picture(width=int(width), height=int(height), nodes=tuple(nodes), edges=tuple(edges))


def _leaf_label(box: TruthBox) -> str:
    return _clip(f"#{box.id} {box.text}", LEAF_LABEL_CHARS)


def _root_label(box: TruthBox, *, chars: int) -> str:
    return _clip(f"#{box.id} g{box.generation} {box.text}", chars)


def rows_for(graph: LineageGraph, *, open_depth: int = OPEN_DEPTH) -> LineageDisplay:
    """The lineage page's data for ``graph`` (see the module docstring).

    ``open_depth``: boxes at this depth or deeper start collapsed (the picture and
    the "expand all" link show everything).
    """
    builder = _Builder(graph, open_depth=open_depth)
    root = builder.box(graph.root, depth=0)
    boxes = list(_walk(root))
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


# --- a truth's history page ---------------------------------------------


@dataclass(frozen=True, kw_only=True)
class HistoryRow:
    """One line of a truth's history: when, what happened, who, why, and links."""

    at: datetime
    what: str
    actor: str
    reason: str
    other_id: int | None = None
    review_id: int | None = None
    run_id: RunId | None = None


_OUT_WORDS = {
    LineageEvent.Action.MERGE: "Merged into #{other}",
    LineageEvent.Action.SUPERSEDE: "Superseded by #{other}",
}
_IN_WORDS = {
    LineageEvent.Action.MERGE: "Made by merging #{other}",
    LineageEvent.Action.SUPERSEDE: "Supersedes #{other}",
}
_EDIT_WORDS = {1: "Added in the admin", 2: "Edited in the admin", 3: "Deleted in the admin"}


def actor_words(actor: str) -> str:
    """Who did it, for people: ``llm:openai/x`` -> "the model openai/x (judge)",
    ``rules`` -> "the rule judge", ``hygiene:prune`` -> "the prune stage", ``import``
    -> "an import"; a person's username stays as it is."""
    kind, model = judge_identity(actor)
    if kind == JudgeKind.LLM:
        return f"the model {model} (judge)"
    if kind == JudgeKind.RULES or actor == "rule":
        return "the rule judge"
    if actor.startswith("hygiene:"):
        return f"the {actor.removeprefix('hygiene:')} stage"
    if actor == "import":
        return "an import"
    return actor


def numbered_reason(record: Any) -> str:
    """The ``reason`` of a lineage event or audit row with truth numbers for its review's
    aliases: rows are written so, and rows recorded earlier kept the judge's ``t1``."""
    review = record.review if record.review_id else None
    return with_truth_numbers(record.reason, truth_names(review.snapshot if review is not None else None))


def history_rows(history: Any) -> list[HistoryRow]:
    """The ``selectors.TruthHistory`` of a truth as one timeline, newest first.

    Audit rows say what happened to the truth itself; lineage events say which truth
    it was merged into or made from (the audit's "retired" row and the merge event
    describe one step, so both are shown: one says when, the other with what).
    """
    pk = history.truth.pk
    rows: list[HistoryRow] = []
    for change in history.changes:
        rows.append(
            HistoryRow(
                at=change.created_at,
                what=change.get_action_display(),
                actor=actor_words(change.actor),
                reason=numbered_reason(change),
                review_id=change.review_id,
                run_id=change.run_id,
            )
        )
    for event in history.events:
        if event.action == LineageEvent.Action.UNDO:
            what = f"Undo: #{event.source_id} restored from #{event.result_id}"
            other = event.source_id if event.result_id == pk else event.result_id
        elif event.source_id == pk:
            what = _OUT_WORDS[event.action].format(other=event.result_id)
            other = event.result_id
        else:
            what = _IN_WORDS[event.action].format(other=event.source_id)
            other = event.source_id
        rows.append(
            HistoryRow(
                at=event.created_at,
                what=what,
                actor=actor_words(event.actor),
                reason=numbered_reason(event),
                other_id=other,
                review_id=event.review_id,
                run_id=event.review.run_id if event.review is not None else None,
            )
        )
    for entry in history.edits:
        rows.append(
            HistoryRow(
                at=entry.action_time,
                what=_EDIT_WORDS.get(entry.action_flag, "Changed in the admin"),
                actor=entry.user.get_username() if entry.user_id else "",
                reason=entry.get_change_message(),
            )
        )
    rows.sort(key=lambda r: r.at, reverse=True)
    return rows


def action_line(
    action: Mapping[str, Any], names: Mapping[str, str], *, snapshot: Sequence[Mapping[str, Any]] | None, dry_run: bool
) -> str:
    """One applied (or, in a dry run, previewed) action of a review, saying which truth
    survives: ``merge #1 + #6 into a new truth: <content>``; ``merge #14 into protected #3
    (kept as is, no new truth): <its text>``; ``supersede #58 by #59 (kept): <its text>``.
    ``names`` maps the call's aliases to truth numbers (``truth_names``); ``snapshot`` is
    the review's members, whose ``protected`` flag names a merge's keeper."""
    rows = {str(row.get("alias")): row for row in snapshot or ()}
    verb = ("would " if dry_run else "") + str(action["action"])
    if action["action"] == "merge":
        members = [str(a) for a in action.get("ids") or ()]
        keeper = next((a for a in members if rows.get(a, {}).get("protected")), None)
        if keeper is not None:
            absorbed = " + ".join(names.get(a, a) for a in members if a != keeper)
            text = rows[keeper].get("content") or action.get("content", "")
            return f"{verb} {absorbed} into protected {names.get(keeper, keeper)} (kept as is, no new truth): {text}"
        return f"{verb} {' + '.join(names.get(a, a) for a in members)} into a new truth: {action.get('content', '')}"
    new = str(action.get("new"))
    old = " + ".join(names.get(str(a), str(a)) for a in action.get("old") or ())
    return f"{verb} {old} by {names.get(new, new)} (kept): {rows.get(new, {}).get('content', '')}"
