"""SSRF: a hostile flow's HTTP Request and Agent nodes try to reach what sits next to the worker
(the API, the Temporal frontend, a local server nobody allowed, the cloud metadata address) by
IP, by name, by IPv6, by odd spellings and by redirect. Each run fails with a clear error that
says how an operator opens the address, and the target never sees a request. What the
deployment lists in SIGNOFF_EGRESS_ALLOW still works, port by port."""

from __future__ import annotations

from urllib.parse import urlsplit

import pytest

from signoff.engine.models import JobStatus
from tests.helpers import wait_status


def http_flow(url: str, *, method: str = "GET", timeout: float = 10) -> dict:
    return {
        "name": "hostile http",
        "nodes": [
            {"id": "call", "type": "HTTPRequest", "params": {"url": url, "method": method, "timeout": timeout}},
            {"id": "out", "type": "TextOutput"},
        ],
        "edges": [{"from": "call.response", "to": "out.input_value"}],
    }


async def run(service, user, make_flow, spec: dict, *, sync: bool = False):
    flow = await make_flow(spec)
    job, _ = await service.submit(user, flow, input_value="x", session_id=None, tweaks=None, idempotency_key=None,
                                  mode="sync" if sync else "background")
    return await wait_status(service.store, job.job_id, JobStatus.completed, JobStatus.failed)


def port_of(url: str) -> int:
    return urlsplit(url).port


@pytest.mark.parametrize("target", [
    "http://127.0.0.1:{port}/steal",
    "http://localhost:{port}/steal",
    "http://[::1]:{port}/steal",
    "http://[::ffff:127.0.0.1]:{port}/steal",
    "http://2130706433:{port}/steal",
    "http://127.1:{port}/steal",
    "http://0.0.0.0:{port}/steal",
], ids=["ipv4", "name", "ipv6", "ipv4-mapped", "decimal", "short", "unspecified"])
@pytest.mark.parametrize("sync", [False, True], ids=["temporal", "inline"])
async def test_a_flow_cannot_reach_a_local_server_nobody_allowed(worker, service, user, make_flow, refused, target,
                                                                 sync):
    done = await run(service, user, make_flow, http_flow(target.format(port=port_of(refused.url))), sync=sync)
    assert done.status == JobStatus.failed
    assert "SIGNOFF_EGRESS_ALLOW" in done.error["error"] and done.error["vertex_id"] == "call", done.error
    assert refused.requests == []


async def test_a_flow_cannot_reach_the_api_the_temporal_frontend_or_the_metadata_service(
        worker, service, user, make_flow, temporal_server):
    for url in (f"http://{temporal_server.address}/api/v1/namespaces/default/workflows",
                "http://127.0.0.1:8000/api/v2/workflows/pending",
                "http://169.254.169.254/latest/meta-data/iam/security-credentials/",
                "http://[fd00:ec2::254]/latest/meta-data/",
                "http://10.0.0.1/", "http://192.168.1.1/"):
        done = await run(service, user, make_flow, http_flow(url, timeout=5))
        assert done.status == JobStatus.failed and "egress refused" in done.error["error"], (url, done.error)


async def test_a_redirect_to_a_refused_address_is_refused(worker, service, user, make_flow, allowed, refused):
    done = await run(service, user, make_flow, http_flow(f"{allowed.url}/redirect?to={refused.url}/steal"))
    # the allowed server answered 302; the node does not follow redirects, and nothing reached the other
    assert refused.requests == []
    assert [r["path"] for r in allowed.requests] == [f"/redirect?to={refused.url}/steal"]
    assert done.status == JobStatus.completed  # the 302 itself is the answer


async def test_what_the_operator_allows_is_reachable_port_by_port(worker, service, user, make_flow, allowed, settings):
    done = await run(service, user, make_flow, http_flow(f"{allowed.url}/fine"))
    assert done.status == JobStatus.completed, done.error
    assert [r["path"] for r in allowed.requests] == ["/fine"]
    # the same host on another port is still refused
    other = port_of(allowed.url) + 1 if port_of(allowed.url) < 65535 else port_of(allowed.url) - 1
    done = await run(service, user, make_flow, http_flow(f"http://127.0.0.1:{other}/"))
    assert done.status == JobStatus.failed and "SIGNOFF_EGRESS_ALLOW" in done.error["error"]


async def test_an_oversize_answer_fails_the_node_without_reading_it_all(worker, service, user, make_flow, allowed,
                                                                       settings):
    settings.http_max_response_bytes = 1024 * 1024
    done = await run(service, user, make_flow, http_flow(f"{allowed.url}/big/{96 * 1024 * 1024}"))
    assert done.status == JobStatus.failed, done.error
    assert "1048576" in done.error["error"] or "larger" in done.error["error"], done.error


def agent_flow(base_url: str | None, api_key: str | None = None) -> dict:
    params = {"max_retries": 0}
    if base_url:
        params["base_url"] = base_url
    if api_key:
        params["api_key"] = api_key
    return {
        "name": "hostile agent",
        "nodes": [{"id": "agent", "type": "Agent", "params": params}, {"id": "out", "type": "TextOutput"}],
        "edges": [{"from": "agent.response", "to": "out.input_value"}],
    }


async def test_the_operators_model_key_goes_only_to_the_operators_model_url(worker, service, user, make_flow,
                                                                           settings, allowed, fake_openai):
    """An Agent with a base_url of its own and no api_key used to receive SIGNOFF_OPENAI_API_KEY."""
    settings.openai_base_url = fake_openai.base_url
    settings.openai_api_key = "sk-operator-secret"
    # the attacker's endpoint (allowed, so the call really goes out): no operator key on it
    done = await run(service, user, make_flow, agent_flow(f"{allowed.url}/v1"))
    assert done.status == JobStatus.completed, done.error
    sent = [r["headers"].get("Authorization") for r in allowed.requests]
    assert sent == [None], sent
    # its own key goes where it says
    allowed.requests.clear()
    done = await run(service, user, make_flow, agent_flow(f"{allowed.url}/v1", api_key="sk-flows-own"))
    assert [r["headers"].get("Authorization") for r in allowed.requests] == ["Bearer sk-flows-own"]
    # the operator's URL (the default, or named exactly) gets the operator's key
    fake_openai.add(_say("hi"), _say("hi"))
    for base in (None, fake_openai.base_url):
        done = await run(service, user, make_flow, agent_flow(base))
        assert done.status == JobStatus.completed, done.error
    assert [h.get("authorization") for h in fake_openai.headers] == ["Bearer sk-operator-secret"] * 2


async def test_an_agents_own_url_obeys_the_egress_policy(worker, service, user, make_flow, settings, refused):
    settings.openai_api_key = "sk-operator-secret"
    done = await run(service, user, make_flow, agent_flow(f"{refused.url}/v1"))
    assert done.status == JobStatus.failed and "SIGNOFF_EGRESS_ALLOW" in done.error["error"], done.error
    assert refused.requests == []


def _say(text: str) -> dict:
    from tests.fixtures.fake_openai import say

    return say(text)
