"""Flow validation against the component registry (DESIGN §4): every problem at once, each
naming its node or edge. A problem is a dict ``{"node"?: id, "edge"?: "a.x->b.y", "message": str}``.

:mod:`signoff.engine.spec` is the flow's data (parse, shape); this module knows the components."""

from __future__ import annotations

import functools
from typing import Any

from signoff.engine.components import get_component
from signoff.engine.components.human_input import HumanInput, remind_floor_problems
from signoff.engine.errors import FlowInvalid
from signoff.engine.spec import FlowSpec, NodeSpec, load_flow


@functools.cache
def _process_max_nodes() -> int:
    """SIGNOFF_MAX_FLOW_NODES of this process (read once), for callers that pass no limit."""
    from signoff.engine.settings import Settings

    return Settings().max_flow_nodes


@functools.cache
def _process_min_remind_every() -> float:
    """SIGNOFF_MIN_REMIND_EVERY_SECONDS of this process (read once), for callers that pass none."""
    from signoff.engine.settings import Settings

    return Settings().min_remind_every_seconds


def too_many_nodes(count: int, max_nodes: int | None = None) -> str | None:
    """The one node-count rule (SIGNOFF_MAX_FLOW_NODES): the problem when a flow of ``count``
    nodes is over ``max_nodes`` (default: this process's setting), else None. The API checks it
    first, before any other work, and answers FLOW_TOO_LARGE; :func:`validate_flow` lists it."""
    limit = _process_max_nodes() if max_nodes is None else max_nodes
    if count > limit:
        return f"the flow has {count} nodes; the limit is {limit} (SIGNOFF_MAX_FLOW_NODES)"
    return None


def validate_flow(spec: FlowSpec, *, max_nodes: int | None = None, min_remind_every: float | None = None) -> None:
    """Raise FlowInvalid listing every problem: unknown type, duplicate id, unknown input or
    output, dangling edge, two edges into a single input, missing required input or param,
    param of the wrong type, a cycle, more nodes than ``max_nodes`` (default
    SIGNOFF_MAX_FLOW_NODES), a Human Input reminding more often than ``min_remind_every``
    seconds (default SIGNOFF_MIN_REMIND_EVERY_SECONDS)."""
    floor = _process_min_remind_every() if min_remind_every is None else min_remind_every
    problems: list[dict[str, Any]] = []
    if not spec.nodes:
        problems.append({"message": "the flow has no nodes"})
    too_many = too_many_nodes(len(spec.nodes), max_nodes)
    if too_many:
        problems.append({"message": too_many})

    nodes: dict[str, NodeSpec] = {}
    for n in spec.nodes:
        if n.id in nodes:
            problems.append({"node": n.id, "message": f"duplicate node id '{n.id}'"})
            continue
        if "." in n.id:
            problems.append({"node": n.id, "message": f"node id '{n.id}' must not contain '.'"})
        nodes[n.id] = n

    ports: dict[str, tuple[dict[str, Any], set[str]]] = {}  # node -> ({input: InputDef}, outputs)
    for nid, n in nodes.items():
        cls = get_component(n.type)
        if cls is None:
            problems.append({"node": nid, "message": f"unknown component type '{n.type}'"})
            continue
        try:
            for msg in cls.check_params(n.params):
                problems.append({"node": nid, "message": msg})
            if cls is HumanInput:
                problems += [{"node": nid, "message": msg} for msg in remind_floor_problems(n.params, floor)]
        except Exception as e:  # a component's own rules must not crash validation
            problems.append({"node": nid, "message": f"bad params: {e.__class__.__name__}: {e}"})
        try:
            ins = {i.name: i for i in cls.input_defs(n.params)}
            outs = {o.name for o in cls.output_defs(n.params)}
        except Exception as e:  # a component's port logic must not crash validation
            problems.append({"node": nid, "message": f"bad params: {e}"})
            continue
        ports[nid] = (ins, outs)

    fed: dict[tuple[str, str], list[str]] = {}
    seen_edges: set[tuple[str, str]] = set()
    adjacency: dict[str, set[str]] = {nid: set() for nid in nodes}
    for e in spec.edges:
        label = e.label
        bad = False
        for end, value in (("from", e.source), ("to", e.target)):
            if "." not in value or not value.split(".", 1)[0] or not value.rsplit(".", 1)[1]:
                problems.append({"edge": label, "message": f"'{end}' must be 'node.port', got '{value}'"})
                bad = True
        if bad:
            continue
        if (e.source, e.target) in seen_edges:
            problems.append({"edge": label, "message": "duplicate edge"})
            continue
        seen_edges.add((e.source, e.target))
        src, out, dst, inp = e.source_node, e.source_output, e.target_node, e.target_input
        if src not in nodes:
            problems.append({"edge": label, "message": f"dangling edge: no node '{src}'"})
            bad = True
        if dst not in nodes:
            problems.append({"edge": label, "message": f"dangling edge: no node '{dst}'"})
            bad = True
        if bad:
            continue
        if src == dst:
            problems.append({"edge": label, "node": src, "message": "an edge from a node to itself is a cycle"})
            continue
        if src in ports and out not in ports[src][1]:
            problems.append(
                {
                    "edge": label,
                    "node": src,
                    "message": f"'{nodes[src].type}' has no output '{out}' (outputs: {', '.join(sorted(ports[src][1])) or 'none'})",
                }
            )
            bad = True
        if dst in ports and inp not in ports[dst][0]:
            problems.append(
                {
                    "edge": label,
                    "node": dst,
                    "message": f"'{nodes[dst].type}' has no input '{inp}' (inputs: {', '.join(sorted(ports[dst][0])) or 'none'})",
                }
            )
            bad = True
        adjacency[src].add(dst)
        if not bad:
            fed.setdefault((dst, inp), []).append(label)

    used_outputs: dict[str, set[str]] = {}
    for e in spec.edges:
        used_outputs.setdefault(e.source_node, set()).add(e.source_output)
    for nid, (ins, _) in ports.items():
        if used_outputs.get(nid) == {"tool"}:
            continue  # used only as an Agent tool: the model supplies the inputs
        for name, idef in ins.items():
            if idef.required and (nid, name) not in fed and nodes[nid].params.get(name) is None:
                problems.append(
                    {"node": nid, "message": f"required input '{name}' is neither connected by an edge nor set as a param"}
                )

    cycle = _find_cycle(adjacency)
    if cycle:
        problems.append({"node": cycle[0], "message": f"cycle: {' -> '.join(cycle + [cycle[0]])}"})

    if problems:
        raise FlowInvalid(problems)


