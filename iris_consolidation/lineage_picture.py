"""A lineage tree laid out as an SVG picture: originals on the left, the truth on the right.

``picture_for`` places the ``TruthBox`` tree that ``lineage_display`` builds; the template
draws the nodes and edges it returns. Pure geometry: no queries, no URLs, no HTML.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .lineage_display import TruthBox

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


def walk(box: TruthBox) -> Iterable[TruthBox]:
    """``box`` and every box below it, depth first, in tree order."""
    yield box
    for source in box.sources:
        yield from walk(source)


def picture_for(root: TruthBox) -> Picture | None:
    """Lay the tree out as a left-to-right dendrogram: one row per leaf (in tree
    order), each parent centred on its sources, one column per step of depth.
    Returns None for a truth with no ancestry (nothing to draw)."""
    if root.is_leaf:
        return None
    boxes = list(walk(root))
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
        nodes.append(_node(box, x=x, y=y, root_label=root_label))
        for step in box.steps:
            kind = "iris-edge-undone" if step.undone else f"iris-edge-{step.action}"
            for source in step.sources:
                sx, sy = positions[id(source)]
                middle = (sx + x) / 2
                edges.append(PictureEdge(path=f"M{sx:.1f} {sy:.1f}H{middle:.1f}V{y:.1f}H{x:.1f}", css_class=kind))
    height = MARGIN * 2 + 14 + rows * ROW
    return Picture(width=int(width), height=int(height), nodes=tuple(nodes), edges=tuple(edges))


def _node(box: TruthBox, *, x: float, y: float, root_label: str) -> PictureNode:
    """The circle of ``box`` at (``x``, ``y``) and its label: the root's right of it, a
    leaf's left of it, an inner truth's number and generation above it."""
    state = "live" if box.live else "retired"
    if box.is_root:
        label, lx, ly, anchor = root_label, x + RADIUS + 8, y + 4, "start"
    elif box.is_leaf or box.seen_before:
        label, lx, ly, anchor = _leaf_label(box), x - RADIUS - 6, y + 4, "end"
    else:
        label, lx, ly, anchor = f"#{box.id} g{box.generation}", x, y - RADIUS - 5, "middle"
    return PictureNode(
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


def _leaf_label(box: TruthBox) -> str:
    return _clip(f"#{box.id} {box.text}", LEAF_LABEL_CHARS)


def _root_label(box: TruthBox, *, chars: int) -> str:
    return _clip(f"#{box.id} g{box.generation} {box.text}", chars)
