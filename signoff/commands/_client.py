"""What the client commands share: settings, an HTTP client with the API key, error output.
(No ``register``: the CLI assembler skips this module.)"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Iterator
from urllib.parse import quote

import httpx

from signoff.engine.plaintext import one_line
from signoff.engine.settings import Settings
from signoff.home import running_dev


class CommandError(Exception):
    """Printed to stderr; the command exits 1."""


def add_client_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--api-url", help="API base URL (SIGNOFF_API_URL; default: the `signoff dev` running on "
                                          "SIGNOFF_HOME, else http://127.0.0.1:8000)")
    parser.add_argument("--api-key", help="API key (SIGNOFF_API_KEY; default: that `signoff dev`'s key)")
    parser.add_argument("--json", action="store_true", help="print the raw JSON response")


def settings_from(args: argparse.Namespace) -> Settings:
    """The settings, with --api-url and --api-key over the environment. When neither names the API
    nor a key, the ``signoff dev`` running on SIGNOFF_HOME (./.signoff), if one is, gives both: its
    API's URL on this machine and the dev user's key, so that commands run in its folder need no
    exports. Never one without the other: a key you gave goes only where you (or the default)
    say, not to a URL a folder's files name."""
    overrides = {}
    if getattr(args, "api_url", None):
        overrides["api_url"] = args.api_url
    if getattr(args, "api_key", None):
        overrides["api_key"] = args.api_key
    settings = Settings(**overrides)
    if settings.api_url or settings.api_key:
        return settings
    dev = running_dev(settings.home)
    if dev is None or httpx.URL(dev["api_url"]).host not in ("127.0.0.1", "localhost", "::1"):
        return settings
    try:
        key = (settings.home / "dev_api_key").read_text().strip()
    except OSError:
        return settings
    return Settings(api_url=dev["api_url"], api_key=key or None)


def client(args: argparse.Namespace, timeout: float | None = 30.0) -> httpx.Client:
    settings = settings_from(args)
    if not settings.api_key:
        raise CommandError("No API key: pass --api-key or set SIGNOFF_API_KEY (see `signoff users create`), or run "
                           "this in the folder where `signoff dev` runs")
    return httpx.Client(base_url=settings.effective_api_url, headers={"x-api-key": settings.api_key}, timeout=timeout)


def check(response: httpx.Response) -> Any:
    if response.status_code >= 400:
        try:
            detail = response.json().get("detail", {})
            msg = f"{detail.get('code', response.status_code)}: {detail.get('message', response.text)}"
        except ValueError:
            msg = f"HTTP {response.status_code}: {response.text[:500]}"
        raise CommandError(msg)
    if response.status_code == 204 or not response.content:
        return None
    return response.json()


def seg(value: str) -> str:
    """``value`` as one path segment of an API URL: a job id, flow, user or secret name given on
    the command line is quoted whole (``/`` included), so ``../../v1/flows/X`` names nothing but
    itself instead of another route."""
    return quote(str(value), safe="")


def request(args: argparse.Namespace, method: str, path: str, **kwargs: Any) -> Any:
    try:
        with client(args) as c:
            return check(c.request(method, path, **kwargs))
    except httpx.TransportError as e:
        raise CommandError(f"Cannot reach the API at {settings_from(args).effective_api_url}: {e}") from None


def sse_events(args: argparse.Namespace, method: str, path: str, **kwargs: Any) -> Iterator[dict[str, Any]]:
    """Yield the decoded `data` of each SSE frame."""
    try:
        with client(args, timeout=None) as c, c.stream(method, path, **kwargs) as r:
            if r.status_code >= 400:
                r.read()
                check(r)
            for line in r.iter_lines():
                if line.startswith("data:"):
                    yield json.loads(line[5:].strip())
    except httpx.TransportError as e:
        raise CommandError(f"Cannot reach the API at {settings_from(args).effective_api_url}: {e}") from None


def emit(args: argparse.Namespace, data: Any, text: str | None = None) -> None:
    if getattr(args, "json", False) or text is None:
        print(json.dumps(data, indent=2, default=str))
    else:
        print(text)


def run_handler(fn):
    """Wrap a handler so a CommandError prints a message instead of a traceback."""

    def handler(args: argparse.Namespace) -> int:
        try:
            return int(fn(args) or 0)
        except CommandError as e:
            print(f"error: {e}", file=sys.stderr)
            return 1

    return handler


def describe_event(ev: dict[str, Any]) -> str:
    name, data = ev.get("event"), ev.get("data") or {}
    if name == "human_input_required":
        opts = ", ".join(o.get("action_id", "") for o in data.get("options", []))
        return f"[{ev.get('seq')}] waiting for a decision ({opts}) on {data.get('request_id')}: {one_line(data.get('prompt'))}"
    if name == "human_input_decision":
        return f"[{ev.get('seq')}] decision {data.get('action_id')} by {data.get('decided_by')}"
    if name == "end":
        return f"[{ev.get('seq')}] end: {data.get('status', 'completed')}"
    return f"[{ev.get('seq')}] {name}" + (f" {json.dumps(data, default=str)[:200]}" if data else "")
