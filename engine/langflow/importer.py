"""A Langflow export as a signoff flow spec (DESIGN §11).

Langflow's export (and ``lfx``'s) is ``{"name", "description", "data": {"nodes": [...], "edges":
[...]}}``: each node's ``data`` has the component ``type`` and ``node.template.<field>.value``;
each edge names its ends in ``data.sourceHandle`` / ``data.targetHandle`` (older files only in
the ``sourceHandle`` / ``targetHandle`` strings, JSON with ``œ`` for ``"``). An edge
``{source}.{sourceHandle.name} -> {target}.{targetHandle.fieldName}`` becomes a signoff edge,
and every node keeps its Langflow id (``HumanInput-x8Kq2``), so request ids, tweaks and spans
name nodes as Langflow does.

All or nothing: every component and setting signoff cannot run is listed in one
:class:`LangflowUnsupported` (422 ``FLOW_INVALID``); nothing is half-imported. A component's
``code`` is never read: a node whose code was edited in Langflow is refused."""

from __future__ import annotations

import json
from typing import Any

from signoff.engine.errors import FlowInvalid
from signoff.engine.langflow.kinds import (
    BY_LANGFLOW_TYPE,
    EMPTY,
    SUPPORTED,
    TOOL_OUTPUT,
    Field,
    Kind,
    Unsupported,
)
from signoff.engine.secrets import SECRET_REF

META = "langflow"  # the top-level key of a converted spec that keeps Langflow's own facts (types, places)
EXTENSION = "signoff"  # the top-level key of an exported file that keeps what Langflow cannot hold
DEFAULT_NAME = "Langflow flow"
# never read: the component's source (signoff runs its own components), the tool table (read in
# tool mode only), tool mode's placeholder
ALWAYS_IGNORED = frozenset({"code", "tools_metadata", "tool_placeholder"})


class LangflowUnsupported(FlowInvalid):
    """The Langflow flow has components or settings signoff cannot run (each listed)."""

    def __init__(self, problems: list[dict[str, Any]] | list[str], message: str | None = None,
                 supported: list[dict[str, str]] | None = None) -> None:
        super().__init__(problems, message)
        self.details["supported"] = supported if supported is not None else SUPPORTED


def is_langflow(data: Any) -> bool:
    """Whether ``data`` has the shape of a Langflow export (``{"data": {"nodes", "edges"}}``, or a
    bare graph whose nodes carry ``data``), as opposed to a signoff spec."""
    if not isinstance(data, dict):
        return False
    graph = data.get("data")
    if "nodes" not in data and isinstance(graph, dict) and isinstance(graph.get("nodes"), list):
        return True
    nodes = data.get("nodes")
    return isinstance(nodes, list) and any(isinstance(n, dict) and isinstance(n.get("data"), dict) for n in nodes)


