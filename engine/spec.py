"""Flow spec (DESIGN §4): load JSON/YAML, validate, and report every problem at once.

A problem is a dict ``{"node"?: id, "edge"?: "a.x->b.y", "message": str}``.
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from signoff.engine.errors import FlowInvalid


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


def apply_tweaks(spec: dict[str, Any], tweaks: dict[str, Any] | None) -> dict[str, Any]:
    """``{node_id: {param: value}}`` merged into the nodes' params (a copy; the spec is not
    changed). A tweak for a node the flow does not have, or whose value is not an object, is
    FlowInvalid naming the node."""
    if not tweaks:
        return spec
    spec = copy.deepcopy(spec)
    nodes = {n.get("id"): n for n in spec.get("nodes", []) if isinstance(n, dict)}
    problems = [
        {"node": str(node_id), "message": f"tweaks: no node '{node_id}' in the flow (or its value is not an object)"}
        for node_id, params in tweaks.items()
        if node_id not in nodes or not isinstance(params, dict)
    ]
    if problems:
        raise FlowInvalid(problems, problems[0]["message"])
    for node_id, params in tweaks.items():
        nodes[node_id].setdefault("params", {}).update(params)
    return spec
