"""Budgets per run (docs/security.md, "Budgets per run"), through the API on a real Temporal dev
server and worker, on SQLite and PostgreSQL: a run that goes over its output bytes, its outbound
calls or its model tokens fails with RUN_BUDGET_EXCEEDED (which budget, the figures), cleanly; a
run under its budgets is not affected; the totals are the run's, not a layer's: they survive a
pause and its resume, a retry of a layer, and count a nested run's spending against its parent.

The budgets are set small on the harness's settings (the worker reads the same object), and put
back after each test."""

from __future__ import annotations

from typing import Any

import pytest

from signoff.engine.models import JobStatus
from tests.fixtures.fake_openai import FakeOpenAI, ToolTarget, call, say
from tests.helpers import CountingHTTP, eventually
from tests.integration.api.conftest import Harness, sse_frames, submit


@pytest.fixture
def budgets(api: Harness, monkeypatch):
    """Set a budget for this test: ``budgets(run_max_calls=5)``."""

    def set_(**values: Any) -> None:
        for name, value in values.items():
            monkeypatch.setattr(api.settings, name, value)

    return set_


@pytest.fixture
def counter(api: Harness):
    srv = CountingHTTP()
    api.egress.add(srv)
    yield srv
    srv.close()


async def _flow(api: Harness, spec: dict[str, Any], user: str = "alice") -> str:
    async with api.client(user) as c:
        r = await c.post("/api/v1/flows", json=spec)
        assert r.status_code == 201, r.text
        return r.json()["id"]


async def _run(api: Harness, flow_id: str, *, input_value: str = "go", mode: str = "background",
               **body: Any) -> tuple[dict, list[dict]]:
    """Submit (``background``: a Temporal run; ``sync``: a gate-less flow runs in the API process)
    and wait for its end or pause; the job as the API shows it and its events."""
    async with api.client("alice") as c:
        job_id = (await submit(c, flow_id, mode, input_value=input_value, **body))["job_id"]
        await api.wait_status(job_id, JobStatus.completed, JobStatus.failed, JobStatus.suspended, timeout=60)
        job = (await c.get(f"/api/v2/workflows/{job_id}")).json()
        frames = sse_frames((await c.get(f"/api/v2/workflows/{job_id}/events")).text) if job["status"] != "suspended" \
            else []
    return job, frames


async def _assert_over(api: Harness, job: dict, frames: list[dict], budget: str, setting: str) -> dict:
    """The run failed with RUN_BUDGET_EXCEEDED naming ``setting``, in its status and its last
    event, and left nothing behind (no checkpoint)."""
    assert job["status"] == "failed", job
    error = job["errors"][0]
    assert error["code"] == "RUN_BUDGET_EXCEEDED" and error["type"] == "RunBudgetExceeded", error
    assert setting in error["error"], error
    assert frames[-1]["event"] == "run_failed", frames
    assert frames[-1]["data"]["code"] == "RUN_BUDGET_EXCEEDED" and setting in frames[-1]["data"]["error"]
    stored = await api.store.get_job(job["job_id"])
    assert stored is not None and stored.status == JobStatus.failed

    async def no_checkpoint() -> bool:
        return await api.store.load_latest_checkpoint(stored.run_id) is None

    # the end's cleanup follows its status (engine/lifecycle.py: end_run, step 3), so a reader
    # that saw the status may come before it: it goes within moments, not never
    await eventually(no_checkpoint, timeout=15, what="the run's checkpoint to go")
    assert budget in {"output_bytes", "calls", "tokens"}
    return error


# ---- output bytes ------------------------------------------------------------------------


def prompt_chain(n: int) -> dict[str, Any]:
    """ChatInput → n Prompt nodes, each passing the text on (the issue's 12 Prompt nodes) → TextOutput."""
    nodes: list[dict[str, Any]] = [{"id": "in", "type": "ChatInput"}]
    edges: list[dict[str, Any]] = []
    prev = "in.message"
    for i in range(n):
        nodes.append({"id": f"p{i}", "type": "Prompt", "params": {"template": "{text}"}})
        edges.append({"from": prev, "to": f"p{i}.text"})
        prev = f"p{i}.prompt"
    nodes.append({"id": "out", "type": "TextOutput"})
    edges.append({"from": prev, "to": "out.input_value"})
    return {"name": f"prompt chain {n}", "nodes": nodes, "edges": edges}


