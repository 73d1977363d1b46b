"""An Agent flow as a FlowRun on the real dev server: it pauses on a tool approval, the
decision goes in through the `resume` Update, and it completes; a worker SIGKILLed while the run
is suspended is replaced by a new one that resumes it without re-sending a model call."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import WorkflowUpdateFailedError

from signoff.engine.errors import InvalidDecision, NotResumable
from signoff.engine.models import Decision, JobStatus
from signoff.worker import build_worker
from tests.fixtures.fake_openai import call, say
from tests.helpers import event_names, eventually, to_a_pause_and_its_retry, wait_status
from signoff.workflows.types import ResumeInput

REPO = Path(__file__).resolve().parents[3]


def agent_flow(llm, target, actions=("approve", "edit", "reject", "respond")) -> dict[str, Any]:
    return {
        "name": "Refund agent",
        "nodes": [
            {"id": "ask", "type": "ChatInput"},
            {"id": "agent", "type": "Agent", "params": {
                "model": "fake-model", "base_url": llm.base_url, "system_prompt": "You send refunds.",
                "retry_backoff": 0.01}},
            {"id": "pay", "type": "HTTPRequest", "params": {
                "url": f"{target.url}/refunds", "method": "POST", "tool_name": "refund",
                "tool_description": "Send a refund", "approval_actions": list(actions)}},
            {"id": "out", "type": "ChatOutput"},
        ],
        "edges": [
            {"from": "ask.message", "to": "agent.input_value"},
            {"from": "pay.tool", "to": "agent.tools"},
            {"from": "agent.response", "to": "out.input_value"},
        ],
    }


async def submit(service, user, flow, text="refund 5 EUR"):
    job, _ = await service.submit(user, flow, input_value=text, session_id="s1", tweaks=None,
                                  idempotency_key=None, mode="background")
    return await service.wait_for_pause_or_end(job.job_id, timeout=60)


async def test_tool_approval_through_the_update_completes(worker, service, store, user, make_flow, fake_openai,
                                                          tool_target):
    fake_openai.add(call("refund", {"body": "5 EUR"}), say("Refund of 5 EUR sent."))
    flow = await make_flow(agent_flow(fake_openai, tool_target))
    job = await submit(service, user, flow)
    assert job.status == JobStatus.suspended, job.error
    assert job.pending.kind == "tool_approval"
    assert job.pending.request_id == f"agent:{job.run_id}:1"
    assert job.pending.tool["name"] == "refund" and job.pending.tool["args"] == {"body": "5 EUR"}
    assert fake_openai.count == 1 and tool_target.hits == []
    # the store shows the pause as the layer's activity persists it; the workflow knows it once it
    # has taken that activity's result, a workflow task later
    handle = service.client.get_workflow_handle(job.job_id)
    pending = await eventually(lambda: handle.query("pending"), what="the workflow to know its pause")
    assert pending["request_id"] == job.pending.request_id and pending["tool"]["args"] == {"body": "5 EUR"}

    await service.resume(user, job.job_id, job.pending.request_id, Decision(action_id="approve"))
    done = await wait_status(store, job.job_id, JobStatus.completed, JobStatus.failed, timeout=60)
    assert done.status == JobStatus.completed, done.error
    assert done.result["output"]["text"] == "Refund of 5 EUR sent."
    assert tool_target.counts == {"/refunds": 1}
    assert fake_openai.count == 2
    assert [m["role"] for m in fake_openai.requests[1]["messages"]] == ["system", "user", "assistant", "tool"]
    assert await event_names(store, job.job_id) == ["human_input_required", "human_input_decision", "end"]


async def test_two_approvals_each_with_its_own_id_the_stale_one_refused(worker, service, store, user, make_flow,
                                                                        fake_openai, tool_target):
    fake_openai.add(call("refund", {"body": "A"}), call("refund", {"body": "B"}), say("both handled"))
    flow = await make_flow(agent_flow(fake_openai, tool_target))
    job = await submit(service, user, flow)
    first = job.pending.request_id
    assert first.endswith(":1")
    # an edit without args is refused before it is consumed; the run stays suspended
    with pytest.raises(InvalidDecision):
        await service.resume(user, job.job_id, first, Decision(action_id="edit", values={"oops": 1}))
    assert (await store.get_job(job.job_id)).status == JobStatus.suspended
    await service.resume(user, job.job_id, first, Decision(action_id="edit", values={"args": {"body": "A2"}}))

    async def second_pause():
        j = await store.get_job(job.job_id)
        return j if j.status == JobStatus.suspended and j.pending and j.pending.request_id != first else None

    from tests.helpers import eventually

    job2 = await eventually(second_pause, timeout=60, what="the second approval")
    second = job2.pending.request_id
    assert second == f"agent:{job.run_id}:2"
    assert [h["body"] for h in tool_target.hits] == ["A2"]
    with pytest.raises(NotResumable):
        await service.resume(user, job.job_id, first, Decision(action_id="approve"))
    handle = service.client.get_workflow_handle(job.job_id)
    with pytest.raises(WorkflowUpdateFailedError):  # the Update's validator refuses the stale id too
        await handle.execute_update("resume", ResumeInput(request_id=first, decision=Decision(action_id="approve"),
                                                          decided_by=user.id))
    await service.resume(user, job.job_id, second, Decision(action_id="reject", values={"message": "not B"}))
    done = await wait_status(store, job.job_id, JobStatus.completed, JobStatus.failed, timeout=60)
    assert done.status == JobStatus.completed, done.error
    assert [h["body"] for h in tool_target.hits] == ["A2"]
    assert fake_openai.count == 3
    assert [m["content"] for m in fake_openai.requests[2]["messages"] if m["role"] == "tool"][1] == "not B"


async def test_a_model_failure_fails_the_run_with_a_clear_error(worker, service, store, user, make_flow, fake_openai,
                                                                tool_target):
    from tests.fixtures.fake_openai import fail

    fake_openai.add(*[fail(503, "model overloaded")] * 4)
    flow = await make_flow(agent_flow(fake_openai, tool_target))
    job = await submit(service, user, flow)
    done = await wait_status(store, job.job_id, JobStatus.failed, timeout=60)
    assert "answered 503: model overloaded; gave up after 4 attempts" in done.error["error"]
    assert done.error.get("vertex_id") == "agent"
    assert fake_openai.count == 4  # the client's retries only: the activity does not retry them again


def _worker_env(settings) -> dict[str, str]:
    env = dict(os.environ)
    env.update({
        "SIGNOFF_HOME": str(settings.home),
        "SIGNOFF_DATABASE_URL": settings.resolved_database_url, "SIGNOFF_EGRESS_ALLOW": settings.egress_allow,
        "SIGNOFF_TEMPORAL_ADDRESS": settings.temporal_address,
        "SIGNOFF_TEMPORAL_NAMESPACE": settings.temporal_namespace,
        "SIGNOFF_TASK_QUEUE": settings.task_queue,
    })
    return env


async def test_a_worker_killed_while_suspended_resumes_without_resending_a_model_call(
        client, service, store, settings, user, make_flow, fake_openai, tool_target):
    fake_openai.add(call("refund", {"body": "5 EUR"}), say("sent after the restart"))
    flow = await make_flow(agent_flow(fake_openai, tool_target))
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "signoff.cli", "worker", cwd=REPO, env=_worker_env(settings),
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
    )
    try:
        job = await submit(service, user, flow)
        assert job.status == JobStatus.suspended, job.error
        assert fake_openai.count == 1
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGKILL)
        stderr = await proc.stderr.read()
        await proc.wait()
    assert proc.returncode == -signal.SIGKILL, stderr.decode()[-2000:]

    async with build_worker(client, store, settings):
        await service.resume(user, job.job_id, job.pending.request_id, Decision(action_id="approve"))
        done = await wait_status(store, job.job_id, JobStatus.completed, JobStatus.failed, timeout=90)
    assert done.status == JobStatus.completed, done.error
    assert done.result["output"]["text"] == "sent after the restart"
    assert fake_openai.count == 2  # the first model call was not re-sent by the new worker
    assert tool_target.counts == {"/refunds": 1}
    assert [m["role"] for m in fake_openai.requests[1]["messages"]] == ["system", "user", "assistant", "tool"]


async def test_the_retry_of_an_agent_layer_that_reached_its_tool_approval_asks_the_model_nothing_again(
        service, store, settings, user, make_flow, fake_openai, tool_target):
    """Resume is not a re-run, for a pause inside the layer too: an Agent asks for a tool's
    approval in the layer that builds it, and its worker is killed after the pause is persisted,
    before Temporal hears of it. The layer's retry goes on from that pause: no second model call,
    the same request, one ``human_input_required``. (The retry looked for the pausing vertex among
    the built ones, where a vertex that paused never is, and built the layer again: the test above
    saw the model asked again, the run ended without its tool and its workflow with the job still
    waiting, about one run in twelve on a loaded box.)"""
    fake_openai.add(call("refund", {"body": "5 EUR"}), say("asked again"))
    flow = await make_flow(agent_flow(fake_openai, tool_target))
    job, _ = await service.submit(user, flow, input_value="refund 5 EUR", session_id="s1", tweaks=None,
                                  idempotency_key=None, mode="background")  # no worker: the test drives the layers
    try:
        paused, retry = await to_a_pause_and_its_retry(store, settings, job.job_id)
        assert paused.pending.kind == "tool_approval" and fake_openai.count == 1
        again = await retry()
        assert fake_openai.count == 1
        assert (again.step, again.pending, again.built, again.persisted, again.done) == (
            paused.step, paused.pending, paused.built, True, False)
        assert (await event_names(store, job.job_id)).count("human_input_required") == 1
        assert (await store.get_job(job.job_id)).waits_for(paused.pending.request_id)
    finally:
        await service.client.get_workflow_handle(job.job_id).terminate("the test drove the layers itself")


async def test_the_worker_passes_its_settings_as_the_agent_defaults(client, service, store, settings, user, make_flow,
                                                                    fake_openai):
    fake_openai.add(say("configured by the worker"))
    spec = {"name": "bare agent",
            "nodes": [{"id": "agent", "type": "Agent"}, {"id": "out", "type": "ChatOutput"}],
            "edges": [{"from": "agent.response", "to": "out.input_value"}]}
    flow = await make_flow(spec)
    worker_settings = settings.model_copy(update={"openai_base_url": fake_openai.base_url,
                                                  "openai_api_key": "sk-worker", "openai_model": "worker-model"})
    async with build_worker(client, store, worker_settings):
        job, _ = await service.submit(user, flow, input_value="hi", session_id=None, tweaks=None,
                                      idempotency_key=None, mode="background")
        done = await wait_status(store, job.job_id, JobStatus.completed, JobStatus.failed, timeout=60)
    assert done.status == JobStatus.completed, done.error
    assert done.result["output"]["text"] == "configured by the worker"
    assert fake_openai.requests[0]["model"] == "worker-model"
    assert fake_openai.headers[0]["authorization"] == "Bearer sk-worker"
