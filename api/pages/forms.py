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
              errors: dict[str, str] | None = None, prefix: str = PREFIX) -> list[Field]:
    """The controls for ``schema``; ``typed``: what the person sent (kept after a refusal),
    ``errors``: a message per property; ``prefix``: of the inputs' names (one per option on a
    card that shows several options' fields in one form, so a field two options share is two
    inputs)."""
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
        f = Field(name=name, input_name=prefix + name, label=label, control="text", required=name in required,
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


def values_from(schema: dict[str, Any] | None, form: FormData, prefix: str = PREFIX) -> dict[str, Any] | None:
    """The decision's values from a submitted form, as ``schema`` describes them; an empty field
    is left out (so ``required`` names it and a default applies)."""
    if not isinstance(schema, dict) or not isinstance(schema.get("properties"), dict):
        return None
    values: dict[str, Any] = {}
    for name, sub in schema["properties"].items():
        sub = sub if isinstance(sub, dict) else {}
        key = prefix + name
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


_TYPE_WORDS = {"integer": "a whole number", "number": "a number", "string": "text", "boolean": "yes or no",
               "array": "a list", "object": "a set of values (JSON)"}


def in_words(problem: dict[str, Any], schema: dict[str, Any] | None, name: str) -> str:
    """A refused value's problem as a person reads it ("Write at least 5 characters."), from the
    rule it broke (the problem's ``type``, a JSON Schema keyword) and the field's schema; the
    check's own message where no rule fits."""
    props = schema.get("properties") if isinstance(schema, dict) and isinstance(schema.get("properties"), dict) else {}
    sub = props.get(name) if isinstance(props.get(name), dict) else {}
    rule = str(problem.get("type") or "")
    limit = sub.get(rule)
    words = {
        "required": "Fill this in.",
        "minLength": f"Write at least {limit} characters.",
        "maxLength": f"Write at most {limit} characters.",
        "minimum": f"Enter {limit} or more.",
        "maximum": f"Enter {limit} or less.",
        "exclusiveMinimum": f"Enter more than {limit}.",
        "exclusiveMaximum": f"Enter less than {limit}.",
        "minItems": f"Choose at least {limit}.",
        "maxItems": f"Choose at most {limit}.",
        "enum": "Choose one of the listed values.",
        "format": f"Enter a valid {sub.get('format', 'value')}.",
        "type": f"Enter {_TYPE_WORDS.get(str(_type(sub)), 'a valid value')}.",
        "pattern": "This is not in the form asked for" + (" (see below)." if sub.get("description") else "."),
    }
    if rule in words and (limit is not None or rule in ("required", "enum", "format", "type", "pattern")):
        return words[rule]
    return str(problem.get("message", ""))


def _too_deep(loc: str) -> InvalidValues:
    """A field whose JSON nests deeper than Python can read (a 500 before): 422, the form shown
    again naming the field (values nested less deeply meet SIGNOFF_MAX_JSON_DEPTH in check_body)."""
    return InvalidValues([{"loc": loc, "type": "json_too_deep",
                           "message": "nests objects and lists too deeply (SIGNOFF_MAX_JSON_DEPTH)"}])


def typed_values(form: FormData, prefix: str = PREFIX) -> dict[str, Any]:
    """What the person typed, by property name, to show again after a refusal."""
    typed: dict[str, Any] = {}
    for key in form.keys():
        if key.startswith(prefix):
            items = form.getlist(key)
            typed[key[len(prefix):]] = items if len(items) > 1 else items[0]
    return typed


# ---- a tool approval's arguments ---------------------------------------------------------------
# What a person approves is what runs (DESIGN §10): the card compares what was submitted with
# the proposal, so an argument changed in the form is never dropped by a plain Approve.


@dataclass
class ArgChange:
    name: str
    old: str  # the proposal's value as the form shows it
    new: str  # as typed


def arg_fields(args: dict[str, Any] | None, typed: dict[str, str] | None = None) -> list[Field]:
    """One input per argument of the tool call (text as it is, anything else as JSON); ``value``
    what to show (typed, after a refusal), ``attrs["original"]`` the proposal's text, which the
    page's script compares with what is typed."""
    out = []
    for name, value in (args or {}).items():
        original = _as_text(value)
        shown = (typed or {}).get(name, original).replace("\r\n", "\n")
        long = len(shown) > 80 or "\n" in shown or len(original) > 80 or "\n" in original
        out.append(Field(name=name, input_name=ARG_PREFIX + name, label=name, value=shown,
                         control="textarea" if long else "text", attrs={"original": original},
                         help="" if isinstance(value, str) else "JSON"))
    return out


def _arg_value(original: Any, raw: str, name: str) -> tuple[Any, bool]:
    """The argument to run with from the submitted text, and whether it differs from the
    proposal. A form sends a textarea's line breaks as CRLF: read as the LF the person typed.
    A text argument stays text; any other is read as JSON (kept as text when it is not JSON)
    and is unchanged when it is the same JSON (spacing aside)."""
    text = raw.replace("\r\n", "\n")
    if isinstance(original, str):
        return (original, False) if text == original.replace("\r\n", "\n") else (text, True)
    try:
        parsed = json.loads(text)
    except ValueError:
        return text, True
    except RecursionError:
        raise _too_deep(f"values.args.{name}") from None
    same = json.dumps(parsed, sort_keys=True) == json.dumps(original, sort_keys=True)
    return (original, False) if same else (parsed, True)


def edited_args(args: dict[str, Any] | None, form: FormData) -> dict[str, Any]:
    """The arguments as edited (an argument the form did not send, or sent unchanged, is the
    proposal's)."""
    out: dict[str, Any] = {}
    for name, original in (args or {}).items():
        raw = form.get(ARG_PREFIX + name)
        out[name] = original if raw is None else _arg_value(original, str(raw), name)[0]
    return out


def arg_changes(args: dict[str, Any] | None, form: FormData) -> list[ArgChange]:
    """The arguments the submitted form changed, old and new (empty: the call as proposed)."""
    changes = []
    for name, original in (args or {}).items():
        raw = form.get(ARG_PREFIX + name)
        if raw is not None and _arg_value(original, str(raw), name)[1]:
            changes.append(ArgChange(name, _as_text(original), str(raw).replace("\r\n", "\n")))
    return changes


def args_diff(before: dict[str, Any] | None, after: Any) -> list[ArgChange]:
    """A decided edit's arguments against the proposal: every argument, old and new text (old
    equal to new where it was not changed)."""
    before = before if isinstance(before, dict) else {}
    after = after if isinstance(after, dict) else {}
    return [ArgChange(name, _as_text(before[name]) if name in before else "",
                      _as_text(after[name]) if name in after else "")
            for name in [*before, *[n for n in after if n not in before]]]


def typed_args(form: FormData) -> dict[str, str]:
    return {k[len(ARG_PREFIX):]: str(v) for k, v in form.items() if k.startswith(ARG_PREFIX)}


# the card's "don't ask again" durations (DESIGN §17): those within SIGNOFF_MAX_STANDING are offered
REMEMBER_FOR = ((3600, "1 hour"), (8 * 3600, "8 hours"), (86400, "24 hours"))


def remember_durations(max_seconds: float) -> list[tuple[int, str]]:
    """The durations the card offers for a standing approval: those within the maximum (the
    maximum itself when it is shorter than all of them)."""
    offered = [(s, label) for s, label in REMEMBER_FOR if s <= max_seconds]
    label = f"{max_seconds / 3600:g} hours" if max_seconds >= 3600 else f"{max_seconds:g} seconds"
    return offered or [(int(max_seconds), label)]
