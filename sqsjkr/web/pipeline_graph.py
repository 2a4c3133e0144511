"""A run of a pipeline laid out for the event page's drawing: a box per step, in columns by layer
(the on_failure steps in a column of their own), and an edge per `after` and `on_failure`.

Only numbers and the fleet layer's values: the template (_pipeline.html) draws it as inline SVG.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqsjkr.contract.pipeline_progress import graph_of, on_failure_only
from sqsjkr.fleet.pipeline_steps import PipelineView, StepView

#: A step's box and the gaps between them, in SVG user units (CSS pixels).
BOX_WIDTH = 150
BOX_HEIGHT = 40
COLUMN_GAP = 60
ROW_GAP = 16
MARGIN = 8


@dataclass(frozen=True)
class Box:
    """A step's box: its top-left corner and its step."""

    x: int
    y: int
    step: StepView

    @property
    def css(self) -> str:
        """The class its state colours it by: "succeeded", "not-needed" ..."""
        return self.step.status.value.replace(" ", "-")


@dataclass(frozen=True)
class Edge:
    """An arrow from one box's right side to another's left: "after", or "on_failure"."""

    x1: int
    y1: int
    x2: int
    y2: int
    kind: str

    @property
    def path(self) -> str:
        """A curve from (x1, y1) to (x2, y2), bending halfway across; an on_failure edge leaves
        its box from below and dips under the row, clear of the after edges beside it."""
        if self.kind == "on_failure":
            low = max(self.y1, self.y2) + ROW_GAP
            return f"M{self.x1},{self.y1} C{self.x1},{low} {self.x2 - 40},{low} {self.x2},{self.y2}"
        middle = (self.x1 + self.x2) // 2
        return f"M{self.x1},{self.y1} C{middle},{self.y1} {middle},{self.y2} {self.x2},{self.y2}"


@dataclass(frozen=True)
class Drawing:
    """A run's boxes and edges, and the size of the picture."""

    boxes: tuple[Box, ...]
    edges: tuple[Edge, ...]
    width: int
    height: int


def columns_of(view: PipelineView) -> dict[str, int]:
    """Each step's column: its layer, the on_failure steps one past the deepest layer."""
    graph = graph_of({"name": view.name, "root": view.root, "steps": _steps(view)})
    deepest = max((s.depth for s in view.steps if not on_failure_only(graph, s.name)), default=0)
    return {s.name: deepest + 1 if on_failure_only(graph, s.name) else s.depth for s in view.steps}


def _steps(view: PipelineView) -> dict[str, dict[str, list[str]]]:
    return {s.name: {"after": list(s.after), "on_failure": list(s.on_failure)} for s in view.steps}


def layout(view: PipelineView) -> Drawing:
    """The boxes in columns, each column's steps by name, and the edges between them."""
    columns = columns_of(view)
    rows: dict[int, int] = {}
    boxes: dict[str, Box] = {}
    for step in sorted(view.steps, key=lambda s: (columns[s.name], s.name)):
        column = columns[step.name]
        row = rows.get(column, 0)
        rows[column] = row + 1
        x = MARGIN + column * (BOX_WIDTH + COLUMN_GAP)
        boxes[step.name] = Box(x, MARGIN + row * (BOX_HEIGHT + ROW_GAP), step)
    edges = []
    for box in boxes.values():
        for kind, targets in (("after", box.step.after), ("on_failure", box.step.on_failure)):
            for name in targets:
                other = boxes.get(name)
                if other is None:
                    continue
                # An after edge runs from the parent to the step; on_failure from the step.
                start, end = (other, box) if kind == "after" else (box, other)
                edges.append(_edge(start, end, kind))
    width = MARGIN * 2 + (max(columns.values(), default=0) + 1) * (BOX_WIDTH + COLUMN_GAP)
    # Room below the last row for the on_failure edges' dip.
    height = MARGIN * 2 + max(rows.values(), default=1) * (BOX_HEIGHT + ROW_GAP) + ROW_GAP
    return Drawing(tuple(boxes.values()), tuple(edges), width - COLUMN_GAP, height)


def _edge(start: Box, end: Box, kind: str) -> Edge:
    if kind == "on_failure":
        # From the middle of the failing step's bottom to the on_failure step's left side.
        return Edge(
            start.x + BOX_WIDTH // 2, start.y + BOX_HEIGHT, end.x, end.y + BOX_HEIGHT // 2, kind
        )
    return Edge(
        start.x + BOX_WIDTH, start.y + BOX_HEIGHT // 2, end.x, end.y + BOX_HEIGHT // 2, kind
    )
