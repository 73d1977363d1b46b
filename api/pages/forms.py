"""A decision's ``fields`` (a JSON Schema, DESIGN §9) as an HTML form, and a submitted form back
as the decision's ``values``.

Each property becomes one labelled control: a string an input (a textarea when it may be long),
an enum a select, a number or integer a number input, a boolean a checkbox, an array of enum
values a set of checkboxes, any other array a textarea with one item per line. Anything else
(an object, a ``oneOf``) is a JSON textarea. What a person typed is parsed as the schema says
where it can be; what cannot be parsed is sent as typed, so the one decision check
(``check_decision``) names the field that is wrong (422 ``INVALID_VALUES``), as for the API."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from starlette.datastructures import FormData

from signoff.engine.errors import InvalidValues

PREFIX = "v."
ARG_PREFIX = "arg."
LONG_TEXT = 200  # a string field allowed longer than this gets a textarea
_INPUT_TYPES = {"date": "date", "time": "time", "email": "email", "uri": "url"}


@dataclass
class Field:
    name: str
    input_name: str
    label: str
    control: str  # text, textarea, number, checkbox, select, checkboxes, lines, json
    required: bool = False
    help: str = ""
    value: Any = None  # what to show: typed text, or the default
    choices: list[tuple[str, str]] = field(default_factory=list)  # (value, label)
    checked: set[str] = field(default_factory=set)
    attrs: dict[str, Any] = field(default_factory=dict)  # min, max, step, minlength, maxlength, pattern
    error: str | None = None


def _type(schema: dict[str, Any]) -> str | None:
    t = schema.get("type")
    if isinstance(t, list):
        t = next((x for x in t if x != "null"), None)
    if t is None and "enum" in schema:
        return "enum"
    return t if isinstance(t, str) else None


def _as_text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    return json.dumps(value, ensure_ascii=False)


def fields_of(schema: dict[str, Any] | None, typed: dict[str, Any] | None = None,
              errors: dict[str, str] | None = None) -> list[Field]:
    """The controls for ``schema``; ``typed``: what the person sent (kept after a refusal),
    ``errors``: a message per property."""
    if not isinstance(schema, dict):
        return []
    props = schema.get("properties")
    if not isinstance(props, dict):
        return []
    required = set(schema.get("required") or [])
    typed = typed or {}
    errors = errors or {}
    out = []
    for name, sub in props.items():
        sub = sub if isinstance(sub, dict) else {}
        label = str(sub.get("title") or name.replace("_", " ").capitalize())
        f = Field(name=name, input_name=PREFIX + name, label=label, control="text", required=name in required,
                  help=str(sub.get("description") or ""), error=errors.get(name))
        kind = _type(sub)
        shown = typed[name] if name in typed else sub.get("default")
        if "enum" in sub and isinstance(sub["enum"], list):
            f.control = "select"
            f.choices = [(_as_text(v), _as_text(v)) for v in sub["enum"]]
            f.value = _as_text(shown)
        elif kind in ("number", "integer"):
            f.control = "number"
            f.value = _as_text(shown)
            f.attrs["step"] = "1" if kind == "integer" else "any"
            for key, attr in (("minimum", "min"), ("maximum", "max")):
                if isinstance(sub.get(key), (int, float)) and not isinstance(sub.get(key), bool):
                    f.attrs[attr] = sub[key]
        elif kind == "boolean":
            f.control = "checkbox"
            f.value = shown is True or shown == "true"
        elif kind == "array":
            items = sub.get("items") if isinstance(sub.get("items"), dict) else {}
            if isinstance(items.get("enum"), list):
                f.control = "checkboxes"
                f.choices = [(_as_text(v), _as_text(v)) for v in items["enum"]]
                picked = shown if isinstance(shown, list) else []
                f.checked = {_as_text(v) for v in picked}
            else:
                f.control = "lines"
                f.value = "\n".join(_as_text(v) for v in shown) if isinstance(shown, list) else _as_text(shown)
                f.help = (f.help + " " if f.help else "") + "One item per line."
        elif kind == "string" or (kind is None and not sub):
            max_len = sub.get("maxLength")
            fmt = sub.get("format")
            if fmt in _INPUT_TYPES:
                f.control = "text"
                f.attrs["type"] = _INPUT_TYPES[fmt]
            else:
                f.control = "textarea" if not isinstance(max_len, int) or max_len > LONG_TEXT else "text"
            if isinstance(sub.get("minLength"), int):
                f.attrs["minlength"] = sub["minLength"]
            if isinstance(max_len, int):
                f.attrs["maxlength"] = max_len
            f.value = _as_text(shown)
        else:
            f.control = "json"
            f.value = _as_text(shown)
            f.help = (f.help + " " if f.help else "") + "JSON."
        out.append(f)
    return out


def _parse_scalar(text: str, kind: str | None) -> Any:
    if kind == "integer":
        try:
            return int(text)
        except ValueError:
            try:
                as_float = float(text)
            except ValueError:
                return text
            return int(as_float) if as_float.is_integer() else as_float
    if kind == "number":
        try:
            number = float(text)
        except ValueError:
            return text
        return int(number) if number.is_integer() and "." not in text and "e" not in text.lower() else number
    if kind == "boolean":
        return text.lower() in ("true", "on", "1", "yes")
    return text


def values_from(schema: dict[str, Any] | None, form: FormData) -> dict[str, Any] | None:
    """The decision's values from a submitted form, as ``schema`` describes them; an empty field
    is left out (so ``required`` names it and a default applies)."""
    if not isinstance(schema, dict) or not isinstance(schema.get("properties"), dict):
        return None
    values: dict[str, Any] = {}
    for name, sub in schema["properties"].items():
        sub = sub if isinstance(sub, dict) else {}
        key = PREFIX + name
        kind = _type(sub)
        if "enum" in sub and isinstance(sub["enum"], list):
            raw = form.get(key)
            if raw in (None, ""):
                continue
            # the enum's own value (a number stays a number)
            values[name] = next((v for v in sub["enum"] if _as_text(v) == raw), raw)
        elif kind == "boolean":
            values[name] = form.get(key) is not None
        elif kind == "array":
            items = sub.get("items") if isinstance(sub.get("items"), dict) else {}
            if isinstance(items.get("enum"), list):
                picked = form.getlist(key)
                values[name] = [next((v for v in items["enum"] if _as_text(v) == p), p) for p in picked]
            else:
                raw = str(form.get(key) or "")
                lines = [line.strip() for line in raw.splitlines() if line.strip()]
                if lines or name in (schema.get("required") or []):
                    values[name] = [_parse_scalar(line, _type(items)) for line in lines]
        elif kind in ("number", "integer", "string") or (kind is None and not sub):
            raw = form.get(key)
            if raw is None or str(raw) == "":
                continue
            values[name] = _parse_scalar(str(raw), kind)
        else:
            raw = form.get(key)
            if raw is None or str(raw).strip() == "":
                continue
            try:
                values[name] = json.loads(str(raw))
            except ValueError:
                values[name] = str(raw)
            except RecursionError:  # nested past what Python reads: refused as any too-deep value
                raise _too_deep(f"values.{name}") from None
    return values


def _too_deep(loc: str) -> InvalidValues:
    """A field whose JSON nests deeper than Python can read (a 500 before): 422, the form shown
    again naming the field (values nested less deeply meet SIGNOFF_MAX_JSON_DEPTH in check_body)."""
    return InvalidValues([{"loc": loc, "type": "json_too_deep",
                           "message": "nests objects and lists too deeply (SIGNOFF_MAX_JSON_DEPTH)"}])


def typed_values(form: FormData) -> dict[str, Any]:
    """What the person typed, by property name, to show again after a refusal."""
    typed: dict[str, Any] = {}
    for key in form.keys():
        if key.startswith(PREFIX):
            items = form.getlist(key)
            typed[key[len(PREFIX):]] = items if len(items) > 1 else items[0]
    return typed


# ---- a tool approval's arguments ---------------------------------------------------------------


def arg_fields(args: dict[str, Any] | None, typed: dict[str, str] | None = None) -> list[Field]:
    """One input per argument of the tool call (text as it is, anything else as JSON)."""
    out = []
    for name, value in (args or {}).items():
        shown = (typed or {}).get(name, _as_text(value))
        long = len(shown) > 80 or "\n" in shown
        out.append(Field(name=name, input_name=ARG_PREFIX + name, label=name, value=shown,
                         control="textarea" if long else "text",
                         help="" if isinstance(value, str) else "JSON"))
    return out


def edited_args(args: dict[str, Any] | None, form: FormData) -> dict[str, Any]:
    """The arguments as edited: a text argument stays text, any other is read as JSON (kept as
    text when it is not JSON)."""
    out: dict[str, Any] = {}
    for name, original in (args or {}).items():
        raw = form.get(ARG_PREFIX + name)
        if raw is None:
            out[name] = original
            continue
        raw = str(raw)
        if isinstance(original, str):
            out[name] = raw
        else:
            try:
                out[name] = json.loads(raw)
            except ValueError:
                out[name] = raw
            except RecursionError:
                raise _too_deep(f"values.args.{name}") from None
    return out


def typed_args(form: FormData) -> dict[str, str]:
    return {k[len(ARG_PREFIX):]: str(v) for k, v in form.items() if k.startswith(ARG_PREFIX)}
