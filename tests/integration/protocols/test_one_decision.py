"""One request answered at once over HTTP, AG-UI, MCP and A2A (DESIGN §15, §1): every surface goes
through RunService.resume, so exactly one decision is applied and the others are refused, on
SQLite and PostgreSQL, with a real Temporal dev server and worker and the official clients."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from a2a.client import ClientConfig, ClientFactory
from a2a.types.a2a_pb2 import Message, Part, Role, SendMessageRequest, TaskState
from a2a.utils.errors import A2AError
from google.protobuf import json_format, struct_pb2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError

from signoff.engine.models import JobStatus
from tests import helpers
from tests.integration.agui.conftest import run_input, sse_events
from tests.integration.api.conftest import Harness

pytestmark = pytest.mark.both_stores


@contextlib.asynccontextmanager
async def clients(h: Harness, base: str) -> AsyncIterator[tuple[Any, Any]]:
    key = h.users["alice"][1]
    async with create_mcp_http_client(headers={"x-api-key": key}) as mcp_http, \
            Client(streamable_http_client(f"{base}/mcp", http_client=mcp_http)) as mcp, \
            httpx.AsyncClient(headers={"x-api-key": key}, timeout=60) as a2a_http:
        a2a = await ClientFactory(ClientConfig(httpx_client=a2a_http, streaming=False)).create_from_url(
            f"{base}/a2a/{h.flows['refund']}")
        try:
            yield mcp, a2a
        finally:
            await a2a.close()


async def test_one_request_answered_over_every_surface_at_once_is_decided_once(h: Harness, base: str,
                                                                                 store_backend: str):
    async with clients(h, base) as (mcp, a2a), h.client("alice") as c:
        for _ in range(helpers.rounds(store_backend, 4)):
            session = f"s-{uuid.uuid4().hex[:8]}"
            r = await c.post("/api/v2/workflows", json={"flow_id": h.flows["refund"], "input_value": "refund 42",
                                                        "mode": "sync", "session_id": session})
            job = r.json()
            assert job["status"] == "suspended", job
            job_id, request_id = job["job_id"], job["human_request"]["request_id"]

            async def over_http() -> bool:
                r = await c.post(f"/api/v2/workflows/{job_id}/resume",
                                 json={"request_id": request_id, "decision": {"action_id": "approve"}})
                return r.status_code == 200

            async def over_agui() -> bool:
                body = run_input(session, resume=[{"interruptId": request_id, "status": "resolved",
                                                   "payload": {"action_id": "approve"}}])
                r = await c.post(f"/api/v1/agui/{h.flows['refund']}", json=body)
                return sse_events(r.text)[-1]["type"] == "RUN_FINISHED"

            async def over_mcp() -> bool:
                try:
                    await mcp.call_tool("decide", {"job_id": job_id, "request_id": request_id, "action_id": "approve"})
                except MCPError as err:
                    assert err.data["code"] == "NOT_RESUMABLE", err.error
                    return False
                return True

            async def over_a2a() -> bool:
                data = json_format.ParseDict({"action_id": "approve"}, struct_pb2.Value())
                request = SendMessageRequest(message=Message(message_id=str(uuid.uuid4()), role=Role.ROLE_USER,
                                                             task_id=job_id, parts=[Part(data=data)]))
                try:
                    [answer] = [r async for r in a2a.send_message(request)]
                except A2AError as err:
                    assert err.data["code"] == "NOT_RESUMABLE", err
                    return False
                return answer.task.status.state == TaskState.TASK_STATE_COMPLETED

            won = await asyncio.gather(over_http(), over_agui(), over_mcp(), over_a2a())
            assert sum(won) == 1, won  # the others were refused
            await h.wait_status(job_id, JobStatus.completed)
            events = await h.store.read_events_named(job_id, "human_input_decision")
            assert len(events) == 1, [e.data for e in events]
