"""A model endpoint that echoes the request never carries the API key into the run's error."""

from __future__ import annotations

import httpx
import pytest

from signoff.engine.llm import ChatClient, ModelError

KEY = "sk-live-0123456789abcdef"


def echoing(status: int) -> httpx.MockTransport:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(status, json={"error": {"message": f"bad key {request.headers['authorization']}"}})

    return httpx.MockTransport(handler)


@pytest.mark.parametrize("status", [401, 503])
async def test_an_echoed_key_is_masked_in_the_error(status: int) -> None:
    client = ChatClient(model="m", base_url="http://model.test/v1", api_key=KEY, max_retries=1, backoff=0,
                        http_client_factory=lambda: httpx.AsyncClient(transport=echoing(status)))
    with pytest.raises(ModelError) as err:
        await client.chat([{"role": "user", "content": "hi"}])
    text = str(err.value) + repr(err.value.details)
    assert f"answered {status}" in text and "bad key Bearer" in text
    assert KEY not in text and KEY[:12] not in text


async def test_a_key_at_the_cut_is_masked_whole() -> None:
    """The echo puts the key across the 300-character cut of the message."""
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(401, json={"error": {"message": "x" * 290 + request.headers["authorization"]}})

    client = ChatClient(model="m", base_url="http://model.test/v1", api_key=KEY, max_retries=0,
                        http_client_factory=lambda: httpx.AsyncClient(transport=httpx.MockTransport(handler)))
    with pytest.raises(ModelError) as err:
        await client.chat([{"role": "user", "content": "hi"}])
    assert "sk-live" not in str(err.value)
