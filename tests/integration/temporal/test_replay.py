"""Replay safety of FlowRun: the histories of real runs of the main paths (approve, reject, a
decision by Signal, a rejected Signal, more rejected Signals than are recorded, a stop while
suspended, a stop while a layer runs, a supersede, the maximum suspension, a failing layer after
a decision; a stop while the pause is persisted is replayed in test_pause_stop_race.py) are
replayed with ``temporalio.worker.Replayer`` against the current workflow code. A change to the workflow
that is not replay-safe (a new command, a reordered activity, an unguarded ``patched``) fails
here instead of in the workers of a deployment with runs in flight."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from temporalio import workflow
from temporalio.client import WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner

from signoff.worker import STRICT_SANDBOX

from signoff.engine.models import Decision, JobStatus
from signoff.service import RunService
from signoff.workflows.flow_run import MAX_RECORDED_REJECTIONS, FlowRun
from signoff.workflows.types import RESUME, ResumeInput

from tests.helpers import event_names, eventually, wait_status

# Histories of the paths below recorded once and kept in git (docs/temporal.md, "Replay"):
# ``pytest tests/integration/temporal/test_replay.py --record-histories`` writes them anew.
HISTORIES = Path(__file__).parent / "histories"

FAIL_AFTER_GATE = {
    "name": "fails after the gate",
    "nodes": [
        {"id": "ask", "type": "ChatInput"},
        {"id": "gate", "type": "HumanInput", "params": {"decisions": ["Approve", "Reject"]}},
        {"id": "calc", "type": "Calculator"},
        {"id": "out", "type": "ChatOutput"},
    ],
    "edges": [
        {"from": "ask.message", "to": "gate.prompt"},
        {"from": "gate.branch_approve", "to": "calc.expression"},
        {"from": "calc.result", "to": "out.input_value"},
    ],
}


@workflow.defn(name="FlowRun", sandboxed=False)
class NotFlowRun:
    """A FlowRun that does not do what the recorded one did (its first command is a timer)."""

    @workflow.run
    async def run(self, inp: dict) -> dict:
        await workflow.sleep(1)
        return {}


def held_http_flow(url: str) -> dict[str, Any]:
    return {
        "name": "held",
        "nodes": [
            {"id": "ask", "type": "ChatInput"},
            {"id": "call", "type": "HTTPRequest", "params": {"url": url, "method": "GET"}},
            {"id": "out", "type": "ChatOutput"},
        ],
        "edges": [{"from": "ask.message", "to": "call.body"}, {"from": "call.response", "to": "out.input_value"}],
    }


async def submit(service: RunService, user, flow, *, session_id: str | None = None, text: str = "refund 42"):
    job, _ = await service.submit(user, flow, input_value=text, session_id=session_id, tweaks=None,
                                  idempotency_key=None, mode="background")
    return job.job_id


async def closed_history(client, job_id: str) -> WorkflowHistory:
    handle = client.get_workflow_handle(job_id)

    async def closed():
        desc = await handle.describe()
        return desc.status is not None and desc.close_time is not None

    await eventually(closed, timeout=60, what=f"workflow {job_id} closed")
    return await handle.fetch_history()


def replayer(workflows=(FlowRun,)) -> Replayer:
    return Replayer(
        workflows=list(workflows),
        data_converter=pydantic_data_converter,
        workflow_runner=SandboxedWorkflowRunner(
            restrictions=STRICT_SANDBOX
        ),
    )


def recorded() -> list[Path]:
    return sorted(HISTORIES.glob("*.json"))


def _file_name(path: str) -> str:
    return path.replace(" ", "_") + ".json"


@pytest.mark.parametrize("history_file", recorded(), ids=lambda p: p.stem)
async def test_recorded_histories_replay(history_file: Path):
    """Every history in git replays against the current FlowRun: a change that would break a run
    in flight (recorded by an earlier version of the code) fails here."""
    data = json.loads(history_file.read_text())
    history = WorkflowHistory.from_json(data["workflow_id"], data["history"])
    result = await replayer().replay_workflow(history, raise_on_replay_failure=False)
    assert result.replay_failure is None, f"{history_file.name}: {result.replay_failure!r}"


def test_the_recorded_histories_cover_every_path():
    assert {p.name for p in recorded()} >= {_file_name(p) for p in PATHS}


PATHS = ("approve", "reject", "signal", "signal spam", "stop suspended", "superseded", "stop running", "failed",
         "timed out")


async def test_histories_of_the_main_paths_replay(worker, service, client, settings, store, user, make_flow,
                                                  http_counter, request):
    gate = await make_flow()
    histories: dict[str, str] = {}  # path → job id

    # approve and reject by the Update (as the API sends them)
    for action in ("approve", "reject"):
        job_id = await submit(service, user, gate, session_id=f"s-{action}")
        await wait_status(store, job_id, JobStatus.suspended)
        await service.resume(user, job_id, f"gate:{job_id}", Decision(action_id=action))
        await wait_status(store, job_id, JobStatus.completed)
        histories[action] = job_id

    # a Signal with a stale request id (rejected, recorded), then a valid Signal
    job_id = await submit(service, user, gate, session_id="s-signal")
    await wait_status(store, job_id, JobStatus.suspended)
    handle = service.client.get_workflow_handle(job_id)
    await handle.signal(RESUME, ResumeInput(request_id="gate:stale", decision=Decision(action_id="approve")))
    await eventually(lambda: _has(store, job_id, "resume_rejected"), what="resume_rejected")
    await handle.signal(RESUME, ResumeInput(request_id=f"gate:{job_id}", decision=Decision(action_id="approve")))
    await wait_status(store, job_id, JobStatus.completed)
    histories["signal"] = job_id

    # more rejected Signals than are recorded (the bound: MAX_RECORDED_REJECTIONS)
    job_id = await submit(service, user, gate, session_id="s-spam")
    await wait_status(store, job_id, JobStatus.suspended)
    handle = service.client.get_workflow_handle(job_id)
    for i in range(MAX_RECORDED_REJECTIONS + 2):
        await handle.signal(RESUME, ResumeInput(request_id=f"gate:stale-{i}", decision=Decision(action_id="approve")))
    await handle.signal(RESUME, ResumeInput(request_id=f"gate:{job_id}", decision=Decision(action_id="approve")))
    await wait_status(store, job_id, JobStatus.completed)
    histories["signal spam"] = job_id

    # stop of a suspended run (cancel claim, then the workflow is cancelled)
    job_id = await submit(service, user, gate, session_id="s-stop")
    await wait_status(store, job_id, JobStatus.suspended)
    assert (await service.stop(user, job_id)).status == JobStatus.cancelled
    histories["stop suspended"] = job_id

    # supersede: a new run in the same session cancels the suspended one
    old = await submit(service, user, gate, session_id="s-sup")
    await wait_status(store, old, JobStatus.suspended)
    new = await submit(service, user, gate, session_id="s-sup")
    await wait_status(store, old, JobStatus.cancelled)
    await wait_status(store, new, JobStatus.suspended)
    assert (await service.stop(user, new)).status == JobStatus.cancelled
    histories["superseded"] = old

    # stop of a run whose layer is running (an HTTP call held by the local server)
    job_id = await submit(service, user, await make_flow(held_http_flow(f"{http_counter.url}/block/replay")))
    await eventually(lambda: http_counter.counts["/block/replay"] == 1, what="the held call")
    assert (await service.stop(user, job_id)).status == JobStatus.cancelled
    histories["stop running"] = job_id

    # a failing layer after a decision (the Calculator cannot evaluate the prompt)
    job_id = await submit(service, user, await make_flow(FAIL_AFTER_GATE), text="refund 42")
    await wait_status(store, job_id, JobStatus.suspended)
    await service.resume(user, job_id, f"gate:{job_id}", Decision(action_id="approve"))
    await wait_status(store, job_id, JobStatus.failed)
    histories["failed"] = job_id

    # the maximum suspension (a durable timer of 1 s here)
    short = RunService(settings.model_copy(update={"max_suspend_seconds": 1}), store, client)
    job_id = await submit(short, user, gate, session_id="s-timeout")
    await wait_status(store, job_id, JobStatus.timed_out)
    histories["timed out"] = job_id

    assert tuple(histories) == PATHS
    fetched = [await closed_history(service.client, job_id) for job_id in histories.values()]
    if request.config.getoption("--record-histories"):
        HISTORIES.mkdir(exist_ok=True)
        for path, history in zip(histories, fetched):
            (HISTORIES / _file_name(path)).write_text(json.dumps(
                {"path": path, "workflow_id": history.workflow_id, "history": json.loads(history.to_json())},
                indent=1) + "\n")
    failures = {}
    for path, history in zip(histories, fetched):
        result = await replayer().replay_workflow(history, raise_on_replay_failure=False)
        if result.replay_failure is not None:
            failures[path] = repr(result.replay_failure)
    assert failures == {}
    # the check has teeth: the same history against a workflow that skips the first layer fails
    control = Replayer(workflows=[NotFlowRun], data_converter=pydantic_data_converter)
    result = await control.replay_workflow(fetched[0], raise_on_replay_failure=False)
    assert result.replay_failure is not None
    # every path really ran to the end it names
    ends = {path: (await store.get_job(job_id)).status.value for path, job_id in histories.items()}
    assert ends == {"approve": "completed", "reject": "completed", "signal": "completed", "signal spam": "completed",
                    "stop suspended": "cancelled", "superseded": "cancelled", "stop running": "cancelled",
                    "failed": "failed", "timed out": "timed_out"}


async def _has(store, job_id: str, event: str) -> bool:
    return event in await event_names(store, job_id)
