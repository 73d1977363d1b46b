"""Named secrets: stored encrypted, referenced by name, revealed only for the request that needs
them, resolved against the secrets of the flow's owner (never the caller's), and never written
anywhere a person or another process could read them back: not the database in clear, not a
checkpoint, an event, a span, the job's result, or Temporal's history."""

from __future__ import annotations

import json
import uuid

import pytest

from signoff.engine.models import Decision, JobStatus
from signoff.engine.secrets import SecretBox, Vault
from tests.helpers import wait_status

VALUE = "sk-live-" + uuid.uuid4().hex  # the secret: it must appear nowhere but in the request


def secret_flow(url: str, *, gate: bool = False) -> dict:
    nodes = [{"id": "ask", "type": "ChatInput"},
             {"id": "call", "type": "HTTPRequest", "params": {
                 "url": url, "method": "POST", "headers": {"Authorization": {"$secret": "payments"}, "X-Plain": "1"}}},
             {"id": "out", "type": "TextOutput"}]
    edges = [{"from": "call.response", "to": "out.input_value"}]
    if gate:
        nodes.append({"id": "gate", "type": "HumanInput"})
        edges += [{"from": "ask.message", "to": "gate.prompt"}, {"from": "gate.branch_approve", "to": "call.body"}]
    else:
        edges.append({"from": "ask.message", "to": "call.body"})
    return {"name": "uses a secret", "nodes": nodes, "edges": edges}


async def run(service, user, flow):
    job, _ = await service.submit(user, flow, input_value="pay 5", session_id=None, tweaks=None, idempotency_key=None,
                                  mode="background")
    return await wait_status(service.store, job.job_id, JobStatus.completed, JobStatus.failed, JobStatus.suspended)


async def test_a_secret_reaches_the_request_and_nothing_else(worker, service, store, settings, user, make_flow,
                                                            allowed, client):
    await Vault(store, settings).put(user.id, "payments", VALUE)
    raw = await store.get_secret(user.id, "payments")
    assert VALUE.encode() not in raw.ciphertext  # encrypted at rest
    flow = await make_flow(secret_flow(f"{allowed.url}/pay", gate=True))
    paused = await run(service, user, flow)
    assert paused.status == JobStatus.suspended
    checkpoint = await store.load_latest_checkpoint(paused.run_id)
    await service.resume(user, paused.job_id, paused.pending.request_id, Decision(action_id="approve"))
    done = await wait_status(store, paused.job_id, JobStatus.completed)
    assert [r["headers"].get("Authorization") for r in allowed.requests] == [VALUE]
    everything = json.dumps({
        "checkpoint": checkpoint.data,
        "job": done.model_dump(mode="json"),
        "events": [e.model_dump(mode="json") for e in await store.read_events(done.job_id)],
        "spans": [s.model_dump(mode="json") for s in await store.get_trace(done.run_id)],
        "messages": [m.model_dump(mode="json") for m in await store.list_messages(done.effective_session)],
        "flow": (await store.get_flow(flow.id)).spec,
    })
    assert VALUE not in everything
    history = await client.get_workflow_handle(done.job_id).fetch_history()
    assert VALUE not in history.to_json()


async def test_a_reference_resolves_against_the_flows_owner_never_the_caller(worker, service, store, settings, user,
                                                                            make_flow, allowed):
    vault = Vault(store, settings)
    await vault.put(user.id, "payments", VALUE)  # alice's
    mallory = await store.get_or_create_user(f"mallory-{uuid.uuid4().hex[:6]}")
    # mallory's own flow naming alice's secret finds no secret of hers
    hers = await make_flow(secret_flow(f"{allowed.url}/steal"), owner=mallory)
    done = await run(service, mallory, hers)
    assert done.status == JobStatus.failed and "no secret named 'payments'" in done.error["error"], done.error
    assert allowed.requests == []
    # a run of alice's flow by a share holder uses alice's secret, where alice sends it
    await store.grant_share((alice_flow := await make_flow(secret_flow(f"{allowed.url}/alice"))).id, mallory.id,
                            ["execute"])
    done = await run(service, mallory, alice_flow)
    assert done.status == JobStatus.completed, done.error
    assert [(r["path"], r["headers"].get("Authorization")) for r in allowed.requests] == [("/alice", VALUE)]
    # a replaced secret is used from then on; a deleted one fails the node with a clear message
    await vault.put(user.id, "payments", "rotated")
    await run(service, user, alice_flow)
    assert allowed.requests[-1]["headers"].get("Authorization") == "rotated"
    assert await store.delete_secret(user.id, "payments")
    done = await run(service, user, alice_flow)
    assert done.status == JobStatus.failed and "signoff secrets set payments" in done.error["error"]


