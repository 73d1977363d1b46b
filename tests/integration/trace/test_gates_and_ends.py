"""The rest of the one-trace story on a real Temporal dev server: an Agent's model and tool calls
under its vertex spans around a tool approval, a late answer (server-side time skipping) gated
as `Fallback` or `Expired`, a flow without a gate that never writes a checkpoint or a
suspension, and a run cancelled before its first layer that still has its root span."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest_asyncio
from temporalio.testing import TimeSkipper, TimeSkippingConfig

from signoff.engine.models import Decision, JobStatus
from signoff.engine.store.sqlite import SQLiteStore
from signoff.engine.tracing import hex_span, root_span_id
from signoff.service import RunService
from signoff.worker import build_worker
from tests.fixtures.fake_openai import call, say

from .conftest import story, wait_status


class CountingStore(SQLiteStore):
    """The real SQLite store, counting every checkpoint and suspension ever written (not merely
    what is left at the end)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.checkpoint_saves: list[str] = []
        self.suspensions: list[str] = []

    async def save_checkpoint(self, run_id: str, data: dict[str, Any], **kw: Any) -> str:
        self.checkpoint_saves.append(run_id)
        return await super().save_checkpoint(run_id, data, **kw)

    async def mark_suspended(self, job_id: str, *args: Any, **kw: Any) -> Any:
        if kw.get("checkpoint") is not None:  # the pause's checkpoint in its own write (issue 33)
            self.checkpoint_saves.append(kw["checkpoint"].run_id)
        self.suspensions.append(job_id)
        return await super().mark_suspended(job_id, *args, **kw)

    async def set_status(self, job_id: str, status: Any, *args: Any, **kw: Any) -> Any:
        if JobStatus(status) == JobStatus.suspended:
            self.suspensions.append(job_id)
        return await super().set_status(job_id, status, *args, **kw)


@pytest_asyncio.fixture
async def store(settings):
    """Handed to the worker (build_worker) and the service by the shared world's fixtures."""
    s = CountingStore(settings.resolved_database_url[len("sqlite:///"):])
    await s.setup()
    yield s
    await s.close()


@pytest_asyncio.fixture
async def skipper(client) -> TimeSkipper:
    # skipping off at start; each test fast-forwards its own workflow's virtual clock
    return TimeSkipper(client, config=TimeSkippingConfig(enabled=False))


async def submit(service, user, flow, text: str = "order 42"):
    job, _ = await service.submit(user, flow, input_value=text, session_id=None, tweaks=None,
                                  idempotency_key=None, mode="background")
    return job


def children(spans, parent) -> list:
    return sorted((s for s in spans if s.parent_id == parent.span_id), key=lambda s: (s.start_time, s.span_id))


# ---- an Agent's model and tool calls around a tool approval ----------------------------------


def agent_flow(llm) -> dict[str, Any]:
    return {
        "name": "calc agent",
        "nodes": [
            {"id": "ask", "type": "ChatInput"},
            {"id": "agent", "type": "Agent", "params": {"model": "fake-model", "base_url": llm.base_url,
                                                        "retry_backoff": 0.01}},
            {"id": "calc", "type": "Calculator", "params": {"tool_name": "calc", "approval_actions": ["approve"]}},
            {"id": "out", "type": "ChatOutput"},
        ],
        "edges": [
            {"from": "ask.message", "to": "agent.input_value"},
            {"from": "calc.tool", "to": "agent.tools"},
            {"from": "agent.response", "to": "out.input_value"},
        ],
    }