def _short(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= 60 else text[:57] + "..."


def _handle(value: Any) -> dict[str, Any] | None:
    """An edge end: the ``data`` object, or the handle string (JSON with ``œ`` for ``"``)."""
    if isinstance(value, dict):
        return value
    if isinstance(value, str) and value:
        try:
            parsed = json.loads(value.replace("œ", '"'))
        except ValueError:
            return None
        return parsed if isinstance(parsed, dict) else None
    return None


class _Node:
    """One Langflow node being read."""

    def __init__(self, nid: str, lf_type: str, node: dict[str, Any], kind: Kind, raw: dict[str, Any]) -> None:
        self.id = nid
        self.lf_type = lf_type
        self.node = node
        self.kind = kind
        self.raw = raw
        template = node.get("template")
        self.template: dict[str, Any] = template if isinstance(template, dict) else {}
        self.display = str(node.get("display_name") or kind.types[lf_type])
        self.values = {name: f.get("value") for name, f in self.template.items() if isinstance(f, dict)}

    def problem(self, message: str, **extra: Any) -> dict[str, Any]:
        return {"node": self.id, "langflow_type": self.lf_type, "display_name": self.display, "message": message,
                **extra}


class _Reader:
    def __init__(self, doc: dict[str, Any]) -> None:
        self.doc = doc
        graph = doc.get("data") if isinstance(doc.get("data"), dict) and "nodes" not in doc else doc
        self.graph: dict[str, Any] = graph
        self.problems: list[dict[str, Any]] = []
        self.nodes: dict[str, _Node] = {}
        self.seen: set[str] = set()  # every node id, supported or not
        self.meta: dict[str, dict[str, Any]] = {}

    # ---- nodes -----------------------------------------------------------------------------

    def read_nodes(self) -> None:
        raw_nodes = self.graph.get("nodes")
        if not isinstance(raw_nodes, list):
            self.problems.append({"message": "data.nodes must be a list of Langflow nodes"})
            return
        for i, raw in enumerate(raw_nodes):
            data = raw.get("data") if isinstance(raw, dict) else None
            if not isinstance(data, dict):
                self.problems.append({"where": f"data.nodes.{i}", "message": f"data.nodes.{i} is not a Langflow node "
                                                                            "(an object with data)"})
                continue
            if raw.get("type") == "noteNode" or data.get("type") in ("note", "noteNode"):
                continue  # a sticky note on the canvas
            nid = raw.get("id") or data.get("id")
            lf_type = data.get("type")
            node = data.get("node") if isinstance(data.get("node"), dict) else {}
            if not isinstance(nid, str) or not nid:
                self.problems.append({"where": f"data.nodes.{i}", "message": f"data.nodes.{i} has no id"})
                continue
            if nid in self.seen:
                self.problems.append({"node": nid, "message": f"duplicate node id '{nid}'"})
                continue
            self.seen.add(nid)
            kind = BY_LANGFLOW_TYPE.get(lf_type) if isinstance(lf_type, str) else None
            display = str(node.get("display_name") or lf_type or "?")
            if kind is None:
                what = ("a group of components (a Langflow group): ungroup it in Langflow first"
                        if raw.get("type") == "groupNode" or isinstance(node.get("flow"), dict)
                        else f"the component type '{lf_type}' is not supported")
                self.problems.append({"node": nid, "langflow_type": str(lf_type), "display_name": display,
                                      "message": what})
                continue
            n = _Node(nid, lf_type, node, kind, raw)
            if node.get("edited") is True:
                self.problems.append(n.problem("its code was edited in Langflow (a custom component): signoff runs "
                                               "Langflow's components as they ship, and never runs a flow's code"))
                continue
            self.nodes[nid] = n
            meta: dict[str, Any] = {"type": lf_type}
            pos = raw.get("position")
            if isinstance(pos, dict) and all(isinstance(pos.get(k), (int, float)) and not isinstance(pos.get(k), bool)
                                             for k in ("x", "y")):
                meta["position"] = {"x": pos["x"], "y": pos["y"]}
            self.meta[nid] = meta

    # ---- edges -----------------------------------------------------------------------------

    def read_edges(self) -> list[tuple[str, str, str, str]]:
        raw_edges = self.graph.get("edges", [])
        if raw_edges is None:
            raw_edges = []
        if not isinstance(raw_edges, list):
            self.problems.append({"message": "data.edges must be a list of Langflow edges"})
            return []
        out: list[tuple[str, str, str, str]] = []
        for i, e in enumerate(raw_edges):
            if not isinstance(e, dict):
                self.problems.append({"where": f"data.edges.{i}", "message": f"data.edges.{i} is not an edge"})
                continue
            data = e.get("data") if isinstance(e.get("data"), dict) else {}
            sh = _handle(data.get("sourceHandle")) or _handle(e.get("sourceHandle")) or {}
            th = _handle(data.get("targetHandle")) or _handle(e.get("targetHandle")) or {}
            src, dst = e.get("source") or sh.get("id"), e.get("target") or th.get("id")
            name, fld = sh.get("name"), th.get("fieldName")
            if not all(isinstance(v, str) and v for v in (src, dst, name, fld)):
                self.problems.append({"where": f"data.edges.{i}", "message":
                                      f"data.edges.{i}: no source and target with their handles (sourceHandle.name, "
                                      "targetHandle.fieldName)"})
                continue
            for end in (src, dst):
                if end not in self.seen:
                    self.problems.append({"edge": f"{src}.{name}->{dst}.{fld}", "message": f"dangling edge: no node '{end}'"})
            if src in self.seen and dst in self.seen:
                out.append((src, name, dst, fld))
        return out

    # ---- params ----------------------------------------------------------------------------

    def params(self, n: _Node, fed: set[str], tool: bool) -> dict[str, Any]:
        kind, params = n.kind, {}
        if n.display != kind.types[n.lf_type]:
            params["display_name"] = n.display
        for name, fdict in n.template.items():
            if name.startswith("_") or name in ALWAYS_IGNORED or not isinstance(fdict, dict):
                continue
            value = fdict.get("value")
            f = kind.by_field.get(name)
            if f is None and kind.dynamic_field is not None:
                target = kind.dynamic_field(name, n.values)
                if target:
                    f = Field(name, target, target, load=_text)
            if f is None:
                if name not in fed and value not in EMPTY and value is not False:
                    self.problems.append(n.problem(f"the setting {_label(fdict, name)} = {_short(value)} is not one "
                                                   "signoff knows for this component"))
                continue
            if f.cosmetic or name in fed:
                continue  # an edge into it is checked with the edges
            if f.param is None:
                if value not in EMPTY and value not in f.neutral:
                    self.problems.append(n.problem(f"the setting {_label(fdict, name)} = {_short(value)} is not "
                                                   f"supported: {f.why}"))
                continue
            if value in EMPTY:
                continue
            if fdict.get("load_from_db") is True and isinstance(value, str):
                if f.secret:
                    params[f.param] = {SECRET_REF: value}
                else:
                    self.problems.append(n.problem(f"the setting {_label(fdict, name)} reads the Langflow global "
                                                   f"variable '{value}': write its value (signoff keeps credentials "
                                                   "only, as named secrets)"))
                continue
            try:
                params[f.param] = f.load(value) if f.load else value
            except Unsupported as e:
                self.problems.append(n.problem(f"the setting {_label(fdict, name)}: {e}"))
        if kind.fix is not None:
            try:
                for message in kind.fix(n.values, fed, params):
                    self.problems.append(n.problem(message))
            except Unsupported as e:
                self.problems.append(n.problem(str(e)))
        for key in [k for k, v in params.items() if v is None]:
            del params[key]
        if tool:
            self.tool_params(n, params)
        return params

    def tool_params(self, n: _Node, params: dict[str, Any]) -> None:
        """A node in tool mode: its tool's name, description and approval actions (Langflow's
        tools_metadata row; approval_actions gate each call)."""
        if not n.kind.tool:
            self.problems.append(n.problem(f"{n.display} cannot be an Agent's tool in signoff (tools: Calculator, "
                                           "API Request / URL, Run Flow, Current Date)"))
            return
        rows = n.values.get("tools_metadata")
        if rows in EMPTY:
            return
        if not isinstance(rows, list):
            self.problems.append(n.problem("tools_metadata must be a list of tools"))
            return
        enabled = [r for r in rows if isinstance(r, dict) and r.get("status", True) is not False]
        if len(enabled) != 1:
            self.problems.append(n.problem(f"{len(enabled)} of its tools are enabled: signoff gives one tool per "
                                           "component to an Agent"))
            return
        row = enabled[0]
        for key, param in (("name", "tool_name"), ("description", "tool_description")):
            # a tool named after its node is signoff's default name
            if isinstance(row.get(key), str) and row[key] and not (key == "name" and row[key] == n.id):
                params[param] = row[key]
        actions = row.get("approval_actions")
        if isinstance(actions, str):
            actions = [a.strip() for a in actions.split(",") if a.strip()]
        if actions not in EMPTY:
            params["approval_actions"] = actions

    # ---- the flow --------------------------------------------------------------------------

    def convert(self) -> dict[str, Any]:
        self.read_nodes()
        edges = self.read_edges()
        fed: dict[str, set[str]] = {}
        tools: set[str] = set()
        for src, name, dst, fld in edges:
            fed.setdefault(dst, set()).add(fld)
            if name == TOOL_OUTPUT:
                tools.add(src)
        nodes = []
        for nid, n in self.nodes.items():
            nodes.append({"id": nid, "type": n.kind.signoff, "params": self.params(n, fed.get(nid, set()), nid in tools)})
        spec_edges = self.edges(edges)
        self.extension(nodes)
        if self.problems:
            raise unsupported(self.problems)
        name = self.doc.get("name")
        spec: dict[str, Any] = {"name": name.strip() if isinstance(name, str) and name.strip() else DEFAULT_NAME}
        if isinstance(self.doc.get("description"), str) and self.doc["description"]:
            spec["description"] = self.doc["description"]
        spec["nodes"] = nodes
        spec["edges"] = spec_edges
        spec[META] = {"nodes": self.meta}
        return spec

    def edges(self, edges: list[tuple[str, str, str, str]]) -> list[dict[str, str]]:
        out: list[dict[str, str]] = []
        for src, name, dst, fld in edges:
            s, d = self.nodes.get(src), self.nodes.get(dst)
            if s is None or d is None:
                continue  # the unsupported end is listed already
            label = f"{src}.{name}->{dst}.{fld}"
            output = self._output(s, name, label)
            into = self._input(d, fld, label)
            if output is None or into is None:
                continue
            edge = {"from": f"{src}.{output}", "to": f"{dst}.{into}"}
            if edge not in out:
                out.append(edge)
        return out

    def _output(self, n: _Node, name: str, label: str) -> str | None:
        if name == TOOL_OUTPUT:
            return "tool"
        for o in n.kind.outputs:
            if o.name == name:
                if o.output is None:
                    self.problems.append(n.problem(f"its output '{o.display or name}' ({name}) is not supported: {o.why}",
                                                   edge=label))
                return o.output
        if n.kind.dynamic_output is not None:
            found = n.kind.dynamic_output(name)
            if found:
                if found != name:
                    self.meta[n.id].setdefault("handles", {})[found] = name
                return found
        known = ", ".join(o.name for o in n.kind.outputs if o.output) or "none"
        self.problems.append(n.problem(f"its output '{name}' is not one signoff knows (outputs: {known})", edge=label))
        return None

    def _input(self, n: _Node, fld: str, label: str) -> str | None:
        f = n.kind.by_field.get(fld)
        if f is not None and f.input:
            return f.input
        if f is None and n.kind.dynamic_field is not None:
            found = n.kind.dynamic_field(fld, n.values)
            if found:
                if found != fld:
                    self.meta[n.id].setdefault("handles", {})[found] = fld
                return found
        fdict = n.template.get(fld) if isinstance(n.template.get(fld), dict) else {}
        why = f": {f.why}" if f is not None and f.why else ""
        self.problems.append(n.problem(f"an edge into {_label(fdict, fld)} is not supported{why}", edge=label))
        return None

    def extension(self, nodes: list[dict[str, Any]]) -> None:
        """What an exported file kept for signoff only (params Langflow's fields cannot hold, a
        node's tweakable list): merged back as it was."""
        ext = self.doc.get(EXTENSION)
        if ext is None:
            return
        by_id = {n["id"]: n for n in nodes}
        if not isinstance(ext, dict):
            self.problems.append({"where": EXTENSION, "message": f"'{EXTENSION}' must be an object"})
            return
        for key in ("params", "tweakable"):
            part = ext.get(key) or {}
            if not isinstance(part, dict):
                self.problems.append({"where": f"{EXTENSION}.{key}", "message": f"'{EXTENSION}.{key}' must be an object"})
                continue
            for nid, value in part.items():
                node = by_id.get(nid)
                if node is None:
                    if nid not in self.seen:
                        self.problems.append({"where": f"{EXTENSION}.{key}", "node": nid,
                                              "message": f"{EXTENSION}.{key}: no node '{nid}'"})
                    continue
                if key == "params" and isinstance(value, dict):
                    node["params"].update(value)
                elif key == "tweakable" and isinstance(value, list):
                    node["tweakable"] = value
                else:
                    self.problems.append({"where": f"{EXTENSION}.{key}.{nid}", "node": nid,
                                          "message": f"{EXTENSION}.{key}.{nid} has the wrong shape"})


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    raise Unsupported(f"expected text, got {_short(value)}")


def _label(fdict: dict[str, Any], name: str) -> str:
    display = fdict.get("display_name")
    return f"'{display}' ({name})" if isinstance(display, str) and display and display != name else f"'{name}'"


def unsupported(problems: list[dict[str, Any]]) -> LangflowUnsupported:
    nodes = {p["node"] for p in problems if "node" in p}
    first = "; ".join(
        (f"{p['node']} ({p.get('display_name', '')}): " if "display_name" in p else "") + p["message"]
        for p in problems[:3])
    more = f" and {len(problems) - 3} more" if len(problems) > 3 else ""
    supported = ", ".join(f"{s['display_name']} ({s['type']})" for s in SUPPORTED)
    return LangflowUnsupported(
        problems,
        f"This Langflow flow cannot run on signoff as it is: {len(problems)} problem(s) in {len(nodes)} node(s): "
        f"{first}{more}. Nothing was imported. signoff runs these Langflow components: {supported}.",
    )


def from_langflow(doc: dict[str, Any]) -> dict[str, Any]:
    """The signoff spec of a Langflow export (see the module). Raises :class:`LangflowUnsupported`
    listing every component and setting signoff cannot run. The result keeps Langflow's node
    types and canvas places under ``"langflow"`` for the way back (:func:`to_langflow`)."""
    try:
        return _Reader(doc).convert()
    except FlowInvalid:
        raise
    except (RecursionError, MemoryError):
        raise FlowInvalid([{"message": "the Langflow export is nested too deeply"}]) from None
    except Exception as e:  # a hostile or broken file must never crash the service
        raise FlowInvalid([{"message": f"the Langflow export could not be read: {e.__class__.__name__}: {e}"}]) from None
