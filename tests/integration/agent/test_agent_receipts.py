"""Exactly the approved arguments (DESIGN §16, docs/audit.md): a gated tool call's receipt holds
the arguments proposed and those it runs with (an edit's), and the Agent compares the hash of
what it is about to send with the decision's right before the side effect: a worker patched to
alter them is refused, the run fails with ARGS_MISMATCH and the tool never runs."""

from __future__ import annotations

from signoff.engine.audit.receipts import sha256_hex, shown_sha256
from signoff.engine.components import agent as agent_module
from signoff.engine.models import Decision, JobStatus
from tests.fixtures.fake_openai import call, say
from tests.helpers import wait_status
from tests.integration.agent.test_agent_flow_run import agent_flow, submit


async def test_an_edited_tool_call_runs_the_edited_arguments_on_the_record(worker, service, store, user, make_flow,
                                                                           fake_openai, tool_target):
    fake_openai.add(call("refund", {"body": "5 EUR"}), say("Refund sent."))
    flow = await make_flow(agent_flow(fake_openai, tool_target))
    job = await submit(service, user, flow)
    assert job.status == JobStatus.suspended, job.error
    await service.resume(user, job.job_id, job.pending.request_id,
                         Decision(action_id="edit", values={"args": {"body": "4 EUR"}, "reason": "capped at 4"}))
    done = await wait_status(store, job.job_id, JobStatus.completed, JobStatus.failed, timeout=60)
    assert done.status == JobStatus.completed, done.error
    assert [h["body"] for h in tool_target.hits] == ["4 EUR"]
    [receipt] = [r.body for r in await store.read_receipts(job.job_id)]
    assert receipt["kind"] == "tool" and receipt["action_id"] == "edit"
    assert receipt["proposed_args"] == {"body": "5 EUR"} and receipt["executed_args"] == {"body": "4 EUR"}
    assert receipt["justification"] == "capped at 4"
    assert receipt["decided_by"] == {"id": user.id, "name": user.name} and receipt["authority"] == "owner"
    assert receipt["shown_sha256"] == shown_sha256(job.pending)  # the call and its arguments as shown


async def test_arguments_altered_after_the_decision_are_refused_and_never_run(worker, service, store, user, make_flow,
                                                                              fake_openai, tool_target, monkeypatch):
    fake_openai.add(call("refund", {"body": "5 EUR"}), say("Refund sent."))
    flow = await make_flow(agent_flow(fake_openai, tool_target))
    job = await submit(service, user, flow)
    assert job.status == JobStatus.suspended, job.error
    # the worker (in this process) patched: the edit's arguments are altered on their way to the tool
    monkeypatch.setattr(agent_module, "tool_args", lambda value: {"body": "5000 EUR"})
    await service.resume(user, job.job_id, job.pending.request_id,
                         Decision(action_id="edit", values={"args": {"body": "4 EUR"}}))
    done = await wait_status(store, job.job_id, JobStatus.completed, JobStatus.failed, timeout=60)
    assert done.status == JobStatus.failed
    assert tool_target.hits == []  # never sent
    assert done.error["code"] == "ARGS_MISMATCH" and done.error["vertex_id"] == "agent", done.error
    assert "not the ones approved" in str(done.error)
    [receipt] = [r.body for r in await store.read_receipts(job.job_id)]
    assert receipt["executed_args"] == {"body": "4 EUR"}  # what was approved, not what was about to run
    assert sha256_hex(receipt["executed_args"]) in str(done.error)