@pytest.mark.parametrize("mode", ["background", "sync"], ids=["temporal", "inline"])
async def test_a_run_over_its_output_bytes_fails(api: Harness, budgets, mode: str) -> None:
    """200 KB through 12 Prompt nodes stores about 2.8 MB; the run may store 1 MiB. Each node is
    far under the per-node cap (SIGNOFF_MAX_OUTPUT_BYTES), so only the run's total stops it."""
    budgets(run_max_output_bytes=1024 * 1024)
    flow_id = await _flow(api, prompt_chain(12))
    job, frames = await _run(api, flow_id, input_value="x" * 200_000, mode=mode)
    error = await _assert_over(api, job, frames, "output_bytes", "SIGNOFF_RUN_MAX_OUTPUT_BYTES")
    assert error["vertex_id"] and error["vertex_id"].startswith("p"), error
    # under the budget, the same flow is not affected
    job, _ = await _run(api, flow_id, input_value="x" * 20_000, mode=mode)
    assert job["status"] == "completed" and len(job["output"]["text"]) == 20_000, job


class Sized(CountingHTTP):
    """``/size/N`` answers N bytes of text (a counting server otherwise)."""

    def __init__(self) -> None:
        super().__init__()
        inner, outer = self.server.RequestHandlerClass, self

        class Handler(inner):  # type: ignore[misc, valid-type]
            def _serve(self) -> None:
                if not self.path.startswith("/size/"):
                    return super()._serve()
                length = int(self.headers.get("content-length") or 0)
                if length:
                    self.rfile.read(length)
                outer.counts[self.path] += 1
                body = b"x" * int(self.path.rsplit("/", 1)[1])
                self.send_response(200)
                self.send_header("content-type", "text/plain")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = _serve

        self.server.RequestHandlerClass = Handler


def call_chain(url: str, n: int) -> dict[str, Any]:
    """n HTTP Request nodes one after the other (a layer each), then a TextOutput."""
    nodes: list[dict[str, Any]] = []
    edges: list[dict[str, Any]] = []
    for i in range(n):
        nodes.append({"id": f"h{i}", "type": "HTTPRequest", "params": {"url": url, "method": "POST"}})
        if i:
            edges.append({"from": f"h{i - 1}.response", "to": f"h{i}.body"})
    nodes.append({"id": "out", "type": "TextOutput"})
    edges.append({"from": f"h{n - 1}.response", "to": "out.input_value"})
    return {"name": f"call chain {n}", "nodes": nodes, "edges": edges}


async def test_the_state_a_run_stores_for_each_layer_counts_too(api: Harness, budgets) -> None:
    """30 layers of 6 KB answers: 180 KB of outputs, but past 64 KB the run's state travels as a
    blob stored per layer (about 2.5 MB in all): that is stored by the run, against its 1 MiB."""
    budgets(run_max_output_bytes=1024 * 1024)
    srv = Sized()
    api.egress.add(srv)
    try:
        job, frames = await _run(api, await _flow(api, call_chain(f"{srv.url}/size/6000", 30)))
        error = await _assert_over(api, job, frames, "output_bytes", "SIGNOFF_RUN_MAX_OUTPUT_BYTES")
        assert "the run's state" in error["error"], error
        assert 11 < srv.counts["/size/6000"] < 30, srv.counts  # past the first state blobs, before the end
        # small answers: the state stays small, nothing is stored per layer, the run completes
        job, _ = await _run(api, await _flow(api, call_chain(f"{srv.url}/size/1000", 30)))
        assert job["status"] == "completed", job
    finally:
        srv.close()


# ---- outbound calls ----------------------------------------------------------------------