def test_a_box_opens_only_what_its_key_sealed(tmp_path, monkeypatch):
    from signoff.engine.secrets import SecretKeyError

    monkeypatch.delenv("SIGNOFF_SECRET_KEY", raising=False)  # the key file in SIGNOFF_HOME
    from signoff.engine.settings import Settings

    one = SecretBox.for_settings(Settings(home=tmp_path / "a"))
    assert (tmp_path / "a" / "secret.key").stat().st_mode & 0o777 == 0o600
    assert SecretBox.for_settings(Settings(home=tmp_path / "a")).open(one.seal("v")) == "v"  # the same key file
    with pytest.raises(SecretKeyError):
        SecretBox.for_settings(Settings(home=tmp_path / "b")).open(one.seal("v"))
    with pytest.raises(SecretKeyError):
        SecretBox("not a key")


async def test_someone_elses_run_cannot_choose_where_the_owners_secret_goes(worker, service, store, settings, user,
                                                                           make_flow, allowed):
    """The owner's flow takes its URL from the run's input (a confused deputy): nobody's run, the
    owner's own included (her input may be pasted from anywhere), sends her secret where the
    input says; an input URL goes with the secret only to the origin of the node's url param."""
    await Vault(store, settings).put(user.id, "payments", VALUE)
    spec = {"name": "url from input", "nodes": [
        {"id": "ask", "type": "ChatInput"},
        {"id": "call", "type": "HTTPRequest", "params": {"method": "POST",
                                                          "headers": {"Authorization": {"$secret": "payments"}}}},
        {"id": "out", "type": "TextOutput"}],
        "edges": [{"from": "ask.message", "to": "call.url"}, {"from": "call.response", "to": "out.input_value"}]}
    flow = await make_flow(spec)
    mallory = await store.get_or_create_user(f"mallory-{uuid.uuid4().hex[:6]}")
    await store.grant_share(flow.id, mallory.id, ["execute"])
    job, _ = await service.submit(mallory, flow, input_value=f"{allowed.url}/steal", session_id=None, tweaks=None,
                                  idempotency_key=None, mode="background")
    done = await wait_status(store, job.job_id, JobStatus.completed, JobStatus.failed)
    assert done.status == JobStatus.failed and "its input decides" in done.error["error"], done.error
    job, _ = await service.submit(user, flow, input_value=f"{allowed.url}/steal", session_id=None, tweaks=None,
                                  idempotency_key=None, mode="background")
    done = await wait_status(store, job.job_id, JobStatus.completed, JobStatus.failed)
    assert done.status == JobStatus.failed and "origin" in done.error["error"], done.error
    assert allowed.requests == []
    # with the node's url param naming the server, an input URL on the same origin is sent (an
    # echo of the secret is masked); another port of the same host is not
    fixed = {**spec, "nodes": [spec["nodes"][0], {**spec["nodes"][1], "params": {
        **spec["nodes"][1]["params"], "url": f"{allowed.url}/"}}, spec["nodes"][2]]}
    flow = await make_flow(fixed)
    job, _ = await service.submit(user, flow, input_value=f"{allowed.url}/echo", session_id=None, tweaks=None,
                                  idempotency_key=None, mode="background")
    done = await wait_status(store, job.job_id, JobStatus.completed, JobStatus.failed)
    assert done.status == JobStatus.completed and allowed.requests[0]["headers"]["Authorization"] == VALUE
    assert VALUE not in json.dumps(done.result)
    host, port = allowed.url.rsplit(":", 1)
    job, _ = await service.submit(user, flow, input_value=f"{host}:{int(port) + 1}/echo", session_id=None,
                                  tweaks=None, idempotency_key=None, mode="background")
    done = await wait_status(store, job.job_id, JobStatus.completed, JobStatus.failed)
    assert done.status == JobStatus.failed and "origin" in done.error["error"], done.error
    assert len(allowed.requests) == 1


async def test_a_model_cannot_choose_where_the_owners_secret_goes(worker, service, store, settings, user, make_flow,
                                                                  allowed, fake_openai):
    """Prompt injection: an Agent's HTTP tool with the owner's secret header and no fixed URL; the
    model (told by its input) calls it with an attacker's URL. The secret is not sent; the model
    is told why and the run goes on."""
    from tests.fixtures.fake_openai import call, say

    await Vault(store, settings).put(user.id, "payments", VALUE)
    fake_openai.add(call("http", {"url": f"{allowed.url}/steal", "body": "x"}), say("could not"))
    spec = {"name": "agent with a secret tool", "nodes": [
        {"id": "agent", "type": "Agent", "params": {"base_url": fake_openai.base_url, "max_retries": 0}},
        {"id": "http", "type": "HTTPRequest", "params": {"method": "POST", "tool_name": "http",
                                                          "headers": {"Authorization": {"$secret": "payments"}}}},
        {"id": "out", "type": "TextOutput"}],
        "edges": [{"from": "http.tool", "to": "agent.tools"}, {"from": "agent.response", "to": "out.input_value"}]}
    done = await run(service, user, await make_flow(spec))
    assert done.status == JobStatus.completed, done.error
    assert allowed.requests == []
    told = [m["content"] for m in fake_openai.requests[-1]["messages"] if m["role"] == "tool"]
    assert told and "a model chose" in told[0] and VALUE not in json.dumps(fake_openai.requests)
