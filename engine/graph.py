"""The graph of a validated flow: vertices, edges, layers in topological order, and the
successor / predecessor maps the engine walks."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from signoff.engine.components import get_component
from signoff.engine.components.base import Component, InputDef
from signoff.engine.spec import FlowSpec, load_flow, spec_hash


@dataclass(frozen=True)
class Edge:
    source: str
    source_output: str
    target: str
    target_input: str

    @property
    def label(self) -> str:
        return f"{self.source}.{self.source_output}->{self.target}.{self.target_input}"


@dataclass
class Vertex:
    id: str
    type: str
    params: dict[str, Any]
    component_class: type[Component]
    inputs: dict[str, InputDef]
    outputs: list[str]
    in_edges: list[Edge] = field(default_factory=list)
    out_edges: list[Edge] = field(default_factory=list)

    @property
    def display_name(self) -> str:
        return self.params.get("display_name") or self.component_class.display_name or self.type

    def component(self) -> Component:
        return self.component_class(self.id, self.params)

    def gating_edges(self) -> list[Edge]:
        """The edges that decide whether this vertex runs (see docs/engine.md, the merge rule):
        the edges into required inputs when there are any, else all incoming edges."""
        required = [e for e in self.in_edges if self.inputs.get(e.target_input) and self.inputs[e.target_input].required]
        return required or list(self.in_edges)


class Graph:
    def __init__(self, spec: FlowSpec) -> None:
        self.spec = spec
        self.hash = spec_hash(spec)
        self.vertices: dict[str, Vertex] = {}
        for n in spec.nodes:
            cls = get_component(n.type)
            if cls is None:
                raise ValueError(f"unknown component type '{n.type}' (validate the flow first)")
            self.vertices[n.id] = Vertex(
                id=n.id,
                type=n.type,
                params=dict(n.params),
                component_class=cls,
                inputs={i.name: i for i in cls.input_defs(n.params)},
                outputs=[o.name for o in cls.output_defs(n.params)],
            )
        self.edges: list[Edge] = []
        for e in spec.edges:
            edge = Edge(e.source_node, e.source_output, e.target_node, e.target_input)
            self.edges.append(edge)
            self.vertices[edge.source].out_edges.append(edge)
            self.vertices[edge.target].in_edges.append(edge)
        self.successors: dict[str, list[str]] = {v: [] for v in self.vertices}
        self.predecessors: dict[str, list[str]] = {v: [] for v in self.vertices}
        for edge in self.edges:
            if edge.target not in self.successors[edge.source]:
                self.successors[edge.source].append(edge.target)
            if edge.source not in self.predecessors[edge.target]:
                self.predecessors[edge.target].append(edge.source)
        self.layers: list[list[str]] = self._layers()
        self.order: list[str] = [v for layer in self.layers for v in layer]

    @classmethod
    def from_spec(cls, spec: FlowSpec | dict[str, Any] | str) -> "Graph":
        return cls(load_flow(spec))

    def _layers(self) -> list[list[str]]:
        indeg = {v: len(self.predecessors[v]) for v in self.vertices}
        layer = [v for v in self.vertices if indeg[v] == 0]
        layers: list[list[str]] = []
        while layer:
            layers.append(layer)
            nxt: list[str] = []
            for v in layer:
                for s in self.successors[v]:
                    indeg[s] -= 1
                    if indeg[s] == 0:
                        nxt.append(s)
            layer = nxt
        if sum(len(x) for x in layers) != len(self.vertices):
            raise ValueError("the flow has a cycle (validate the flow first)")
        return layers

    def consumers(self, vertex_id: str) -> list[Edge]:
        return self.vertices[vertex_id].out_edges

    def terminal_vertices(self) -> list[str]:
        """Output components (ChatOutput, TextOutput), in topological order."""
        return [v for v in self.order if self.vertices[v].component_class.terminal]
