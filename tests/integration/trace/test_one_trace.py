"""One trace per run (DESIGN §1 invariant 5) on a real Temporal dev server, a worker in this
process and a SQLite store: the story of a paused and resumed run, two gates, 50 runs in a
row, a failing component, and a flow without a gate."""

from __future__ import annotations

import collections

from signoff.engine.models import Decision, JobStatus
from signoff.engine.tracing import hex_span, root_span_id

from .conftest import EXPECTED, gate_flow, story, wait_status


async def submit(service, user, flow, session: str):
    job, _ = await service.submit(user, flow, input_value="order 42", session_id=session, tweaks=None,
                                  idempotency_key=None, mode="background")
    return job


def vertex_counts(spans) -> collections.Counter[str]:
    return collections.Counter(s.attributes["signoff.vertex_id"] for s in spans if s.type == "component")


async def test_approve_reject_and_a_custom_action_each_tell_one_story(worker, service, store, user, make_flow):
    flow = await make_flow(gate_flow())
    jobs = {action: await submit(service, user, flow, f"s-{action}") for action in EXPECTED}
    for action, job in jobs.items():
        job = await service.wait_for_pause_or_end(job.job_id, timeout=60)
        assert job.status == JobStatus.suspended
        await service.resume(user, job.job_id, job.pending.request_id, Decision(action_id=action))
    for action, job in jobs.items():
        await wait_status(store, job.job_id, JobStatus.completed)
        spans = await store.get_trace(job.job_id)
        assert story(spans) == EXPECTED[action]
        assert all(n == 1 for n in vertex_counts(spans).values())
        root = next(s for s in spans if s.parent_id is None)
        assert root.span_id == hex_span(root_span_id(job.job_id)) and root.status == "ok" and root.end_time
        assert root.name == "Refund approval" and root.type == "flow"
        (gate,) = [s for s in spans if s.type == "gate"]
        assert gate.attributes["signoff.action_id"] == action
        assert gate.attributes["signoff.decided_by"] == user.id
        assert gate.attributes["signoff.request_id"] == f"gate:{job.job_id}"
        assert gate.inputs["prompt"] == "Refund order 42?"
        # one trace id for every span, the run id's own 128 bits
        assert {s.attributes["otel.trace_id"] for s in spans} == {job.job_id.replace("-", "")}


async def test_two_gates_in_sequence_give_two_gate_spans_in_one_trace(worker, service, store, user, make_flow):
    flow = await make_flow({
        "name": "two gates",
        "nodes": [
            {"id": "ask", "type": "ChatInput"},
            {"id": "g1", "type": "HumanInput", "params": {"decisions": ["Approve", "Reject"]}},
            {"id": "mid", "type": "Prompt", "params": {"template": "Second look at {x}"}},
            {"id": "g2", "type": "HumanInput", "params": {"decisions": ["Ship it", "Hold"]}},
            {"id": "out", "type": "ChatOutput"},
        ],
        "edges": [
            {"from": "ask.message", "to": "g1.prompt"},
            {"from": "g1.branch_approve", "to": "mid.x"},
            {"from": "mid.prompt", "to": "g2.prompt"},
            {"from": "g2.branch_ship_it", "to": "out.input_value"},
        ],
    })
    job = await submit(service, user, flow, "two")
    for action in ("approve", "ship_it"):
        job = await service.wait_for_pause_or_end(job.job_id, timeout=60)
        assert job.status == JobStatus.suspended
        await service.resume(user, job.job_id, job.pending.request_id, Decision(action_id=action))
        await wait_status(store, job.job_id, JobStatus.in_progress, JobStatus.suspended, JobStatus.completed)
    await wait_status(store, job.job_id, JobStatus.completed)
    spans = await store.get_trace(job.job_id)
    assert story(spans) == ["Chat Input", "Human In The Loop — Approve", "Prompt", "Human In The Loop — Ship it",
                            "Chat Output"]
    assert [s.attributes["signoff.vertex_id"] for s in spans if s.type == "gate"] == ["g1", "g2"]


async def test_fifty_runs_in_a_row_every_vertex_exactly_one_span(worker, service, store, user, make_flow):
    flow = await make_flow(gate_flow())
    actions = list(EXPECTED)
    for i in range(50):
        action = actions[i % len(actions)]
        job = await submit(service, user, flow, f"row-{i}")
        job = await service.wait_for_pause_or_end(job.job_id, timeout=60)
        await service.resume(user, job.job_id, job.pending.request_id, Decision(action_id=action))
        done = await wait_status(store, job.job_id, JobStatus.completed)
        # read as soon as the job is completed: the spans are already there (flushed before the
        # activity returned), nothing arrives later
        spans = await store.get_trace(done.job_id)
        assert story(spans) == EXPECTED[action], i
        assert all(n == 1 for n in vertex_counts(spans).values()), i
        assert all(s.end_time is not None for s in spans), i


async def test_a_failing_component_span_has_error_status(worker, service, store, user, make_flow):
    flow = await make_flow({
        "name": "dies",
        "nodes": [
            {"id": "ask", "type": "ChatInput"},
            {"id": "calc", "type": "Calculator", "params": {"expression": "1/0"}},
            {"id": "out", "type": "TextOutput"},
        ],
        "edges": [{"from": "calc.result", "to": "out.input_value"}],
    })
    job = await submit(service, user, flow, "dies")
    failed = await wait_status(store, job.job_id, JobStatus.failed)
    spans = await store.get_trace(job.job_id)
    calc = next(s for s in spans if s.attributes.get("signoff.vertex_id") == "calc")
    assert calc.status == "error" and calc.end_time is not None
    assert calc.attributes["signoff.error"] and calc.attributes["signoff.component_type"] == "Calculator"
    root = next(s for s in spans if s.parent_id is None)
    assert root.status == "error" and root.attributes["signoff.error.vertex_id"] == "calc"
    assert failed.error["vertex_id"] == "calc"
    assert "out" not in vertex_counts(spans)  # the trace shows where the run died
    (listed,) = [t for t in await store.list_traces(flow_id=flow.id) if t["trace_id"] == job.job_id]
    assert listed["status"] == "error"


async def test_default_off_no_gate_no_gate_span_no_checkpoint(worker, service, store, user, make_flow):
    flow = await make_flow({
        "name": "plain",
        "nodes": [{"id": "ask", "type": "ChatInput"}, {"id": "out", "type": "ChatOutput"}],
        "edges": [{"from": "ask.message", "to": "out.input_value"}],
    })
    job = await submit(service, user, flow, "plain")
    await wait_status(store, job.job_id, JobStatus.completed)
    spans = await store.get_trace(job.job_id)
    assert story(spans) == ["Chat Input", "Chat Output"]
    assert not [s for s in spans if s.type == "gate" or s.name.startswith("Human In The Loop")]
    events = [e.event for e in await store.read_events(job.job_id)]
    assert "human_input_required" not in events
    assert await store.load_latest_checkpoint(job.job_id) is None
