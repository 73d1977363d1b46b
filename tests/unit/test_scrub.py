"""Every literal credential of a request (a revealed secret, a literal header, a URL's userinfo,
a model's API key) is masked in whatever comes back (an answer, an error) before any text is
cut: a cut first would leave the head of a credential that straddles it (issue 28)."""

from __future__ import annotations

import base64
import json
from http.server import BaseHTTPRequestHandler
from typing import Any

import httpx
import pytest

from signoff.engine.llm import ChatClient, ModelError
from signoff.engine.secrets import clipped, credentials

from tests.helpers import LocalHTTPServer

from .conftest import flow

TOKEN = "tok-literal-7f3a9c1e5b2d4f6a8c0e"  # a literal header value (35 characters)
PASSWORD = "pw-in-the-url-91b2c3d4"
KEY = "sk-live-0123456789abcdef0123456789ab"  # 35 characters


class EchoServer(LocalHTTPServer):
    """Answers every request with its headers (the way a debugging endpoint or a hostile one
    does); ``/fail...`` with a 500, the echo placed after ``pad`` characters."""

    def __init__(self) -> None:
        class Handler(BaseHTTPRequestHandler):
            def _handle(self) -> None:
                pad = int(self.path.rpartition("pad=")[2] or 0) if "pad=" in self.path else 0
                payload = ("x" * pad + json.dumps(dict(self.headers))).encode()
                self.send_response(500 if self.path.startswith("/fail") else 200)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            do_GET = do_POST = _handle

            def log_message(self, *args: Any) -> None:
                pass

        super().__init__(Handler)


@pytest.fixture
def echo(egress):
    s = EchoServer()
    egress.add(s)
    try:
        yield s
    finally:
        s.close()


def leaks(text: str, secret: str) -> bool:
    """Any 8 consecutive characters of ``secret`` in ``text``."""
    return any(secret[i:i + 8] in text for i in range(len(secret) - 7))


def http_flow(url: str, headers: dict[str, Any]) -> dict:
    return flow([("http", "HTTPRequest", {"url": url, "headers": headers}), ("out", "TextOutput")],
                [("http.response", "out.input_value")])


async def test_an_echoed_literal_header_is_masked_in_the_output(runner, echo):
    done = await runner.start(http_flow(f"{echo.url}/ok", {"X-Api-Token": TOKEN, "Accept": "text/plain"}),
                              run_id="echo-ok")
    assert done.status == "completed"
    text = done.result["output"]["text"]
    assert "X-Api-Token" in text and "text/plain" in text  # the echo is there, a harmless value too
    assert not leaks(text, TOKEN)


@pytest.mark.parametrize("pad", range(300, 340, 3))  # the token (~160 characters into the echo) across the 500 cut
async def test_a_literal_header_at_the_cut_of_an_error_is_masked_whole(runner, echo, pad):
    done = await runner.start(http_flow(f"{echo.url}/fail?pad={pad}", {"X-Api-Token": TOKEN}), run_id=f"echo-{pad}")
    assert done.status == "failed"
    assert not leaks(json.dumps(done.error), TOKEN)


async def test_url_userinfo_is_masked_in_the_answer_and_the_error(runner, echo):
    host = echo.url.removeprefix("http://")
    done = await runner.start(http_flow(f"http://svc:{PASSWORD}@{host}/fail", {}), run_id="userinfo")
    assert done.status == "failed"
    text = json.dumps(done.error)
    basic = base64.b64encode(f"svc:{PASSWORD}".encode()).decode()
    assert "answered 500" in text
    assert not leaks(text, PASSWORD) and not leaks(text, basic)
    ok = await runner.start(http_flow(f"http://svc:{PASSWORD}@{host}/ok", {}), run_id="userinfo-ok")
    assert "Authorization" in ok.result["output"]["text"]  # httpx sent the userinfo as Basic, echoed
    assert not leaks(ok.result["output"]["text"], basic)


def model(handler, *, base_url: str = "http://model.test/v1", api_key: str | None = KEY) -> ChatClient:
    return ChatClient(model="m", base_url=base_url, api_key=api_key, max_retries=0, backoff=0,
                      http_client_factory=lambda: httpx.AsyncClient(transport=httpx.MockTransport(handler)))


@pytest.mark.parametrize("pad", range(150, 200, 4))
async def test_a_model_answer_without_choices_is_masked_before_it_is_cut(pad):
    """The key straddles the 200-character cut of an answer that is not a chat completion."""
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"p": "x" * pad, "echo": request.headers["authorization"]})

    with pytest.raises(ModelError) as err:
        await model(handler).chat([{"role": "user", "content": "hi"}])
    assert "without choices" in str(err.value)
    assert not leaks(str(err.value) + repr(err.value.details), KEY)


async def test_a_model_base_url_userinfo_and_an_echoed_key_are_masked():
    def handler(request: httpx.Request) -> httpx.Response:
        if "fail" in request.url.path:
            return httpx.Response(401, json={"error": {"message": f"bad {request.headers['authorization']}"}})
        return httpx.Response(200, json={"choices": [{"message": {"content": f"you sent {request.headers['authorization']}"}}]})

    client = model(handler, base_url=f"http://svc:{PASSWORD}@model.test/fail", api_key=None)
    with pytest.raises(ModelError) as err:
        await client.chat([{"role": "user", "content": "hi"}])
    assert "model.test" in str(err.value) and not leaks(str(err.value), PASSWORD)
    assert not leaks(client.shown_url, PASSWORD)
    result = await model(handler).chat([{"role": "user", "content": "hi"}])
    assert result.content.startswith("you sent") and not leaks(result.content, KEY)


def test_masking_comes_before_the_cut():
    hide = credentials(headers={"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"})
    text = "y" * 10 + KEY
    for limit in range(10, 50):
        assert not leaks(clipped(text, hide, limit) + "zzzzzzzz", KEY)
    assert "application/json" not in hide  # a value that is never a credential is left alone
