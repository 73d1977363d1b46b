"""Flow spec (DESIGN §4): load JSON/YAML, validate, and report every problem at once.

A problem is a dict ``{"node"?: id, "edge"?: "a.x->b.y", "message": str}``.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from signoff.engine.errors import FlowInvalid

MAX_NODES = 500


class NodeSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str = Field(min_length=1, max_length=200)
    type: str = Field(min_length=1, max_length=200)
    params: dict[str, Any] = Field(default_factory=dict)


class EdgeSpec(BaseModel):
    """``{"from": "node.output", "to": "node.input"}``; ``source``/``target`` are also accepted."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    source: str = Field(alias="from", min_length=1, max_length=500)
    target: str = Field(alias="to", min_length=1, max_length=500)

    @property
    def source_node(self) -> str:
        return self.source.rsplit(".", 1)[0] if "." in self.source else self.source

    @property
    def source_output(self) -> str:
        return self.source.rsplit(".", 1)[1] if "." in self.source else ""

    @property
    def target_node(self) -> str:
        return self.target.rsplit(".", 1)[0] if "." in self.target else self.target

    @property
    def target_input(self) -> str:
        return self.target.rsplit(".", 1)[1] if "." in self.target else ""

    @property
    def label(self) -> str:
        return f"{self.source}->{self.target}"


class FlowSpec(BaseModel):
    model_config = ConfigDict(extra="allow")

    name: str = Field("", max_length=500)
    description: str | None = None
    nodes: list[NodeSpec]
    edges: list[EdgeSpec] = Field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (edges with ``from``/``to``)."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)

    def node(self, node_id: str) -> NodeSpec | None:
        for n in self.nodes:
            if n.id == node_id:
                return n
        return None


def spec_hash(spec: FlowSpec | dict[str, Any]) -> str:
    data = spec.to_dict() if isinstance(spec, FlowSpec) else spec
    return hashlib.sha256(json.dumps(data, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


class _Yaml12Loader(yaml.SafeLoader):
    """SafeLoader with YAML 1.2 booleans: only true/false, so a node called `no`, `on` or
    `yes` stays a string (YAML 1.1 would make it a boolean)."""


_Yaml12Loader.yaml_implicit_resolvers = {
    k: [(tag, rx) for tag, rx in v if tag != "tag:yaml.org,2002:bool"]
    for k, v in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_Yaml12Loader.add_implicit_resolver(
    "tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
)


def _parse_text(text: str | bytes) -> Any:
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError:
            raise FlowInvalid([{"message": "the flow is not UTF-8 text"}]) from None
    stripped = text.lstrip()
    if not stripped:
        raise FlowInvalid([{"message": "the flow is empty"}])
    if stripped[0] in "{[":
        try:
            return json.loads(text)
        except json.JSONDecodeError as e:
            raise FlowInvalid([{"message": f"not valid JSON: {e.msg} at line {e.lineno} column {e.colno}"}]) from None
    try:
        return yaml.load(text, Loader=_Yaml12Loader)  # noqa: S506 - a SafeLoader
    except yaml.YAMLError as e:
        raise FlowInvalid([{"message": f"not valid YAML: {str(e).splitlines()[0]}"}]) from None


def load_flow(source: str | bytes | dict[str, Any] | FlowSpec) -> FlowSpec:
    """Parse a flow from JSON or YAML text, or a dict. Raises FlowInvalid on a bad shape (every
    shape problem listed). Does not check the components; see :func:`validate_flow`."""
    if isinstance(source, FlowSpec):
        return source
    data = _parse_text(source) if isinstance(source, (str, bytes)) else source
    if not isinstance(data, dict):
        raise FlowInvalid([{"message": "a flow is an object with name, nodes and edges"}])
    try:
        return FlowSpec.model_validate(data)
    except ValidationError as e:
        raise FlowInvalid(_shape_problems(data, e)) from None


def _shape_problems(data: dict[str, Any], err: ValidationError) -> list[dict[str, Any]]:
    problems: list[dict[str, Any]] = []
    for item in err.errors(include_url=False):
        loc = item.get("loc", ())
        where = ".".join(str(x) for x in loc) or "flow"
        problem: dict[str, Any] = {"message": f"{where}: {item.get('msg')}"}
        if len(loc) >= 2 and loc[0] == "nodes" and isinstance(loc[1], int):
            nodes = data.get("nodes")
            if isinstance(nodes, list) and loc[1] < len(nodes) and isinstance(nodes[loc[1]], dict):
                nid = nodes[loc[1]].get("id")
                if isinstance(nid, str):
                    problem["node"] = nid
        if len(loc) >= 2 and loc[0] == "edges" and isinstance(loc[1], int):
            edges = data.get("edges")
            if isinstance(edges, list) and loc[1] < len(edges) and isinstance(edges[loc[1]], dict):
                e = edges[loc[1]]
                problem["edge"] = f"{e.get('from', e.get('source', '?'))}->{e.get('to', e.get('target', '?'))}"
        problems.append(problem)
    return problems


def validate_flow(spec: FlowSpec, *, max_nodes: int = MAX_NODES) -> None:
    """Raise FlowInvalid listing every problem: unknown type, duplicate id, unknown input or
    output, dangling edge, two edges into a single input, missing required input or param,
    param of the wrong type, a cycle."""
    from signoff.engine.components import get_component

    problems: list[dict[str, Any]] = []
    if not spec.nodes:
        problems.append({"message": "the flow has no nodes"})
    if len(spec.nodes) > max_nodes:
        problems.append({"message": f"the flow has {len(spec.nodes)} nodes; the limit is {max_nodes}"})

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


def parse_and_validate(source: str | bytes | dict[str, Any] | FlowSpec, *, max_nodes: int = MAX_NODES) -> FlowSpec:
    spec = load_flow(source)
    validate_flow(spec, max_nodes=max_nodes)
    return spec


def flow_has_gate(spec: FlowSpec) -> bool:
    """True when the flow can pause: a Human Input with a downstream consumer, or a
    tool-capable component with approval_actions wired into another node's input."""
    from signoff.engine.components import get_component

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
        if cls.type_name == "HumanInput" and consumers.get(n.id):
            return True
        if cls.tool_capable and n.id in tool_edges and n.params.get("approval_actions"):
            return True
    return False
