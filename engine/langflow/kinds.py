"""The Langflow components signoff runs, one :class:`Kind` each: which Langflow types it covers,
the signoff component it becomes, and what becomes of each template field and output.

One table serves both directions: :mod:`.importer` reads a Langflow node through it,
:mod:`.exporter` writes a signoff node back through it. A template field is

- mapped: its value becomes a signoff param (``param``) and an edge into it feeds a signoff input
  (``input``), converted by ``load`` (Langflow value -> signoff value) and ``dump`` (back);
- neutral: a setting signoff does not have, accepted only at the values that change nothing
  (``neutral``); any other value is unsupported, and ``why`` says what signoff does instead;
- cosmetic: how the canvas shows it (colours, icons, caching), ignored whatever its value.

A field the table does not know is ignored when it is empty and unsupported otherwise, so no
setting that changes what a flow does is dropped without a word.

Over 500 lines on purpose: a declarative table, a row per Langflow component, read in one place
by the importer and the exporter; cutting it would scatter one table."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Callable

TOOL_OUTPUT = "component_as_tool"  # a Langflow component in tool mode, handed to an Agent
EMPTY: tuple[Any, ...] = (None, "", [], {})


class Unsupported(ValueError):
    """A value signoff cannot take (the message says what and why)."""


class Inexpressible(ValueError):
    """A signoff value Langflow's field cannot hold (the exporter keeps it for signoff only)."""


@dataclass(frozen=True)
class Field:
    name: str                      # the Langflow template field
    param: str | None = None       # the signoff param its value sets
    input: str | None = None       # the signoff input an edge into it feeds
    display: str = ""
    ftype: str = "str"             # Langflow's template type
    input_type: str = "MessageTextInput"  # Langflow's _input_type
    default: Any = ""              # what Langflow holds when it is unset (the exporter writes it)
    handle: tuple[str, ...] = ()   # the types an edge into it may carry (Langflow's input_types)
    neutral: tuple[Any, ...] = ()  # values of an unmapped field that change nothing
    why: str = ""                  # what signoff does instead, when the value is not neutral
    cosmetic: bool = False
    advanced: bool = False
    secret: bool = False           # a credential (load_from_db: a Langflow global variable -> a signoff secret)
    load: Callable[[Any], Any] | None = None
    dump: Callable[[Any], Any] | None = None
    options: tuple[str, ...] = ()
    # the Langflow types the exporter writes it for (empty: all of the kind's; NEVER: only when its
    # param is set, e.g. an older spelling)
    types: tuple[str, ...] = ()


@dataclass(frozen=True)
class Out:
    name: str                      # Langflow's output name
    output: str | None             # the signoff output it is (None: unsupported)
    display: str = ""
    types: tuple[str, ...] = ("Message",)
    method: str = ""
    why: str = ""
    lf: tuple[str, ...] = ()       # the Langflow types that have it (empty: all; NEVER: an older one)


NEVER = ("-",)


@dataclass(frozen=True)
class Kind:
    signoff: str                   # the signoff component type
    types: dict[str, str]          # Langflow type -> its default display name (the first is written on export)
    description: str
    fields: tuple[Field, ...]
    outputs: tuple[Out, ...]
    tool: bool = False             # usable as an Agent tool (Langflow's tool mode)
    # what a type-specific rule adds: (template values, fed fields, params) -> problems; may set params
    fix: Callable[[dict[str, Any], set[str], dict[str, Any]], list[str]] | None = None
    dynamic_field: Callable[[str, dict[str, Any]], str | None] | None = None  # field -> signoff input/param
    dynamic_output: Callable[[str], str | None] | None = None                 # output -> signoff output

    @property
    def by_field(self) -> dict[str, Field]:
        return {f.name: f for f in self.fields}

    @property
    def first_type(self) -> str:
        return next(iter(self.types))


# ---- value conversions ---------------------------------------------------------------------


def _str(value: Any) -> str:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    if not isinstance(value, str):
        raise Unsupported(f"expected text, got {json.dumps(value)[:80]}")
    return value


def _int(value: Any) -> int:
    if isinstance(value, bool):
        raise Unsupported(f"expected a whole number, got {value}")
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value.strip())
    if not isinstance(value, int):
        raise Unsupported(f"expected a whole number, got {json.dumps(value)[:80]}")
    return value