async def test_agent_model_and_tool_calls_hang_under_its_spans_around_the_approval(
        worker, service, store, user, make_flow, fake_openai):
    fake_openai.add(call("calc", {"expression": "6*7"}), say("It is 42."))
    flow = await make_flow(agent_flow(fake_openai))
    job = await service.wait_for_pause_or_end((await submit(service, user, flow, "6*7?")).job_id, timeout=60)
    assert job.status == JobStatus.suspended and job.pending.kind == "tool_approval", job.error
    await service.resume(user, job.job_id, job.pending.request_id, Decision(action_id="approve"))
    done = await wait_status(store, job.job_id, JobStatus.completed, JobStatus.failed)
    assert done.status == JobStatus.completed, done.error

    spans = await store.get_trace(job.job_id)
    (root,) = [s for s in spans if s.parent_id is None]
    top = children(spans, root)
    # in the order things ended: the gate starts at paused_at, the layer's (workflow) time, so
    # it may start a moment before the Agent span that asked (docs/tracing.md)
    top.sort(key=lambda s: (s.end_time, s.span_id))
    names = [s.name for s in top]
    assert sorted(names[:2]) == ["Calculator", "Chat Input"]  # the first layer: the tool's vertex too
    assert names[2:] == ["Agent", "Human In The Loop — Approve", "Agent", "Chat Output"]
    first, gate, second = top[2:5]
    assert gate.end_time <= second.start_time
    assert first.attributes["signoff.paused"] is True
    assert [(s.type, s.name) for s in children(spans, first)] == [("llm", "fake-model")]
    (llm1,) = children(spans, first)
    assert llm1.status == "ok" and llm1.attributes["gen_ai.usage.input_tokens"] == 1
    assert llm1.outputs["tool_calls"] == [{"name": "calc", "args": json.dumps({"expression": "6*7"})}]
    assert gate.attributes["signoff.request_kind"] == "tool_approval"
    assert gate.attributes["signoff.request_id"] == f"agent:{job.job_id}:1"
    tool, llm2 = children(spans, second)
    assert (tool.type, tool.name, tool.status) == ("tool", "calc", "ok")
    assert tool.inputs == {"expression": "6*7"} and tool.outputs == {"result": 42}
    assert tool.attributes["signoff.tool.outcome"] == "approved"
    assert tool.start_time >= gate.end_time  # the tool ran after the person approved it
    assert (llm2.type, llm2.status) == ("llm", "ok") and llm2.outputs["content"] == "It is 42."
    assert len({s.span_id for s in spans}) == len(spans) and fake_openai.count == 2
    assert {s.attributes["otel.trace_id"] for s in spans} == {job.job_id.replace("-", "")}


# ---- a late answer: Fallback and Expired gate spans (time skipping) -------------------------------


def late_flow(fallback: bool) -> dict[str, Any]:
    return {
        "name": "late",
        "nodes": [
            {"id": "ask", "type": "ChatInput"},
            {"id": "gate", "type": "HumanInput",
             "params": {"decisions": ["Approve", "Reject"], "timeout": {"value": 3, "unit": "Days"},
                        "enable_fallback": fallback}},
            {"id": "ok", "type": "ChatOutput", "params": {"text": "approved", "display_name": "Approved"}},
            {"id": "no", "type": "ChatOutput", "params": {"text": "refused", "display_name": "Refused"}},
            *([{"id": "fb", "type": "ChatOutput", "params": {"text": "too late: escalated",
                                                              "display_name": "Escalated"}}] if fallback else []),
        ],
        "edges": [
            {"from": "ask.message", "to": "gate.prompt"},
            {"from": "gate.branch_approve", "to": "ok.input_value"},
            {"from": "gate.branch_reject", "to": "no.input_value"},
            *([{"from": "gate.branch_fallback", "to": "fb.input_value"}] if fallback else []),
        ],
    }


async def answer_late(service, skipper, store, user, flow):
    job = await submit(service, user, flow)
    job = await service.wait_for_pause_or_end(job.job_id, timeout=30)
    assert job.status == JobStatus.suspended
    assert await skipper.fast_forward(service.client.get_workflow_handle(job.job_id), timedelta(days=4))
    await service.resume(user, job.job_id, job.pending.request_id, Decision(action_id="approve"))
    done = await wait_status(store, job.job_id, JobStatus.completed, JobStatus.failed)
    assert done.status == JobStatus.completed, done.error
    return done, await store.get_trace(job.job_id)


async def test_a_late_answer_rerouted_to_fallback_is_the_fallback_gate(worker, settings, store, user, make_flow,
                                                                        skipper):
    service = RunService(settings, store, skipper.client)
    done, spans = await answer_late(service, skipper, store, user, await make_flow(late_flow(fallback=True)))
    assert done.result["output"]["text"] == "too late: escalated"
    assert story(spans) == ["Chat Input", "Human In The Loop — Fallback", "Escalated"]
    (gate,) = [s for s in spans if s.type == "gate"]
    assert gate.attributes["signoff.action_id"] == "fallback" and gate.attributes["signoff.rerouted"] is True
    assert gate.attributes["signoff.requested_action"] == "approve"
    assert gate.attributes["signoff.rerouted_action"] == "fallback"
    assert gate.attributes["signoff.timeout_seconds"] == 3 * 24 * 3600
    assert store.checkpoint_saves == [done.run_id] and store.suspensions  # the counting store counts


