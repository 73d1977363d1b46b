"""A run's flow drawn as the run page shows it: each vertex's state from the run's spans and
its pending request, laid out left to right (a vertex's column is the longest path to it)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from signoff.engine.langflow.importer import META
from signoff.engine.langflow.kinds import BY_LANGFLOW_TYPE
from signoff.engine.models import Job, JobStatus, SpanRecord

NODE_W, NODE_H, GAP_X, GAP_Y, PAD = 168, 56, 56, 20, 12

NODE_STATE_TEXT = {
    "built": ("Built", "check"),
    "decided": ("Decided", "check"),
    "paused": ("Paused", "pause"),
    "skipped": ("Skipped", "skip"),
    "failed": ("Failed", "x"),
    "running": ("Running", "running"),
    "not_reached": ("Not reached", "circle"),
    "step": ("Step", "flow"),  # the flow page: a node outside any run, its type as the note
}


@dataclass
class GraphNode:
    id: str
    type: str
    label: str
    state: str
    x: int
    y: int
    note: str = ""

    @property
    def state_text(self) -> str:
        if self.state == "step" and self.note:
            return self.note[:22]
        return NODE_STATE_TEXT[self.state][0]

    @property
    def icon(self) -> str:
        return NODE_STATE_TEXT[self.state][1]


@dataclass
class GraphEdge:
    path: str
    live: bool


@dataclass
class Graph:
    nodes: list[GraphNode]
    edges: list[GraphEdge]
    width: int
    height: int


def _node_label(node: dict[str, Any], langflow: dict[str, Any]) -> str:
    """What a vertex is called on the graph: its ``display_name``; for a node imported from
    Langflow whose name was its type's own ("OpenAI", not kept in params: engine/langflow), that
    type's display name; else its id ("OpenAIModel-Rr8Tu", which the node's tooltip always shows)."""
    params = node.get("params") if isinstance(node.get("params"), dict) else {}
    shown = params.get("display_name")
    if isinstance(shown, str) and shown.strip():
        return shown.strip()
    meta = langflow.get(node.get("id"))
    lf_type = meta.get("type") if isinstance(meta, dict) else None
    kind = BY_LANGFLOW_TYPE.get(lf_type) if isinstance(lf_type, str) else None
    return kind.types[lf_type] if kind is not None else str(node.get("id"))


def node_states(job: Job, spans: list[SpanRecord]) -> dict[str, tuple[str, str]]:
    """Each vertex's state from the run's spans and its pending request: (state, note)."""
    states: dict[str, tuple[str, str]] = {}
    for span in sorted(spans, key=lambda s: s.start_time):
        vid = span.attributes.get("signoff.vertex_id")
        if not vid or "." in str(vid) and span.type != "gate":
            continue
        vid = str(vid)
        if span.type == "gate":
            states[vid] = ("decided", str(span.attributes.get("signoff.action_label") or ""))
        elif span.status == "error":
            states[vid] = ("failed", str(span.attributes.get("signoff.error") or ""))
        elif span.attributes.get("signoff.skipped"):
            states[vid] = ("skipped", "")
        elif span.attributes.get("signoff.paused"):
            states[vid] = ("paused", "")
        elif span.end_time is None:
            states[vid] = ("running", "")
        elif vid not in states or states[vid][0] != "decided":
            states[vid] = ("built", "")
    if job.status == JobStatus.suspended and job.pending is not None:
        vid = job.pending.request_id.split(":", 1)[0]
        states[vid] = ("paused", "Waiting for a decision")
    if job.status == JobStatus.failed and job.error and job.error.get("vertex_id"):
        states[str(job.error["vertex_id"])] = ("failed", str(job.error.get("error") or ""))
    return states


def steps(spec: dict[str, Any]) -> dict[str, tuple[str, str]]:
    """The flow page's node "states": each node a step, its type as the note."""
    return {str(n["id"]): ("step", str(n.get("type") or "")) for n in spec.get("nodes") or []
            if isinstance(n, dict) and isinstance(n.get("id"), str)}


def layout(spec: dict[str, Any], states: dict[str, tuple[str, str]]) -> Graph:
    """The flow drawn left to right: a vertex's column is the longest path to it."""
    nodes = [n for n in spec.get("nodes") or [] if isinstance(n, dict) and isinstance(n.get("id"), str)]
    ids = [n["id"] for n in nodes]
    known = set(ids)
    meta = spec.get(META) if isinstance(spec.get(META), dict) else {}
    langflow = meta.get("nodes") if isinstance(meta.get("nodes"), dict) else {}
    edges = []
    for e in spec.get("edges") or []:
        if not isinstance(e, dict):
            continue
        src = str(e.get("from", "")).split(".", 1)[0]
        dst = str(e.get("to", "")).split(".", 1)[0]
        if src in known and dst in known and src != dst:
            edges.append((src, dst))
    column = {i: 0 for i in ids}
    for _ in range(len(ids)):  # longest path by relaxation (a loop's back edge just stops changing it)
        changed = False
        for src, dst in edges:
            if column[dst] < column[src] + 1 and column[src] + 1 < len(ids):
                column[dst] = column[src] + 1
                changed = True
        if not changed:
            break
    rows: dict[int, int] = {}
    out_nodes: dict[str, GraphNode] = {}
    for n in nodes:
        col = column[n["id"]]
        row = rows.get(col, 0)
        rows[col] = row + 1
        state, note = states.get(n["id"], ("not_reached", ""))
        out_nodes[n["id"]] = GraphNode(id=n["id"], type=str(n.get("type", "")), label=_node_label(n, langflow), state=state,
                                       note=note, x=PAD + col * (NODE_W + GAP_X), y=PAD + row * (NODE_H + GAP_Y))
    out_edges = []
    for src, dst in edges:
        a, b = out_nodes[src], out_nodes[dst]
        x1, y1 = a.x + NODE_W, a.y + NODE_H // 2
        x2, y2 = b.x, b.y + NODE_H // 2
        if x2 <= x1:  # a back edge (a loop): around the bottom
            low = max(a.y, b.y) + NODE_H + GAP_Y // 2
            path = f"M{x1},{y1} C{x1 + 40},{y1} {x1 + 40},{low} {x1},{low} L{x2},{low} C{x2 - 40},{low} {x2 - 40},{y2} {x2},{y2}"
        else:
            mid = (x1 + x2) // 2
            path = f"M{x1},{y1} C{mid},{y1} {mid},{y2} {x2},{y2}"
        live = a.state in ("built", "decided") and b.state not in ("not_reached",)
        out_edges.append(GraphEdge(path=path, live=live))
    width = PAD * 2 + (max(column.values(), default=0) + 1) * (NODE_W + GAP_X) - GAP_X
    height = PAD * 2 + max(rows.values(), default=1) * (NODE_H + GAP_Y) - GAP_Y + GAP_Y
    return Graph(nodes=list(out_nodes.values()), edges=out_edges, width=width, height=height)