def _number(value: Any) -> int | float:
    if isinstance(value, str):
        try:
            value = float(value) if "." in value else int(value)
        except ValueError:
            raise Unsupported(f"expected a number, got {value[:80]!r}") from None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise Unsupported(f"expected a number, got {json.dumps(value)[:80]}")
    return value


def _bool(value: Any) -> bool:
    if not isinstance(value, bool):
        raise Unsupported(f"expected true or false, got {json.dumps(value)[:80]}")
    return value


def _positive_or_unset(convert: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """Langflow writes 0 for "not set" in some number fields: 0 maps to no param."""

    def load(value: Any) -> Any:
        number = convert(value)
        return None if number == 0 else number

    return load


def _rows_to_dict(value: Any) -> dict[str, Any]:
    """A Langflow table of ``{key, value}`` rows (or an object) as an object."""
    if isinstance(value, dict):
        return dict(value)
    if isinstance(value, list):
        out: dict[str, Any] = {}
        for row in value:
            if not isinstance(row, dict) or "key" not in row:
                raise Unsupported("expected a table of {key, value} rows")
            if row.get("key") in (None, ""):
                continue
            out[str(row["key"])] = row.get("value")
        return out
    if isinstance(value, str):
        try:
            parsed = json.loads(value)
        except ValueError:
            raise Unsupported("expected a table of {key, value} rows or a JSON object") from None
        return _rows_to_dict(parsed)
    raise Unsupported("expected a table of {key, value} rows")


def _dict_to_rows(value: Any) -> list[dict[str, Any]]:
    if not isinstance(value, dict):
        raise Inexpressible("not an object")
    if any(isinstance(v, dict) for v in value.values()):
        raise Inexpressible("a value is a secret reference")
    return [{"key": k, "value": v} for k, v in value.items()]


def _headers(value: Any) -> dict[str, str]:
    rows = _rows_to_dict(value)
    return {k: v if isinstance(v, str) else json.dumps(v) for k, v in rows.items()}


def _one_url(value: Any) -> str:
    if isinstance(value, list):
        urls = [u for u in value if u not in (None, "")]
        if len(urls) != 1:
            raise Unsupported(f"{len(urls)} URLs: signoff fetches one URL per node")
        value = urls[0]
    return _str(value).strip()


def _decisions(value: Any) -> list[str]:
    if isinstance(value, str):
        value = [v.strip() for v in value.split(",")]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise Unsupported("expected a list of action labels")
    return value


def _duration(value: Any) -> Any:
    if isinstance(value, dict):
        return {"value": _number(value.get("value", 0)), "unit": _str(value.get("unit", "Days"))}
    return _number(value)


# ---- If-Else operators: Langflow's names <-> signoff's ----------------------------------------

ROUTER_OPERATORS = {
    "equals": "equals", "not equals": "not_equals", "contains": "contains", "starts with": "starts_with",
    "ends with": "ends_with", "regex": "regex_match", "less than": "less_than",
    "less than or equal": "less_than_or_equal", "greater than": "greater_than",
    "greater than or equal": "greater_than_or_equal",
}
ROUTER_BACK = {v: k for k, v in ROUTER_OPERATORS.items()}


def _operator(value: Any) -> str:
    op = _str(value).strip()
    if op in ROUTER_OPERATORS:
        return ROUTER_OPERATORS[op]
    if op in ROUTER_BACK:  # already signoff's spelling (a tweak)
        return op
    raise Unsupported(f"operator '{op}' is not one of {', '.join(ROUTER_OPERATORS)}")


def _router_fix(values: dict[str, Any], fed: set[str], params: dict[str, Any]) -> list[str]:
    # Langflow compares case-sensitively unless told otherwise, and always for regex (it removes
    # the switch): signoff's default is the other way, so the value is always written
    if params.get("operator") == "regex_match" or "case_sensitive" not in values:
        params["case_sensitive"] = True
    return []


# ---- shared fields -----------------------------------------------------------------------------

COSMETIC = tuple(Field(n, cosmetic=True) for n in ("background_color", "chat_icon", "text_color"))
SESSION = (
    Field("session_id", neutral=EMPTY, why="signoff keeps the run's own session (the request's session_id)"),
    Field("context_id", neutral=EMPTY, why="signoff has no context ids"),
)
TOOL_FIELDS = (Field("tools_metadata", cosmetic=True),)  # read by the importer itself (tool mode)


def _api_key(display: str = "API Key") -> Field:
    return Field("api_key", "api_key", display=display, secret=True, input_type="SecretStrInput", load=_str)


# ---- the components ----------------------------------------------------------------------------

CHAT_INPUT = Kind(
    "ChatInput", {"ChatInput": "Chat Input"}, "Get chat inputs from the Playground.",
    (
        # the Playground's last text: a run's input is the request's input_value, as in Langflow's API
        Field("input_value", display="Input Text", input_type="MultilineInput", cosmetic=True),
        Field("should_store_message", display="Store Messages", ftype="bool", input_type="BoolInput", default=True,
              neutral=(True,), why="signoff always stores the message in the session history"),
        Field("sender", display="Sender Type", input_type="DropdownInput", default="User", neutral=("User",),
              options=("Machine", "User"), why="a Chat Input's message is the User's"),
        Field("sender_name", "sender_name", display="Sender Name", default="User", load=_str),
        *SESSION,
        Field("files", display="Files", ftype="file", input_type="FileInput", neutral=EMPTY,
              why="signoff does not take files with a message"),
        *COSMETIC,
    ),
    (Out("message", "message", "Chat Message", method="message_response"),),
)

CHAT_OUTPUT = Kind(
    "ChatOutput", {"ChatOutput": "Chat Output"}, "Display a chat message in the Playground.",
    (
        Field("input_value", "input_value", "input_value", display="Inputs", input_type="HandleInput",
              handle=("Data", "DataFrame", "Message")),
        Field("should_store_message", display="Store Messages", ftype="bool", input_type="BoolInput", default=True,
              neutral=(True,), why="signoff always stores the message in the session history"),
        Field("sender", display="Sender Type", input_type="DropdownInput", default="Machine", neutral=("Machine",),
              options=("Machine", "User"), why="a Chat Output's message is the Machine's"),
        Field("sender_name", "sender_name", display="Sender Name", default="AI", load=_str),
        *SESSION,
        Field("data_template", display="Data Template", default="{text}", neutral=("{text}",) + EMPTY,
              why="signoff shows the text of what it is given"),
        Field("clean_data", ftype="bool", input_type="BoolInput", cosmetic=True),
        *COSMETIC,
    ),
    (Out("message", "message", "Output Message", method="message_response"),),
)

TEXT_INPUT = Kind(
    "TextInput", {"TextInput": "Text Input"}, "Get user text inputs.",
    (Field("input_value", "value", display="Text", input_type="MultilineInput", load=_str),),
    (Out("text", "text", "Output Text", method="text_response"),),
)

TEXT_OUTPUT = Kind(
    "TextOutput", {"TextOutput": "Text Output"}, "Sends text output via API.",
    (Field("input_value", "input_value", "input_value", display="Inputs", handle=("Message",)),),
    (Out("text", "text", "Output Text", method="text_response"),),
)


def _prompt_variables(values: dict[str, Any]) -> list[str]:
    import string

    template = values.get("template")
    if not isinstance(template, str):
        return []
    try:
        return [name for _, name, _, _ in string.Formatter().parse(template) if name]
    except ValueError:
        return []


def _prompt_fix(values: dict[str, Any], fed: set[str], params: dict[str, Any]) -> list[str]:
    # a variable neither wired nor filled in is empty text in Langflow
    for name in _prompt_variables(values):
        if name not in fed and name not in params:
            params[name] = ""
    return []


PROMPT = Kind(
    "Prompt", {"Prompt": "Prompt", "Prompt Template": "Prompt Template"}, "Create a prompt template with dynamic variables.",
    (
        Field("template", "template", display="Template", ftype="prompt", input_type="PromptInput", load=_str),
        Field("template_format", display="Template Format", input_type="DropdownInput", default="f-string",
              neutral=("f-string",) + EMPTY, options=("f-string", "jinja2"),
              why="signoff fills f-string templates ({variable}) only"),
        Field("tool_placeholder", cosmetic=True),
    ),
    (Out("prompt", "prompt", "Prompt", method="build_prompt"),),
    fix=lambda values, fed, params: _prompt_fix(values, fed, params),
    # each {variable} of the template is a field of its own (an edge, or its value)
    dynamic_field=lambda name, values: name if name in _prompt_variables(values) else None,
)

COMBINE_TEXT = Kind(
    "CombineText", {"CombineText": "Combine Text"},
    "Concatenate two text sources into a single text chunk using a specified delimiter.",
    (
        Field("text1", "text1", "text1", display="First Text", handle=("Message",), load=_str),
        Field("text2", "text2", "text2", display="Second Text", handle=("Message",), load=_str),
        Field("delimiter", "delimiter", "delimiter", display="Delimiter", default=" ", handle=("Message",), load=_str),
    ),
    (Out("combined_text", "combined_text", "Combined Text", method="combine_texts"),),
)

_MODEL_COSMETIC = tuple(Field(n, cosmetic=True) for n in
                        ("stream", "base_url_ibm_watsonx", "project_id", "verbose", "handle_parsing_errors",
                         "agent_description", "format_instructions"))
PROVIDERS = ("OpenAI", "Ollama")


def _model_fix(values: dict[str, Any], fed: set[str], params: dict[str, Any]) -> list[str]:
    """The model: Langflow's model picker (``model``: ``[{name, provider}]``) or the older
    ``agent_llm`` / ``provider`` + ``model_name``. OpenAI, or Ollama through its OpenAI-compatible
    URL; any other provider is unsupported."""
    problems: list[str] = []
    picked = values.get("model")
    provider = values.get("provider") or values.get("agent_llm") or "OpenAI"
    if "model" in fed or "agent_llm" in fed:
        return ["a model wired in from another component (a Language Model output) is not supported: set the "
                "model on this node"]
    if isinstance(picked, list) and picked:
        first = picked[0] if isinstance(picked[0], dict) else {}
        if len(picked) > 1:
            problems.append("more than one model selected")
        provider = first.get("provider") or provider
        if first.get("name"):
            params["model"] = str(first["name"])
    elif isinstance(picked, str) and picked:
        params["model"] = picked
    if provider not in PROVIDERS:
        return problems + [f"model provider '{provider}' is not supported (signoff calls OpenAI-compatible "
                           "endpoints: OpenAI, or Ollama)"]
    if provider == "Ollama" and not params.get("base_url"):
        url = values.get("ollama_base_url") or "http://localhost:11434"
        params["base_url"] = str(url).rstrip("/") + "/v1"
    return problems


def _model_fields(*, agent: bool) -> tuple[Field, ...]:
    openai = NEVER if agent else ("OpenAIModel",)
    return (
        Field("model", display="Language Model", ftype="model", input_type="ModelInput", cosmetic=True),  # _model_fix
        Field("provider", input_type="DropdownInput", cosmetic=True),  # _model_fix
        Field("agent_llm", input_type="DropdownInput", cosmetic=True),  # _model_fix
        Field("ollama_base_url", cosmetic=True),  # _model_fix
        Field("model_name", "model", display="Model Name", input_type="DropdownInput", load=_str, types=openai),
        Field("openai_api_base", "base_url", display="OpenAI API Base", input_type="StrInput", advanced=True, load=_str,
              types=openai),
        _api_key(),
        Field("temperature", "temperature", display="Temperature", ftype="slider", input_type="SliderInput",
              default=0.1, load=_number),
        Field("max_retries", "max_retries", display="Max Retries", ftype="int", input_type="IntInput", default=5,
              advanced=True, load=_int, types=openai),
        Field("timeout", "timeout", display="Timeout", ftype="int", input_type="IntInput", default=700, advanced=True,
              load=_positive_or_unset(_number), types=openai),
        Field("model_kwargs", ftype="dict", input_type="DictInput", neutral=EMPTY, types=openai,
              why="signoff sends no extra model arguments"),
        Field("json_mode", ftype="bool", input_type="BoolInput", default=False, neutral=(False, None), types=openai,
              why="signoff does not ask for JSON mode"),
        *(
            (Field("seed", cosmetic=True),
             Field("max_tokens", ftype="int", input_type="IntInput", neutral=(0,) + EMPTY,
                   why="the Agent does not cap its answers' tokens"),
             Field("output_schema", ftype="table", input_type="TableInput", neutral=EMPTY,
                   why="signoff's Agent answers text, not a structured response"))
            if agent else
            (Field("seed", "seed", display="Seed", ftype="int", input_type="IntInput", default=1, advanced=True,
                   load=_int, types=openai),
             Field("max_tokens", "max_tokens", display="Max Tokens", ftype="int", input_type="IntInput", advanced=True,
                   load=_positive_or_unset(_int)))
        ),
        *_MODEL_COSMETIC,
    )


LANGUAGE_MODEL = Kind(
    "LanguageModel", {"LanguageModelComponent": "Language Model", "OpenAIModel": "OpenAI"},
    "Runs a language model given a specified provider.",
    (
        Field("input_value", "input_value", "input_value", display="Input", input_type="MessageInput",
              handle=("Message",), load=_str),
        Field("system_message", "system_message", "system_message", display="System Message",
              input_type="MultilineInput", handle=("Message",), load=_str),
        *_model_fields(agent=False),
    ),
    (
        Out("text_output", "text_output", "Model Response", method="text_response"),
        Out("model_output", None, "Language Model", types=("LanguageModel",), method="build_model",
            why="the model object feeds other components' model inputs, which signoff does not have"),
    ),
    fix=_model_fix,
)

_MEMORY_SENDERS = ("Machine", "User", "Machine and User")


def _memory_fix(values: dict[str, Any], fed: set[str], params: dict[str, Any]) -> list[str]:
    # older exports filter by `sender`; newer ones by `sender_type` (`sender` is then Store mode's)
    if "sender_type" not in values and values.get("sender") not in EMPTY:
        if values["sender"] not in _MEMORY_SENDERS:
            return [f"sender '{values['sender']}' is not one of {', '.join(_MEMORY_SENDERS)}"]
        params["sender_type"] = values["sender"]
    return []


MESSAGE_HISTORY = Kind(
    "MessageHistory", {"Memory": "Message History"},
    "Stores or retrieves stored chat messages from Langflow tables or an external memory.",
    (
        Field("mode", display="Mode", input_type="TabInput", default="Retrieve", neutral=("Retrieve",) + EMPTY,
              options=("Retrieve", "Store"), why="signoff's Message History retrieves (Chat Input and Chat Output "
                                                 "store the messages)"),
        Field("message", neutral=EMPTY, why="Store mode is not supported"),
        Field("memory", input_type="HandleInput", handle=("Memory",), neutral=EMPTY,
              why="signoff reads its own session history, not an external memory"),
        Field("sender_type", "sender_type", display="Sender Type", input_type="DropdownInput",
              default="Machine and User", options=_MEMORY_SENDERS, advanced=True, load=_str),
        Field("sender", cosmetic=True),  # _memory_fix
        Field("sender_name", "sender_name", display="Sender Name", advanced=True, load=_str),
        Field("n_messages", "n_messages", display="Number of Messages", ftype="int", input_type="IntInput", default=100,
              advanced=True, load=_int),
        *SESSION,
        Field("order", "order", display="Order", input_type="DropdownInput", default="Ascending",
              options=("Ascending", "Descending"), advanced=True, load=_str),
        Field("template", "template", display="Template", input_type="MultilineInput", default="{sender_name}: {text}",
              advanced=True, load=_str),
    ),
    (
        Out("messages_text", "messages_text", "Messages", method="retrieve_messages_as_text"),
        Out("messages", "messages_text", "Messages", types=("Data",), method="retrieve_messages", lf=NEVER),
        Out("dataframe", None, "Table", types=("DataFrame",), why="signoff passes the history on as text"),
    ),
    fix=_memory_fix,
)

ROUTER = Kind(
    "ConditionalRouter", {"ConditionalRouter": "If-Else"},
    "Routes an input message to a corresponding output based on text comparison.",
    (
        Field("input_text", "input_text", "input_text", display="Text Input", handle=("Message",), load=_str),
        Field("operator", "operator", display="Operator", input_type="DropdownInput", default="equals",
              options=tuple(ROUTER_OPERATORS), load=_operator, dump=lambda v: ROUTER_BACK.get(v, v)),
        Field("match_text", "match_text", "match_text", display="Match Text", handle=("Message",), load=_str),
        Field("case_sensitive", "case_sensitive", display="Case Sensitive", ftype="bool", input_type="BoolInput",
              default=True, advanced=True, load=_bool),
        Field("true_case_message", "true_case_message", "true_case_message", display="Case True",
              input_type="MessageInput", handle=("Message",), advanced=True, load=_str),
        Field("false_case_message", "false_case_message", "false_case_message", display="Case False",
              input_type="MessageInput", handle=("Message",), advanced=True, load=_str),
        # only used to break a loop, and signoff runs no loops
        Field("max_iterations", ftype="int", input_type="IntInput", cosmetic=True),
        Field("default_route", input_type="DropdownInput", cosmetic=True),
    ),
    (
        Out("true_result", "true_result", "True", method="true_response"),
        Out("false_result", "false_result", "False", method="false_response"),
    ),
    fix=_router_fix,
)

CALCULATOR = Kind(
    "Calculator", {"CalculatorComponent": "Calculator"},
    "Perform basic arithmetic operations on a given expression.",
    (Field("expression", "expression", "expression", display="Expression", handle=("Message",), load=_str),
     *TOOL_FIELDS),
    (Out("result", "result", "Data", types=("Data",), method="evaluate_expression"),),
    tool=True,
)

api, url = ("APIRequest",), ("URLComponent",)
_HTTP_COMMON = (
    Field("headers", "headers", display="Headers", ftype="table", input_type="TableInput", advanced=True,
          load=_headers, dump=_dict_to_rows),
    Field("timeout", "timeout", display="Timeout", ftype="int", input_type="IntInput", default=30, advanced=True,
          load=_positive_or_unset(_number)),
    *TOOL_FIELDS,
)

API_REQUEST = Kind(
    "HTTPRequest", {"APIRequest": "API Request", "URLComponent": "URL"},
    "Make HTTP requests using URL or cURL commands.",
    (
        Field("url_input", "url", "url", display="URL", handle=("Message",), load=_one_url, types=api),
        Field("urls", "url", "url", display="URLs", handle=("Message",), load=_one_url, dump=lambda v: [v],
              types=url),
        Field("method", "method", display="Method", input_type="DropdownInput", default="GET",
              options=("GET", "POST", "PATCH", "PUT", "DELETE"), load=lambda v: _str(v).upper(), types=api),
        Field("body", "body", "body", display="Body", ftype="table", input_type="TableInput", handle=("Data", "JSON"),
              advanced=True, load=_rows_to_dict, dump=_dict_to_rows, types=api),
        *_HTTP_COMMON,
        Field("mode", input_type="TabInput", default="URL", neutral=("URL",) + EMPTY, types=api,
              why="paste the request's URL, method, headers and body instead of a cURL command"),
        Field("curl_input", neutral=EMPTY, why="cURL mode is not supported", types=api),
        Field("curl", neutral=EMPTY, why="cURL mode is not supported", types=NEVER),
        Field("use_curl", neutral=(False,) + EMPTY, why="cURL mode is not supported", types=NEVER),
        Field("query_params", neutral=EMPTY, why="write the query into the URL", types=api),
        Field("follow_redirects", ftype="bool", input_type="BoolInput", default=False, neutral=(False,) + EMPTY,
              types=api, why="signoff does not follow redirects (each hop would need its own egress check)"),
        Field("save_to_file", ftype="bool", input_type="BoolInput", default=False, neutral=(False,) + EMPTY,
              types=api, why="signoff passes the response on, it writes no files"),
        Field("include_httpx_metadata", ftype="bool", input_type="BoolInput", default=False, neutral=(False,) + EMPTY,
              types=api, why="signoff passes the response body on"),
        # the URL component (a GET of one page)
        Field("format", input_type="DropdownInput", default="HTML", neutral=("HTML", "Raw HTML") + EMPTY, types=url,
              why="signoff returns the page as fetched (Output Format HTML); it does not strip it to text"),
        Field("max_depth", ftype="int", input_type="SliderInput", default=1, neutral=(1, "1") + EMPTY, types=url,
              why="signoff fetches one page, it does not crawl"),
        *(Field(n, cosmetic=True) for n in ("prevent_outside", "use_async", "continue_on_failure",
                                             "check_response_status", "autoset_encoding", "filter_text_html")),
    ),
    (
        Out("data", "response", "API Response", types=("Data",), method="make_api_request", lf=api),
        Out("raw_results", "response", "Raw Content", method="fetch_content_as_message", lf=url),
        Out("text", "response", "Message", method="fetch_content_text", lf=NEVER),
        Out("page_results", None, "Extracted Pages", types=("DataFrame",), why="signoff passes the page on as text"),
        Out("dataframe", None, "DataFrame", types=("DataFrame",), why="signoff passes the response on as text"),
    ),
    tool=True,
)


def _agent_fix(values: dict[str, Any], fed: set[str], params: dict[str, Any]) -> list[str]:
    return _model_fix(values, fed, params)


AGENT = Kind(
    "Agent", {"Agent": "Agent"}, "Define the agent's instructions, then enter a task to complete using tools.",
    (
        Field("input_value", "input_value", "input_value", display="Input", handle=("Message",), load=_str),
        Field("system_prompt", "system_prompt", "system_prompt", display="Agent Instructions",
              input_type="MultilineInput", handle=("Message",), load=_str),
        Field("tools", input="tools", display="Tools", ftype="other", input_type="HandleInput", handle=("Tool",)),
        Field("max_iterations", "max_iterations", display="Max Iterations", ftype="int", input_type="IntInput",
              default=15, advanced=True, load=_int),
        Field("n_messages", "n_messages", display="Number of Chat History Messages", ftype="int", input_type="IntInput",
              default=100, advanced=True, load=_int),
        Field("add_current_date_tool", "add_current_date_tool", display="Current Date", ftype="bool",
              input_type="BoolInput", default=True, advanced=True, load=_bool),
        Field("add_calculator_tool", "add_calculator_tool", display="Calculator", ftype="bool",
              input_type="BoolInput", default=False, advanced=True, load=_bool),
        *_model_fields(agent=True),
        Field("memory", input_type="HandleInput", handle=("Memory",), neutral=EMPTY,
              why="the Agent reads the session's history itself (Number of Chat History Messages)"),
        # the history inputs older Agents carried: only their defaults match what the Agent does
        Field("sender", neutral=("Machine and User",) + EMPTY, why="the Agent reads both senders' messages"),
        Field("sender_type", neutral=("Machine and User",) + EMPTY, why="the Agent reads both senders' messages"),
        Field("sender_name", neutral=EMPTY, why="the Agent reads every sender's messages"),
        Field("order", neutral=("Ascending",) + EMPTY, why="the Agent reads the history oldest first"),
        Field("template", cosmetic=True),
        *SESSION,
    ),
    (
        Out("response", "response", "Response", method="message_response"),
        Out("structured_response", None, "Structured Response", types=("Data",),
            why="signoff's Agent answers text, not a structured response"),
    ),
    fix=_agent_fix,
)

RUN_FLOW_SEP = "~"  # Langflow's Run Flow names the child's inputs and outputs "{vertex}~{name}"


def _run_flow_field(name: str, values: dict[str, Any]) -> str | None:
    if name.rsplit(RUN_FLOW_SEP, 1)[-1] == "input_value":
        return "input_value"
    return None


def _run_flow_fix(values: dict[str, Any], fed: set[str], params: dict[str, Any]) -> list[str]:
    if not params.get("flow_name") and values.get("flow_id_selected") not in EMPTY:
        params["flow_id"] = _str(values["flow_id_selected"])
    inputs = [n for n in values if _run_flow_field(n, values) and (n in fed or values[n] not in EMPTY)]
    if len(inputs) > 1:
        return [f"the child flow's inputs {', '.join(sorted(inputs))} are all set: signoff passes one input "
                "(the child's input_value)"]
    others = sorted(n for n in values if RUN_FLOW_SEP in n and not _run_flow_field(n, values)
                    and (n in fed or values[n] not in EMPTY))
    if others:
        return [f"the child flow's fields {', '.join(others)} are set: signoff passes the child's input_value only"]
    return []


RUN_FLOW = Kind(
    "RunFlow", {"RunFlow": "Run Flow"}, "Executes another flow from within the same project.",
    (
        Field("flow_name_selected", "flow_name", display="Flow Name", input_type="DropdownInput", load=_str),
        Field("flow_id_selected", cosmetic=True),  # _run_flow_fix
        Field("session_id", neutral=EMPTY, why="the child runs in the run's own session"),
        Field("cache_flow", ftype="bool", input_type="BoolInput", cosmetic=True),
        Field("flow_tweak_data", cosmetic=True),
        *TOOL_FIELDS,
    ),
    (),
    tool=True,
    fix=_run_flow_fix,
    dynamic_field=_run_flow_field,
    dynamic_output=lambda name: "output" if RUN_FLOW_SEP in name or name == "output" else None,
)

HUMAN_INPUT = Kind(
    "HumanInput", {"HumanInput": "Human Input"},
    "Pause the flow to collect a human decision and route on the chosen action.",
    (
        Field("prompt", "prompt", "prompt", display="Form Content", input_type="MultilineInput", handle=("Message",),
              load=_str),
        Field("decisions", "decisions", display="User Actions", ftype="action_picker", input_type="ActionPickerInput",
              default=["Approve", "Reject"], load=_decisions),
        Field("timeout", "timeout", display="Timeout", ftype="duration", input_type="DurationInput",
              default={"value": 3, "unit": "Days"}, load=_duration),
        Field("enable_fallback", "enable_fallback", display="Enable Fallback", ftype="bool", input_type="BoolInput",
              default=False, advanced=True, load=_bool),
    ),
    (),
    dynamic_output=lambda name: name if name.startswith("branch_") else None,
)

CURRENT_DATE = Kind(
    "CurrentDate", {"CurrentDate": "Current Date"}, "Returns the current date and time in the selected timezone.",
    (Field("timezone", "timezone", "timezone", display="Timezone", input_type="DropdownInput", default="UTC",
           load=_str), *TOOL_FIELDS),
    (Out("current_date", "current_date", "Current Date", method="get_current_date"),),
    tool=True,
)

KINDS: tuple[Kind, ...] = (CHAT_INPUT, CHAT_OUTPUT, TEXT_INPUT, TEXT_OUTPUT, PROMPT, COMBINE_TEXT, LANGUAGE_MODEL,
                           MESSAGE_HISTORY, ROUTER, CALCULATOR, API_REQUEST, AGENT, RUN_FLOW, HUMAN_INPUT, CURRENT_DATE)
BY_LANGFLOW_TYPE: dict[str, Kind] = {t: k for k in KINDS for t in k.types}
BY_SIGNOFF_TYPE: dict[str, Kind] = {k.signoff: k for k in KINDS}
SUPPORTED: list[dict[str, str]] = [{"type": t, "display_name": d} for k in KINDS for t, d in k.types.items()]


def tweak_names(signoff_type: str, params: dict[str, Any]) -> dict[str, Any]:
    """``params`` of a tweak (or any params) with Langflow's field names turned into signoff's
    param names for a node of ``signoff_type`` (``{"model_name": ...}`` -> ``{"model": ...}``);
    names that are signoff's already are kept."""
    kind = BY_SIGNOFF_TYPE.get(signoff_type)
    if kind is None or not isinstance(params, dict):
        return params
    own = {f.param for f in kind.fields if f.param}
    out: dict[str, Any] = {}
    for name, value in params.items():
        f = kind.by_field.get(name)
        if f is not None and f.param and f.param != name and name not in own:
            try:
                out[f.param] = f.load(value) if f.load and value is not None else value
            except Unsupported:
                out[f.param] = value  # validation names what is wrong with it
        else:
            out[name] = value
    return out


__all__ = ["BY_LANGFLOW_TYPE", "BY_SIGNOFF_TYPE", "EMPTY", "KINDS", "SUPPORTED", "TOOL_OUTPUT", "Field", "Inexpressible",
           "Kind", "Out", "Unsupported", "tweak_names"]