def agent_flow(llm: FakeOpenAI, target: ToolTarget, **agent: Any) -> dict[str, Any]:
    return {
        "name": "busy agent",
        "nodes": [
            {"id": "ask", "type": "ChatInput"},
            {"id": "agent", "type": "Agent", "params": {
                "model": "fake-model", "base_url": llm.base_url, "retry_backoff": 0.01, "max_iterations": 100,
                **agent}},
            {"id": "ping", "type": "HTTPRequest", "params": {
                "url": f"{target.url}/ping", "method": "POST", "tool_name": "ping", "tool_description": "Ping"}},
            {"id": "out", "type": "ChatOutput"},
        ],
        "edges": [
            {"from": "ask.message", "to": "agent.input_value"},
            {"from": "ping.tool", "to": "agent.tools"},
            {"from": "agent.response", "to": "out.input_value"},
        ],
    }


async def test_an_agent_over_its_outbound_calls_fails(api: Harness, budgets) -> None:
    """A model the author controls asks for a tool call again and again: each model call and each
    tool call is one of the run's 10; the 11th is never sent."""
    budgets(run_max_calls=10)
    with FakeOpenAI() as llm, ToolTarget() as target:
        api.egress.add(llm, target)
        llm.add(*[call("ping", {"body": str(i)}) for i in range(30)], say("done"))
        job, frames = await _run(api, await _flow(api, agent_flow(llm, target)))
        sent = llm.count + target.counts["/ping"]
    error = await _assert_over(api, job, frames, "calls", "SIGNOFF_RUN_MAX_CALLS")
    assert sent == 10, sent
    assert error["vertex_id"] == "agent", error


async def test_an_agent_under_its_budgets_is_not_affected(api: Harness) -> None:
    with FakeOpenAI() as llm, ToolTarget() as target:
        api.egress.add(llm, target)
        llm.add(*[call("ping", {"body": str(i)}) for i in range(5)], say("done"))
        job, _ = await _run(api, await _flow(api, agent_flow(llm, target)))
        assert job["status"] == "completed" and job["output"]["text"] == "done", job
        assert llm.count == 6 and target.counts["/ping"] == 5


async def test_a_run_over_its_model_tokens_fails(api: Harness, budgets) -> None:
    """The fake model reports 2 tokens an answer; the run may use 7: the 4th answer is over."""
    budgets(run_max_tokens=7)
    with FakeOpenAI() as llm, ToolTarget() as target:
        api.egress.add(llm, target)
        llm.add(*[call("ping", {"body": str(i)}) for i in range(10)], say("done"))
        job, frames = await _run(api, await _flow(api, agent_flow(llm, target)))
        assert llm.count == 4 and target.counts["/ping"] == 3, (llm.count, target.counts)
    await _assert_over(api, job, frames, "tokens", "SIGNOFF_RUN_MAX_TOKENS")


async def test_a_retried_layer_does_not_get_a_fresh_budget(api: Harness, budgets) -> None:
    """An HTTP node whose server answers 500 fails retryably: its layer is tried 5 times. The
    run may make 3 calls in all, retries included; the 4th attempt is refused before it dials."""
    budgets(run_max_calls=3)
    with ToolTarget() as target:
        api.egress.add(target)
        spec = {"name": "flaky", "nodes": [
            {"id": "call", "type": "HTTPRequest", "params": {"url": f"{target.url}/fail", "method": "GET"}},
            {"id": "out", "type": "TextOutput"}], "edges": [{"from": "call.response", "to": "out.input_value"}]}
        job, frames = await _run(api, await _flow(api, spec))
        assert target.counts["/fail"] == 3, target.counts
    await _assert_over(api, job, frames, "calls", "SIGNOFF_RUN_MAX_CALLS")


async def test_nested_runs_spend_their_parents_budget(api: Harness, budgets, counter) -> None:
    """Three Run Flow nodes, each running a child that makes 2 calls: 6 calls, over a budget of 4."""
    budgets(run_max_calls=4)
    child = await _flow(api, {"name": "two calls", "nodes": [
        {"id": "a", "type": "HTTPRequest", "params": {"url": f"{counter.url}/nested-a", "method": "GET"}},
        {"id": "b", "type": "HTTPRequest", "params": {"url": f"{counter.url}/nested-b", "method": "GET"}},
        {"id": "out_a", "type": "TextOutput"}, {"id": "out_b", "type": "TextOutput"}],
        "edges": [{"from": "a.response", "to": "out_a.input_value"}, {"from": "b.response", "to": "out_b.input_value"}]})
    nodes: list[dict[str, Any]] = [{"id": "in", "type": "TextInput"}]
    edges: list[dict[str, Any]] = []
    for i in range(3):
        nodes += [{"id": f"run{i}", "type": "RunFlow", "params": {"flow_id": child}},
                  {"id": f"out{i}", "type": "TextOutput"}]
        edges += [{"from": "in.text", "to": f"run{i}.input_value"}, {"from": f"run{i}.output", "to": f"out{i}.input_value"}]
    job, frames = await _run(api, await _flow(api, {"name": "fan out", "nodes": nodes, "edges": edges}))
    await _assert_over(api, job, frames, "calls", "SIGNOFF_RUN_MAX_CALLS")
    assert counter.counts["/nested-a"] + counter.counts["/nested-b"] == 4, counter.counts