async def test_a_late_answer_without_fallback_is_the_expired_gate_and_no_branch(worker, settings, store, user,
                                                                               make_flow, skipper):
    service = RunService(settings, store, skipper.client)
    done, spans = await answer_late(service, skipper, store, user, await make_flow(late_flow(fallback=False)))
    assert story(spans) == ["Chat Input", "Human In The Loop — Expired"]  # no branch span at all
    (gate,) = [s for s in spans if s.type == "gate"]
    assert gate.attributes["signoff.action_id"] == "__expired__" and gate.attributes["signoff.rerouted"] is True
    assert gate.attributes["signoff.requested_action"] == "approve"
    root = next(s for s in spans if s.parent_id is None)
    assert root.status == "ok" and root.end_time is not None


# ---- default-off: never a checkpoint, never a suspension ---------------------------------------


async def test_a_flow_without_a_gate_never_writes_a_checkpoint_or_a_suspension(worker, service, store, user,
                                                                              make_flow):
    flow = await make_flow({
        "name": "plain",
        "nodes": [
            {"id": "ask", "type": "ChatInput"},
            {"id": "p", "type": "Prompt", "params": {"template": "Echo {x}"}},
            # a Human Input with no consumer does not pause (skipped): still no gate
            {"id": "idle", "type": "HumanInput", "params": {"decisions": ["Approve"]}},
            {"id": "out", "type": "ChatOutput"},
        ],
        "edges": [{"from": "ask.message", "to": "p.x"}, {"from": "p.prompt", "to": "out.input_value"},
                  {"from": "ask.message", "to": "idle.prompt"}],
    })
    jobs = [await submit(service, user, flow, f"run {i}") for i in range(3)]
    for job in jobs:
        await wait_status(store, job.job_id, JobStatus.completed)
        spans = await store.get_trace(job.job_id)
        assert not [s for s in spans if s.type == "gate" or s.name.startswith("Human In The Loop")]
        names = story(spans)
        assert names[0] == "Chat Input" and names[3:] == ["Chat Output"]
        assert sorted(names[1:3]) == ["Human Input", "Prompt"]  # the idle Human Input: an ordinary span
        events = await store.read_events(job.job_id)
        assert [e.event for e in events] == ["end"]
        assert not any("suspended" in json.dumps(e.data) for e in events)
    assert store.checkpoint_saves == []  # not merely none left behind: none ever written
    assert store.suspensions == []


# ---- a run cancelled before its first layer ---------------------------------------------------------


async def test_a_run_cancelled_before_its_first_layer_has_a_cancelled_root(client, service, store, user, make_flow,
                                                                           settings):
    flow = await make_flow({"name": "never ran", "nodes": [{"id": "ask", "type": "ChatInput"},
                                                           {"id": "out", "type": "ChatOutput"}],
                            "edges": [{"from": "ask.message", "to": "out.input_value"}]})
    job = await submit(service, user, flow)  # no worker yet: the first layer cannot start
    await service.client.get_workflow_handle(job.job_id).cancel()  # what a stop of a running job does
    async with build_worker(client, store, settings):
        ended = await wait_status(store, job.job_id, JobStatus.cancelled)
    spans = await store.get_trace(job.job_id)
    (root,) = spans  # the root alone: no component ran
    assert root.span_id == hex_span(root_span_id(job.job_id)) and root.parent_id is None
    assert root.status == "error" and root.attributes["signoff.status"] == "cancelled"
    assert root.end_time is not None and root.name == "never ran"
    (listed,) = [t for t in await store.list_traces(flow_id=flow.id) if t["trace_id"] == job.job_id]
    assert listed["status"] == "error" and listed["end_time"] is not None and ended.status == JobStatus.cancelled


async def test_a_run_that_ended_before_its_first_layer_started_has_its_root(client, service, store, user, make_flow,
                                                                             settings):
    """The job is already cancelled when its first layer starts (a stop claim that landed first):
    run_layer ends the workflow at once, and the trace is still the root span."""
    flow = await make_flow({"name": "stopped first", "nodes": [{"id": "ask", "type": "ChatInput"},
                                                               {"id": "out", "type": "ChatOutput"}],
                            "edges": [{"from": "ask.message", "to": "out.input_value"}]})
    job = await submit(service, user, flow)  # no worker yet
    assert await store.set_status(job.job_id, JobStatus.cancelled, expect=[JobStatus.queued],
                                  event=("run_cancelled", {"reason": "stopped"}))
    async with build_worker(client, store, settings):
        result = await service.client.get_workflow_handle(job.job_id).result()
    assert result["status"] == "cancelled"
    (root,) = await store.get_trace(job.job_id)
    assert root.parent_id is None and root.status == "error" and root.attributes["signoff.status"] == "cancelled"
    assert root.end_time is not None and root.name == "stopped first"
