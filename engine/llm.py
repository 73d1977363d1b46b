"""A small client for OpenAI-compatible chat completions (OpenAI, vLLM, Ollama, LM Studio, ...).

``POST {base_url}/chat/completions`` with ``model``, ``messages`` and ``tools``; the answer's
first choice is returned as an assistant message whose tool calls are parsed. The base URL,
model and key come from the caller (an Agent's params, else the Settings the caller passed in):
this module never reads the environment.

Errors:

- retried with exponential backoff (``Retry-After`` honoured, capped): timeouts and transport
  errors, 408, 409, 429 and 5xx, and an answer that is not a chat completion (no JSON, no
  choices). A chat completion has no side effect, so sending it again is safe.
- not retried: any other 4xx (bad key, unknown model, bad request): the error says what the
  endpoint answered.

Either way, a failure is a :class:`ModelError` (a ``ComponentError``) whose message names the
endpoint, the status and the endpoint's own error message, never the API key.
"""

from __future__ import annotations

import asyncio
import json
import random
from dataclasses import dataclass, field
from typing import Any, Callable

import httpx

from signoff.engine.egress import EgressError
from signoff.engine.errors import ComponentError
from signoff.engine.secrets import clipped, credentials, scrubbed, without_userinfo

DEFAULT_BASE_URL = "https://api.openai.com/v1"
RETRY_STATUSES = frozenset({408, 409, 429, 500, 502, 503, 504}) | frozenset(range(520, 530))
MAX_BACKOFF = 30.0


class ModelError(ComponentError):
    """The model endpoint failed."""

    code = "MODEL_ERROR"


@dataclass
class ToolCall:
    """One tool call of an assistant message. ``arguments`` is the parsed object, or None when
    the model sent something that is not a JSON object (``error`` says what)."""

    id: str
    name: str
    raw_arguments: str
    arguments: dict[str, Any] | None
    error: str | None = None


@dataclass
class ChatResult:
    message: dict[str, Any]  # the assistant message as it goes back into the conversation
    content: str
    tool_calls: list[ToolCall] = field(default_factory=list)
    finish_reason: str | None = None
    usage: dict[str, Any] | None = None
    attempts: int = 1


def parse_tool_calls(message: dict[str, Any]) -> list[ToolCall]:
    """The tool calls of an assistant message, each with its arguments parsed (or an error)."""
    calls: list[ToolCall] = []
    raw_calls = message.get("tool_calls") or []
    if not isinstance(raw_calls, list):
        raw_calls = []
    for i, raw in enumerate(raw_calls):
        if not isinstance(raw, dict):
            calls.append(ToolCall(id=f"call_{i}", name="", raw_arguments="", arguments=None, error="the tool call is not an object"))
            continue
        fn = raw.get("function") if isinstance(raw.get("function"), dict) else {}
        name = fn.get("name") if isinstance(fn.get("name"), str) else ""
        call_id = raw.get("id") if isinstance(raw.get("id"), str) and raw.get("id") else f"call_{i}"
        args_raw = fn.get("arguments")
        error = None
        args: dict[str, Any] | None
        if isinstance(args_raw, dict):  # some servers send an object instead of a JSON string
            args, args_raw = args_raw, json.dumps(args_raw)
        elif args_raw is None or (isinstance(args_raw, str) and not args_raw.strip()):
            args, args_raw = {}, ""
        elif isinstance(args_raw, str):
            try:
                parsed = json.loads(args_raw)
            except ValueError as e:
                args, error = None, f"the arguments are not valid JSON ({e.msg} at column {e.colno})"
            else:
                if isinstance(parsed, dict):
                    args = parsed
                else:
                    args, error = None, "the arguments must be a JSON object"
        else:
            args, error, args_raw = None, "the arguments must be a JSON object", json.dumps(args_raw, default=str)
        if not name and error is None:
            error = "the tool call has no function name"
        calls.append(ToolCall(id=call_id, name=name, raw_arguments=args_raw, arguments=args, error=error))
    return calls


def _endpoint_error(resp: httpx.Response, hide: list[str]) -> str:
    """The endpoint's own error message (OpenAI shape ``{"error": {"message"}}``) or the body,
    with ``hide`` (the API key) masked before it is cut short (a cut must not leave half a key)."""
    try:
        body = resp.json()
    except ValueError:
        return clipped(resp.text, hide, 300).strip()
    said: Any = body
    if isinstance(body, dict):
        err = body.get("error")
        if isinstance(err, dict) and isinstance(err.get("message"), str):
            said = err["message"]
        elif isinstance(err, str):
            said = err
        elif isinstance(body.get("detail"), str):
            said = body["detail"]
    return clipped(said if isinstance(said, str) else json.dumps(said), hide, 300)


def _retry_after(resp: httpx.Response) -> float | None:
    value = resp.headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None