# ---- across a pause --------------------------------------------------------------------------


def gated_calls(url: str, before: int, after: int) -> dict[str, Any]:
    """``before`` HTTP calls, then a gate, then ``after`` calls once approved."""
    nodes: list[dict[str, Any]] = [{"id": "in", "type": "TextInput"},
                                   {"id": "gate", "type": "HumanInput", "params": {"decisions": ["Approve", "Reject"]}},
                                   {"id": "no", "type": "TextOutput", "params": {"text": "refused"}}]
    edges: list[dict[str, Any]] = [{"from": "in.text", "to": "gate.prompt"},
                                   {"from": "gate.branch_reject", "to": "no.input_value"}]
    for i in range(before):
        nodes += [{"id": f"a{i}", "type": "HTTPRequest", "params": {"url": f"{url}/before", "method": "GET"}},
                  {"id": f"seen{i}", "type": "TextOutput"}]
        edges.append({"from": f"a{i}.response", "to": f"seen{i}.input_value"})
    for i in range(after):
        nodes += [{"id": f"b{i}", "type": "HTTPRequest", "params": {"url": f"{url}/after", "method": "POST"}},
                  {"id": f"out{i}", "type": "TextOutput"}]
        edges += [{"from": "gate.branch_approve", "to": f"b{i}.body"}, {"from": f"b{i}.response", "to": f"out{i}.input_value"}]
    return {"name": "calls around a gate", "nodes": nodes, "edges": edges}


async def _approve(api: Harness, job: dict) -> dict:
    job_id = job["job_id"]
    async with api.client("alice") as c:
        pending = (await c.get(f"/api/v2/workflows/{job_id}/pending")).json()
        r = await c.post(f"/api/v2/workflows/{job_id}/resume",
                         json={"request_id": pending["request_id"], "decision": {"action_id": "approve"}})
        assert r.status_code == 200, r.text
        await api.wait_status(job_id, JobStatus.completed, JobStatus.failed, timeout=60)
        return (await c.get(f"/api/v2/workflows/{job_id}")).json(), \
            sse_frames((await c.get(f"/api/v2/workflows/{job_id}/events")).text)


async def test_the_budget_survives_a_pause_and_its_resume(api: Harness, budgets, counter) -> None:
    """4 calls before the gate, 3 after it, 5 in all: the run fails after the resume, on its 6th."""
    budgets(run_max_calls=5)
    flow_id = await _flow(api, gated_calls(counter.url, before=4, after=3))
    job, _ = await _run(api, flow_id)
    assert job["status"] == "suspended", job
    assert counter.counts["/before"] == 4
    job, frames = await _approve(api, job)
    await _assert_over(api, job, frames, "calls", "SIGNOFF_RUN_MAX_CALLS")
    assert counter.counts["/after"] == 1, counter.counts
    names = [f["event"] for f in frames]
    assert names.index("human_input_decision") < names.index("run_failed") == len(names) - 1


async def test_a_gated_run_under_its_budget_is_not_affected(api: Harness, budgets, counter) -> None:
    budgets(run_max_calls=7)
    flow_id = await _flow(api, gated_calls(counter.url, before=4, after=3))
    job, _ = await _run(api, flow_id)
    assert job["status"] == "suspended", job
    job, _ = await _approve(api, job)
    assert job["status"] == "completed", job
    assert counter.counts["/before"] == 4 and counter.counts["/after"] == 3
