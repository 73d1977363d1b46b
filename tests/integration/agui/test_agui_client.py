"""The real ``@ag-ui/client`` (npm, installed from tests/agui's lock file by
scripts/ensure-agui-client) run by the machine's Node against a running signoff (the harness's
app behind uvicorn on 127.0.0.1): what any AG-UI client (a CopilotKit app, a script) sees.

Each AG-UI run is one ``node tests/agui/run.mjs`` process driving ``HttpAgent.runAgent``; the
client's state (its messages and pending interrupts) is carried from one run to the next as a
real client keeps it. The client verifies the stream itself (it refuses a run that breaks
AG-UI's rules); every event it delivered is validated again here against ``ag-ui-protocol``'s
models."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import subprocess
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from signoff.engine.models import JobStatus
from tests.fixtures.fake_openai import FakeOpenAI, ToolTarget, call, say
from tests.helpers import event_names
from tests.integration.agui.conftest import EVENT
from tests.integration.agui.test_agui_api import agent_flow, upload
from tests.integration.api.conftest import Harness

ROOT = Path(__file__).resolve().parents[3]
CLIENT_DIR = ROOT / "tests" / "agui"


@pytest.fixture(scope="module")
def node() -> str:
    """Node 20+ with @ag-ui/client installed from the project's own lock file."""
    exe = shutil.which("node")
    assert exe, "Node 20+ is needed for the @ag-ui/client tests (tests/agui)"
    major = int(subprocess.run([exe, "--version"], capture_output=True, text=True, check=True).stdout.strip()
                .lstrip("v").split(".")[0])
    assert major >= 20, f"Node {major}: the @ag-ui/client tests need Node 20+"
    subprocess.run([str(ROOT / "scripts" / "ensure-agui-client")], check=True)  # no-op when installed
    return exe


