"""A share is the permission, checked wherever it matters, not only at the door:

- Run Flow runs a child flow only when the run's user may execute it (a revoked share, or a
  flow never shared, is "not found"), inline and on Temporal; a per-run budget bounds nested
  runs in total, so a small flow cannot fan out into thousands of runs;
- a decision sent through Temporal (the ``resume`` Update, as `temporal workflow update` sends
  it) is refused after the decider's share was revoked, and the run stays suspended;
- a share holder tweaks only what the owner marked tweakable;
- deleting a flow cancels every run of it that waits, so nothing waits for a flow that is gone.
"""

from __future__ import annotations

import uuid

import pytest
from temporalio.client import WorkflowUpdateFailedError

from signoff.engine.errors import FlowInvalid, Forbidden
from signoff.engine.models import Decision, JobStatus
from signoff.workflows.types import RESUME, ResumeInput
from tests.helpers import GATE_FLOW, event_names, wait_status


def child_flow(url: str) -> dict:
    return {"name": "child", "nodes": [
        {"id": "call", "type": "HTTPRequest", "params": {"url": url, "method": "POST"}},
        {"id": "out", "type": "TextOutput"}], "edges": [{"from": "call.response", "to": "out.input_value"}]}


def parent_flow(child_id: str, fan_out: int = 1) -> dict:
    nodes = [{"id": "in", "type": "TextInput", "params": {"value": "go"}}]
    edges = []
    for i in range(fan_out):
        nodes.append({"id": f"run{i}", "type": "RunFlow", "params": {"flow_id": child_id}})
        nodes.append({"id": f"out{i}", "type": "TextOutput"})
        edges += [{"from": "in.text", "to": f"run{i}.input_value"}, {"from": f"run{i}.output", "to": f"out{i}.input_value"}]
    return {"name": "parent", "nodes": nodes, "edges": edges}


async def run(service, user, flow, *, mode: str = "background", tweaks=None):
    job, _ = await service.submit(user, flow, input_value="x", session_id=None, tweaks=tweaks, idempotency_key=None,
                                  mode=mode)
    return await wait_status(service.store, job.job_id, JobStatus.completed, JobStatus.failed, JobStatus.suspended)


@pytest.mark.parametrize("mode", ["background", "sync"], ids=["temporal", "inline"])
async def test_run_flow_needs_the_run_users_permission_on_the_child(worker, service, store, user, make_flow,
                                                                   http_counter, mode):
    mallory = await store.get_or_create_user(f"mallory-{uuid.uuid4().hex[:6]}")
    child = await make_flow(child_flow(f"{http_counter.url}/child-{mode}"))  # alice's
    parent = await make_flow(parent_flow(child.id), owner=mallory)
    # never shared: the child is "not found" to mallory's run
    done = await run(service, mallory, parent, mode=mode)
    assert done.status == JobStatus.failed and "not found, or you may not run it" in done.error["error"], done.error
    # shared: it runs
    await store.grant_share(child.id, mallory.id, ["execute"])
    done = await run(service, mallory, parent, mode=mode)
    assert done.status == JobStatus.completed, done.error
    # revoked: refused again, and the child never ran after the revoke
    assert await store.revoke_share(child.id, mallory.id)
    done = await run(service, mallory, parent, mode=mode)
    assert done.status == JobStatus.failed and "may not run it" in done.error["error"]
    assert http_counter.counts[f"/child-{mode}"] == 1


async def test_nested_runs_are_bounded_per_run_in_total(worker, service, store, user, make_flow, settings,
                                                        http_counter):
    """Fan-out, not depth: 4 levels of 5 Run Flow nodes each would start 780 nested runs."""
    settings.max_nested_runs = 12
    leaf = await make_flow(child_flow(f"{http_counter.url}/leaf"))
    level = leaf
    for _ in range(3):
        level = await make_flow(parent_flow(level.id, fan_out=5))
    top = await make_flow(parent_flow(level.id, fan_out=5))
    done = await run(service, user, top)
    assert done.status == JobStatus.failed and "SIGNOFF_MAX_NESTED_RUNS" in done.error["error"], done.error
    assert http_counter.counts["/leaf"] <= 12
    # a run within the budget is not affected
    settings.max_nested_runs = 100
    done = await run(service, user, await make_flow(parent_flow(leaf.id, fan_out=3)))
    assert done.status == JobStatus.completed, done.error


async def test_a_temporal_update_after_the_share_was_revoked_is_refused(worker, service, store, user, make_flow):
    bob = await store.get_or_create_user(f"bob-{uuid.uuid4().hex[:6]}")
    flow = await make_flow()  # alice's
    await store.grant_share(flow.id, bob.id, ["execute"])
    job = await run(service, bob, flow)
    assert job.status == JobStatus.suspended
    assert await store.revoke_share(flow.id, bob.id)
    handle = service.client.get_workflow_handle(job.job_id)
    # as `temporal workflow update execute --name resume --input '{"request_id": ..., ...}'` sends it
    with pytest.raises(WorkflowUpdateFailedError) as e:
        await handle.execute_update(RESUME, ResumeInput(request_id=job.pending.request_id,
                                                        decision=Decision(action_id="approve")))
    assert getattr(e.value.cause, "type", None) == "FORBIDDEN"
    # and through the service (the HTTP resume): 403, the job still waits
    with pytest.raises(Forbidden):
        await service.resume(bob, job.job_id, job.pending.request_id, Decision(action_id="approve"))
    after = await store.get_job(job.job_id)
    assert after.status == JobStatus.suspended and after.pending.request_id == job.pending.request_id
    assert "human_input_decision" not in await event_names(store, job.job_id)
    # the owner of the flow is still welcome to run and decide her own runs
    own = await run(service, user, flow)
    await service.resume(user, own.job_id, own.pending.request_id, Decision(action_id="approve"))
    await wait_status(store, own.job_id, JobStatus.completed)


