"""Flow spec (DESIGN §4): load JSON/YAML, validate, and report every problem at once.

A problem is a dict ``{"node"?: id, "edge"?: "a.x->b.y", "message": str}``.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import json
import math
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
    # The params a user the flow is shared with may set by tweaks (default: the component's
    # own list, its inputs' text); the owner may tweak any (engine/sharing.py).
    tweakable: list[str] | None = None


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


class FlowSyntaxError(FlowInvalid):
    """The text is not one JSON or YAML document at all (empty, not UTF-8, malformed), as opposed
    to a document that the flow rules refuse (plain FlowInvalid). The API answers the first as
    INVALID_REQUEST and the second as FLOW_INVALID."""


@functools.cache
def _process_max_depth() -> int:
    """SIGNOFF_MAX_JSON_DEPTH of this process, for callers that do not pass their own (read once)."""
    from signoff.engine.settings import Settings

    return Settings().max_json_depth


def _where(path: list[Any] | tuple[Any, ...]) -> str:
    return ".".join(str(p) for p in path) or "the document"


def _too_deep(path: list[Any] | tuple[Any, ...], max_depth: int, mark: Any = None) -> FlowInvalid:
    at = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
    return FlowInvalid([{"where": _where(path), "message":
                         f"{_where(path)}{at} nests objects and lists more than {max_depth} levels deep;"
                         f" the limit is {max_depth} (SIGNOFF_MAX_JSON_DEPTH)"}])


def _deeper_than(value: Any, max_depth: int) -> list[Any] | None:
    """The path to the first object or list nested deeper than ``max_depth`` (the document itself
    is level 1), or None. Iterative: any depth is walked without recursion."""
    stack: list[tuple[Any, int, list[Any]]] = [(value, 1, [])]
    while stack:
        item, depth, path = stack.pop()
        if isinstance(item, dict):
            children: Any = item.items()
        elif isinstance(item, list):
            children = enumerate(item)
        else:
            continue
        if depth > max_depth:
            return path
        nested = [(sub, depth + 1, [*path, key]) for key, sub in children if isinstance(sub, (dict, list))]
        stack.extend(reversed(nested))  # document order
    return None


class _Yaml12Loader(yaml.SafeLoader):
    """The one YAML loader for flows (the API upload, SIGNOFF_FLOWS_DIR, ``signoff run``): YAML 1.2
    core schema, and nothing a JSON document could not say.

    - Booleans are only true/false (a node called ``no``, ``on`` or ``yes`` stays a string); ints
      are decimal, ``0o`` or ``0x`` (``0777`` is 777, ``1:20`` a string); no timestamps (a date stays
      a string), no ``<<`` merge, no ``=``; ``.inf``/``.nan`` are refused (JSON has no such number).
    - Mapping keys are strings, as written (``1: x`` is ``{"1": "x"}``); a list or mapping as a key
      is refused.
    - Only JSON's types: an explicit tag other than str, int, float, bool, null, seq, map (``!!binary``,
      ``!!set``, ``!!timestamp``, ``!!python/...``, local tags) is refused.
    - **No anchors or aliases** (``&name``, ``*name``): a flow never needs them, and an alias is how
      a few hundred bytes expand to gigabytes ("billion laughs"). The first anchor or alias is
      refused while composing, before anything is expanded.
    - Objects and lists nest at most ``max_depth`` levels (SIGNOFF_MAX_JSON_DEPTH), checked while
      composing, so a deep document never reaches the recursive parts.
    """

    def __init__(self, stream: str, *, max_depth: int) -> None:
        super().__init__(stream)
        self.max_depth = max_depth
        self._path: list[Any] = []

    def compose_node(self, parent: Any, index: Any) -> Any:
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) is not None:
            mark = event.start_mark
            kind = f"alias *{event.anchor}" if isinstance(event, yaml.AliasEvent) else f"anchor &{event.anchor}"
            raise FlowInvalid([{"where": f"line {mark.line + 1}", "message":
                                f"YAML {kind} at line {mark.line + 1}, column {mark.column + 1}: anchors and aliases "
                                "are not accepted in a flow; write the value out where it is used"}])
        if not isinstance(event, (yaml.SequenceStartEvent, yaml.MappingStartEvent)):
            return super().compose_node(parent, index)
        if parent is not None:
            self._path.append(index.value if isinstance(index, yaml.ScalarNode) else index if isinstance(index, int) else "?")
        try:
            if len(self._path) + 1 > self.max_depth:
                raise _too_deep(self._path, self.max_depth, event.start_mark)
            return super().compose_node(parent, index)
        finally:
            if parent is not None:
                self._path.pop()

    def construct_mapping(self, node: Any, deep: bool = False) -> dict[str, Any]:
        if not isinstance(node, yaml.MappingNode):
            raise yaml.constructor.ConstructorError(None, None, f"expected a mapping, found {node.id}", node.start_mark)
        mapping: dict[str, Any] = {}
        for key_node, value_node in node.value:
            if not isinstance(key_node, yaml.ScalarNode):
                raise _not_json(key_node, "a mapping key must be a string, not a list or a mapping")
            mapping[str(key_node.value)] = self.construct_object(value_node, deep=deep)
        return mapping

    def construct_yaml_int(self, node: Any) -> int:
        text = str(self.construct_scalar(node)).replace("_", "")
        sign, digits = (-1, text[1:]) if text[:1] == "-" else (1, text[1:] if text[:1] == "+" else text)
        try:
            if digits[:2] in ("0o", "0O"):
                return sign * int(digits[2:], 8)
            if digits[:2] in ("0x", "0X"):
                return sign * int(digits[2:], 16)
            return sign * int(digits, 10)
        except ValueError:  # e.g. more than 4,300 digits
            raise _not_json(node, f"{text[:50]!r} is not an integer signoff can hold") from None

    def construct_yaml_float(self, node: Any) -> float:
        text = str(self.construct_scalar(node)).replace("_", "")
        if text.lstrip("+-").lower() in (".inf", ".nan"):
            raise _not_json(node, f"{text!r} is not a JSON number (no infinity, no NaN)")
        try:
            value = float(text)
        except ValueError:
            raise _not_json(node, f"{text[:50]!r} is not a number") from None
        if not math.isfinite(value):
            raise _not_json(node, f"{text[:50]!r} is not a JSON number (no infinity, no NaN)")
        return value

    def construct_not_json(self, node: Any) -> Any:
        tag = "!!" + node.tag.removeprefix(_CORE) if node.tag.startswith(_CORE) else node.tag
        raise _not_json(node, f"the YAML tag {tag} is not accepted: a flow is plain data (strings, numbers, "
                              "true/false, null, lists and mappings)")


def _not_json(node: Any, message: str) -> FlowInvalid:
    mark = node.start_mark
    return FlowInvalid([{"where": f"line {mark.line + 1}",
                         "message": f"line {mark.line + 1}, column {mark.column + 1}: {message}"}])


_CORE = "tag:yaml.org,2002:"
_Yaml12Loader.yaml_implicit_resolvers = {}
for _tag, _rx, _first in (  # YAML 1.2 core schema; anything else plain is a string
    ("null", r"^(?:~|null|Null|NULL|)$", ["~", "n", "N", ""]),
    ("bool", r"^(?:true|True|TRUE|false|False|FALSE)$", list("tTfF")),
    ("int", r"^(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)$", list("-+0123456789")),
    ("float", r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$",
     list("-+0123456789.")),
):
    _Yaml12Loader.add_implicit_resolver(_CORE + _tag, re.compile(_rx), _first)
_Yaml12Loader.yaml_constructors = {
    **{_CORE + t: yaml.SafeLoader.yaml_constructors[_CORE + t] for t in ("null", "bool", "str", "seq", "map")},
    _CORE + "int": _Yaml12Loader.construct_yaml_int,
    _CORE + "float": _Yaml12Loader.construct_yaml_float,
    None: _Yaml12Loader.construct_not_json,
}
_Yaml12Loader.yaml_multi_constructors = {}


def _no_constant(name: str) -> Any:
    raise FlowInvalid([{"where": "the document", "message": f"{name} is not a JSON number"}])


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise FlowInvalid([{"where": "the document", "message": f"{text[:50]} is too large for a JSON number"}])
    return value


def _json(text: str, max_depth: int) -> Any:
    try:
        data = json.loads(text, parse_constant=_no_constant, parse_float=_finite)
    except RecursionError:
        raise _too_deep([], max_depth) from None
    except json.JSONDecodeError:
        raise
    except ValueError as e:  # e.g. an integer of more than 4,300 digits
        raise FlowInvalid([{"where": "the document", "message": f"not a JSON value signoff can hold: {e}"}]) from None
    path = _deeper_than(data, max_depth)
    if path is not None:
        raise _too_deep(path, max_depth)
    return data


def _yaml(text: str, max_depth: int) -> Any:
    loader = _Yaml12Loader(text, max_depth=max_depth)
    try:
        return loader.get_single_data()
    except RecursionError:
        raise _too_deep([], max_depth) from None
    finally:
        loader.dispose()


def parse_text(text: str | bytes, *, syntax: str | None = None, max_depth: int | None = None) -> Any:
    """A flow's text as data: JSON, or YAML through the one loader (:class:`_Yaml12Loader`).

    ``syntax`` ``"json"`` or ``"yaml"`` says which; None: JSON when the text starts with ``{`` or
    ``[`` (falling back to YAML, which reads JSON-like flow mappings), else YAML. Objects and lists
    nest at most ``max_depth`` levels (default SIGNOFF_MAX_JSON_DEPTH). Raises FlowSyntaxError when
    the text is no document, FlowInvalid for a document a flow may not be (too deep, anchors or
    aliases, a value JSON cannot hold)."""
    depth = _process_max_depth() if max_depth is None else max_depth
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError:
            raise _syntax("the flow is not UTF-8 text") from None
    text = text.removeprefix("\ufeff")
    stripped = text.lstrip()
    if not stripped:
        raise _syntax("the flow is empty")
    if syntax == "json" or (syntax is None and stripped[0] in "{["):
        try:
            return _json(text, depth)
        except json.JSONDecodeError as e:
            json_error = _syntax(f"not valid JSON: {e.msg} at line {e.lineno} column {e.colno}")
        if syntax == "json":
            raise json_error
        try:
            return _yaml(text, depth)
        except yaml.YAMLError:
            raise json_error from None
    try:
        return _yaml(text, depth)
    except yaml.YAMLError as e:
        raise _syntax(f"not valid YAML: {_yaml_error(e)}") from None


def _syntax(message: str) -> FlowSyntaxError:
    return FlowSyntaxError([{"message": message}], message)


def _yaml_error(err: yaml.YAMLError) -> str:
    mark = getattr(err, "problem_mark", None)
    problem = getattr(err, "problem", None) or str(err).splitlines()[0]
    context = getattr(err, "context", None)
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    return f"{problem}{where}" + (f" ({context})" if context else "")


_parse_text = parse_text


def flow_document(data: Any) -> Any:
    """A flow's data as a signoff spec: a Langflow export (recognised by its shape) is converted
    (:mod:`signoff.engine.langflow`, DESIGN §11), anything else is returned as it is. The one place
    a Langflow flow becomes a spec: :func:`load_flow` and the API's upload call it."""
    from signoff.engine.langflow import from_langflow, is_langflow

    return from_langflow(data) if is_langflow(data) else data


def load_flow(source: str | bytes | dict[str, Any] | FlowSpec) -> FlowSpec:
    """Parse a flow from JSON or YAML text, or a dict (a signoff spec, or a Langflow export:
    :func:`flow_document`). Raises FlowInvalid on a bad shape (every shape problem listed). Does
    not check the components; see :func:`validate_flow`."""
    if isinstance(source, FlowSpec):
        return source
    data = flow_document(_parse_text(source) if isinstance(source, (str, bytes)) else source)
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
    from signoff.engine.langflow import tweak_names

    for node_id, params in tweaks.items():
        # Langflow's field names (a tweak as Langflow's API takes it) are the node's params' names
        nodes[node_id].setdefault("params", {}).update(tweak_names(str(nodes[node_id].get("type")), params))
    return spec
