"""A signoff flow spec as a Langflow export (``GET /api/v1/flows/{id}/export?format=langflow``,
``signoff flows export``).

Each node becomes the Langflow component of its :class:`~.kinds.Kind` (the Langflow type it was
imported from, kept under the spec's ``"langflow"`` key, else the kind's first), with its params
in the template fields and its place on the canvas; each edge gets Langflow's handles (objects
in ``data``, and the ``œ`` strings). No component ``code`` is written: Langflow fills a node's
code in from its own components when it loads the file.

What Langflow's fields cannot hold (a Human Input's approvers, a secret header, a node's
``tweakable`` list, ...) goes under the file's top-level ``"signoff"`` key, which Langflow
ignores and the importer reads back, so import -> export -> import gives the same spec."""

from __future__ import annotations

import json
import uuid
from typing import Any

from signoff.engine.errors import FlowInvalid
from signoff.engine.langflow.importer import EXTENSION, META
from signoff.engine.langflow.kinds import (
    AGENT,
    BY_SIGNOFF_TYPE,
    HUMAN_INPUT,
    LANGUAGE_MODEL,
    PROMPT,
    RUN_FLOW,
    TOOL_OUTPUT,
    Field,
    Inexpressible,
    Kind,
    _prompt_variables,
)
from signoff.engine.secrets import SECRET_REF

TOOL_PARAMS = ("tool_name", "tool_description", "approval_actions")


def _encode(handle: dict[str, Any]) -> str:
    """Langflow's handle string: the JSON with ``œ`` for ``"``."""
    return json.dumps(handle, separators=(",", ":"), ensure_ascii=False).replace('"', "œ")


def _entry(f: Field, value: Any, *, load_from_db: bool = False) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "_input_type": f.input_type, "advanced": f.advanced, "display_name": f.display or f.name, "dynamic": False,
        "info": "", "list": isinstance(value, list) and f.ftype not in ("table", "action_picker", "model"),
        "name": f.name, "placeholder": "", "required": False, "show": True, "title_case": False, "tool_mode": False,
        "trace_as_metadata": True, "type": f.ftype, "value": value,
    }
    if f.handle or f.ftype == "str":
        entry["input_types"] = list(f.handle)
    if f.secret:
        entry.update(password=True, load_from_db=load_from_db)
    if f.options:
        entry["options"] = list(f.options)
    if f.input_type == "MultilineInput":
        entry["multiline"] = True
    return entry


def _writes(f: Field, lf_type: str) -> bool:
    return not f.types or lf_type in f.types


def _field_for(kind: Kind, lf_type: str, param: str) -> Field | None:
    """The template field that holds ``param`` in a node of ``lf_type``."""
    fields = [f for f in kind.fields if f.param == param]
    return next((f for f in fields if _writes(f, lf_type)), fields[0] if fields else None)


def _lf_type(kind: Kind, meta: dict[str, Any]) -> str:
    lf_type = meta.get("type")
    return lf_type if isinstance(lf_type, str) and lf_type in kind.types else kind.first_type


def _lf_output(kind: Kind, lf_type: str, output: str, handles: dict[str, Any]) -> tuple[str, list[str]]:
    """Langflow's name and types of the signoff output ``output``."""
    if output == "tool":
        return TOOL_OUTPUT, ["Tool"]
    if isinstance(handles.get(output), str):
        return handles[output], ["Message"]
    outs = [o for o in kind.outputs if o.output == output]
    found = next((o for o in outs if not o.lf or lf_type in o.lf), outs[0] if outs else None)
    return (found.name, list(found.types)) if found else (output, ["Message"])


def _lf_input(kind: Kind, lf_type: str, into: str, handles: dict[str, Any]) -> tuple[str, list[str], str]:
    """Langflow's field name, input types and type of the signoff input ``into``."""
    if isinstance(handles.get(into), str):
        return handles[into], ["Message"], "str"
    fields = [f for f in kind.fields if f.input == into]
    found = next((f for f in fields if _writes(f, lf_type)), fields[0] if fields else None)
    if found is None:
        return into, ["Message"], "str"
    return found.name, list(found.handle) or ["Message"], "other" if found.ftype == "other" else "str"


def _layout(spec: dict[str, Any]) -> dict[str, dict[str, float]]:
    """Places for nodes that have none: a column per layer (longest path), a row per node."""
    ids = [n["id"] for n in spec.get("nodes") or []]
    preds: dict[str, set[str]] = {i: set() for i in ids}
    for e in spec.get("edges") or []:
        src, dst = str(e.get("from", "")).rsplit(".", 1)[0], str(e.get("to", "")).rsplit(".", 1)[0]
        if src in preds and dst in preds and src != dst:
            preds[dst].add(src)
    layer: dict[str, int] = {}
    for _ in range(len(ids) + 1):  # relax: longest path, bounded (a cycle cannot loop forever)
        changed = False
        for i in ids:
            value = max((layer.get(p, 0) + 1 for p in preds[i]), default=0)
            if layer.get(i) != value:
                layer[i], changed = min(value, len(ids)), True
        if not changed:
            break
    rows: dict[int, int] = {}
    places = {}
    for i in ids:
        col = layer.get(i, 0)
        places[i] = {"x": 100.0 + 450.0 * col, "y": 100.0 + 320.0 * rows.get(col, 0)}
        rows[col] = rows.get(col, 0) + 1
    return places


