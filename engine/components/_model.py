"""What the components that call a chat model share (the Agent, the Language Model): the model
params' checks and the one way to build a :class:`~signoff.engine.llm.ChatClient`, with the
operator-key rule (docs/agent.md). Not a component module (the registry skips ``_`` names)."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from signoff.engine.components.base import BuildContext, ParamDef
from signoff.engine.errors import ComponentError
from signoff.engine.llm import DEFAULT_BASE_URL, MAX_BACKOFF, ChatClient

DEFAULT_MODEL = "gpt-4o-mini"
# A flow is untrusted input: a model component's retries are bounded.
LIMITS = {"max_retries": (0, 10)}


# The params of every model component: where the model is, its key, how long to wait and retry.
ENDPOINT_PARAMS = [
    ParamDef("model", "str", description="Model name (default: settings openai_model)."),
    ParamDef("base_url", "str", description="OpenAI-compatible base URL, e.g. http://localhost:11434/v1."),
    ParamDef("api_key", "str", secret=True,
             description='API key, or a secret: {"$secret": "NAME"} (default: the operator\'s key, for the '
                         "operator's model URL only)."),
    ParamDef("temperature", "number", description="Sampling temperature (left to the server when unset)."),
]
RETRY_PARAMS = [
    ParamDef("timeout", "number", default=60, description="Seconds to wait for one model answer."),
    ParamDef("max_retries", "int", default=3, description="Retries of a model call on timeouts, 429 and 5xx."),
    ParamDef("retry_backoff", "number", default=0.5, description="First retry delay in seconds (doubles)."),
]


def same_endpoint(a: str, b: str) -> bool:
    return a.rstrip("/").lower() == b.rstrip("/").lower()


def host_port(url: str) -> str:
    """``host:port`` of a URL, as SIGNOFF_EGRESS_ALLOW writes it (IPv6 in brackets)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def check_model_params(params: dict[str, Any], limits: dict[str, tuple[int, int]] | None = None) -> list[str]:
    """The rules of the model params every model component has: bounded ints, positive
    timeout, a backoff of at most :data:`MAX_BACKOFF`, an http(s) ``base_url``."""
    problems: list[str] = []
    for name, (low, high) in {**LIMITS, **(limits or {})}.items():
        v = params.get(name)
        if isinstance(v, int) and not isinstance(v, bool) and not low <= v <= high:
            problems.append(f"param '{name}' must be between {low} and {high}")
    for name in ("timeout", "retry_backoff"):
        v = params.get(name)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and (v < 0 or (name == "timeout" and v == 0)):
            problems.append(f"param '{name}' must be > 0" if name == "timeout" else f"param '{name}' must be >= 0")
        elif name == "retry_backoff" and isinstance(v, (int, float)) and v > MAX_BACKOFF:
            problems.append(f"param 'retry_backoff' must be at most {MAX_BACKOFF:g} seconds")
    url = params.get("base_url")
    if isinstance(url, str) and url and not url.startswith(("http://", "https://")):
        problems.append("param 'base_url' must start with http:// or https://")
    return problems


async def chat_client(ctx: BuildContext, params: dict[str, Any], *, who: str,
                      extra_body: dict[str, Any] | None = None) -> ChatClient:
    """The model endpoint and its key. The operator's key (SIGNOFF_OPENAI_API_KEY) goes only to
    the operator's model URL (SIGNOFF_OPENAI_BASE_URL, else OpenAI's): a node with a base_url of
    its own uses its own api_key or none. The operator's URL is let through the egress policy for
    this call only; a node's own URL obeys SIGNOFF_EGRESS_ALLOW."""
    settings = ctx.run.settings
    operator_url = (settings.openai_base_url if settings else None) or DEFAULT_BASE_URL
    base_url = params.get("base_url") or (settings.openai_base_url if settings else None)
    operators = same_endpoint(base_url or DEFAULT_BASE_URL, operator_url)
    api_key = await ctx.run.reveal(params.get("api_key"), vertex_id=ctx.vertex_id)
    if not api_key and operators and settings is not None:
        api_key = settings.openai_api_key
    allow = [host_port(operator_url)] if operators and settings is not None and settings.openai_base_url else []
    if not base_url and not api_key:
        raise ComponentError(
            f"{who}: no model endpoint: set the node's base_url (any OpenAI-compatible server, "
            "e.g. http://localhost:11434/v1) or an API key for OpenAI (param api_key, or SIGNOFF_OPENAI_BASE_URL / "
            "SIGNOFF_OPENAI_API_KEY, or OPENAI_BASE_URL / OPENAI_API_KEY for the process)",
            vertex_id=ctx.vertex_id,
        )
    extra: dict[str, Any] = dict(extra_body or {})
    if params.get("temperature") is not None:
        extra["temperature"] = params["temperature"]
    return ChatClient(
        model=params.get("model") or (settings.openai_model if settings else None) or DEFAULT_MODEL,
        base_url=base_url,
        api_key=api_key,
        timeout=ctx.run.capped_timeout(float(params.get("timeout") or 60)),
        max_retries=int(params.get("max_retries") if params.get("max_retries") is not None else 3),
        backoff=float(params.get("retry_backoff") if params.get("retry_backoff") is not None else 0.5),
        http_client_factory=lambda: ctx.run.http_client(allow=allow),
        extra_body=extra,
        who=who,
        on_usage=ctx.run.budget.spend_tokens,  # the run's budget of tokens (SIGNOFF_RUN_MAX_TOKENS)
    )