class Client:
    """One AG-UI client (its thread, messages and pending interrupts), each run a Node process."""

    def __init__(self, node: str, url: str, api_key: str, thread: str | None = None) -> None:
        self.node, self.url, self.api_key = node, url, api_key
        self.thread = thread or f"t-{uuid.uuid4().hex[:10]}"
        self.messages: list[dict[str, Any]] = []
        self.pending: list[dict[str, Any]] = []

    async def run(self, *, message: str | None = None, resume: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        plan: dict[str, Any] = {"url": self.url, "apiKey": self.api_key, "threadId": self.thread,
                                "messages": self.messages, "pendingInterrupts": self.pending}
        if message is not None:
            plan["message"] = message
        if resume is not None:
            plan["resume"] = resume
        proc = await asyncio.create_subprocess_exec(
            self.node, str(CLIENT_DIR / "run.mjs"), cwd=CLIENT_DIR, stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        out, err = await asyncio.wait_for(proc.communicate(json.dumps(plan).encode()), timeout=120)
        assert proc.returncode == 0, err.decode()
        result = json.loads(out)
        for event in result["events"]:
            EVENT.validate_python(event)  # what the client delivered is valid AG-UI 1.0
        self.messages, self.pending = result["messages"], result["pendingInterrupts"]
        return result


def types(result: dict[str, Any]) -> list[str]:
    return [e["type"] for e in result["events"]]


def assistant_texts(result: dict[str, Any]) -> list[str]:
    return [m["content"] for m in result["messages"] if m["role"] == "assistant" and m.get("content")]


async def test_an_ag_ui_client_runs_a_gated_flow_and_approves_it(h: Harness, live: str, node: str):
    alice = Client(node, f"{live}/api/v1/agui/{h.flows['refund']}", h.users["alice"][1])
    first = await alice.run(message="refund 42")
    assert first["error"] is None and first["outcomes"] == ["interrupt"], first
    [interrupt] = alice.pending
    job_id = interrupt["metadata"]["job_id"]
    assert interrupt["id"] == f"gate:{job_id}" and interrupt["message"] == "Approve the refund for: refund 42"
    assert [o["label"] for o in interrupt["metadata"]["options"]] == ["Approve", "Reject"]
    assert types(first)[0] == "RUN_STARTED" and types(first)[-1] == "RUN_FINISHED"

    second = await alice.run(resume=[{"status": "resolved", "payload": {"action_id": "approve"}}])
    assert second["error"] is None and second["outcomes"] == ["success"], second
    assert alice.pending == []  # the client cleared its interrupt
    assert ["TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_END"] == [
        t for t in types(second) if t.startswith("TEXT_MESSAGE")]
    assert assistant_texts(second) == ["Refund sent"]  # in the client's own conversation
    assert second["result"]["output"]["text"] == "Refund sent"
    assert (await h.store.get_job(job_id)).status == JobStatus.completed


async def test_an_ag_ui_client_rejects_and_the_other_branch_runs(h: Harness, live: str, node: str):
    alice = Client(node, f"{live}/api/v1/agui/{h.flows['refund']}", h.users["alice"][1])
    await alice.run(message="refund 43")
    done = await alice.run(resume=[{"status": "resolved", "payload": {"action_id": "reject"}}])
    assert done["outcomes"] == ["success"] and assistant_texts(done) == ["Refund refused"]


async def test_an_ag_ui_client_edits_a_tool_call_and_the_tool_runs_with_its_arguments(h: Harness, live: str,
                                                                                       node: str):
    with FakeOpenAI() as llm, ToolTarget() as target:
        h.egress.add(llm, target)
        llm.add(call("refund", {"body": "45 EUR"}, "call_pay"), say("Refund of 40 EUR sent."))
        flow = await upload(h, agent_flow(llm, target))
        alice = Client(node, f"{live}/api/v1/agui/{flow}", h.users["alice"][1])
        first = await alice.run(message="refund 45 EUR")
        assert first["outcomes"] == ["interrupt"], first
        [interrupt] = alice.pending
        assert interrupt["reason"] == "tool_approval" and interrupt["toolCallId"] == "call_pay"
        # the client shows the call the model asked for, in its conversation
        [asked] = [tc for m in alice.messages if m["role"] == "assistant" for tc in m.get("toolCalls") or []]
        assert asked["id"] == "call_pay" and json.loads(asked["function"]["arguments"]) == {"body": "45 EUR"}
        assert target.hits == []

        done = await alice.run(resume=[{"status": "resolved",
                                        "payload": {"action_id": "edit", "values": {"args": {"body": "40 EUR"}}}}])
        assert done["error"] is None and done["outcomes"] == ["success"], done
        assert [hit["body"] for hit in target.hits] == ["40 EUR"]
        [tool] = [m for m in done["messages"] if m["role"] == "tool"]
        assert tool["toolCallId"] == "call_pay" and json.loads(tool["content"])["echo"] == "40 EUR"
        assert assistant_texts(done)[-1] == "Refund of 40 EUR sent."


async def test_the_same_interrupt_answered_twice_is_one_decision_and_not_resumable(h: Harness, live: str,
                                                                                   node: str):
    alice = Client(node, f"{live}/api/v1/agui/{h.flows['refund']}", h.users["alice"][1])
    await alice.run(message="refund 44")
    [interrupt] = alice.pending
    job_id = interrupt["metadata"]["job_id"]
    await alice.run(resume=[{"status": "resolved", "payload": {"action_id": "approve"}}])
    again = await alice.run(resume=[{"interruptId": interrupt["id"], "status": "resolved",
                                     "payload": {"action_id": "reject"}}])
    assert again["outcomes"] == ["error"] and again["error"].startswith("NOT_RESUMABLE:"), again
    assert types(again) == ["RUN_STARTED", "RUN_ERROR"]
    assert await event_names(h.store, job_id) == ["human_input_required", "human_input_decision", "end"]


async def test_a_stop_while_waiting_ends_the_threads_run_with_the_cancelled_outcome(h: Harness, live: str,
                                                                                      node: str):
    url = f"{live}/api/v1/agui/{h.flows['refund']}"
    key = h.users["alice"][1]
    # the client abandons its interrupt: the waiting run is stopped
    alice = Client(node, url, key)
    await alice.run(message="refund 45")
    job_id = alice.pending[0]["metadata"]["job_id"]
    cancelled = await alice.run(resume=[{"status": "cancelled"}])
    assert cancelled["outcomes"] == ["cancelled"] and alice.pending == []
    assert (await h.store.get_job(job_id)).status == JobStatus.cancelled

    # someone stops the waiting run elsewhere (the HTTP API): an answer is refused and the job is
    # left cancelled; the client's cancel then ends the thread's run and frees it for a new one
    bob_thread = Client(node, url, key)
    await bob_thread.run(message="refund 46")
    job_id = bob_thread.pending[0]["metadata"]["job_id"]
    async with httpx.AsyncClient(base_url=live, headers={"x-api-key": key}) as c:
        stop = await c.post("/api/v2/workflows/stop", json={"job_id": job_id})
    assert stop.json()["status"] == "cancelled"
    late = await bob_thread.run(resume=[{"status": "resolved", "payload": {"action_id": "approve"}}])
    assert late["error"].startswith("NOT_RESUMABLE:") and len(bob_thread.pending) == 1
    over = await bob_thread.run(resume=[{"status": "cancelled"}])
    assert over["outcomes"] == ["cancelled"] and bob_thread.pending == []
    [finished] = [e for e in over["events"] if e["type"] == "RUN_FINISHED"]
    assert finished["metadata"] == {"job_id": job_id, "reason": "stopped"}
    fresh = await bob_thread.run(message="refund 47")
    assert fresh["outcomes"] == ["interrupt"] and bob_thread.pending[0]["metadata"]["job_id"] != job_id
    assert (await h.store.get_job(job_id)).status == JobStatus.cancelled


async def test_a_user_who_may_not_see_the_run_cannot_resume_it(h: Harness, live: str, node: str):
    url = f"{live}/api/v1/agui/{h.flows['refund']}"
    alice = Client(node, url, h.users["alice"][1])
    await alice.run(message="refund 48")
    [interrupt] = alice.pending
    job_id = interrupt["metadata"]["job_id"]
    # erin has alice's thread id and interrupt (say, from a shared screen), not her permission
    erin = Client(node, url, h.users["erin"][1], thread=alice.thread)
    erin.pending = [interrupt]
    stolen = await erin.run(resume=[{"status": "resolved", "payload": {"action_id": "approve"}}])
    assert stolen["error"].startswith("JOB_NOT_FOUND:"), stolen
    refused = await erin.run(message="refund for erin")  # nor may she run alice's flow
    assert refused["error"] is not None
    job = await h.store.get_job(job_id)
    assert job.status == JobStatus.suspended and job.pending.request_id == interrupt["id"]
    assert await event_names(h.store, job_id) == ["human_input_required"]


async def test_the_readme_script_drives_a_gated_flow(h: Harness, live: str, node: str):
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("## AG-UI"):]
    script = re.search(r"```js\n(.*?)```", section, re.S).group(1)
    path = CLIENT_DIR / f".readme-{uuid.uuid4().hex[:8]}.mjs"  # beside node_modules, so the import resolves
    path.write_text(script)
    try:
        env = {**os.environ, "SIGNOFF_URL": live, "SIGNOFF_API_KEY": h.users["alice"][1], "FLOW_ID": h.flows["refund"]}
        proc = await asyncio.create_subprocess_exec(node, str(path), "refund 49", cwd=CLIENT_DIR, env=env,
                                                    stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        out, err = await asyncio.wait_for(proc.communicate(), timeout=120)
    finally:
        path.unlink()
    assert proc.returncode == 0, err.decode()
    assert out.decode().splitlines() == ["Approve the refund for: refund 49 [approve, reject]", "Refund sent"]