class ChatClient:
    """``await ChatClient(...).chat(messages, tools)`` → :class:`ChatResult`."""

    def __init__(
        self,
        *,
        model: str,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout: float = 60.0,
        max_retries: int = 3,
        backoff: float = 0.5,
        http_client_factory: Callable[[], httpx.AsyncClient],
        extra_body: dict[str, Any] | None = None,
        who: str = "Agent",
        on_usage: Callable[[dict[str, Any] | None], None] | None = None,
    ) -> None:
        self.model = model
        self.base_url = (base_url or DEFAULT_BASE_URL).rstrip("/")
        self.api_key = api_key
        self.timeout = timeout
        self.max_retries = max(0, max_retries)
        self.backoff = max(0.0, backoff)
        self.http_client_factory = http_client_factory  # the run's client: egress policy, size cap
        self.extra_body = extra_body or {}
        self.who = who
        self.on_usage = on_usage  # told each answer's ``usage`` (a run's budget of tokens); it may raise

    @property
    def _hide(self) -> list[str]:
        """The key and the base URL's userinfo: masked in every error and answer, before any cut."""
        return credentials(values=[self.api_key], urls=[self.base_url])

    @property
    def url(self) -> str:
        return f"{self.base_url}/chat/completions"

    @property
    def shown_url(self) -> str:
        """The endpoint as errors and spans show it: its userinfo masked."""
        return without_userinfo(self.url)

    def _delay(self, attempt: int, resp: httpx.Response | None = None) -> float:
        hinted = _retry_after(resp) if resp is not None else None
        if hinted is not None:
            return min(hinted, MAX_BACKOFF)
        return min(self.backoff * (2**attempt) * (1 + random.random() / 4), MAX_BACKOFF)

    def _fail(self, message: str, **details: Any) -> ModelError:
        # an endpoint that echoes the request (its Authorization header) must not put the key
        # into the run's error, events and logs
        return ModelError(scrubbed(f"{self.who}: the model endpoint {self.shown_url} {message}", self._hide),
                          model=self.model, **details)

    async def chat(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None) -> ChatResult:
        body: dict[str, Any] = {"model": self.model, "messages": messages, **self.extra_body}
        if tools:
            body["tools"] = tools
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        attempts = self.max_retries + 1
        last = ""
        async with self.http_client_factory() as client:
            for attempt in range(attempts):
                resp: httpx.Response | None = None
                try:
                    resp = await client.post(self.url, json=body, headers=headers, timeout=self.timeout)
                except EgressError as e:  # refused, or an answer over the size cap: retrying cannot help
                    raise self._fail(f"cannot be used: {e}") from None
                except httpx.TimeoutException:
                    last = f"did not answer within {self.timeout:g} s"
                except httpx.HTTPError as e:
                    last = f"could not be reached ({e.__class__.__name__}: {e})"
                else:
                    if resp.status_code in RETRY_STATUSES:
                        last = f"answered {resp.status_code}: {_endpoint_error(resp, self._hide)}"
                    elif resp.status_code >= 400:
                        hint = " (check the API key)" if resp.status_code in (401, 403) else ""
                        hint = hint or (" (check base_url and model)" if resp.status_code == 404 else "")
                        raise self._fail(
                            f"answered {resp.status_code}: {_endpoint_error(resp, self._hide)}{hint}", status_code=resp.status_code
                        )
                    else:
                        result = self._parse(resp)
                        if isinstance(result, ChatResult):
                            result.attempts = attempt + 1
                            if self.on_usage is not None:
                                self.on_usage(result.usage)
                            return result
                        last = result  # a malformed answer: ask again
                if attempt + 1 < attempts:
                    await asyncio.sleep(self._delay(attempt, resp))
        raise self._fail(f"{last}; gave up after {attempts} attempt{'s' if attempts != 1 else ''}", attempts=attempts)

    def _parse(self, resp: httpx.Response) -> ChatResult | str:
        """A ChatResult, or the reason the answer is not a chat completion."""
        try:
            data = resp.json()
        except ValueError:
            return f"answered {resp.status_code} with a body that is not JSON: {clipped(resp.text, self._hide, 200)!r}"
        choices = data.get("choices") if isinstance(data, dict) else None
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            return f"answered {resp.status_code} without choices: {clipped(json.dumps(data), self._hide, 200)}"
        msg = choices[0].get("message")
        if not isinstance(msg, dict):
            return f"answered {resp.status_code} with a choice that has no message"
        content = msg.get("content")
        if isinstance(content, list):  # content parts
            content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
        # an endpoint that echoes the request must not put the key into the run's outputs
        content = scrubbed(content, self._hide) if isinstance(content, str) else ""
        calls = parse_tool_calls(msg)
        message: dict[str, Any] = {"role": "assistant", "content": content or None}
        if calls:
            message["tool_calls"] = [
                {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.raw_arguments}} for c in calls
            ]
        elif not content:
            message["content"] = ""
        usage = data.get("usage") if isinstance(data.get("usage"), dict) else None
        return ChatResult(
            message=message, content=content, tool_calls=calls, finish_reason=choices[0].get("finish_reason"), usage=usage
        )


__all__ = ["ChatClient", "ChatResult", "ModelError", "ToolCall", "DEFAULT_BASE_URL", "parse_tool_calls"]