class _Writer:
    def __init__(self, spec: dict[str, Any]) -> None:
        self.spec = spec
        meta = spec.get(META) if isinstance(spec.get(META), dict) else {}
        self.meta: dict[str, Any] = meta.get("nodes") if isinstance(meta.get("nodes"), dict) else {}
        self.ext_params: dict[str, dict[str, Any]] = {}
        self.ext_tweakable: dict[str, list[str]] = {}
        self.kinds: dict[str, tuple[Kind, str]] = {}
        edges = spec.get("edges") or []
        self.tool_nodes = {str(e.get("from", "")).rsplit(".", 1)[0] for e in edges
                           if str(e.get("from", "")).endswith(".tool")}
        self.fed: dict[str, set[str]] = {}
        for e in edges:
            node, _, into = str(e.get("to", "")).rpartition(".")
            self.fed.setdefault(node, set()).add(into)

    def node_meta(self, nid: str) -> dict[str, Any]:
        found = self.meta.get(nid)
        return found if isinstance(found, dict) else {}

    def keep(self, nid: str, param: str, value: Any) -> None:
        self.ext_params.setdefault(nid, {})[param] = value

    def node(self, n: dict[str, Any], place: dict[str, float]) -> dict[str, Any]:
        nid, stype = n["id"], n["type"]
        kind = BY_SIGNOFF_TYPE.get(stype)
        if kind is None:
            raise FlowInvalid([{"node": nid, "message": f"'{stype}' has no Langflow component"}])
        meta = self.node_meta(nid)
        handles = meta.get("handles") if isinstance(meta.get("handles"), dict) else {}
        lf_type = _lf_type(kind, meta)
        self.kinds[nid] = (kind, lf_type)
        params = dict(n.get("params") or {})
        display = params.pop("display_name", None)
        display = display if isinstance(display, str) and display else kind.types[lf_type]
        if n.get("tweakable") is not None:
            self.ext_tweakable[nid] = n["tweakable"]
        template: dict[str, Any] = {"_type": "Component"}
        tool = nid in self.tool_nodes
        tool_row = {k: params.pop(k) for k in TOOL_PARAMS if k in params} if tool else {}

        if kind in (LANGUAGE_MODEL, AGENT) and lf_type != "OpenAIModel":
            model = params.pop("model", None)
            picker = [{"name": model, "provider": "OpenAI"}] if isinstance(model, str) and model else []
            template["model"] = _entry(Field("model", display="Language Model", ftype="model", input_type="ModelInput"),
                                       picker)
        if kind is PROMPT:
            variables = _prompt_variables({"template": params.get("template")})
            for var in variables:
                value = params.pop(var, "")
                if isinstance(value, str):
                    template[var] = _entry(Field(var, display=var, handle=("Message",), input_type="DefaultPromptField"),
                                           value)
                else:
                    self.keep(nid, var, value)
                    template[var] = _entry(Field(var, display=var, handle=("Message",)), "")
        if kind is RUN_FLOW:
            name = handles.get("input_value") if isinstance(handles.get("input_value"), str) else "input_value"
            template[name] = _entry(Field(name, display="Input Value", handle=("Message",)),
                                    params.pop("input_value", "") if isinstance(params.get("input_value", ""), str) else "")
            flow_id = params.pop("flow_id", None)
            if flow_id:
                template["flow_id_selected"] = _entry(Field("flow_id_selected", display="Flow ID"), flow_id)
                template["flow_name_selected"] = _entry(Field("flow_name_selected", display="Flow Name",
                                                              input_type="DropdownInput"), None)

        for param, value in list(params.items()):
            f = _field_for(kind, lf_type, param)
            if f is None or f.cosmetic:
                self.keep(nid, param, value)
                continue
            try:
                if f.secret and isinstance(value, dict) and set(value) == {SECRET_REF}:
                    template[f.name] = _entry(f, value[SECRET_REF], load_from_db=True)
                else:
                    template[f.name] = _entry(f, f.dump(value) if f.dump else value)
            except Inexpressible:
                self.keep(nid, param, value)
        for f in kind.fields:
            # the component's other fields: a setting signoff does not have at the value that changes
            # nothing; a param left unset as unset (so a re-import sets nothing); a wired field exists
            wired = f.input is not None and f.input in self.fed.get(nid, set())
            if f.name in template or f.cosmetic or not (wired or _writes(f, lf_type)):
                continue
            unset = "" if f.ftype in ("str", "prompt") else None
            template[f.name] = _entry(f, f.default if f.param is None and f.input is None else unset)
        if tool:
            name = tool_row.get("tool_name") or nid
            row = {"name": name, "description": tool_row.get("tool_description") or "", "tags": [name], "status": True}
            if tool_row.get("approval_actions"):
                row["approval_actions"] = tool_row["approval_actions"]
            template["tools_metadata"] = _entry(Field("tools_metadata", display="Actions", ftype="tools",
                                                      input_type="ToolsInput"), [row])
            for k in TOOL_PARAMS:  # set but empty (or the node's own id as its name): kept exactly
                if k in tool_row and (not tool_row[k] or (k == "tool_name" and tool_row[k] == nid)):
                    self.keep(nid, k, tool_row[k])
        outputs = self.outputs(kind, lf_type, n, handles, tool)
        node = {
            "base_classes": sorted({t for o in outputs for t in o["types"]}), "beta": False, "conditional_paths": [],
            "custom_fields": {"template": _prompt_variables({"template": params.get("template")})} if kind is PROMPT
            else {},
            "description": kind.description, "display_name": display, "documentation": "", "edited": False,
            "field_order": [k for k in template if k != "_type"], "frozen": False, "legacy": False, "metadata": {},
            "output_types": [], "outputs": outputs, "pinned": False, "template": template, "tool_mode": tool,
        }
        return {
            "id": nid, "type": "genericNode", "position": place,
            "data": {"id": nid, "type": lf_type, "node": node, "showNode": True},
            "measured": {"width": 320, "height": 240}, "selected": False, "dragging": False,
        }

    def outputs(self, kind: Kind, lf_type: str, n: dict[str, Any], handles: dict[str, Any], tool: bool
                ) -> list[dict[str, Any]]:
        def out(name: str, display: str, types: list[str], method: str = "") -> dict[str, Any]:
            return {"allows_loop": False, "cache": True, "display_name": display, "group_outputs": False,
                    "method": method, "name": name, "selected": types[0], "tool_mode": True, "types": types,
                    "value": "__UNDEFINED__"}

        found = []
        if kind is HUMAN_INPUT:
            params = n.get("params") or {}
            labels = params.get("decisions") if isinstance(params.get("decisions"), list) else ["Approve", "Reject"]
            for label in labels:
                if isinstance(label, str) and label.strip():
                    found.append({**out(f"branch_{label.strip().lower().replace(' ', '_')}", label.strip(), ["Message"],
                                        "route_branch"), "group_outputs": True})
            if params.get("enable_fallback") is True:
                found.append({**out("branch_fallback", "Fallback", ["Message"], "route_branch"), "group_outputs": True})
        elif kind is RUN_FLOW:
            name = handles.get("output") if isinstance(handles.get("output"), str) else "output"
            found.append(out(name, "Flow Output", ["Message"]))
        else:
            found = [out(o.name, o.display or o.name, list(o.types), o.method) for o in kind.outputs
                     if o.output and (not o.lf or lf_type in o.lf)]
        if tool:
            found.append(out(TOOL_OUTPUT, "Toolset", ["Tool"], "to_toolkit"))
        return found

    def edge(self, e: dict[str, Any]) -> dict[str, Any]:
        src, _, output = str(e["from"]).rpartition(".")
        dst, _, into = str(e["to"]).rpartition(".")
        skind, stype = self.kinds[src]
        dkind, dtype = self.kinds[dst]
        smeta, dmeta = self.node_meta(src), self.node_meta(dst)
        sname, stypes = _lf_output(skind, stype, output, smeta.get("handles") or {})
        dname, dtypes, ftype = _lf_input(dkind, dtype, into, dmeta.get("handles") or {})
        if output == "tool":
            dtypes, ftype = ["Tool"], "other"
        sh = {"dataType": stype, "id": src, "name": sname, "output_types": stypes}
        th = {"fieldName": dname, "id": dst, "inputTypes": dtypes, "type": ftype}
        return {
            "animated": False, "className": "", "data": {"sourceHandle": sh, "targetHandle": th},
            "id": f"xy-edge__{src}{_encode(sh)}-{dst}{_encode(th)}", "selected": False,
            "source": src, "sourceHandle": _encode(sh), "target": dst, "targetHandle": _encode(th),
        }

    def write(self, flow_id: str | None) -> dict[str, Any]:
        spec = self.spec
        places = _layout(spec)
        nodes = []
        for n in spec.get("nodes") or []:
            pos = self.node_meta(n["id"]).get("position")
            place = pos if isinstance(pos, dict) else places[n["id"]]
            nodes.append(self.node(n, place))
        edges = [self.edge(e) for e in spec.get("edges") or []]
        name = spec.get("name") or "signoff flow"
        doc: dict[str, Any] = {
            "id": str(uuid.uuid5(uuid.NAMESPACE_URL, f"signoff:flow:{flow_id or name}")),
            "name": name, "description": spec.get("description") or "", "is_component": False,
            "data": {"nodes": nodes, "edges": edges, "viewport": {"x": 0, "y": 0, "zoom": 1}},
        }
        ext: dict[str, Any] = {}
        if self.ext_params:
            ext["params"] = self.ext_params
        if self.ext_tweakable:
            ext["tweakable"] = self.ext_tweakable
        if ext:
            doc[EXTENSION] = ext
        return doc


def to_langflow(spec: dict[str, Any], *, flow_id: str | None = None) -> dict[str, Any]:
    """The Langflow export of a signoff spec (a valid one: as stored). See the module."""
    return _Writer(spec).write(flow_id)