def _find_cycle(adjacency: dict[str, set[str]]) -> list[str] | None:
    white, grey, black = 0, 1, 2
    color = {n: white for n in adjacency}
    stack_path: list[str] = []

    for start in sorted(adjacency):
        if color[start] != white:
            continue
        stack: list[tuple[str, list[str]]] = [(start, sorted(adjacency[start]))]
        color[start] = grey
        stack_path.append(start)
        while stack:
            node, children = stack[-1]
            if children:
                child = children.pop(0)
                if color.get(child, black) == grey:
                    return stack_path[stack_path.index(child):]
                if color.get(child) == white:
                    color[child] = grey
                    stack_path.append(child)
                    stack.append((child, sorted(adjacency[child])))
            else:
                color[node] = black
                stack_path.pop()
                stack.pop()
    return None


def parse_and_validate(source: str | bytes | dict[str, Any] | FlowSpec, *, max_nodes: int | None = None,
                       min_remind_every: float | None = None) -> FlowSpec:
    spec = load_flow(source)
    validate_flow(spec, max_nodes=max_nodes, min_remind_every=min_remind_every)
    return spec


def flow_has_gate(spec: FlowSpec) -> bool:
    """True when the flow can pause: a Human Input with a downstream consumer, or a
    tool-capable component with approval_actions wired into another node's input."""
    consumers: dict[str, int] = {}
    tool_edges: set[str] = set()
    for e in spec.edges:
        consumers[e.source_node] = consumers.get(e.source_node, 0) + 1
        if e.source_output == "tool":
            tool_edges.add(e.source_node)
    for n in spec.nodes:
        cls = get_component(n.type)
        if cls is None:
            continue
        if cls.gate and consumers.get(n.id):
            return True
        if cls.tool_capable and n.id in tool_edges and n.params.get("approval_actions"):
            return True
    return False
