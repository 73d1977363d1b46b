"""HTTP Request: a real side effect, sent with an ``Idempotency-Key`` derived from run id and
vertex id, so a retried build is recognisable by the server.

It dials through the run's one HTTP client: the egress policy (SIGNOFF_EGRESS_ALLOW) is checked
on the resolved address of every connection, the body read is capped
(SIGNOFF_HTTP_MAX_RESPONSE_BYTES) and so is the timeout (SIGNOFF_HTTP_MAX_TIMEOUT_SECONDS). A
refusal or an oversize answer fails the node at once (retrying cannot help). Header values may
be secret references (``{"$secret": "NAME"}``), revealed only for the request, and only to the
origin of the node's own ``url`` param: a URL that comes from an input (a share holder's, a model's, an upstream output) never carries them elsewhere."""

from __future__ import annotations

import hashlib
from typing import Any
from urllib.parse import urlsplit

import httpx

from signoff.engine.components import register
from signoff.engine.components.base import BuildContext, Component, InputDef, OutputDef, ParamDef, as_text
from signoff.engine.egress import EgressError
from signoff.engine.errors import ComponentError
from signoff.engine.secrets import clipped, credentials, scrubbed, secret_names, without_userinfo

METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS")


def origin(url: Any) -> tuple[str, str, int] | None:
    """Scheme, host and port of an http(s) URL; None for anything else."""
    if not isinstance(url, str):
        return None
    try:
        parts = urlsplit(url.strip())
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        return None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return None
    return parts.scheme, parts.hostname.lower(), port


def idempotency_key(run_id: str, vertex_id: str) -> str:
    return hashlib.sha256(f"{run_id}:{vertex_id}".encode()).hexdigest()[:32]


@register
class HTTPRequest(Component):
    type_name = "HTTPRequest"
    display_name = "HTTP Request"
    description = "Sends an HTTP request and outputs the response body as text."
    tool_capable = True
    inputs = [InputDef("url", required=True), InputDef("body")]
    outputs = [OutputDef("response")]
    params = [
        ParamDef("method", "str", default="GET"),
        ParamDef("headers", "dict", default={}, secret=True,
                 description='Request headers; a value may be a secret: {"$secret": "NAME"}.'),
        ParamDef("timeout", "number", default=30),
    ]

    @classmethod
    def check_params(cls, params: dict[str, Any]) -> list[str]:
        problems = super().check_params(params)
        m = params.get("method")
        if isinstance(m, str) and m.upper() not in METHODS:
            problems.append(f"param 'method': '{m}' is not one of {', '.join(METHODS)}")
        url = params.get("url")
        if isinstance(url, str) and not url.startswith(("http://", "https://")):
            problems.append("param 'url' must start with http:// or https://")
        t = params.get("timeout")
        if isinstance(t, (int, float)) and not isinstance(t, bool) and t <= 0:
            problems.append("param 'timeout' must be > 0")
        return problems

    async def build(self, ctx: BuildContext) -> dict[str, Any]:
        url = as_text(self.value(ctx, "url", "")).strip()
        if not url.startswith(("http://", "https://")):
            raise ComponentError(f"HTTPRequest: '{url}' is not an http(s) URL", vertex_id=ctx.vertex_id)
        method = str(self.params.get("method") or "GET").upper()
        declared = self.params.get("headers") or {}
        fixed = origin(self.params.get("url"))
        if secret_names(declared) and ctx.inputs.get("url") is not None and (fixed is None or origin(url) != fixed):
            # a confused deputy: an input (a share holder's, a model's after a prompt injection, an
            # upstream node's output) must not choose where the owner's credential goes
            raise ComponentError(
                f"HTTPRequest '{ctx.vertex_id}' would send a secret of the flow's owner to a URL "
                + ("a model chose" if ctx.model_chosen else "its input decides")
                + "; a secret goes only to the origin (scheme, host, port) of the node's url param",
                vertex_id=ctx.vertex_id,
            )
        revealed = await ctx.run.reveal(declared, vertex_id=ctx.vertex_id)
        headers = {str(k): str(v) for k, v in revealed.items()}
        # every literal credential of this request (a revealed secret, a literal header, the URL's
        # userinfo) is masked in whatever comes back, before anything is cut
        hide = credentials(headers=headers, urls=[url, self.params.get("url")])
        shown = without_userinfo(url)
        headers.setdefault("Idempotency-Key", idempotency_key(ctx.run_id, ctx.vertex_id))
        body = self.value(ctx, "body")
        kwargs: dict[str, Any] = {}
        if body is not None and method not in ("GET", "HEAD"):
            if isinstance(body, dict) and "text" in body and "sender" in body:  # a chat message: its text
                kwargs["content"] = as_text(body).encode()
            elif isinstance(body, (dict, list)):
                kwargs["json"] = body
            else:
                kwargs["content"] = as_text(body).encode()
        timeout = ctx.run.capped_timeout(float(self.params.get("timeout") or 30))

        def fail(message: str, **details: Any) -> ComponentError:
            return ComponentError(scrubbed(message, hide), vertex_id=ctx.vertex_id, **details)

        try:
            async with ctx.run.http_client(timeout=timeout) as client:
                resp = await client.request(method, url, headers=headers, timeout=timeout, **kwargs)
        except EgressError as e:  # refused by the egress policy, or an answer over the size cap
            raise fail(f"HTTPRequest: {method} {shown}: {e}") from None
        except httpx.InvalidURL as e:
            raise fail(f"HTTPRequest: '{shown}' is not a URL signoff can call: {e}") from None
        except httpx.HTTPError as e:
            raise fail(f"HTTPRequest: {method} {shown} failed: {e.__class__.__name__}: {e}", retryable=True) from None
        if resp.status_code >= 400:
            raise fail(
                f"HTTPRequest: {method} {shown} answered {resp.status_code}: {clipped(resp.text, hide, 500)}",
                retryable=resp.status_code >= 500 or resp.status_code == 429,
                status_code=resp.status_code,
            )
        # a server that echoes a request's headers must not put a credential into the run's outputs
        return {"response": scrubbed(resp.text, hide)}