async def test_a_share_holder_tweaks_only_what_the_owner_marked_tweakable(worker, service, store, user, make_flow,
                                                                          http_counter):
    bob = await store.get_or_create_user(f"bob-{uuid.uuid4().hex[:6]}")
    spec = {"name": "owner's call", "nodes": [
        {"id": "ask", "type": "ChatInput"},
        {"id": "call", "type": "HTTPRequest", "params": {"url": f"{http_counter.url}/owner",
                                                          "headers": {"Authorization": "Bearer owner"}},
         "tweakable": ["body"]},
        {"id": "out", "type": "TextOutput"}],
        "edges": [{"from": "ask.message", "to": "call.body"}, {"from": "call.response", "to": "out.input_value"}]}
    flow = await make_flow(spec)
    await store.grant_share(flow.id, bob.id, ["execute"])
    for tweak in ({"call": {"url": "http://evil.example/steal"}}, {"call": {"headers": {}}},
                  {"out": {"text": "pwned"}}):
        with pytest.raises(Forbidden):
            await run(service, bob, flow, tweaks=tweak)
    assert await store.list_user_active_jobs(bob.id) == []
    done = await run(service, bob, flow, tweaks={"ask": {"input_value": "hello"}, "call": {"body": "fine"}})
    assert done.status == JobStatus.completed and http_counter.counts["/owner"] == 1
    # the owner may tweak anything; a tweak of a node the flow does not have is 422 at submit
    done = await run(service, user, flow, tweaks={"out": {"text": "mine"}})
    assert done.status == JobStatus.completed and done.result["output"]["text"] == "mine"
    with pytest.raises(FlowInvalid):
        await run(service, user, flow, tweaks={"nope": {"x": 1}})


async def test_what_the_owner_marks_tweakable_never_moves_a_credential(worker, service, store, user, make_flow,
                                                                       http_counter):
    """The owner marked too much tweakable: still, a share holder never tweaks a credential, the
    destination of a node that carries one, or any value naming a secret (secrets resolve
    against the owner)."""
    bob = await store.get_or_create_user(f"bob-{uuid.uuid4().hex[:6]}")
    spec = {"name": "too trusting", "nodes": [
        {"id": "ask", "type": "ChatInput", "tweakable": ["input_value"]},
        {"id": "call", "type": "HTTPRequest", "params": {"url": f"{http_counter.url}/owner",
                                                          "headers": {"Authorization": {"$secret": "payments"}}},
         "tweakable": ["url", "headers", "body", "method"]},
        {"id": "plain", "type": "HTTPRequest", "params": {"url": f"{http_counter.url}/plain"},
         "tweakable": ["url"]},
        {"id": "out", "type": "TextOutput"}],
        "edges": [{"from": "ask.message", "to": "call.body"}, {"from": "call.response", "to": "plain.body"},
                  {"from": "plain.response", "to": "out.input_value"}]}
    flow = await make_flow(spec)
    await store.grant_share(flow.id, bob.id, ["execute"])
    for tweak in ({"call": {"url": "http://evil.example/steal"}}, {"call": {"headers": {"X": "y"}}},
                  {"ask": {"input_value": {"$secret": "payments"}}},
                  {"call": {"body": {"note": {"$secret": "payments"}}}}):
        with pytest.raises(Forbidden) as err:
            await run(service, bob, flow, tweaks=tweak)
        assert "credential" in err.value.message
    assert await store.list_user_active_jobs(bob.id) == []
    assert http_counter.counts.get("/owner", 0) == 0
    # what carries no credential stays the owner's to open up
    from signoff.engine.sharing import untweakable
    assert untweakable(spec, {"plain": {"url": "http://x.test/"}, "call": {"method": "PUT", "body": "b"}}) == []


async def test_deleting_a_flow_cancels_the_runs_that_wait_for_it(worker, service, store, user, make_flow):
    bob = await store.get_or_create_user(f"bob-{uuid.uuid4().hex[:6]}")
    flow = await make_flow(GATE_FLOW)
    await store.grant_share(flow.id, bob.id, ["execute"])
    mine = await run(service, user, flow)
    theirs = await run(service, bob, flow)
    assert mine.status == theirs.status == JobStatus.suspended
    with pytest.raises(Forbidden):
        await service.delete_flow(bob, flow)  # only the owner deletes
    assert sorted(await service.delete_flow(user, flow)) == sorted([mine.job_id, theirs.job_id])
    for job in (mine, theirs):
        ended = await store.get_job(job.job_id)
        assert ended.status == JobStatus.cancelled and ended.pending is None
        events = await store.read_events(job.job_id)
        assert events[-1].event == "run_cancelled" and events[-1].data == {"reason": "flow_deleted"}
        cards = [m for m in await store.list_messages(ended.effective_session) if m.kind == "card"
                 and m.job_id == job.job_id]
        assert cards and all(c.card.get("superseded") for c in cards)
    assert await store.list_pending(user.id) == [] or all(j.flow_id != flow.id for j in await store.list_pending(user.id))
    assert await store.get_flow(flow.id) is None
